//! Smoke test of the VFIO backend on a real (or QEMU-emulated) controller
//! bound to vfio-pci: bring-up, identify, data at several sizes and
//! alignments, flush, trim, write zeroes, SMART log. Prints `VFIO-SMOKE-OK`
//! on success. Run by `driver/vm/run.sh` inside the test VM.
//!
//! Usage: `vfio_smoke <pci-address>`

use std::process::ExitCode;
use std::time::Instant;

use pollfs_core::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use pollfs_core::units::{FrameId, Lba, Nanos, PAGE_SIZE};
use pollfs_driver::vfio::VfioDevice;
use pollfs_driver::{DriverConfig, NvmeDevice};

fn now(start: Instant) -> Nanos {
    Nanos(start.elapsed().as_nanos() as u64)
}

fn run<Q: DeviceQueue>(q: &mut Q, c: Command<'_>, start: Instant) -> Result<(), DevError> {
    let tag = q.submit(&c)?;
    loop {
        let mut got = None;
        q.poll(now(start), 16, &mut |done| {
            if done.tag == tag {
                got = Some(done.result);
            }
        });
        if let Some(r) = got {
            return r;
        }
    }
}

fn check(
    dev: &VfioDevice,
    q: &mut impl DeviceQueue,
    lba: u64,
    n: u32,
    start: Instant,
) -> Result<(), String> {
    let src: Vec<FrameId> = (0..n).map(FrameId).collect();
    let dst: Vec<FrameId> = (n..2 * n).map(FrameId).collect();
    for (i, &f) in src.iter().enumerate() {
        let page: Vec<u8> = (0..PAGE_SIZE)
            .map(|b| (b ^ (i * 31) ^ lba as usize) as u8)
            .collect();
        dev.frames().write(f, 0, &page);
    }
    for &f in &dst {
        dev.frames().fill(f, 0, PAGE_SIZE, 0xee);
    }
    let w = Command::Write {
        lba: Lba(lba),
        frames: &src,
        fua: n % 2 == 0,
    };
    run(q, w, start).map_err(|e| format!("write lba {lba} n {n}: {e}"))?;
    let r = Command::Read {
        lba: Lba(lba),
        frames: &dst,
    };
    run(q, r, start).map_err(|e| format!("read lba {lba} n {n}: {e}"))?;
    let mut a = vec![0u8; PAGE_SIZE];
    let mut b = vec![0u8; PAGE_SIZE];
    for (s, d) in src.iter().zip(&dst) {
        dev.frames().read(*s, 0, &mut a);
        dev.frames().read(*d, 0, &mut b);
        if a != b {
            return Err(format!("data mismatch at lba {lba} n {n}"));
        }
    }
    Ok(())
}

/// One thread's share: its own queue, frames and blocks.
fn threaded(dev: &VfioDevice, t: u32, bpp: u64, start: Instant) -> Result<(), String> {
    let mut q = dev
        .open_nvme_queue()
        .map_err(|e| format!("thread queue: {e}"))?;
    for round in 0..50u64 {
        let base = 2048 + t * 64;
        let src: Vec<FrameId> = (base..base + 8).map(FrameId).collect();
        let dst: Vec<FrameId> = (base + 8..base + 16).map(FrameId).collect();
        let lba = (u64::from(t) * 10_000 + round * 16) * bpp;
        for (i, f) in src.iter().enumerate() {
            let v = (round as usize) ^ (i << 4) ^ (t as usize);
            dev.frames().fill(*f, 0, PAGE_SIZE, v as u8);
        }
        let w = Command::Write {
            lba: Lba(lba),
            frames: &src,
            fua: false,
        };
        run(&mut q, w, start).map_err(|e| format!("thread write: {e}"))?;
        let r = Command::Read {
            lba: Lba(lba),
            frames: &dst,
        };
        run(&mut q, r, start).map_err(|e| format!("thread read: {e}"))?;
        let (mut a, mut b) = (vec![0u8; PAGE_SIZE], vec![0u8; PAGE_SIZE]);
        for (x, y) in src.iter().zip(&dst) {
            dev.frames().read(*x, 0, &mut a);
            dev.frames().read(*y, 0, &mut b);
            if a != b {
                return Err(format!("thread {t} round {round}: mismatch"));
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let Some(pci) = std::env::args().nth(1) else {
        eprintln!("usage: vfio_smoke <pci-address>");
        return ExitCode::from(2);
    };
    let start = Instant::now();
    let clock = move || now(start);
    // 8 MiB requests: split at MDTS, and large enough per command for
    // chained PRP list pages when the controller's MDTS allows.
    let config = DriverConfig {
        max_transfer: Some(8 << 20),
        ..DriverConfig::default()
    };
    let dev = match NvmeDevice::vfio(&pci, config, 4096, clock) {
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
    'outer: for n in [1u32, 2, 3, 8, 33, 256, 2048] {
        for lba in [0, 1, 7, 4096 * bpp + 3, cap - u64::from(n) * bpp] {
            if let Err(e) = check(&dev, &mut q, lba, n, start) {
                result = Err(e);
                break 'outer;
            }
        }
    }
    let result = result
        .and_then(|()| run(&mut q, Command::Flush, start).map_err(|e| format!("flush: {e}")))
        .and_then(|()| {
            run(
                &mut q,
                Command::WriteZeroes {
                    lba: Lba(0),
                    blocks: 100_000.min(cap),
                },
                start,
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
                start,
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
        let ctrl = dev.controller();
        ctrl.reset(ctrl.generation())
            .map_err(|e| format!("reset: {e}"))?;
        check(&dev, &mut q, 64, 4, start)
    });
    // A second queue alongside, then dropped (Delete SQ/CQ) and reopened.
    let result = result.and_then(|()| {
        for _ in 0..2 {
            let mut q2 = dev
                .open_nvme_queue()
                .map_err(|e| format!("second queue: {e}"))?;
            check(&dev, &mut q2, 128, 2, start)?;
        }
        check(&dev, &mut q, 256, 2, start)
    });
    // Two threads, each with its own queue, on disjoint frames and blocks.
    let result = result.and_then(|()| {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..2u32)
                .map(|t| {
                    let dev = &dev;
                    s.spawn(move || threaded(dev, t, bpp, start))
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
    println!(
        "queue stats: {:?}, resets: {}",
        q.stats(),
        dev.controller().resets()
    );
    match result {
        Ok(()) => {
            println!("VFIO-SMOKE-OK");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
