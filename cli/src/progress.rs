//! A spinner on stderr for `fsck`, whose time goes with the metadata it
//! reads (the checkpoint chain and the log), not with the device's size:
//! it shows how much has been read so far, and nothing at all when stderr
//! is not a terminal. The count comes from [`Metered`], a device that
//! wraps the real one and adds up the bytes its commands move, as
//! smoltcp's tracing devices wrap a real one; the engine has no progress
//! hook to call. (`mkfs` writes the superblocks and an empty log and
//! checkpoint whatever the device's size: it needs none.) A leg's copy
//! gets a bar ([`CopyBar`]) fed from the mirror's own status.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pollfs_core::dev::{BlockDevice, Command, Completion, DevError, DeviceQueue, Geometry, Tag};
use pollfs_core::units::Nanos;

use crate::units::show_bytes;

/// A device that counts the bytes its commands move.
#[derive(Debug)]
pub struct Metered<D> {
    inner: D,
    moved: Arc<AtomicU64>,
}

impl<D> Metered<D> {
    /// `inner`, counting into `moved`.
    pub fn new(inner: D, moved: Arc<AtomicU64>) -> Metered<D> {
        Metered { inner, moved }
    }
}

/// A queue of a [`Metered`] device.
#[derive(Debug)]
pub struct MeteredQueue<Q> {
    inner: Q,
    moved: Arc<AtomicU64>,
}

impl<Q: DeviceQueue> DeviceQueue for MeteredQueue<Q> {
    fn submit(&mut self, command: &Command<'_>) -> Result<Tag, DevError> {
        let tag = self.inner.submit(command)?;
        // Counted once started: a tool's progress, not a data path.
        self.moved
            .fetch_add(command.data_bytes(), Ordering::Relaxed);
        Ok(tag)
    }
    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        self.inner.poll(now, max, done)
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
}

impl<D: BlockDevice> BlockDevice for Metered<D> {
    type Queue = MeteredQueue<D::Queue>;
    type Frames = D::Frames;
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn frames(&self) -> &D::Frames {
        self.inner.frames()
    }
    fn open_queue(&self) -> Result<Self::Queue, DevError> {
        Ok(MeteredQueue {
            inner: self.inner.open_queue()?,
            moved: self.moved.clone(),
        })
    }
}

/// A spinner saying `what` and the bytes counted in `moved`; hidden when
/// stderr is not a terminal. Cleared when dropped.
#[derive(Debug)]
pub struct Spinner {
    bar: ProgressBar,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    /// Starts one for `what` (e.g. "file:/x: checking").
    pub fn start(what: &str, moved: Arc<AtomicU64>) -> Spinner {
        if !std::io::stderr().is_terminal() {
            return Spinner {
                bar: ProgressBar::hidden(),
                ticker: None,
            };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix}: {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_prefix(what.to_string());
        let shown = bar.clone();
        // The bar's own steady tick redraws; this thread updates what it
        // says, and ends when the bar is finished.
        let ticker = std::thread::Builder::new()
            .name("pollfs-progress".into())
            .spawn(move || {
                while !shown.is_finished() {
                    let read = show_bytes(moved.load(Ordering::Relaxed));
                    shown.set_message(format!("{read} of metadata read"));
                    shown.tick();
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .ok();
        Spinner { bar, ticker }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

/// A bar of a leg's copy (`pollfs mirror rejoin --wait`, `replace`):
/// blocks copied of the mirror's; hidden when stderr is not a terminal.
/// Cleared when dropped.
#[derive(Debug)]
pub struct CopyBar(ProgressBar);

impl CopyBar {
    /// A bar for `what` (e.g. "copying to leg 1") of `total` blocks.
    pub fn new(what: &str, total: u64) -> CopyBar {
        if !std::io::stderr().is_terminal() {
            return CopyBar(ProgressBar::hidden());
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{prefix}: [{bar:40}] {percent}% of {len} blocks ({eta})")
        {
            bar.set_style(style);
        }
        bar.set_prefix(what.to_string());
        CopyBar(bar)
    }

    /// Blocks copied so far.
    pub fn set(&self, copied: u64) {
        self.0.set_position(copied);
    }
}

impl Drop for CopyBar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pollfs_core::dev::ram::RamDevice;
    use pollfs_core::Fs;

    #[test]
    fn a_metered_device_counts_the_bytes_its_commands_move() {
        let moved = Arc::new(AtomicU64::new(0));
        let ram = RamDevice::new(16 << 20, 4096, 64).unwrap();
        let dev = Metered::new(ram.clone(), moved.clone());
        let fs = Fs::format(dev, pollfs_core::Config::default(), 1).unwrap();
        let formatted = moved.load(Ordering::Relaxed);
        assert!(formatted > 0);
        let f = fs.create("a").unwrap();
        let s = fs.session().unwrap();
        s.write_all_at(&f, &[1; 8192], 0).unwrap();
        s.sync_data(&f).unwrap();
        let after = moved.load(Ordering::Relaxed);
        // The mounted engine's commands (the format's and the recovery's
        // went before its counters began) are what the meter saw since.
        let st = fs.stats();
        assert!(st.dev_write_bytes >= 8192);
        assert_eq!(after - formatted, st.dev_read_bytes + st.dev_write_bytes);
        // A check reads through it too.
        drop((f, s, fs));
        let dev = Metered::new(ram, moved.clone());
        let report = pollfs_core::persist::check(
            &dev,
            pollfs_core::hosted::monotonic_clock,
            std::thread::yield_now,
        )
        .unwrap();
        assert!(report.problems.is_empty());
        assert!(moved.load(Ordering::Relaxed) > after, "the check's reads");
    }
}
