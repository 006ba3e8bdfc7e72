//! The queue's one table: per command id, the command in flight with that
//! id and, while the id is a request's tag, the request.
//!
//! A request's tag is the id of its first command (its lead id), taken
//! from the [`CidPool`] when the request starts and given back when the
//! request's completion is handed to the caller. The lead id carries the
//! request's first command; further pieces (a transfer split at MDTS, a
//! long trim or zero range) take ids of their own, given back as each
//! completes, and a later piece reuses the lead id once its first command
//! is done. So a one-command request, the usual case, costs one id
//! allocation and starts with its command in flight in one step
//! ([`Table::start_one`]; on an idle queue it takes the tag given back
//! last, without a search), and its plain-success completion is checked,
//! released and accounted in the one entry the command id names
//! ([`Table::succeed`]).

use alloc::vec;
use alloc::vec::Vec;

use pollfs_core::dev::requests::{Finished, Merge};
use pollfs_core::dev::{Completion, DevError, Tag};
use pollfs_core::units::Nanos;

use crate::qpair::CidPool;

/// The part of a trim or zero request not yet issued: such a request is
/// issued piecewise as command ids free up.
#[derive(Clone, Copy, Debug)]
pub(super) struct Unissued {
    pub zeroes: bool,
    pub lba: u64,
    pub blocks: u64,
}

/// One command id's entry.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Entry {
    /// A command with this id is in flight.
    busy: bool,
    /// This id is the tag of a request that has not finished.
    open: bool,
    /// The request the command in flight belongs to (its lead id).
    tag: u16,
    // The command in flight: its retries and timeout state.
    pub retries: u8,
    pub timed_out: bool,
    pub deadline: Option<Nanos>,
    pub abort_by: Option<Nanos>,
    // The request, while `open`: the merge of its pieces and what is
    // still to be issued.
    pub merge: Merge,
    pub rest: Option<Unissued>,
}

/// True if a command with id `cid` is in flight in `entries`.
#[inline]
fn busy(entries: &[Entry], cid: u16) -> bool {
    entries.get(usize::from(cid)).is_some_and(|e| e.busy)
}

/// Where a poll hands completions back: the caller's callback, with room
/// for `room` more.
pub(super) struct HandBack<'a> {
    pub done: &'a mut dyn FnMut(Completion),
    pub room: usize,
    pub handed: usize,
}

impl HandBack<'_> {
    #[inline]
    fn give(&mut self, c: Completion) {
        self.room -= 1;
        self.handed += 1;
        (self.done)(c);
    }
}

/// Command ids and requests of one queue.
#[derive(Debug)]
pub(super) struct Table {
    ids: CidPool,
    entries: Vec<Entry>,
    /// Commands in flight.
    busy: usize,
    /// Requests started and not finished.
    open: usize,
    /// Finished requests' completions waiting to be handed back.
    finished: Finished,
    /// The tag given back last: a one-command request on an idle queue
    /// takes it, which skips the search for the lowest free id (on a busy
    /// queue it is mostly taken, and a failed try costs more than the
    /// search saves).
    recent: u16,
}

impl Table {
    /// A table of `capacity` command ids.
    pub fn new(capacity: u16) -> Table {
        Table {
            ids: CidPool::new(capacity),
            entries: vec![Entry::default(); usize::from(capacity)],
            busy: 0,
            open: 0,
            finished: Finished::with_capacity(usize::from(capacity)),
            recent: 0,
        }
    }
    /// Command ids the queue has.
    pub fn capacity(&self) -> usize {
        self.ids.capacity()
    }
    /// Ids free for a new request or piece.
    #[inline]
    pub fn available(&self) -> usize {
        self.ids.available()
    }
    /// Commands in flight.
    #[inline]
    pub fn commands(&self) -> usize {
        self.busy
    }
    /// True if a command with id `cid` is in flight.
    #[inline]
    pub fn is_busy(&self, cid: u16) -> bool {
        busy(&self.entries, cid)
    }
    /// True if request `tag` can issue a piece now: its lead id is idle,
    /// or another id is free.
    pub fn can_issue(&self, tag: u16) -> bool {
        !self.is_busy(tag) || self.available() > 0
    }

