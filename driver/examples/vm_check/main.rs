//! Device test of the VFIO backend on a real (or QEMU-emulated) controller
//! bound to vfio-pci: bring-up, identify, data at many sizes and
//! alignments (beyond MDTS, chained PRP lists), flush, deallocate, write
//! zeroes, SMART log, resets with the queue idle and with commands in
//! flight, several queue pairs in parallel. It leaves a known pattern on
//! the namespace ([`pattern`]) and prints `VM-CHECK-OK` on success. Run by
//! `vm/test.sh` inside the test VM; the host then runs
//! `vm_check verify-image nvme.img` on the backing file.
//!
//! On a namespace formatted with protection information (`vm/pi-test.sh`)
//! the same test runs with PRACT and PRCHK on every command, and [`pi`]
//! checks the PI on the medium and that damaged blocks are caught.
//!
//! Usage: `vm_check <pci-address>` | `vm_check verify-image <image>` |
//! `vm_check pi-image <image>` | `vm_check pi-corrupt <image>` |
//! `vm_check pi-detect <pci-address>`

#[path = "../check/pages.rs"]
mod pages;
mod pattern;
mod pi;

use std::process::ExitCode;
use std::time::Instant;

use pollfs_core::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::units::{FrameId, Lba, PAGE_SIZE};
use pollfs_driver::vfio::VfioDevice;
use pollfs_driver::{DriverConfig, NvmeDevice};

use pages::Pages;

/// Submits `c` and polls until it completes.
fn run<Q: DeviceQueue>(q: &mut Q, c: Command<'_>) -> Result<(), DevError> {
    pollfs_core::persist::run_polled(q, &c, monotonic_clock, std::thread::yield_now)
}

/// Writes `p`'s pages, reads them back into other frames and compares.
fn check(dev: &VfioDevice, q: &mut impl DeviceQueue, p: Pages) -> Result<(), String> {
    pages::write_read(dev.frames(), q, p, run).map(drop)
}

/// `n` pages at `lba` from frame 0, with FUA on every other size.
fn at(lba: u64, n: u32) -> Pages {
    Pages {
        fua: n % 2 == 0,
        ..Pages::new(lba, n, lba)
    }
}

/// One thread's share: its own queue, frames and blocks.
fn threaded(dev: &VfioDevice, t: u32, bpp: u64) -> Result<(), String> {
    let mut q = dev
        .open_nvme_queue()
        .map_err(|e| format!("thread queue: {e}"))?;
    for round in 0..50u64 {
        let p = Pages {
            first_frame: 2048 + t * 64,
            ..Pages::new(
                (u64::from(t) * 10_000 + round * 16) * bpp,
                8,
                round << 8 | u64::from(t),
            )
        };
        check(dev, &mut q, p).map_err(|e| format!("thread {t} round {round}: {e}"))?;
    }
    Ok(())
}

/// Submits a batch of writes, resets the controller before reaping any of
/// them, and expects every one to complete successfully (the queue
/// re-creates itself and resubmits what was in flight); then reads the
/// data back.
fn reset_mid_io(dev: &VfioDevice, q: &mut impl DeviceQueue, bpp: u64) -> Result<(), String> {
    const BATCH: u32 = 16;
    const PAGES: u32 = 4;
    let base_lba = 8192 * bpp;
    let mut tags = Vec::new();
    let mut frames = Vec::new();
    let mut written = Vec::new();
    for i in 0..BATCH {
        let f: Vec<FrameId> = (i * PAGES..(i + 1) * PAGES).map(FrameId).collect();
        written.push(pages::fill(dev.frames(), &f, u64::from(i) ^ 0xa5)?);
        frames.push(f);
    }
    for (i, f) in frames.iter().enumerate() {
        let lba = base_lba + i as u64 * u64::from(PAGES) * bpp;
        let w = Command::Write {
            lba: Lba(lba),
            frames: f,
            fua: false,
        };
        tags.push(q.submit(&w).map_err(|e| format!("mid-io submit: {e}"))?);
    }
    let ctrl = dev.controller();
    ctrl.reset(ctrl.generation())
        .map_err(|e| format!("reset mid-io: {e}"))?;
    let mut left = tags.len();
    let mut failed = None;
    let start = Instant::now();
    let deadline = std::time::Duration::from_secs(60);
    while left > 0 {
        q.poll(monotonic_clock(), 64, &mut |done| {
            if tags.contains(&done.tag) {
                left -= 1;
                if let Err(e) = done.result {
                    failed = Some(e);
                }
            }
        });
        if start.elapsed() > deadline {
            return Err(format!("reset mid-io: {left} commands never completed"));
        }
    }
    if let Some(e) = failed {
        return Err(format!("reset mid-io: a command failed: {e}"));
    }
    let dst: Vec<FrameId> = (BATCH * PAGES..BATCH * PAGES + PAGES)
        .map(FrameId)
        .collect();
    for (i, want) in written.iter().enumerate() {
        let lba = base_lba + i as u64 * u64::from(PAGES) * bpp;
        let r = Command::Read {
            lba: Lba(lba),
            frames: &dst,
        };
        run(q, r).map_err(|e| format!("mid-io read back: {e}"))?;
        if pages::contents(dev.frames(), &dst)? != *want {
            return Err(format!("reset mid-io: batch {i} data lost"));
        }
    }
    println!("reset with {BATCH} commands in flight: all completed, data intact");
    Ok(())
}

