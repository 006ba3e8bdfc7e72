//! loom models of the primitives: every interleaving of their atomic and
//! mutex operations is explored (`just loom`).
#![allow(clippy::unwrap_used)]

use alloc::sync::Arc;
use core::future::Future;
use core::pin::pin;
use core::sync::atomic::Ordering;
use core::task::{Context, Poll, Waker};

use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::thread;

use crate::cache::{Claim, Insert, PageCache, Radix};
use crate::lock::{Held, Level, Mode, RangeLock};
use crate::sync::WaitQueue;
use crate::units::{ByteRange, InodeId, PageIndex};

/// Polls `f` until it is ready, yielding to loom between polls.
fn spin_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        thread::yield_now();
    }
}

#[test]
fn range_lock_excludes_overlapping_holders() {
    loom::model(|| {
        let lock = Arc::new(RangeLock::new(Level::Extent));
        let inside = Arc::new(AtomicUsize::new(0));
        let handles: alloc::vec::Vec<_> = [(0u64, 100u64), (50, 150)]
            .into_iter()
            .map(|(a, b)| {
                let (lock, inside) = (lock.clone(), inside.clone());
                thread::spawn(move || {
                    let held = Held::new();
                    let g = spin_on(lock.lock(ByteRange::new(a, b), Mode::Exclusive, &held));
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two holders of overlapping ranges"
                    );
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(g);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(lock.is_idle());
    });
}

struct Flag(AtomicBool);

impl alloc::task::Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn wait_queue_never_loses_a_wake_up() {
    loom::model(|| {
        let queue = Arc::new(WaitQueue::new());
        let ready = Arc::new(AtomicBool::new(false));
        let (q, r) = (queue.clone(), ready.clone());
        let setter = thread::spawn(move || {
            r.store(true, Ordering::SeqCst);
            q.wake_all();
        });
        let woken = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(woken.clone());
        let mut cx = Context::from_waker(&waker);
        let mut wait = pin!(queue.wait_until(|| ready.load(Ordering::SeqCst).then_some(())));
        if wait.as_mut().poll(&mut cx).is_pending() {
            // Parked: the setter must wake us, and then we must be ready.
            while !woken.0.load(Ordering::SeqCst) {
                thread::yield_now();
            }
            assert!(
                wait.as_mut().poll(&mut cx).is_ready(),
                "woken but not ready"
            );
        }
        setter.join().unwrap();
    });
}

#[test]
fn write_drain_admits_no_writer_once_drained() {
    loom::model(|| {
        let inode = Arc::new(crate::fs::inode_for_tests());
        let inside = Arc::new(AtomicBool::new(false));
        let (i, w) = (inode.clone(), inside.clone());
        let writer = thread::spawn(move || {
            if let Some(slot) = i.writers().try_enter(0) {
                w.store(true, Ordering::SeqCst);
                w.store(false, Ordering::SeqCst);
                i.writers().exit(slot);
            }
        });
        inode.writers().block();
        spin_on(inode.writers().drained());
        assert!(
            !inside.load(Ordering::SeqCst),
            "a writer is inside after the drain"
        );
        // And none gets in while blocked.
        assert!(inode.writers().try_enter(1).is_none());
        inode.writers().unblock();
        writer.join().unwrap();
    });
}

#[test]
fn a_pinned_page_is_never_evicted() {
    loom::model(|| {
        let cache = Arc::new(PageCache::new(1));
        let map = Arc::new(Radix::new());
        let ino = InodeId(1);
        // Page 0 cached and uptodate; the index leaf already exists.
        let Insert::New { slot, .. } = cache.insert(&map, ino, PageIndex(0)) else {
            panic!("insert")
        };
        cache.finish_fill(&map, PageIndex(0), slot, true, false);
        let (c, m) = (cache.clone(), map.clone());
        let evictor = thread::spawn(move || {
            // Page 1 needs the only slot: it may evict page 0 unless pinned.
            if let Insert::New { slot, .. } = c.insert(&m, ino, PageIndex(1)) {
                c.finish_fill(&m, PageIndex(1), slot, true, false);
            }
        });
        if let Claim::Done(s, _) = cache.pin(&map, ino, PageIndex(0)) {
            assert_eq!(
                cache.index_of(s),
                PageIndex(0),
                "a pinned page changed identity"
            );
            cache.unpin(s, false);
        }
        evictor.join().unwrap();
    });
}
