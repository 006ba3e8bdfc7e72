//! pollfs under an OS: [`config`], the engine's hosted configuration with
//! the two things that need a thread of their own, which the engine crate
//! does not start: hybrid polling under an async runtime ([`park`]), and a
//! thread that drives the log's background steps
//! ([`Session::background_step`](pollfs_core::Session::background_step):
//! writing logged pages home, checkpoints off the sync path). The engine
//! crate starts no thread; it offers the step to whatever driver its
//! `Config::background` names, once a mount has finished loading, and this
//! crate is the one home of the hosted driver, for every door (the
//! command, the C library, the tests).
//!
//! The thread steps while logged pages are due home or the log is due a
//! checkpoint, and sleeps otherwise, until a sync that staged data or a
//! log write finds work due and wakes it. The mount's handles own it: when
//! the last `Fs` or `File` drops, it is stopped and joined, so it never
//! outlives them, and it holds no handle itself (only the work, which
//! holds the shared state, as a session does).
//!
//! While syncs keep coming the thread naps ([`NAP`]) between looks at the
//! log instead of sleeping until woken: waking a sleeping thread costs the
//! waker a system call and, on an idle core, an inter-processor interrupt
//! (tens of microseconds in a virtual machine), and with the log's due
//! mark a few dozen syncs apart that cost landed on one sync in thirty, as
//! the sync latency's tail. A nap's timer wakes the thread at its own
//! cost. Only after [`NAPS_BEFORE_SLEEP`] naps in a row found nothing due
//! does it sleep until a sync wakes it, so an idle mount costs nothing.
//!
//! Wake-ups are not lost: the thread marks itself asleep before it looks
//! at the log a last time, and a sync looks at that mark only after it
//! staged its data (both sequentially consistent), so either the thread
//! sees the data or the sync sees the mark; the wake itself is a flag set
//! under the mutex the thread sleeps on. A napping thread is not marked
//! asleep: it looks again within a nap.
//!
//! `Fs::pause_background` keeps the thread's steps out (they return 0
//! while it holds); a failed step counts itself in
//! `Stats::background_errors` and the thread backs off.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use pollfs_core::fs::background::{BackgroundDriver, BackgroundWaker, BackgroundWork};
use pollfs_core::Config;

pub mod park;

/// How long the thread sleeps after a step that failed (the device
/// refused a write) before it tries again, unless woken sooner; and the
/// longest it sleeps at all.
pub const BACKOFF: Duration = Duration::from_millis(10);

/// How long the thread naps between looks at the log while pages were
/// due recently. A sync stages one page; the log is due a few dozen pages
/// before its share is full, so a look every nap keeps up with syncs a
/// few microseconds apart.
pub const NAP: Duration = Duration::from_micros(100);

/// Naps in a row that found nothing due before the thread sleeps until a
/// sync wakes it (about 10 ms with nothing to write home).
pub const NAPS_BEFORE_SLEEP: u32 = 100;

/// [`pollfs_core::hosted::config`] with this crate's thread as the driver
/// of the log's background steps, and futures waiting for the device under
/// an async runtime polled on a schedule ([`park::hybrid_park`]) instead
/// of spinning.
pub fn config() -> Config {
    Config {
        background: Some(start),
        park: park::hybrid_park,
        ..pollfs_core::hosted::config()
    }
}

/// Starts the thread for `work` (a mount that has finished loading);
/// `None` if no thread can be started (then syncs write home themselves
/// when the log's share for data is full, and checkpoint when the log is
/// half full). The engine calls it, through [`Config::background`].
pub fn start(work: Arc<dyn BackgroundWork>) -> Option<BackgroundDriver> {
    let signal = Arc::new(Signal::default());
    let thread = {
        let (work, signal) = (work.clone(), signal.clone());
        std::thread::Builder::new()
            .name("pollfs-home".into())
            .spawn(move || run(&*work, &signal))
            .ok()?
    };
    // Commits leave checkpoints to the thread from now on; it turns this
    // off again however it ends.
    work.set_steps(true);
    Some(BackgroundDriver {
        waker: signal.clone(),
        guard: Box::new(Stopper {
            signal,
            thread: Some(thread),
        }),
    })
}