/// Leaves [`pattern`] data on the namespace for the host to find: a 1 MiB
/// region in one command, the last pages, and a region that was written
/// and then zeroed with Write Zeroes. Flushes at the end.
fn leave_pattern(dev: &VfioDevice, q: &mut impl DeviceQueue) -> Result<(), String> {
    let bs = u64::from(dev.geometry().block_size);
    let cap_bytes = dev.geometry().capacity * bs;
    let mut write_pattern = |at: u64, pages: u64| -> Result<(), String> {
        let frames: Vec<FrameId> = (0..pages as u32).map(FrameId).collect();
        for (i, f) in frames.iter().enumerate() {
            dev.frames()
                .write(*f, 0, &pattern::page(at + i as u64 * 4096))
                .map_err(|e| e.to_string())?;
        }
        let w = Command::Write {
            lba: Lba(at / bs),
            frames: &frames,
            fua: false,
        };
        run(q, w).map_err(|e| format!("pattern write at {at}: {e}"))
    };
    write_pattern(pattern::PATTERN_AT, pattern::PATTERN_LEN / 4096)?;
    write_pattern(cap_bytes - pattern::TAIL_PAGES * 4096, pattern::TAIL_PAGES)?;
    write_pattern(pattern::ZEROED_AT, pattern::ZEROED_LEN / 4096)?;
    let z = Command::WriteZeroes {
        lba: Lba(pattern::ZEROED_AT / bs),
        blocks: pattern::ZEROED_LEN / bs,
    };
    run(q, z).map_err(|e| format!("pattern write zeroes: {e}"))?;
    let pages = (pattern::ZEROED_LEN / 4096) as u32;
    let dst: Vec<FrameId> = (0..pages).map(FrameId).collect();
    let r = Command::Read {
        lba: Lba(pattern::ZEROED_AT / bs),
        frames: &dst,
    };
    run(q, r).map_err(|e| format!("read zeroed region: {e}"))?;
    let mut buf = vec![0u8; PAGE_SIZE];
    for f in &dst {
        dev.frames()
            .read(*f, 0, &mut buf)
            .map_err(|e| e.to_string())?;
        if buf.iter().any(|&b| b != 0) {
            return Err("write zeroes left data behind".to_string());
        }
    }
    run(q, Command::Flush).map_err(|e| format!("final flush: {e}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let [_, cmd, image] = args.as_slice() {
        let host = match cmd.as_str() {
            "verify-image" => Some(
                pattern::verify_image(image, None)
                    .map(|()| println!("image {image}: guest data present")),
            ),
            "pi-image" => Some(pi::verify_image(image)),
            "pi-corrupt" => Some(pi::corrupt_image(image)),
            _ => None,
        };
        if let Some(done) = host {
            return match done {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("FAILED: {e}");
                    ExitCode::FAILURE
                }
            };
        }
    }
    let detect = args.get(1).is_some_and(|a| a == "pi-detect");
    let args: Vec<String> = if detect {
        args.into_iter().skip(1).collect()
    } else {
        args
    };
    let Some(pci) = args.get(1).cloned() else {
        eprintln!("usage: vm_check <pci-address> | vm_check verify-image <image>");
        return ExitCode::from(2);
    };
    // 8 MiB requests: split at MDTS, and large enough per command for
    // chained PRP list pages when the controller's MDTS allows.
    let config = DriverConfig {
        max_transfer: Some(8 << 20),
        ..DriverConfig::default()
    };
    let dev = match NvmeDevice::vfio(&pci, config, 4096, monotonic_clock) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bring-up failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let info = *dev.controller().info();
    let model = String::from_utf8_lossy(&info.identify.model)
        .trim()
        .to_string();
    println!(
        "controller: {model}, VS {:#010x}, MDTS {} bytes, {} I/O queues",
        info.version, info.mdts_bytes, info.io_queues
    );
    println!("geometry: {:?}", dev.geometry());
    println!("protection: {:?}", info.protection);
    if detect {
        return match pi::detect(&dev) {
            Ok(()) => {
                println!("VM-PI-OK");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("FAILED: {e}");
                ExitCode::FAILURE
            }
        };
    }
    // The 16 MiB frame arena comes from hugepages when `pollfs setup`
    // reserved some.
    if let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") {
        let field = |name: &str| -> Option<u64> {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
        };
        if let (Some(total), Some(free)) = (field("HugePages_Total:"), field("HugePages_Free:")) {
            println!(
                "hugepages in use: {} of {total}",
                total.saturating_sub(free)
            );
        }
    }
    let mut q = match dev.open_nvme_queue() {
        Ok(q) => q,
        Err(e) => {
            eprintln!("open queue failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cap = dev.geometry().capacity;
    let bpp = dev.geometry().blocks_per_page();
    let mut result = Ok(());
    'outer: for n in [1u32, 2, 3, 8, 33, 256, 1024, 1025, 2048] {
        for lba in [0, 1, 7, 4096 * bpp + 3, cap - u64::from(n) * bpp] {
            if let Err(e) = check(&dev, &mut q, at(lba, n)) {
                result = Err(e);
                break 'outer;
            }
        }
    }
    let result = result
        .and_then(|()| run(&mut q, Command::Flush).map_err(|e| format!("flush: {e}")))
        .and_then(|()| {
            run(
                &mut q,
                Command::WriteZeroes {
                    lba: Lba(0),
                    blocks: 100_000.min(cap),
                },
            )
            .map_err(|e| format!("write zeroes: {e}"))
        })
        .and_then(|()| {
            run(
                &mut q,
                Command::Deallocate {
                    lba: Lba(0),
                    blocks: 64,
                },
            )
            .map_err(|e| format!("deallocate: {e}"))
        })
        .and_then(|()| {
            let smart = dev
                .controller()
                .smart_log()
                .map_err(|e| format!("smart: {e}"))?;
            println!(
                "temperature: {} K",
                u16::from_le_bytes([smart[1], smart[2]])
            );
            Ok(())
        });
    // A controller reset with the queue idle, then I/O again: the queue
    // must re-create itself on the controller.
    let result = result.and_then(|()| {
        println!("step: reset with the queue idle");
        let ctrl = dev.controller();
        ctrl.reset(ctrl.generation())
            .map_err(|e| format!("reset: {e}"))?;
        check(&dev, &mut q, at(64, 4))
    });
    // A second queue alongside, then dropped (Delete SQ/CQ) and reopened.
    let result = result.and_then(|()| {
        println!("step: queues created and deleted");
        for _ in 0..2 {
            let mut q2 = dev
                .open_nvme_queue()
                .map_err(|e| format!("second queue: {e}"))?;
            check(&dev, &mut q2, at(128, 2))?;
        }
        check(&dev, &mut q, at(256, 2))
    });
    // Four threads, each with its own queue, on disjoint frames and blocks.
    let result = result.and_then(|()| {
        println!("step: 4 queue pairs in parallel");
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4u32)
                .map(|t| {
                    let dev = &dev;
                    s.spawn(move || threaded(dev, t, bpp))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("thread panicked".to_string()))
                })
                .collect::<Result<Vec<()>, String>>()
                .map(|_| ())
        })
    });
    let result = result.and_then(|()| {
        println!("step: reset with commands in flight");
        reset_mid_io(&dev, &mut q, bpp)
    });
    let result = result.and_then(|()| {
        println!("step: pattern for the host");
        leave_pattern(&dev, &mut q)
    });
    println!(
        "queue stats: {:?}, resets: {}, integrity errors: {}",
        q.stats(),
        dev.controller().resets(),
        dev.controller().integrity_errors()
    );
    match result {
        Ok(()) => {
            println!("VM-CHECK-OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
