//! Sessions lent to operations (hosted builds), owned by the mount's
//! handles.
//!
//! A mount's [`Lender`] lives in the `Handles` every `Fs` and `File` clone
//! shares, and owns every session it makes: when the last handle drops,
//! the lender drops, and with it every session, so their device queues
//! (queue pairs, DMA memory) and, once nothing else holds the mount, the
//! device and its controller are freed, whatever threads used them and
//! whether those threads still run.
//!
//! A thread keeps in a thread-local slot a weak reference to the session
//! it adopted for each mount (the first one lent to it). An operation first
//! tries that session: upgrade the reference, claim the session with one
//! atomic swap; no lock shared between threads on that path. If the thread
//! has none yet, or its own is lent to another operation (several tasks on
//! one thread), the lender's list is searched under its lock for a session
//! no thread adopted and no operation holds, and a new one is made when
//! there is none. An operation gives its session back by releasing the
//! claim, on whatever thread it ends (a task may move). A thread that exits
//! disowns its sessions, which others may then adopt. A weak reference
//! outliving its mount keeps only the session's empty allocation, until the
//! thread next borrows a session or exits.
//!
//! Explicit sessions ([`Fs::session`](super::Fs::session)) are the
//! caller's: they do not pass through here.

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::any::Any;
use core::ops::Deref;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::cell::RefCell;

use super::{Fs, Session, Shared};
use crate::dev::BlockDevice;
use crate::error::Result;
use crate::sync::Mutex;

/// Numbers mounts, so a thread's slots know whose sessions they point at.
static NEXT_MOUNT: AtomicU64 = AtomicU64::new(1);

/// The sessions a mount lends to operations; dropped with its last handle.
pub(crate) struct Lender<D: BlockDevice> {
    /// This mount's number (threads' slots are filed by it).
    mount: u64,
    /// Every session made for lending. Taken only when a thread has no
    /// session of its own free, before the operation takes any lock; a
    /// session opened under it takes the counters' lock and the device's.
    sessions: Mutex<Vec<Arc<Lendable<D>>>>,
}

impl<D: BlockDevice> core::fmt::Debug for Lender<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Lender")
            .field("mount", &self.mount)
            .finish_non_exhaustive()
    }
}

/// A session and who is using it.
struct Lendable<D: BlockDevice> {
    session: Session<D>,
    /// Lent to an operation now.
    busy: AtomicBool,
    /// A thread's slot points at it: only that thread claims it.
    adopted: AtomicBool,
}

impl<D: BlockDevice> Lendable<D> {
    /// Takes the session for one operation, if no other holds it.
    fn claim(&self) -> bool {
        self.busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }
}

/// A lendable session, whatever its device type.
trait Adopted: Any + Send + Sync {
    /// Its adopting thread is gone: other threads may adopt it.
    fn disown(&self);
}

impl<D: BlockDevice> Adopted for Lendable<D> {
    fn disown(&self) {
        self.adopted.store(false, Ordering::Release);
    }
}

/// A thread's pointer to the session it adopted for mount `mount`.
struct Slot {
    mount: u64,
    session: Weak<dyn Adopted>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(session) = self.session.upgrade() {
            session.disown();
        }
    }
}

std::thread_local! {
    /// This thread's adopted sessions, one per mount at most.
    static SLOTS: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
}

/// A session lent to one operation; given back when dropped.
pub(crate) struct Lent<D: BlockDevice>(Arc<Lendable<D>>);

impl<D: BlockDevice> Deref for Lent<D> {
    type Target = Session<D>;
    fn deref(&self) -> &Session<D> {
        &self.0.session
    }
}

impl<D: BlockDevice> Drop for Lent<D> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

impl<D: BlockDevice> Lender<D> {
    /// A lender with no sessions yet.
    pub(crate) fn new() -> Lender<D> {
        Lender {
            mount: NEXT_MOUNT.fetch_add(1, Ordering::Relaxed),
            sessions: Mutex::new(Vec::new()),
        }
    }

    /// Sessions made so far (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// This thread's adopted session, if it has one and it is free.
    #[inline]
    fn own(&self) -> Option<Arc<Lendable<D>>> {
        let mine = SLOTS
            .try_with(|slots| {
                let slots = slots.try_borrow().ok()?;
                let slot = slots.iter().find(|s| s.mount == self.mount)?;
                slot.session.upgrade()
            })
            .ok()
            .flatten()?;
        let mine: Arc<dyn Any + Send + Sync> = mine;
        let mine = mine.downcast::<Lendable<D>>().ok()?;
        mine.claim().then_some(mine)
    }

