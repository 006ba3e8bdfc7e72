//! One ring queue and the thread that serves it.
//!
//! The thread pins itself to the queue's CPU (the kernel puts a request on
//! the queue of the CPU its caller runs on), makes its own io_uring,
//! registers [`DEPTH`] entries, and then loops: wait for completions; for
//! each entry that came back with a request, lay it out, give it to
//! fuser's [`Dispatcher`] (the engine call runs in this thread's own lent
//! session), put the reply in the entry and send COMMIT_AND_FETCH, which
//! answers the request and waits for the next in one command. Nothing on
//! that path is shared with another queue.
//!
//! The queue ends when the kernel lets every entry go: at unmount the
//! connection is aborted and each waiting command completes with
//! ENOTCONN; a commit after that fails the same way.

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};

use fuser::{Dispatcher, Filesystem, ReplySink};
use io_uring::{cqueue, squeue, IoUring};

use super::entry::Entry;
use super::layout::{self, Request};

/// Entries per queue. A queue's thread serves one request at a time; a
/// second entry lets the kernel hand over the next request while this one
/// is being answered. Each costs a payload buffer (the largest request).
pub const DEPTH: usize = 2;

/// Where a reply to the request in one entry is gathered, from whichever
/// thread replies (pollfs replies on the serving thread, so the lock is
/// never contended).
#[derive(Debug, Default)]
struct Sink {
    slot: Mutex<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The request this entry waits to answer, until a reply comes.
    awaiting: Option<u64>,
    /// The reply, as fuser writes it to `/dev/fuse`.
    reply: Vec<u8>,
}

impl Sink {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        // A panic while the slot was held leaves nothing half-done that
        // matters: `awaiting` and `reply` are rewritten for each request.
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the reply to request `unique`.
    fn expect(&self, unique: u64) {
        let mut slot = self.slot();
        slot.awaiting = Some(unique);
        slot.reply.clear();
    }

    /// Ends the wait: the reply gathered, if one came.
    fn take(&self) -> (MutexGuard<'_, Slot>, bool) {
        let mut slot = self.slot();
        let replied = slot.awaiting.take().is_none();
        (slot, replied)
    }
}

impl ReplySink for Sink {
    fn send(&self, reply: &[IoSlice<'_>]) -> io::Result<()> {
        let mut slot = self.slot();
        let Some(unique) = slot.awaiting else {
            return Err(io::Error::other(
                "a reply came after its ring entry was answered",
            ));
        };
        slot.reply.clear();
        for part in reply {
            slot.reply.extend_from_slice(part);
        }
        if slot.reply.get(8..16).map(|u| u == unique.to_ne_bytes()) != Some(true) {
            slot.reply.clear();
            return Err(io::Error::other(format!(
                "a reply for another request given to request {unique}'s ring entry"
            )));
        }
        slot.awaiting = None;
        Ok(())
    }
}

/// Did a completion with this result end the entry because the
/// connection is going away (unmount, abort, the server exiting)?
fn ending(res: i32) -> bool {
    [
        libc::ENOTCONN,
        libc::ECANCELED,
        libc::ECONNABORTED,
        libc::ENODEV,
    ]
    .contains(&-res)
}

/// The queue's work so far, for the report at unmount.
#[derive(Debug, Default)]
pub struct Tally {
    /// Requests answered through the ring.
    pub served: AtomicU64,
    /// Ring entries that could not be given to fuser (answered EIO).
    pub malformed: AtomicU64,
}

/// What the queue's thread needs.
pub struct Queue<FS: Filesystem> {
    pub qid: u16,
    pub dispatcher: Dispatcher<FS>,
    /// Payload buffer size of each entry.
    pub capacity: usize,
    pub tally: Arc<Tally>,
}

/// Which command an entry last sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Register,
    Commit,
}