    /// Starts a request on a free id, its tag; `None` when none is free.
    #[inline]
    pub fn start(&mut self, rest: Option<Unissued>) -> Option<u16> {
        let tag = self.ids.alloc()?;
        let e = self.entries.get_mut(usize::from(tag))?;
        e.open = true;
        e.merge = Merge::default();
        e.rest = rest;
        self.open += 1;
        Some(tag)
    }
    /// Starts a one-command request, the usual case: a free id becomes
    /// its tag with its command in flight on it
    /// ([`start`](Self::start) and [`issue`](Self::issue) as one step);
    /// `None` when no id is free.
    #[inline]
    pub fn start_one(&mut self) -> Option<u16> {
        let tag = if self.ids.in_use() == 0 && self.ids.take(self.recent) {
            self.recent
        } else {
            self.ids.alloc()?
        };
        let e = self.entries.get_mut(usize::from(tag))?;
        *e = Entry {
            busy: true,
            open: true,
            tag,
            merge: Merge::new(1),
            ..Entry::default()
        };
        self.open += 1;
        self.busy += 1;
        Some(tag)
    }
    /// The id for request `tag`'s next command: its lead id if no command
    /// of its own is in flight there, else a free one. The command counts
    /// as in flight from here; [`unissue`](Self::unissue) undoes this if it
    /// cannot be sent.
    #[inline]
    pub fn issue(&mut self, tag: u16) -> Option<u16> {
        let lead = self.entries.get(usize::from(tag))?;
        if !lead.open {
            return None;
        }
        let cid = if lead.busy { self.ids.alloc()? } else { tag };
        let e = self.entries.get_mut(usize::from(cid))?;
        e.busy = true;
        e.tag = tag;
        e.retries = 0;
        e.timed_out = false;
        e.deadline = None;
        e.abort_by = None;
        self.busy += 1;
        if let Some(r) = self.entries.get_mut(usize::from(tag)) {
            r.merge.sent();
        }
        Some(cid)
    }
    /// Undoes [`issue`](Self::issue) for a command that was never sent.
    pub fn unissue(&mut self, cid: u16) {
        let Some(tag) = self.release(cid) else {
            return;
        };
        if let Some(r) = self.request_mut(tag) {
            r.merge.piece_done(Ok(()));
        }
    }
    /// Ends command `cid`: its id is free again unless it is its
    /// request's lead id. Returns the request's tag; `None` if no command
    /// with that id is in flight (an unknown or duplicate completion),
    /// and then nothing changes.
    #[inline]
    pub fn release(&mut self, cid: u16) -> Option<u16> {
        let e = self.entries.get_mut(usize::from(cid))?;
        if !e.busy {
            return None;
        }
        e.busy = false;
        self.busy -= 1;
        let tag = e.tag;
        if tag != cid {
            self.ids.release(cid);
        }
        Some(tag)
    }
    /// The command in flight with id `cid`.
    pub fn command_mut(&mut self, cid: u16) -> Option<&mut Entry> {
        self.entries.get_mut(usize::from(cid)).filter(|e| e.busy)
    }
    /// The unfinished request `tag`.
    #[inline]
    pub fn request(&self, tag: u16) -> Option<&Entry> {
        self.entries.get(usize::from(tag)).filter(|e| e.open)
    }
    /// The unfinished request `tag`.
    #[inline]
    pub fn request_mut(&mut self, tag: u16) -> Option<&mut Entry> {
        self.entries.get_mut(usize::from(tag)).filter(|e| e.open)
    }
    /// Finishes request `tag` with `result`: its completion waits for
    /// [`hand_back`](Self::hand_back). Nothing happens to a request that
    /// is not open.
    #[inline]
    pub fn finish(&mut self, tag: u16, result: Result<(), DevError>) {
        if let Some(e) = self.entries.get_mut(usize::from(tag)) {
            if e.open {
                e.open = false;
                self.open -= 1;
                self.finished.push(Completion {
                    tag: Tag(u32::from(tag)),
                    result,
                });
            }
        }
    }
    /// Finishes request `tag` with `result` and hands its completion
    /// straight to `out` if it has room and no earlier completion is
    /// waiting (else it waits, as with [`finish`](Self::finish)).
    #[inline]
    pub fn finish_to(&mut self, tag: u16, result: Result<(), DevError>, out: &mut HandBack<'_>) {
        let Some(e) = self.entries.get_mut(usize::from(tag)) else {
            return;
        };
        if !e.open {
            return;
        }
        e.open = false;
        // A finished request has nothing in flight, so its lead id is
        // idle unless another request's piece took it since.
        let idle = !e.busy;
        self.open -= 1;
        self.hand_to(tag, idle, result, out);
    }
    /// Hands finished request `tag`'s completion to `out` if it has room
    /// and none is waiting before it, freeing the tag if its id is
    /// `idle`; else the completion waits for
    /// [`hand_back`](Self::hand_back).
    #[inline]
    fn hand_to(
        &mut self,
        tag: u16,
        idle: bool,
        result: Result<(), DevError>,
        out: &mut HandBack<'_>,
    ) {
        let c = Completion {
            tag: Tag(u32::from(tag)),
            result,
        };
        if out.room == 0 || !self.finished.is_empty() {
            self.finished.push(c);
            return;
        }
        if idle {
            self.ids.release(tag);
            self.recent = tag;
        }
        out.give(c);
    }
    /// A plain success of command `cid`, accounted as it is read: the
    /// command ends, and its request with it if that was its last piece.
    /// `false` if no command with that id is in flight (an unknown or
    /// duplicate completion), and then nothing changes.
    // Always inlined into the queue's reap (its hot path): out of line
    // it counted 16 more instructions per I/O.
    #[inline(always)]
    pub fn succeed(&mut self, cid: u16, out: &mut HandBack<'_>) -> bool {
        let Some(e) = self.entries.get_mut(usize::from(cid)) else {
            return false;
        };
        if !e.busy {
            return false;
        }
        if e.tag == cid && e.open && e.rest.is_none() && e.merge == Merge::new(1) {
            // A one-command request, the usual case: the command and its
            // request end together in the one entry.
            e.busy = false;
            e.open = false;
            self.busy -= 1;
            self.open -= 1;
            self.hand_to(cid, true, Ok(()), out);
            return true;
        }
        match self.release(cid) {
            Some(tag) => {
                self.account(tag, Ok(()), out);
                true
            }
            None => false,
        }
    }
    /// Accounts a released command's `result` to its request `tag`, and
    /// finishes the request (straight to `out` when it can) if that was
    /// its last piece.
    #[inline]
    pub fn account(&mut self, tag: u16, result: Result<(), DevError>, out: &mut HandBack<'_>) {
        let finished = match self.request_mut(tag) {
            Some(r) => {
                if result.is_err() {
                    r.rest = None;
                }
                (r.merge.piece_done(result) && r.rest.is_none()).then(|| r.merge.result())
            }
            None => None,
        };
        if let Some(result) = finished {
            self.finish_to(tag, result, out);
        }
    }
    /// Ends request `tag` at once: it was never handed to the caller
    /// (`submit` refuses it), and nothing of it is in flight.
    pub fn withdraw(&mut self, tag: u16) {
        if let Some(e) = self.entries.get_mut(usize::from(tag)) {
            if e.open && !e.busy {
                e.open = false;
                self.open -= 1;
                self.ids.release(tag);
            }
        }
    }
    /// Hands waiting completions to `out`, oldest first, as far as it has
    /// room, and frees their tags.
    #[inline]
    pub fn hand_back(&mut self, out: &mut HandBack<'_>) {
        if self.finished.is_empty() {
            return;
        }
        self.hand_back_waiting(out);
    }
    fn hand_back_waiting(&mut self, out: &mut HandBack<'_>) {
        let (ids, entries) = (&mut self.ids, &self.entries);
        self.finished.hand_back(out.room, |c| {
            // A finished request has nothing in flight, so its lead id is
            // idle unless another request's piece took it since.
            let tag = c.tag.0 as u16;
            if !busy(entries, tag) {
                ids.release(tag);
            }
            out.give(c);
        });
    }
    /// Requests whose tag is taken: open, or finished and not handed back.
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.open + self.finished.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_command_request_lives_in_its_lead_id() {
        let mut t = Table::new(2);
        let a = t.start(None).unwrap();
        assert_eq!(t.issue(a), Some(a), "the first command takes the lead id");
        assert_eq!(t.release(a), Some(a));
        assert_eq!(t.release(a), None, "a duplicate completion");
        assert_eq!(t.request(a).unwrap().merge.outstanding(), 1);
        t.finish(a, Ok(()));
        assert_eq!(t.available(), 1, "the tag is held until handed back");
        let mut seen = Vec::new();
        let mut out = HandBack {
            done: &mut |c| seen.push(c),
            room: 4,
            handed: 0,
        };
        t.hand_back(&mut out);
        assert_eq!(out.handed, 1);
        assert_eq!(seen[0].tag, Tag(u32::from(a)));
        assert_eq!((t.available(), t.in_flight()), (2, 0));
    }