/// How a sync wakes the thread, and how the handles stop it.
#[derive(Debug, Default)]
struct Signal {
    state: Mutex<Wake>,
    changed: Condvar,
    asleep: AtomicBool,
}

#[derive(Debug, Default)]
struct Wake {
    kicked: bool,
    stop: bool,
}

impl BackgroundWaker for Signal {
    fn asleep(&self) -> bool {
        self.asleep.load(Ordering::SeqCst)
    }

    fn wake(&self) {
        if let Ok(mut w) = self.state.lock() {
            w.kicked = true;
            self.changed.notify_one();
        }
    }
}

impl Signal {
    fn stop(&self) {
        if let Ok(mut w) = self.state.lock() {
            w.stop = true;
            self.changed.notify_one();
        }
    }

    /// Waits `nap` or until stopped, without the asleep mark (no sync
    /// wakes a napping thread); false once stopped.
    fn nap(&self, nap: Duration) -> bool {
        let Ok(w) = self.state.lock() else {
            return false;
        };
        if w.stop {
            return false;
        }
        match self.changed.wait_timeout(w, nap) {
            Ok((w, _)) => !w.stop,
            Err(_) => false,
        }
    }

    /// Sleeps until woken or stopped, or for `timeout`; false once
    /// stopped. The caller set the asleep mark and then found nothing due.
    fn sleep(&self, timeout: Duration) -> bool {
        let Ok(mut w) = self.state.lock() else {
            return false;
        };
        if !w.kicked && !w.stop {
            w = match self.changed.wait_timeout(w, timeout) {
                Ok((w, _)) => w,
                Err(_) => return false,
            };
        }
        w.kicked = false;
        self.asleep.store(false, Ordering::SeqCst);
        !w.stop
    }
}

/// The running thread, owned by the mount's handles; stopped and joined
/// on drop.
#[derive(Debug)]
struct Stopper {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Stopper {
    fn drop(&mut self) {
        self.signal.stop();
        if let Some(t) = self.thread.take() {
            // A panic in the thread is already reported; the mount goes
            // on without it.
            let _ = t.join();
        }
    }
}

/// Turns the steps' checkpoints off when the thread ends, however it ends:
/// commits then checkpoint at half full again.
struct StepsOff<'a>(&'a dyn BackgroundWork);

impl Drop for StepsOff<'_> {
    fn drop(&mut self) {
        self.0.set_steps(false);
    }
}

fn run(work: &dyn BackgroundWork, signal: &Signal) {
    let _off = StepsOff(work);
    // Naps in a row that found nothing due; at the limit the thread
    // sleeps until a sync wakes it.
    let mut idle = NAPS_BEFORE_SLEEP;
    loop {
        if work.due() {
            match work.step() {
                Ok(1..) => idle = 0,
                // Nothing written while due: the pages are busy under a
                // sync or a writeback, free again within a nap.
                Ok(0) => {
                    if !signal.nap(NAP) {
                        return;
                    }
                }
                // A failed step, or no session to step in (the work
                // counted either): wait a while, or for the next sync
                // that stages data.
                Err(_) => {
                    signal.asleep.store(true, Ordering::SeqCst);
                    if !signal.sleep(BACKOFF) {
                        return;
                    }
                }
            }
            continue;
        }
        if idle < NAPS_BEFORE_SLEEP {
            idle += 1;
            if !signal.nap(NAP) {
                return;
            }
            continue;
        }
        signal.asleep.store(true, Ordering::SeqCst);
        if work.due() {
            signal.asleep.store(false, Ordering::SeqCst);
            continue;
        }
        if !signal.sleep(BACKOFF) {
            return;
        }
    }
}
