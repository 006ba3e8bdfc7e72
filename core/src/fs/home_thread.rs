//! The hosted filesystem's log thread (see `home`): it drives
//! [`Session::background_step`] on a session of its own while logged pages
//! are due home or the log is due a checkpoint, and sleeps otherwise,
//! until a sync that staged data or a log write finds work due and wakes
//! it.
//!
//! The thread is owned by the mount's handles (`Handles`, with the lender):
//! when the last `Fs` or `File` drops, it is stopped and joined, so it
//! never outlives the mount's handles and holds no handle itself (only the
//! shared state, as a session does).
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

use alloc::sync::Arc;
use core::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Session, Shared};
use crate::dev::BlockDevice;
use crate::persist::Journal;

/// How long the thread sleeps after a step that failed (the device
/// refused a write) before it tries again, unless woken sooner; and the
/// longest it sleeps at all.
const BACKOFF: Duration = Duration::from_millis(10);

/// How long the thread naps between looks at the log while pages were
/// due recently. A sync stages one page; the log is due a few dozen pages
/// before its share is full, so a look every nap keeps up with syncs a
/// few microseconds apart.
const NAP: Duration = Duration::from_micros(100);

/// Naps in a row that found nothing due before the thread sleeps until a
/// sync wakes it (about 10 ms with nothing to write home).
const NAPS_BEFORE_SLEEP: u32 = 100;

/// How a sync wakes the thread, and how the handles stop it.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    state: Mutex<Wake>,
    changed: Condvar,
    asleep: AtomicBool,
}

#[derive(Debug, Default)]
struct Wake {
    kicked: bool,
    stop: bool,
}

impl Signal {
    /// True if the thread is asleep or about to be: a caller that made
    /// pages due should [`kick`](Signal::kick) it.
    pub(crate) fn asleep(&self) -> bool {
        self.asleep.load(Ordering::SeqCst)
    }

    /// Wakes the thread.
    pub(crate) fn kick(&self) {
        if let Ok(mut w) = self.state.lock() {
            w.kicked = true;
            self.changed.notify_one();
        }
    }

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

    /// Sleeps until kicked or stopped, or for `timeout`; false once
    /// stopped. The caller set [`Signal::asleep`]'s mark and then found
    /// nothing due.
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

/// The running thread; stopped and joined on drop.
#[derive(Debug)]
pub(crate) struct HomeWriter {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl HomeWriter {
    /// Starts the thread for `shared` if its journal has a log; `None`
    /// otherwise, or if no thread can be started (then syncs write home
    /// themselves when the share is full, and checkpoint when the log is
    /// half full).
    pub(crate) fn start<D: BlockDevice>(shared: &Arc<Shared<D>>) -> Option<HomeWriter> {
        if !shared.config.home_writer {
            return None;
        }
        // `Fs::new` has no log: nothing to write home, ever.
        if !shared.journal.has_log() {
            return None;
        }
        let signal = shared.home_signal.clone();
        let fs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("pollfs-home".into())
            .spawn(move || run(fs))
            .ok()?;
        shared.journal.set_background(true);
        Some(HomeWriter {
            signal,
            thread: Some(thread),
        })
    }
}

impl Drop for HomeWriter {
    fn drop(&mut self) {
        self.signal.stop();
        if let Some(t) = self.thread.take() {
            // A panic in the thread is already reported; the mount goes
            // on without it.
            let _ = t.join();
        }
    }
}

/// Turns the journal's background mode off when the thread ends, however
/// it ends: commits then checkpoint at half full again.
struct BackgroundOff<'a>(&'a Journal);

impl Drop for BackgroundOff<'_> {
    fn drop(&mut self) {
        self.0.set_background(false);
    }
}

fn run<D: BlockDevice>(fs: Arc<Shared<D>>) {
    let _off = BackgroundOff(&fs.journal);
    // Its session (a device queue) is opened when pages are first due,
    // not before: the user's threads open theirs first. With none to be
    // had, syncs write home themselves when the share is full.
    let mut session: Option<Session<D>> = None;
    let signal = &fs.home_signal;
    // Naps in a row that found nothing due; at the limit the thread
    // sleeps until a sync wakes it.
    let mut idle = NAPS_BEFORE_SLEEP;
    loop {
        if fs.journal.background_due() {
            if session.is_none() {
                session = Session::open(fs.clone()).ok();
            }
            match session.as_ref().map(|s| s.background_step()) {
                Some(Ok(1..)) => idle = 0,
                // Nothing written while due: the pages are busy under a
                // sync or a writeback, free again within a nap.
                Some(Ok(0)) => {
                    if !signal.nap(NAP) {
                        return;
                    }
                }
                // A failed step (it counted itself in `Stats`) or no
                // queue (counted here, with the closed sessions' sum):
                // wait a while, or for the next sync that stages data.
                failed => {
                    if failed.is_none() {
                        fs.counters.lock().1.background_errors += 1;
                    }
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
        if fs.journal.background_due() {
            signal.asleep.store(false, Ordering::SeqCst);
            continue;
        }
        if !signal.sleep(BACKOFF) {
            return;
        }
    }
}