impl<FS: Filesystem> Queue<FS> {
    /// Serves the queue until the kernel lets every entry go. Says on
    /// `registered` whether the kernel took the entries.
    pub fn serve(self, registered: Sender<(u16, io::Result<()>)>) -> io::Result<()> {
        // Best effort: a queue served off its CPU still works.
        let _ = crate::sys::pin_to_cpu(usize::from(self.qid));
        let setup = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build((DEPTH * 2) as u32);
        let mut ring = match setup {
            Ok(ring) => ring,
            Err(e) => {
                let _ = registered.send((self.qid, Err(io::Error::new(e.kind(), e.to_string()))));
                return Ok(());
            }
        };
        let mut entries: Vec<Entry> = (0..DEPTH).map(|_| Entry::new(self.capacity)).collect();
        let mut sent = [Sent::Register; DEPTH];
        let sinks: Vec<Arc<Sink>> = (0..DEPTH).map(|_| Arc::default()).collect();
        let fuse = self.dispatcher.as_fd().as_raw_fd();
        let registering = (|| {
            let mut sq = ring.submission();
            for (i, e) in entries.iter_mut().enumerate() {
                e.register(&mut sq, fuse, self.qid, i as u64)?;
            }
            drop(sq);
            ring.submit()
        })();
        if let Err(e) = registering {
            let _ = registered.send((self.qid, Err(e)));
            return Ok(());
        }
        // The kernel refuses a registration at once; one it takes stays
        // with it until a request comes.
        let mut done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        let refused = done.iter().find(|&&(_, res)| res < 0).map(|&(_, res)| res);
        let _ = registered.send((
            self.qid,
            refused.map_or(Ok(()), |res| Err(io::Error::from_raw_os_error(-res))),
        ));
        let mut live = DEPTH;
        let mut told = false;
        loop {
            for (user_data, res) in done.drain(..) {
                let Some(i) = usize::try_from(user_data).ok().filter(|&i| i < DEPTH) else {
                    continue;
                };
                let e = &mut entries[i];
                e.completed();
                live -= 1;
                let next = if res < 0 {
                    if ending(res) || refused.is_some() {
                        continue;
                    }
                    // The kernel took the entry out of the queue: offer it
                    // again, once, so that the queue keeps its depth.
                    if !told {
                        eprintln!(
                            "pollfs: io_uring queue {}: {:?} failed: {}; registering the entry again",
                            self.qid,
                            sent[i],
                            io::Error::from_raw_os_error(-res)
                        );
                        told = true;
                    }
                    if sent[i] == Sent::Register {
                        continue;
                    }
                    Sent::Register
                } else {
                    Sent::Commit
                };
                let mut sq = ring.submission();
                match next {
                    Sent::Register => e.register(&mut sq, fuse, self.qid, user_data)?,
                    Sent::Commit => {
                        let commit_id = self.answer(e, &sinks[i])?;
                        e.commit_and_fetch(&mut sq, fuse, self.qid, commit_id, user_data)?;
                    }
                }
                sent[i] = next;
                live += 1;
            }
            if live == 0 {
                return Ok(());
            }
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                // Interrupted, or short of memory for the moment: the
                // commands are still queued; wait again.
                Err(e)
                    if [libc::EINTR, libc::EAGAIN, libc::EBUSY]
                        .contains(&e.raw_os_error().unwrap_or(0)) => {}
                Err(e) => return Err(e),
            }
            done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        }
    }

    /// Serves the request in entry `e` and puts the reply in it; returns
    /// the id to commit it by.
    fn answer(&self, e: &mut Entry, sink: &Arc<Sink>) -> io::Result<u64> {
        let header = e.header()?;
        let (unique, commit_id) = (layout::unique(&header), layout::commit_id(&header));
        let eio = layout::error_reply(unique, libc::EIO);
        let request = match Request::parse(&header, e.capacity()) {
            Ok(r) => r,
            Err(m) => {
                self.malformed(&m.to_string());
                e.put_reply(&eio, &[])?;
                return Ok(commit_id);
            }
        };
        sink.expect(unique);
        let sink_dyn: Arc<dyn ReplySink> = sink.clone();
        let dispatched = self
            .dispatcher
            .dispatch(e.request(&header, &request)?, sink_dyn);
        let (slot, replied) = sink.take();
        self.tally.served.fetch_add(1, Ordering::Relaxed);
        match (dispatched, replied) {
            (Ok(_), true) => match layout::split_reply(&slot.reply, unique, e.capacity()) {
                Ok((out, args)) => e.put_reply(out, args)?,
                Err(bad) => {
                    self.malformed(&bad.to_string());
                    e.put_reply(&eio, &[])?;
                }
            },
            (Ok(_), false) => {
                self.malformed("the filesystem did not answer at once");
                e.put_reply(&eio, &[])?;
            }
            (Err(err), _) => {
                self.malformed(&err.to_string());
                e.put_reply(&eio, &[])?;
            }
        }
        Ok(commit_id)
    }

    /// Counts a request answered EIO; says the first on stderr.
    fn malformed(&self, why: &str) {
        if self.tally.malformed.fetch_add(1, Ordering::Relaxed) == 0 {
            eprintln!(
                "pollfs: io_uring queue {}: a request answered EIO: {why}",
                self.qid
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(unique: u64) -> Vec<u8> {
        let mut r = layout::error_reply(unique, 0).to_vec();
        r.extend_from_slice(b"data");
        r
    }

    #[test]
    fn a_reply_is_gathered_once_for_the_request_awaited() {
        let sink = Sink::default();
        sink.expect(7);
        let r = reply(7);
        sink.send(&[IoSlice::new(&r[..16]), IoSlice::new(&r[16..])])
            .unwrap();
        let (slot, replied) = sink.take();
        assert!(replied);
        assert_eq!(slot.reply, r);
        drop(slot);
        // After the entry was answered, a late reply is refused.
        assert!(sink.send(&[IoSlice::new(&r)]).is_err());
    }

    #[test]
    fn a_reply_for_another_request_or_none_is_not_taken() {
        let sink = Sink::default();
        sink.expect(8);
        assert!(sink.send(&[IoSlice::new(&reply(7))]).is_err());
        assert!(sink.send(&[IoSlice::new(b"short")]).is_err());
        let (slot, replied) = sink.take();
        assert!(!replied);
        assert!(slot.reply.is_empty());
    }

    #[test]
    fn only_a_dead_connection_ends_an_entry_quietly() {
        assert!(ending(-libc::ENOTCONN) && ending(-libc::ECANCELED));
        assert!(!ending(-libc::EINVAL) && !ending(-libc::ENOENT));
    }
}
