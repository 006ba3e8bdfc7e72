//! Helpers shared by the hosted tests: a fake clock, a synchronous
//! "submit and wait" on top of the polled queue, and the pages check the
//! examples run on real controllers ([`pages`]).

#![allow(dead_code)]

#[path = "../../examples/check/pages.rs"]
pub mod pages;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pollfs_core::dev::{BlockDevice, Command, Completion, DevError, DeviceQueue, FrameArena, Tag};
use pollfs_core::units::{FrameId, Nanos};
use pollfs_driver::emu::{EmuConfig, EmuController, EmulatedDevice};
use pollfs_driver::{DriverConfig, NvmeDevice};

/// A clock that advances 1 ms every time it is read, so blocking admin
/// waits always reach their deadline without real time passing.
pub fn ticking_clock() -> impl Fn() -> Nanos + Send + Sync + 'static {
    let t = Arc::new(AtomicU64::new(0));
    move || Nanos(t.fetch_add(1_000_000, Ordering::Relaxed))
}

/// An emulated device with the given shapes.
pub fn device(
    emu: EmuConfig,
    config: DriverConfig,
    frames: u32,
) -> (EmulatedDevice, Arc<EmuController>) {
    NvmeDevice::emulated_with(emu, config, frames, ticking_clock()).unwrap()
}

/// Polls at `now` until `tag` completes (other completions are collected
/// into `others`), up to a bounded number of polls.
pub fn wait_at<Q: DeviceQueue>(q: &mut Q, tag: Tag, now: Nanos) -> Option<Result<(), DevError>> {
    for _ in 0..100 {
        let mut found = None;
        q.poll(now, usize::MAX, &mut |c: Completion| {
            if c.tag == tag {
                found = Some(c.result);
            }
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

/// Submits and waits at time zero.
pub fn run<Q: DeviceQueue>(q: &mut Q, c: Command<'_>) -> Result<(), DevError> {
    let tag = q.submit(&c)?;
    wait_at(q, tag, Nanos(0)).expect("command did not complete")
}

/// Fills frames with a pattern that depends on `seed` and the byte index.
pub fn pattern<F: FrameArena>(arena: &F, frames: &[FrameId], seed: u64) {
    pages::fill(arena, frames, seed).unwrap();
}

/// Reads frames back into one buffer.
pub fn contents<F: FrameArena>(arena: &F, frames: &[FrameId]) -> Vec<u8> {
    pages::contents(arena, frames).unwrap()
}

/// Writes `n` patterned frames at `lba`, reads them into other frames,
/// and checks both the frames and the medium.
pub fn write_read_check(
    dev: &EmulatedDevice,
    emu: &EmuController,
    q: &mut <EmulatedDevice as BlockDevice>::Queue,
    lba: u64,
    n: u32,
    seed: u64,
) {
    let want = pages::write_read(dev.frames(), q, pages::Pages::new(lba, n, seed), |q, c| {
        run(q, c)
    })
    .unwrap();
    let mut medium = vec![0u8; want.len()];
    emu.read_medium(lba * u64::from(dev_block_size(dev)), &mut medium);
    assert_eq!(medium, want, "medium at lba {lba} n {n}");
}

/// The device's logical block size.
pub fn dev_block_size(dev: &EmulatedDevice) -> u32 {
    dev.geometry().block_size
}

/// Runs `run` on every file of the committed corpus `tests/corpus/NAME`
/// (a fuzz target's), in name order; a panic names the file.
pub fn replay_corpus(name: &str, run: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus at {}", dir.display());
    for path in files {
        let bytes = std::fs::read(&path).expect("corpus file");
        let result = std::panic::catch_unwind(|| run(&bytes));
        assert!(result.is_ok(), "{} failed", path.display());
    }
}

/// Polls `q` on the real clock until `tag` completes or 10 s pass (a
/// hang fails the test): for queues over real sockets.
pub fn wait_real<Q: DeviceQueue>(q: &mut Q, tag: Tag) -> Result<(), DevError> {
    let clock = pollfs_driver::tcp::net::std_clock();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut found = None;
        q.poll(clock(), usize::MAX, &mut |c| {
            if c.tag == tag {
                found = Some(c.result);
            }
        });
        if let Some(r) = found {
            return r;
        }
        assert!(
            std::time::Instant::now() < until,
            "command did not complete in 10 s"
        );
        std::thread::yield_now();
    }
}

/// Submits `c` on `q` and waits for it on the real clock ([`wait_real`]).
pub fn run_real<Q: DeviceQueue>(q: &mut Q, c: Command<'_>) -> Result<(), DevError> {
    let tag = q.submit(&c)?;
    wait_real(q, tag)
}

/// Writes `n` patterned pages at `lba` on an NVMe/TCP device, reads them
/// back into other frames, and checks both the frames and the test
/// target's medium.
#[cfg(feature = "tcp-target")]
pub fn tcp_write_read_check<Q: DeviceQueue>(
    t: &pollfs_driver::tcp::target::TestTarget,
    dev: &pollfs_driver::tcp::net::TcpDevice,
    q: &mut Q,
    lba: u64,
    n: u32,
    seed: u64,
) {
    let want =
        pages::write_read(dev.frames(), q, pages::Pages::new(lba, n, seed), run_real).unwrap();
    let mut medium = vec![0u8; want.len()];
    let bs = dev.geometry().block_size as usize;
    assert!(t.read_medium(lba as usize * bs, &mut medium));
    assert_eq!(medium, want, "medium at lba {lba}, {n} pages");
}
