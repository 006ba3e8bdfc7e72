//! The request table of a queue that splits each caller's request into
//! pieces (a volume's legs): the slots keyed by the tag handed to the
//! caller, the merge of the pieces' results ([`Merge`], which the NVMe
//! queue uses too, in its own table keyed by command id), and the
//! finished requests waiting for `poll` to hand them back ([`Finished`],
//! which the NVMe queue's table uses too).
//!
//! Slots are kept when freed, with whatever buffers they grew, so the hot
//! path stops allocating once the table has grown to the queue's working
//! depth. A tag stays taken from [`Requests::take`] until `poll` has handed
//! its completion back ([`Requests::hand_back`]), so two requests the
//! caller can see never share a tag.

use alloc::vec::Vec;

use super::{Completion, DevError, Tag};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Live,
    /// Finished; its completion waits to be handed back.
    Finished,
}

/// Finished requests' completions waiting for a poll to hand them back,
/// oldest first: the hand-back of every queue that finishes requests
/// before the caller polls (a volume's [`Requests`], the NVMe queue's
/// table).
///
/// A poll usually hands back everything it finished, so this costs a
/// push and a read per request; the part already read is dropped
/// whenever the cursor has passed half of it.
#[derive(Debug, Default)]
pub struct Finished {
    done: Vec<Completion>,
    /// The oldest completion not yet handed back.
    next: usize,
}

impl Finished {
    /// Room for `n` completions before the first allocation.
    pub fn with_capacity(n: usize) -> Finished {
        Finished {
            done: Vec::with_capacity(n),
            next: 0,
        }
    }
    /// Queues a finished request's completion behind the others.
    #[inline]
    pub fn push(&mut self, c: Completion) {
        self.done.push(c);
    }
    /// True if no completion waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.next == self.done.len()
    }
    /// Completions waiting.
    #[inline]
    pub fn len(&self) -> usize {
        self.done.len() - self.next
    }
    /// Hands up to `max` waiting completions to `each`, oldest first;
    /// returns how many.
    #[inline]
    pub fn hand_back(&mut self, max: usize, mut each: impl FnMut(Completion)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(&c) = self.done.get(self.next) else {
                break;
            };
            self.next += 1;
            each(c);
            n += 1;
        }
        if self.next == self.done.len() {
            self.done.clear();
            self.next = 0;
        } else if self.next >= self.done.len() / 2 {
            self.done.drain(..self.next);
            self.next = 0;
        }
        n
    }
}

/// A queue's requests, each with caller state `T`.
#[derive(Debug)]
pub struct Requests<T> {
    slots: Vec<(State, T)>,
    free: Vec<u32>,
    live: usize,
    finished: Finished,
}

impl<T: Default> Default for Requests<T> {
    fn default() -> Self {
        Requests {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            finished: Finished::default(),
        }
    }
}

impl<T: Default> Requests<T> {
    /// Takes a free slot, as it was left (the caller resets what it
    /// uses), and returns its tag.
    // Always inlined: a queue's submit takes one slot per request, and the
    // compiler otherwise keeps this out of line for its generic callers.
    #[inline(always)]
    pub fn take(&mut self) -> (u32, &mut T) {
        self.live += 1;
        let tag = match self.free.pop() {
            Some(tag) => tag,
            None => self.grow(),
        };
        // `tag` came from the free list or was just pushed.
        let slot = match self.slots.get_mut(tag as usize) {
            Some(slot) => slot,
            None => unreachable!(),
        };
        slot.0 = State::Live;
        (tag, &mut slot.1)
    }
    /// A new slot, while the table grows to the queue's working depth
    /// (out of line: the steady state reuses freed slots).
    #[inline(never)]
    fn grow(&mut self) -> u32 {
        self.slots.push((State::Free, T::default()));
        (self.slots.len() - 1) as u32
    }
}

