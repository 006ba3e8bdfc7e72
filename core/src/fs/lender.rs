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
//! The lender keeps its sessions in an append-only table whose entries
//! are read without a lock and stay put while the lender lives, so a lent
//! session is a plain borrow of the mount's handle: no reference count
//! moves on the way in or out. A thread keeps in a thread-local slot the
//! index of the session it adopted for each mount (the first one lent to
//! it), and in a second, plain one the mount and index it used last. An
//! operation first tries that session: read the index, claim the session
//! with one atomic swap; no lock shared between threads on that path, and
//! no other atomic read-modify-write. If the thread
//! has none yet, or its own is lent to another operation (several tasks on
//! one thread), the lender's list is searched under its lock for a session
//! no thread adopted and no operation holds, and a new one is made when
//! there is none. An operation gives its session back by releasing the
//! claim, on whatever thread it ends (a task may move). A thread that exits
//! disowns its sessions, which others may then adopt (the slot keeps a weak
//! reference for that). A weak reference outliving its mount keeps only
//! the session's empty allocation, until the thread next borrows a session
//! or exits.
//!
//! Explicit sessions ([`Fs::session`](super::Fs::session)) are the
//! caller's: they do not pass through here.

use alloc::boxed::Box;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::ops::Deref;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::cell::{Cell, RefCell};

use spin::Once;

use super::{Fs, Session, Shared};
use crate::dev::BlockDevice;
use crate::dev::DevError;
use crate::error::Result;
use crate::sync::Mutex;

/// Numbers mounts, so a thread's slots know whose sessions they point at.
static NEXT_MOUNT: AtomicU64 = AtomicU64::new(1);

/// The sessions a mount lends to operations; dropped with its last handle.
pub(crate) struct Lender<D: BlockDevice> {
    /// This mount's number (threads' slots are filed by it).
    mount: u64,
    /// Every session made for lending, by index; read without a lock.
    sessions: Table<Lendable<D>>,
    /// Taken to search `sessions` for a free one or to append one: only
    /// when a thread has no session of its own free, before the operation
    /// takes any lock; a session opened under it takes the counters' lock
    /// and the device's.
    grow: Mutex<()>,
}

/// Sessions in bucket 0 of a [`Table`]; bucket `k` holds `FIRST << k`.
const FIRST: usize = 8;
/// Buckets of a [`Table`]: enough for every index a `usize` can hold.
const BUCKETS: usize = (usize::BITS - FIRST.trailing_zeros()) as usize;

/// One bucket of a [`Table`]: its entries, each set once.
type Bucket<T> = Box<[Once<Arc<T>>]>;

/// An append-only table whose entries never move: bucket `k` holds
/// `FIRST << k` entries and is made when the first of them is appended.
/// Lookups take no lock (two `Once` loads); appends are serialized by the
/// caller.
struct Table<T> {
    buckets: [Once<Bucket<T>>; BUCKETS],
    len: AtomicUsize,
}

impl<T> Table<T> {
    fn new() -> Table<T> {
        Table {
            buckets: core::array::from_fn(|_| Once::new()),
            len: AtomicUsize::new(0),
        }
    }

    /// Bucket and place in it of entry `i`.
    #[inline]
    fn locate(i: usize) -> Option<(usize, usize)> {
        let n = i.checked_add(FIRST)?;
        let k = (n.ilog2() - FIRST.trailing_zeros()) as usize;
        Some((k, n - (FIRST << k)))
    }

    /// Entry `i`, if appended.
    #[inline]
    fn get(&self, i: usize) -> Option<&Arc<T>> {
        let (k, at) = Self::locate(i)?;
        self.get_at(k, at)
    }

    /// Entry `at` of bucket `k` (as [`Table::locate`] places it), if
    /// appended.
    #[inline]
    fn get_at(&self, k: usize, at: usize) -> Option<&Arc<T>> {
        self.buckets.get(k)?.get()?.get(at)?.get()
    }

    /// Entries appended so far.
    fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Appends `value` (the caller serializes appends); its index, or
    /// `None` if the table is full.
    fn push(&self, value: Arc<T>) -> Option<usize> {
        let i = self.len.load(Ordering::Relaxed);
        let (k, at) = Self::locate(i)?;
        let bucket = self.buckets.get(k)?.call_once(|| {
            (0..FIRST << k)
                .map(|_| Once::new())
                .collect::<Vec<_>>()
                .into_boxed_slice()
        });
        bucket.get(at)?.call_once(|| value);
        self.len.store(i + 1, Ordering::Release);
        Some(i)
    }
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
trait Adopted: Send + Sync {
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
    /// Where the session sits in its lender's table.
    index: usize,
    /// The session, to disown it when the thread exits.
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
    /// The mount of the slot this thread used last (0: none) and where its
    /// session sits in the lender's table (bucket, place). Needs no
    /// destructor, so reading it is a few loads.
    static LAST: Cell<(u64, usize, usize)> = const { Cell::new((0, 0, 0)) };
}

/// A session lent to one operation; given back when dropped. It borrows
/// the mount's handle, whose lender keeps the session.
pub(crate) struct Lent<'a, D: BlockDevice>(&'a Lendable<D>);