    /// A session no thread adopted and no operation holds, or a new one;
    /// this thread adopts it if it has none for this mount.
    fn other(&self, shared: &Arc<Shared<D>>) -> Result<Arc<Lendable<D>>> {
        let mut sessions = self.sessions.lock();
        let free = sessions
            .iter()
            .find(|s| !s.adopted.load(Ordering::Acquire) && s.claim())
            .cloned();
        let session = match free {
            Some(s) => s,
            None => {
                let s = Arc::new(Lendable {
                    session: Session::open(shared.clone())?,
                    busy: AtomicBool::new(true),
                    adopted: AtomicBool::new(false),
                });
                sessions.push(s.clone());
                s
            }
        };
        drop(sessions);
        self.adopt(&session);
        Ok(session)
    }

    /// Points this thread's slot for this mount at `session`, unless the
    /// slot points at a live session already. Forgets slots of mounts that
    /// are gone.
    fn adopt(&self, session: &Arc<Lendable<D>>) {
        let _ = SLOTS.try_with(|slots| {
            let Ok(mut slots) = slots.try_borrow_mut() else {
                return;
            };
            slots.retain(|s| s.session.strong_count() > 0);
            if slots.iter().any(|s| s.mount == self.mount) {
                return;
            }
            if session
                .adopted
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return;
            }
            let weak: Weak<Lendable<D>> = Arc::downgrade(session);
            slots.push(Slot {
                mount: self.mount,
                session: weak,
            });
        });
    }
}

/// Lends a session of `fs` to one operation.
#[inline]
pub(crate) fn lend<D: BlockDevice>(fs: &Fs<D>) -> Result<Lent<D>> {
    let lender = &fs.handles.lender;
    let session = match lender.own() {
        Some(s) => s,
        None => lender.other(&fs.shared)?,
    };
    Ok(Lent(session))
}

#[cfg(test)]
mod tests {
    use super::lend;
    use crate::dev::ram::RamDevice;
    use crate::fs::{Config, Fs};

    fn fs() -> Fs<RamDevice> {
        let dev = RamDevice::new(16 << 20, 4096, 64).unwrap();
        let config = Config {
            cache_pages: 32,
            dirty_limit_pages: 16,
            ..Config::default()
        };
        Fs::new(dev, config).unwrap()
    }

    #[test]
    fn a_thread_reuses_its_session_and_a_second_operation_gets_another() {
        let fs = fs();
        let a = lend(&fs).unwrap();
        let hint = a.drain_hint;
        // The thread's own session is lent: a second operation gets
        // another, which no thread adopts.
        let b = lend(&fs).unwrap();
        assert_ne!(b.drain_hint, hint);
        drop(a);
        drop(b);
        assert_eq!(lend(&fs).unwrap().drain_hint, hint);
        let a = lend(&fs).unwrap();
        assert_eq!(a.drain_hint, hint);
        // The unadopted one is lent again rather than a third made.
        let b = lend(&fs).unwrap();
        assert_ne!(b.drain_hint, hint);
        assert_eq!(fs.handles.lender.len(), 2);
    }

    #[test]
    fn an_exited_thread_gives_its_session_up_for_adoption() {
        let fs = fs();
        let theirs = fs.clone();
        // `join` returns once the thread's slots are dropped.
        std::thread::spawn(move || drop(lend(&theirs).unwrap()))
            .join()
            .unwrap();
        let on_exited = fs.handles.lender.sessions.lock()[0].session.drain_hint;
        assert_eq!(lend(&fs).unwrap().drain_hint, on_exited);
        assert_eq!(fs.handles.lender.len(), 1);
    }

    #[test]
    fn the_last_handle_frees_sessions_adopted_by_threads_that_live_on() {
        use std::sync::mpsc::channel;
        let fs = fs();
        let (used, quit) = (channel(), channel::<()>());
        let theirs = fs.clone();
        let thread = std::thread::spawn(move || {
            drop(lend(&theirs).unwrap());
            drop(theirs);
            used.0.send(()).unwrap();
            quit.1.recv().unwrap();
        });
        used.1.recv().unwrap();
        drop(lend(&fs).unwrap());
        let mount = alloc::sync::Arc::downgrade(&fs.shared);
        drop(fs);
        // The thread still runs, its slot still names its session: the
        // sessions are gone all the same, and with them the mount.
        assert!(mount.upgrade().is_none());
        quit.0.send(()).unwrap();
        thread.join().unwrap();
    }
}
