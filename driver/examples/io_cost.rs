//! The driver's CPU cost per 4 KiB I/O, for `valgrind --tool=callgrind`.
//!
//! Runs random 4 KiB reads at a fixed queue depth. Submission and reaping
//! go through the `#[inline(never)]` functions below, so the driver's cost
//! is their inclusive cost divided by the I/O count; `vm/io-cost.sh` does
//! the arithmetic.
//!
//! - On the emulated controller (the default), which executes each
//!   command synchronously inside the SQ doorbell write, nothing ever
//!   waits; the emulated device's register handlers
//!   (`EmuController::read32`/`write32`/`tick`, where the device does its
//!   work) are switched out of the count.
//! - Over NVMe/TCP (`tcp URL`, a target in another process: the test
//!   target of `examples/tcp_target.rs`), the data really crosses a
//!   socket, so some polls find nothing yet. Those idle polls are the
//!   caller waiting, not work per I/O: the program counts them, and before
//!   the run it makes `CALIBRATION` polls with nothing in flight through
//!   `driver_idle_poll`, so the script can take their average cost out.
//!   System calls count only their user-space part (callgrind cannot see
//!   the kernel). After an idle poll the program sleeps briefly (not
//!   counted), so few polls are idle and their correction stays small.
//!
//! - `split`: on the emulated controller over memory kept as atomic words
//!   and accessed by VFIO memory's own code (`EmuMemory::with_split_reads`),
//!   so the driver reads each completion's word holding the status in one
//!   load before the rest of the entry, as on VFIO memory.
//!
//! Usage: `io_cost [ios] [queue-depth] [tcp URL | split]` (defaults
//! 200000, 32).

use std::process::ExitCode;

use pollfs_core::dev::{BlockDevice, Command, Completion, DeviceQueue, Tag};
use pollfs_core::units::{FrameId, Lba, Nanos};
use pollfs_driver::emu::StdClock;
use pollfs_driver::{
    DriverConfig, EmuConfig, EmuController, EmuMemory, NvmeDevice, PcieTransport, Transport,
};

/// Idle polls made before the run, to price one.
const CALIBRATION: u64 = 20_000;

#[inline(never)]
fn driver_submit<Q: DeviceQueue>(
    q: &mut Q,
    c: &Command<'_>,
) -> Result<Tag, pollfs_core::dev::DevError> {
    q.submit(c)
}

#[inline(never)]
fn driver_poll<Q: DeviceQueue>(
    q: &mut Q,
    now: Nanos,
    max: usize,
    done: &mut dyn FnMut(Completion),
) -> usize {
    q.poll(now, max, done)
}

#[inline(never)]
fn driver_idle_poll<Q: DeviceQueue>(q: &mut Q, now: Nanos) -> usize {
    q.poll(now, 1, &mut |_| {})
}

fn run<T: Transport>(dev: &NvmeDevice<T>, ios: u64, qd: u32, tcp: bool) -> ExitCode {
    let mut q = match dev.open_nvme_queue() {
        Ok(q) => q,
        Err(e) => {
            eprintln!("queue: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Time only advances per batch: the cost of reading the clock is not
    // the driver's.
    let mut now = 0u64;
    if tcp {
        for _ in 0..CALIBRATION {
            now += 1_000;
            driver_idle_poll(&mut q, Nanos(now));
        }
    }
    let pages = dev.geometry().capacity_pages();
    let frames: Vec<[FrameId; 1]> = (0..qd).map(|f| [FrameId(f)]).collect();
    let mut rng = pollfs_core::rng::SplitMix64::new(0x2545_F491_4F6C_DD1D);
    let (mut submitted, mut completed, mut errors) = (0u64, 0u64, 0u64);
    let (mut polls, mut idle) = (0u64, 0u64);
    let mut free: Vec<usize> = (0..qd as usize).collect();
    // Slot by tag value: the driver's tags are small integers, and a
    // lookup here should cost next to nothing (it is counted).
    let mut slot_of: Vec<usize> = Vec::new();
    while completed < ios {
        while submitted < ios {
            let Some(slot) = free.pop() else { break };
            let c = Command::Read {
                lba: Lba(rng.below(pages)),
                frames: &frames[slot],
            };
            match driver_submit(&mut q, &c) {
                Ok(tag) => {
                    let i = tag.0 as usize;
                    if slot_of.len() <= i {
                        slot_of.resize(i + 1, 0);
                    }
                    slot_of[i] = slot;
                    submitted += 1;
                }
                Err(e) => {
                    eprintln!("submit: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        if tcp {
            // Over TCP, the answers take a while: wait for them
            // (uncounted) rather than poll for nothing.
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        now += 1_000;
        let n = driver_poll(&mut q, Nanos(now), qd as usize, &mut |c| {
            completed += 1;
            errors += u64::from(c.result.is_err());
            if let Some(&slot) = slot_of.get(c.tag.0 as usize) {
                free.push(slot);
            }
        });
        polls += 1;
        idle += u64::from(n == 0);
        if n == 0 && tcp {
            // Over TCP, let the data come before polling again: each idle
            // poll is taken out at its calibrated price, so the fewer the
            // closer the count (an idle poll with a command in flight
            // costs a little more than one on an empty queue).
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
    println!(
        "ios {completed} errors {errors} queue depth {qd} polls {polls} idle polls {idle} calibration polls {}",
        if tcp { CALIBRATION } else { 0 }
    );
    if errors > 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let ios: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let qd: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(32);
    let config = DriverConfig {
        io_entries: 1024,
        ..DriverConfig::default()
    };
    let mode = args.next();
    if mode.as_deref() == Some("tcp") {
        let url = args.next().unwrap_or_default();
        return match NvmeDevice::tcp(&url, config, qd) {
            Ok(dev) => run(&dev, ios, qd, true),
            Err(e) => {
                eprintln!("{url}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let emu = EmuConfig {
        bytes: 64 << 20,
        block_size: 4096,
        ..EmuConfig::default()
    };
    let memory = if mode.as_deref() == Some("split") {
        EmuMemory::with_split_reads()
    } else {
        EmuMemory::new()
    };
    let ctrl = EmuController::new(emu, memory.clone());
    let transport = PcieTransport::new(ctrl, memory);
    match NvmeDevice::new(transport, StdClock::new(), config, qd) {
        Ok(dev) => run(&dev, ios, qd, false),
        Err(e) => {
            eprintln!("bring-up: {e}");
            ExitCode::FAILURE
        }
    }
}