impl<D: BlockDevice> Deref for Lent<'_, D> {
    type Target = Session<D>;
    fn deref(&self) -> &Session<D> {
        &self.0.session
    }
}

impl<D: BlockDevice> Drop for Lent<'_, D> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

impl<D: BlockDevice> Lender<D> {
    /// A lender with no sessions yet.
    pub(crate) fn new() -> Lender<D> {
        Lender {
            mount: NEXT_MOUNT.fetch_add(1, Ordering::Relaxed),
            sessions: Table::new(),
            grow: Mutex::new(()),
        }
    }

    /// Sessions made so far (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.sessions.len()
    }

    /// This thread's adopted session, if it has one and it is free.
    #[inline]
    fn own(&self) -> Option<&Lendable<D>> {
        let (mount, k, at) = LAST.try_with(Cell::get).unwrap_or((0, 0, 0));
        let (k, at) = if mount == self.mount {
            (k, at)
        } else {
            let index = SLOTS
                .try_with(|slots| {
                    let slots = slots.try_borrow().ok()?;
                    Some(slots.iter().find(|s| s.mount == self.mount)?.index)
                })
                .ok()
                .flatten()?;
            let (k, at) = Table::<Lendable<D>>::locate(index)?;
            let _ = LAST.try_with(|last| last.set((self.mount, k, at)));
            (k, at)
        };
        let mine = self.sessions.get_at(k, at)?;
        mine.claim().then_some(&**mine)
    }

    /// A session no thread adopted and no operation holds, or a new one;
    /// this thread adopts it if it has none for this mount.
    #[cold]
    #[inline(never)]
    fn other(&self, shared: &Arc<Shared<D>>) -> Result<&Lendable<D>> {
        let grow = self.grow.lock();
        let free = (0..self.sessions.len()).find_map(|i| {
            let s = self.sessions.get(i)?;
            (!s.adopted.load(Ordering::Acquire) && s.claim()).then_some((i, s))
        });
        let (index, session) = match free {
            Some(found) => found,
            None => {
                let s = Arc::new(Lendable {
                    session: Session::open(shared.clone())?,
                    busy: AtomicBool::new(true),
                    adopted: AtomicBool::new(false),
                });
                let i = self.sessions.push(s).ok_or(DevError::NoQueues)?;
                (i, self.sessions.get(i).ok_or(DevError::NoQueues)?)
            }
        };
        drop(grow);
        self.adopt(index, session);
        Ok(&**session)
    }

    /// Points this thread's slot for this mount at `session` (entry
    /// `index`), unless the slot points at a live session already.
    /// Forgets slots of mounts that are gone.
    fn adopt(&self, index: usize, session: &Arc<Lendable<D>>) {
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
                index,
                session: weak,
            });
        });
    }
}

/// Lends a session of `fs` to one operation.
#[inline(always)]
pub(crate) fn lend<D: BlockDevice>(fs: &Fs<D>) -> Result<Lent<'_, D>> {
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
    fn the_table_finds_every_entry_across_its_buckets() {
        let table = super::Table::new();
        for i in 0..300usize {
            assert_eq!(table.push(alloc::sync::Arc::new(i)), Some(i));
        }
        assert_eq!(table.len(), 300);
        for i in 0..300usize {
            assert_eq!(table.get(i).map(|v| **v), Some(i));
        }
        assert!(table.get(300).is_none());
        assert!(table.get(usize::MAX).is_none(), "past every bucket");
    }

    #[test]
    fn a_thread_alternating_between_mounts_gets_its_own_session_of_each() {
        let (one, two) = (fs(), fs());
        let (h1, h2) = (
            lend(&one).unwrap().drain_hint,
            lend(&two).unwrap().drain_hint,
        );
        for _ in 0..3 {
            assert_eq!(lend(&one).unwrap().drain_hint, h1);
            assert_eq!(lend(&two).unwrap().drain_hint, h2);
        }
        assert_eq!(one.handles.lender.len(), 1);
        assert_eq!(two.handles.lender.len(), 1);
    }

    #[test]
    fn an_exited_thread_gives_its_session_up_for_adoption() {
        let fs = fs();
        let theirs = fs.clone();
        // `join` returns once the thread's slots are dropped.
        std::thread::spawn(move || drop(lend(&theirs).unwrap()))
            .join()
            .unwrap();
        let on_exited = fs
            .handles
            .lender
            .sessions
            .get(0)
            .unwrap()
            .session
            .drain_hint;
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