    #[test]
    fn a_completion_goes_straight_back_only_behind_no_waiting_one() {
        let mut t = Table::new(4);
        let (a, b, c) = (
            t.start(None).unwrap(),
            t.start(None).unwrap(),
            t.start(None).unwrap(),
        );
        let mut seen = Vec::new();
        {
            let mut out = HandBack {
                done: &mut |c| seen.push(c.tag),
                room: 2,
                handed: 0,
            };
            t.finish_to(a, Ok(()), &mut out);
            assert_eq!(out.handed, 1, "nothing waits: straight back");
            t.finish(b, Err(DevError::Media));
            t.finish_to(c, Ok(()), &mut out);
            assert_eq!(out.handed, 1, "b waits, so c waits behind it");
            t.hand_back(&mut out);
            assert_eq!(out.handed, 2, "room for one more");
        }
        assert_eq!(t.in_flight(), 1);
        assert_eq!(seen, [Tag(a.into()), Tag(b.into())]);
        assert_eq!(t.available(), 3, "c's tag is held until it is handed back");
    }

    #[test]
    fn further_pieces_take_their_own_ids_and_reuse_an_idle_lead() {
        let mut t = Table::new(3);
        let a = t.start(None).unwrap();
        let first = t.issue(a).unwrap();
        let second = t.issue(a).unwrap();
        assert_ne!(first, second);
        assert_eq!(t.release(second), Some(a));
        assert_eq!(t.available(), 2, "a piece's own id is free at once");
        assert_eq!(t.release(first), Some(a));
        assert_eq!(t.available(), 2, "the lead id is the request's tag");
        assert_eq!(t.issue(a), Some(a), "an idle lead id is reused");
        t.unissue(a);
        assert_eq!(t.commands(), 0);
        assert!(t.can_issue(a));
        t.withdraw(a);
        assert_eq!((t.available(), t.in_flight()), (3, 0));
        assert_eq!(t.issue(a), None, "not a request any more");
    }

