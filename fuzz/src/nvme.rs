//! The `nvme_completions` fuzz input: file operations through the real
//! NVMe driver while the emulated controller lies in its completions (bad command ids, bad SQ heads, wrong
//! queue ids, stale phase tags, duplicates), stalls, reorders, fails or
//! swallows commands. The engine and driver must return errors, never panic
//! and never hang; time is virtual, so timeouts, aborts and resets happen
//! within a few thousand polls.

use std::sync::atomic::{AtomicU64, Ordering};

use arbitrary::Arbitrary;
use pollfs_core::units::Nanos;
use pollfs_core::{Config, Fs};
use pollfs_driver::emu::Hostile;
use pollfs_driver::{DriverConfig, EmuConfig, NvmeDevice};

static NOW: AtomicU64 = AtomicU64::new(0);

/// Each look at the clock moves it 50 µs: the driver's timeouts (set to a
/// few ms) expire after a bounded number of polls.
fn virtual_now() -> Nanos {
    Nanos(NOW.fetch_add(50_000, Ordering::Relaxed))
}

/// One file operation; offsets and lengths fold into a 16-page file.
#[derive(Arbitrary, Debug)]
pub enum NvOp {
    /// `write_at`.
    Write(u16, u16),
    /// `read_at`.
    Read(u16, u16),
    /// `set_len`.
    SetLen(u16),
    /// `punch_hole`.
    Punch(u16, u16),
    /// `sync_data`.
    Sync,
}

/// The faults to switch on, and the operations before and after.
#[derive(Arbitrary, Debug)]
pub struct NvmeInput {
    /// Which lie the controller tells (values past the list: none).
    pub hostile: u8,
    /// Completion latency, in virtual microseconds.
    pub latency_us: u8,
    /// Release held completions newest first.
    pub reorder: bool,
    /// Commands to fail with an error status (mod 8).
    pub fail_io: u8,
    /// Commands whose completions are swallowed (mod 4).
    pub drop_io: u8,
    /// Whether Abort frees a swallowed command.
    pub stuck_abortable: bool,
    /// Operations run before the faults are switched on.
    pub clean: Vec<NvOp>,
    /// Operations run with the faults on.
    pub ops: Vec<NvOp>,
}

const HOSTILE: [Hostile; 5] = [
    Hostile::BadCid,
    Hostile::BadSqHead,
    Hostile::WrongSqId,
    Hostile::WrongPhase,
    Hostile::Duplicate,
];
const SPAN: u64 = 16 * 4096;

fn run_op<D: pollfs_core::dev::BlockDevice>(
    s: &pollfs_core::Session<D>,
    f: &pollfs_core::File<D>,
    op: &NvOp,
) {
    let at = |o: u16| u64::from(o) % SPAN;
    let len = |l: u16| u64::from(l) % (3 * 4096) + 1;
    // Errors are expected; only panics and hangs are failures.
    let _ = match *op {
        NvOp::Write(o, l) => s
            .write_at(f, &vec![0xa5; len(l) as usize], at(o))
            .map(|_| ()),
        NvOp::Read(o, l) => s
            .read_at(f, &mut vec![0; len(l) as usize], at(o))
            .map(|_| ()),
        NvOp::SetLen(l) => s.set_len(f, at(l)),
        NvOp::Punch(o, l) => s.punch_hole(f, at(o), len(l)),
        NvOp::Sync => s.sync_data(f),
    };
}

/// Runs one input; panics only if the engine or driver does.
pub fn run(input: &NvmeInput) {
    let emu = EmuConfig {
        bytes: 4 << 20,
        block_size: 4096,
        ..EmuConfig::default()
    };
    let driver = DriverConfig {
        command_timeout: 2_000_000,
        abort_timeout: 1_000_000,
        admin_timeout: 2_000_000,
        health_interval: 500_000,
        ..DriverConfig::default()
    };
    let Ok((dev, ctrl)) = NvmeDevice::emulated_with(emu, driver, 8, virtual_now) else {
        return;
    };
    let config = Config {
        cache_pages: 8,
        clock: virtual_now,
        ..Config::default()
    };
    let Ok(fs) = Fs::new(dev, config) else {
        return;
    };
    let Ok(session) = fs.session() else {
        return;
    };
    let Ok(f) = fs.create("f") else {
        return;
    };
    for op in input.clean.iter().take(8) {
        run_op(&session, &f, op);
    }
    ctrl.set_faults(|k| {
        k.hostile = HOSTILE.get(usize::from(input.hostile)).copied();
        k.latency = u64::from(input.latency_us) * 1_000;
        k.reorder = input.reorder;
        k.fail_io = u32::from(input.fail_io % 8);
        k.drop_io = u32::from(input.drop_io % 4);
        k.stuck_abortable = input.stuck_abortable;
    });
    for op in input.ops.iter().take(8) {
        run_op(&session, &f, op);
    }
}