impl<T> Requests<T> {
    /// The live (unfinished) request `tag`.
    #[inline]
    pub fn get(&self, tag: u32) -> Option<&T> {
        match self.slots.get(tag as usize) {
            Some((State::Live, t)) => Some(t),
            _ => None,
        }
    }
    /// The live (unfinished) request `tag`.
    #[inline]
    pub fn get_mut(&mut self, tag: u32) -> Option<&mut T> {
        match self.slots.get_mut(tag as usize) {
            Some((State::Live, t)) => Some(t),
            _ => None,
        }
    }
    /// Finishes live request `tag` with `result`: its completion waits for
    /// [`hand_back`](Self::hand_back). Nothing happens to a request that
    /// is not live.
    #[inline]
    pub fn finish(&mut self, tag: u32, result: Result<(), DevError>) {
        if let Some(slot) = self.slots.get_mut(tag as usize) {
            if slot.0 == State::Live {
                slot.0 = State::Finished;
                self.live -= 1;
                self.finished.push(Completion {
                    tag: Tag(tag),
                    result,
                });
            }
        }
    }
    /// Frees live request `tag` at once: it was never handed to the caller
    /// (`submit` refuses it).
    #[inline]
    pub fn withdraw(&mut self, tag: u32) {
        if let Some(slot) = self.slots.get_mut(tag as usize) {
            if slot.0 == State::Live {
                slot.0 = State::Free;
                self.live -= 1;
                self.free.push(tag);
            }
        }
    }
    /// Hands up to `max` finished requests' completions to `done`, oldest
    /// first, and frees their tags; returns how many.
    #[inline]
    pub fn hand_back(&mut self, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        let (slots, free) = (&mut self.slots, &mut self.free);
        self.finished.hand_back(max, |c| {
            if let Some(slot) = slots.get_mut(c.tag.0 as usize) {
                slot.0 = State::Free;
                free.push(c.tag.0);
            }
            done(c);
        })
    }
    /// Requests taken and not yet finished.
    #[inline]
    pub fn live(&self) -> usize {
        self.live
    }
    /// Requests whose tag is taken: live, or finished and not handed back.
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.live + self.finished.len()
    }
}

/// The merge of one request's pieces: how many are still out, and the
/// first error any of them met (the request's result).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Merge {
    outstanding: u32,
    error: Option<DevError>,
}

impl Merge {
    /// A request with `n` pieces out and no error yet.
    #[inline]
    pub fn new(n: u32) -> Merge {
        Merge {
            outstanding: n,
            error: None,
        }
    }
    /// One more piece is out.
    #[inline]
    pub fn sent(&mut self) {
        self.outstanding += 1;
    }
    /// Records an error that is not a piece's (one could not be sent);
    /// the first error stays the result.
    #[inline]
    pub fn fail(&mut self, e: DevError) {
        self.error.get_or_insert(e);
    }
    /// A piece finished with `result`; true when none is out any more.
    #[inline]
    pub fn piece_done(&mut self, result: Result<(), DevError>) -> bool {
        self.outstanding = self.outstanding.saturating_sub(1);
        if let Err(e) = result {
            self.fail(e);
        }
        self.outstanding == 0
    }
    /// Pieces still out.
    #[inline]
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }
    /// The first error met, if any.
    #[inline]
    pub fn error(&self) -> Option<DevError> {
        self.error
    }
    /// The request's result: the first error met, or success.
    #[inline]
    pub fn result(&self) -> Result<(), DevError> {
        self.error.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_reused_only_after_hand_back_and_keep_their_buffers() {
        let mut r: Requests<Vec<u8>> = Requests::default();
        let (a, buf) = r.take();
        buf.extend_from_slice(&[1, 2, 3]);
        let (b, _) = r.take();
        assert_ne!(a, b);
        r.finish(a, Ok(()));
        r.finish(a, Err(DevError::Media));
        assert!(r.get(a).is_none(), "finished requests are not live");
        assert_eq!((r.live(), r.in_flight()), (1, 2));
        let (c, _) = r.take();
        assert_ne!(c, a, "a's completion has not been handed back yet");
        let mut seen = Vec::new();
        assert_eq!(r.hand_back(8, &mut |c| seen.push(c)), 1);
        assert_eq!(
            seen,
            [Completion {
                tag: Tag(a),
                result: Ok(())
            }]
        );
        let (d, buf) = r.take();
        assert_eq!(d, a);
        assert!(buf.capacity() >= 3, "the buffer is kept");
        r.withdraw(d);
        r.withdraw(d);
        assert_eq!((r.live(), r.in_flight()), (2, 2));
        assert!(r.get_mut(99).is_none());
    }

    #[test]
    fn completions_come_back_first_in_first_out_across_compaction() {
        let mut r: Requests<()> = Requests::default();
        let tags: Vec<u32> = (0..5).map(|_| r.take().0).collect();
        for &t in &tags[..4] {
            r.finish(t, Ok(()));
        }
        let mut seen = Vec::new();
        r.hand_back(1, &mut |c| seen.push(c.tag.0));
        r.hand_back(2, &mut |c| seen.push(c.tag.0));
        r.finish(tags[4], Err(DevError::Media));
        r.hand_back(8, &mut |c| seen.push(c.tag.0));
        assert_eq!(seen, tags);
        assert_eq!((r.in_flight(), r.finished.done.len()), (0, 0));
    }

    #[test]
    fn the_first_error_of_any_piece_is_the_result() {
        let mut m = Merge::new(2);
        assert!(!m.piece_done(Err(DevError::Media)));
        m.sent();
        assert!(!m.piece_done(Err(DevError::Timeout)));
        assert!(m.piece_done(Ok(())));
        assert_eq!(m.result(), Err(DevError::Media));
        assert_eq!(Merge::default().result(), Ok(()));
    }
}