    #[test]
    fn a_plain_success_ends_its_command_and_a_request_whose_last_piece_it_was() {
        let mut t = Table::new(4);
        let mut seen = Vec::new();
        let (a, b);
        {
            let mut out = HandBack {
                done: &mut |c| seen.push(c),
                room: 4,
                handed: 0,
            };
            a = t.start(None).unwrap();
            t.issue(a).unwrap();
            assert!(t.succeed(a, &mut out), "a one-command request");
            assert!(!t.succeed(a, &mut out), "a duplicate completion");
            assert_eq!((out.handed, t.in_flight(), t.available()), (1, 0, 4));
            b = t.start(None).unwrap();
            let first = t.issue(b).unwrap();
            let second = t.issue(b).unwrap();
            assert!(t.succeed(second, &mut out));
            assert_eq!(out.handed, 1, "one piece still out");
            assert!(!t.succeed(second, &mut out));
            assert!(t.succeed(first, &mut out));
            assert_eq!((out.handed, t.in_flight(), t.available()), (2, 0, 4));
            assert!(!t.succeed(9, &mut out), "out of range");
        }
        let tags: Vec<Tag> = seen.iter().map(|c| c.tag).collect();
        assert_eq!(tags, [Tag(a.into()), Tag(b.into())]);
        assert!(seen.iter().all(|c| c.result.is_ok()));
    }

    #[test]
    fn a_one_command_start_is_a_start_and_an_issue() {
        let mut t = Table::new(2);
        let a = t.start_one().unwrap();
        assert_eq!((t.commands(), t.in_flight(), t.available()), (1, 1, 1));
        assert!(t.is_busy(a) && t.command_mut(a).is_some_and(|c| c.retries == 0));
        assert_eq!(t.request(a).unwrap().merge.outstanding(), 1);
        t.unissue(a);
        t.withdraw(a);
        assert_eq!((t.commands(), t.in_flight(), t.available()), (0, 0, 2));
        let b = t.start_one().unwrap();
        let c = t.start_one().unwrap();
        assert_ne!(b, c);
        assert_eq!(t.start_one(), None, "no id free");
    }

    #[test]
    fn ids_run_out_and_unknown_ids_are_refused() {
        let mut t = Table::new(1);
        let a = t.start(None).unwrap();
        assert_eq!(t.start(None), None);
        t.issue(a).unwrap();
        assert_eq!(t.issue(a), None, "the lead is busy and no id is free");
        assert_eq!(t.release(7), None);
        assert!(t.command_mut(a).is_some() && t.command_mut(7).is_none());
    }
}
