//! The driver against the emulated controller: bring-up, data at many
//! sizes and alignments, splitting beyond MDTS, multi-page PRP lists,
//! trim and zeroing, queue limits.

// Test helpers outside #[test] functions unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pollfs_core::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use pollfs_core::units::{FrameId, Lba, Nanos, PAGE_SIZE};
use pollfs_driver::emu::EmuConfig;
use pollfs_driver::{DriverConfig, NvmeDevice, PcieTransport};

#[test]
fn emulated_device_reports_identify_geometry() {
    let dev = NvmeDevice::emulated(64 << 20, 4096, 16).unwrap();
    let g = dev.geometry();
    assert_eq!(g.block_size, 4096);
    assert_eq!(g.capacity, (64 << 20) / 4096);
    assert_eq!(g.max_transfer, 128 * 1024);
    assert_eq!(g.queue_depth, 255);
    assert_eq!(dev.frames().frame_count(), 16);
    let info = dev.controller().info();
    assert_eq!(info.version, 0x0001_0400);
    assert!(info.identify.supports_dsm());
    assert!(NvmeDevice::emulated(1 << 20, 1024, 4).is_err());
}

#[test]
fn read_back_at_many_sizes_and_alignments() {
    for bs in [512u32, 4096] {
        let emu = EmuConfig {
            bytes: 8 << 20,
            block_size: bs,
            ..EmuConfig::default()
        };
        let (dev, ctrl) = device(emu, DriverConfig::default(), 128);
        let mut q = dev.open_queue().unwrap();
        let cap = dev.geometry().capacity;
        let bpp = dev.geometry().blocks_per_page();
        let mut seed = 1;
        for n in [1u32, 2, 3, 5, 8, 17, 31, 32] {
            // Block-aligned but not page-aligned starts on 512-byte
            // devices, and the last blocks of the device.
            for lba in [0, 1, 7, 9, 1000 * bpp + 3, cap - u64::from(n) * bpp] {
                write_read_check(&dev, &ctrl, &mut q, lba, n, seed);
                seed += 1;
            }
        }
    }
}

#[test]
fn requests_beyond_mdts_are_split_and_completed_as_one() {
    let emu = EmuConfig {
        mdts: 2, // 16 KiB per command
        ..EmuConfig::default()
    };
    let config = DriverConfig {
        max_transfer: Some(1 << 20),
        ..DriverConfig::default()
    };
    let (dev, ctrl) = device(emu, config, 512);
    assert_eq!(dev.geometry().max_transfer, 1 << 20);
    let mut q = dev.open_nvme_queue().unwrap();
    assert_eq!(q.frames_per_command(), 4);
    let before = ctrl.stats();
    write_read_check(&dev, &ctrl, &mut q, 24, 256, 9);
    let after = ctrl.stats();
    assert_eq!(after.writes - before.writes, 64);
    assert_eq!(after.reads - before.reads, 64);
    // An odd-sized request: 4 + 4 + 2 frames.
    write_read_check(&dev, &ctrl, &mut q, 1, 10, 10);
    assert_eq!(ctrl.stats().writes - after.writes, 3);
}

#[test]
fn max_transfer_is_clamped_so_a_request_fits_in_the_queue() {
    let emu = EmuConfig {
        mdts: 1, // 8 KiB per command
        ..EmuConfig::default()
    };
    let config = DriverConfig {
        max_transfer: Some(1 << 20),
        io_entries: 5, // four command ids
        ..DriverConfig::default()
    };
    let (dev, ctrl) = device(emu, config, 16);
    assert_eq!(dev.geometry().max_transfer, 4 * 8192);
    let mut q = dev.open_queue().unwrap();
    write_read_check(&dev, &ctrl, &mut q, 0, 8, 1);
}

#[test]
fn multi_page_prp_lists_carry_one_large_command() {
    let emu = EmuConfig {
        bytes: 32 << 20,
        mdts: 0, // unlimited
        ..EmuConfig::default()
    };
    let config = DriverConfig {
        max_transfer: Some(4 << 20),
        io_entries: 8,
        ..DriverConfig::default()
    };
    let (dev, ctrl) = device(emu, config, 2048);
    let mut q = dev.open_nvme_queue().unwrap();
    // MDTS 0 means "no limit": one command per request, 1024 pages
    // described by a two-page PRP list.
    assert_eq!(q.frames_per_command(), 1024);
    let before = ctrl.stats().writes;
    write_read_check(&dev, &ctrl, &mut q, 8, 1024, 3);
    assert_eq!(ctrl.stats().writes - before, 1);
    write_read_check(&dev, &ctrl, &mut q, 9, 600, 4);
    assert_eq!(ctrl.stats().writes - before, 2);
}

#[test]
fn chained_prp_list_pages_reach_the_device() {
    let emu = EmuConfig {
        bytes: 32 << 20,
        mdts: 10, // 4 MiB
        block_size: 4096,
        ..EmuConfig::default()
    };
    let config = DriverConfig {
        max_transfer: Some(4 << 20),
        io_entries: 4,
        ..DriverConfig::default()
    };
    let (dev, ctrl) = device(emu, config, 2048);
    assert_eq!(dev.controller().info().mdts_bytes, 4 << 20);
    let mut q = dev.open_nvme_queue().unwrap();
    assert_eq!(q.frames_per_command(), 1024);
    let before = ctrl.stats().writes;
    // 700 and 1024 pages: one list page and two chained ones.
    write_read_check(&dev, &ctrl, &mut q, 3, 700, 4);
    write_read_check(&dev, &ctrl, &mut q, 1, 1024, 5);
    assert_eq!(ctrl.stats().writes - before, 2);
    // Without a max_transfer the same controller is capped at 1 MiB.
    let (dev, _) = device(emu, DriverConfig::default(), 8);
    assert_eq!(dev.controller().info().mdts_bytes, 1 << 20);
    assert_eq!(dev.geometry().max_transfer, 1 << 20);
}

#[test]
fn trim_and_write_zeroes_clear_blocks_and_split_large_ranges() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 64);
    let mut q = dev.open_queue().unwrap();
    write_read_check(&dev, &ctrl, &mut q, 100, 8, 5);
    run(
        &mut q,
        Command::Deallocate {
            lba: Lba(100),
            blocks: 16,
        },
    )
    .unwrap();
    let mut buf = vec![0xffu8; 32 * 512];
    ctrl.read_medium(100 * 512, &mut buf);
    assert!(buf[..16 * 512].iter().all(|&b| b == 0));
    assert!(buf[16 * 512..].iter().any(|&b| b != 0));
    // 100000 blocks need two Write Zeroes commands (16-bit block count).
    let before = ctrl.stats().write_zeroes;
    run(
        &mut q,
        Command::WriteZeroes {
            lba: Lba(0),
            blocks: 100_000,
        },
    )
    .unwrap();
    assert_eq!(ctrl.stats().write_zeroes - before, 2);
    ctrl.read_medium(100 * 512, &mut buf);
    assert!(buf.iter().all(|&b| b == 0));
    let cap = dev.geometry().capacity;
    assert_eq!(
        q.submit(&Command::WriteZeroes {
            lba: Lba(cap - 1),
            blocks: 2
        })
        .err(),
        Some(DevError::OutOfRange)
    );
}

#[test]
fn large_zero_ranges_are_issued_as_ids_free_up() {
    let config = DriverConfig {
        io_entries: 3, // two command ids
        ..DriverConfig::default()
    };
    let (dev, ctrl) = device(EmuConfig::default(), config, 8);
    let mut q = dev.open_queue().unwrap();
    let blocks = dev.geometry().capacity; // 131072 blocks: 2 commands
    let tag = q
        .submit(&Command::WriteZeroes {
            lba: Lba(0),
            blocks,
        })
        .unwrap();
    assert_eq!(q.submit(&Command::Flush).err(), Some(DevError::QueueFull));
    assert_eq!(wait_at(&mut q, tag, Nanos(0)), Some(Ok(())));
    assert_eq!(ctrl.stats().write_zeroes, 2);
}

#[test]
fn flush_and_fua_reach_the_device() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_queue().unwrap();
    run(
        &mut q,
        Command::Write {
            lba: Lba(0),
            frames: &[FrameId(0)],
            fua: true,
        },
    )
    .unwrap();
    run(&mut q, Command::Flush).unwrap();
    let s = ctrl.stats();
    assert_eq!((s.fua_writes, s.flushes), (1, 1));
}

#[test]
fn command_id_exhaustion_returns_queue_full_and_recovers() {
    let config = DriverConfig {
        io_entries: 4,
        ..DriverConfig::default()
    };
    let (dev, _ctrl) = device(EmuConfig::default(), config, 8);
    let mut q = dev.open_queue().unwrap();
    let tags: Vec<_> = (0..3).map(|_| q.submit(&Command::Flush).unwrap()).collect();
    assert_eq!(q.submit(&Command::Flush).err(), Some(DevError::QueueFull));
    // A request needing two commands does not start when only one id is free.
    let mut got = Vec::new();
    q.poll(Nanos(0), 1, &mut |c| got.push(c));
    assert_eq!(got.len(), 1);
    assert_eq!(q.in_flight(), 2);
    q.poll(Nanos(0), 10, &mut |c| got.push(c));
    assert_eq!(got.iter().map(|c| c.tag).collect::<Vec<_>>(), tags);
    assert!(got.iter().all(|c| c.result.is_ok()));
    assert_eq!(q.in_flight(), 0);
}

#[test]
fn phase_tags_survive_many_ring_wraps() {
    let config = DriverConfig {
        io_entries: 2, // one id; the CQ wraps every other command
        ..DriverConfig::default()
    };
    let (dev, ctrl) = device(EmuConfig::default(), config, 8);
    let mut q = dev.open_queue().unwrap();
    for i in 0..25 {
        write_read_check(&dev, &ctrl, &mut q, i * 8, 1, i);
    }
    let config = DriverConfig {
        io_entries: 5,
        ..DriverConfig::default()
    };
    let (dev, _) = device(EmuConfig::default(), config, 8);
    let mut q = dev.open_queue().unwrap();
    for _ in 0..10 {
        let tags: Vec<_> = (0..3).map(|_| q.submit(&Command::Flush).unwrap()).collect();
        let mut n = 0;
        q.poll(Nanos(0), 10, &mut |c| {
            assert!(tags.contains(&c.tag));
            n += 1;
        });
        assert_eq!(n, 3);
    }
}

#[test]
fn bad_frames_and_oversized_requests_are_refused() {
    let (dev, _) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_queue().unwrap();
    let e = q.submit(&Command::Read {
        lba: Lba(0),
        frames: &[FrameId(8)],
    });
    assert_eq!(e.err(), Some(DevError::InvalidRequest));
    let many = vec![FrameId(0); 33];
    let e = q.submit(&Command::Read {
        lba: Lba(0),
        frames: &many,
    });
    assert_eq!(e.err(), Some(DevError::InvalidRequest));
    assert_eq!(q.in_flight(), 0);
    // Frame arena accesses outside a frame are refused, and copy nothing.
    let mut buf = [7u8; 16];
    let refused = Err(DevError::FrameRange);
    assert_eq!(
        dev.frames().read(FrameId(0), PAGE_SIZE - 8, &mut buf),
        refused
    );
    assert_eq!(buf, [7; 16]);
    assert_eq!(dev.frames().read(FrameId(99), 0, &mut buf), refused);
    assert_eq!(dev.frames().write(FrameId(0), usize::MAX, &buf), refused);
    assert_eq!(dev.frames().fill(FrameId(99), 0, 1, 0), refused);
    assert_eq!(
        dev.frames().read(FrameId(0), PAGE_SIZE - 16, &mut buf),
        Ok(())
    );
}

#[test]
fn queues_are_independent_and_ids_are_reused() {
    let emu = EmuConfig {
        max_io_queues: 2,
        ..EmuConfig::default()
    };
    let (dev, ctrl) = device(emu, DriverConfig::default(), 64);
    let q1 = dev.open_queue().unwrap();
    let q2 = dev.open_queue().unwrap();
    assert_eq!(dev.open_queue().err(), Some(DevError::NoQueues));
    drop(q1);
    let q3 = dev.open_queue().unwrap();
    let dev = std::sync::Arc::new(dev);
    let handles: Vec<_> = [q2, q3]
        .into_iter()
        .enumerate()
        .map(|(i, mut q)| {
            let dev = dev.clone();
            let ctrl = ctrl.clone();
            std::thread::spawn(move || {
                let n = 4u32;
                let base = i as u32 * 2 * n;
                let src: Vec<FrameId> = (base..base + n).map(FrameId).collect();
                let dst: Vec<FrameId> = (base + n..base + 2 * n).map(FrameId).collect();
                for round in 0..20u64 {
                    let lba = (i as u64 * 1000 + round) * 8;
                    pattern(dev.frames(), &src, round * 7 + i as u64);
                    let w = Command::Write {
                        lba: Lba(lba),
                        frames: &src,
                        fua: false,
                    };
                    run(&mut q, w).unwrap();
                    run(
                        &mut q,
                        Command::Read {
                            lba: Lba(lba),
                            frames: &dst,
                        },
                    )
                    .unwrap();
                    assert_eq!(contents(dev.frames(), &src), contents(dev.frames(), &dst));
                }
                drop(ctrl);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn smart_log_counts_io() {
    let (dev, ctrl) = device(EmuConfig::default(), DriverConfig::default(), 8);
    let mut q = dev.open_queue().unwrap();
    write_read_check(&dev, &ctrl, &mut q, 0, 2, 1);
    let log = dev.controller().smart_log().unwrap();
    assert_eq!(u16::from_le_bytes([log[1], log[2]]), 300);
    assert_eq!(u64::from_le_bytes(log[80..88].try_into().unwrap()), 1);
    assert_eq!(u64::from_le_bytes(log[64..72].try_into().unwrap()), 1);
    let mut errors = [0xffu8; 64];
    dev.controller()
        .get_log_page(pollfs_driver::spec::command::log_page::ERROR, &mut errors)
        .unwrap();
    assert_eq!(errors, [0; 64]);
    let unknown = dev.controller().get_log_page(0x7f, &mut errors);
    assert!(matches!(
        unknown,
        Err(pollfs_driver::DriverError::Admin { .. })
    ));
    // The controller still works after a failed admin command.
    let nq = dev
        .controller()
        .admin(pollfs_driver::spec::command::SubmissionEntry::get_features(
            7,
        ))
        .unwrap();
    assert_eq!(nq.dw0, 63 | (63 << 16));
}

#[test]
fn file_backed_namespace_outlives_the_controller() {
    use pollfs_driver::emu::{EmuController, EmuMemory};
    let path = std::env::temp_dir().join(format!("pollfs-emu-{}.img", std::process::id()));
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap()
    };
    let emu = EmuConfig {
        bytes: 4 << 20,
        block_size: 4096,
        ..EmuConfig::default()
    };
    let bring_up = || {
        let mem = EmuMemory::new();
        let ctrl = EmuController::with_file(emu, mem.clone(), open()).unwrap();
        let dev = NvmeDevice::new(
            PcieTransport::new(ctrl.clone(), mem),
            ticking_clock(),
            DriverConfig::default(),
            16,
        )
        .unwrap();
        (dev, ctrl)
    };
    {
        let (dev, ctrl) = bring_up();
        let mut q = dev.open_queue().unwrap();
        write_read_check(&dev, &ctrl, &mut q, 5, 3, 42);
        run(
            &mut q,
            Command::WriteZeroes {
                lba: Lba(6),
                blocks: 1,
            },
        )
        .unwrap();
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 << 20);
    let (dev, _ctrl) = bring_up();
    let mut q = dev.open_queue().unwrap();
    let frames = [FrameId(8), FrameId(9), FrameId(10)];
    run(
        &mut q,
        Command::Read {
            lba: Lba(5),
            frames: &frames,
        },
    )
    .unwrap();
    let mut expect = vec![0u8; 3 * PAGE_SIZE];
    let src: Vec<FrameId> = (0..3).map(FrameId).collect();
    pattern(dev.frames(), &src, 42);
    expect.copy_from_slice(&contents(dev.frames(), &src));
    expect[PAGE_SIZE..2 * PAGE_SIZE].fill(0);
    assert_eq!(contents(dev.frames(), &frames), expect);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn controllers_on_one_dma_memory_share_a_page_cache_arena() {
    use pollfs_driver::emu::{EmuFrames, EmuMemory};
    use std::sync::Arc;
    let mem = EmuMemory::new();
    let arena = Arc::new(EmuFrames::new(&mem, 8).unwrap());
    let emu = EmuConfig {
        bytes: 4 << 20,
        block_size: 4096,
        ..EmuConfig::default()
    };
    let config = DriverConfig::default();
    let (a, ctrl_a) =
        NvmeDevice::emulated_on(emu, config, &mem, arena.clone(), ticking_clock()).unwrap();
    let (b, ctrl_b) =
        NvmeDevice::emulated_on(emu, config, &mem, a.arena(), ticking_clock()).unwrap();
    assert!(std::ptr::eq(a.frames(), b.frames()));
    // A page written from frame 0 to A, read from A into frame 1, written
    // from frame 1 to B: both controllers reached the one arena.
    pattern(&*arena, &[FrameId(0)], 7);
    let (mut qa, mut qb) = (a.open_queue().unwrap(), b.open_queue().unwrap());
    let page = |f| [FrameId(f)];
    run(
        &mut qa,
        Command::Write {
            lba: Lba(3),
            frames: &page(0),
            fua: false,
        },
    )
    .unwrap();
    run(
        &mut qa,
        Command::Read {
            lba: Lba(3),
            frames: &page(1),
        },
    )
    .unwrap();
    run(
        &mut qb,
        Command::Write {
            lba: Lba(5),
            frames: &page(1),
            fua: false,
        },
    )
    .unwrap();
    let want = contents(&*arena, &[FrameId(0)]);
    let (mut on_a, mut on_b) = (vec![0u8; PAGE_SIZE], vec![0u8; PAGE_SIZE]);
    ctrl_a.read_medium(3 * 4096, &mut on_a);
    ctrl_b.read_medium(5 * 4096, &mut on_b);
    assert_eq!(on_a, want);
    assert_eq!(on_b, want);
}

#[test]
fn data_round_trips_over_memory_read_as_vfio_memory_is() {
    use pollfs_driver::emu::StdClock;
    use pollfs_driver::{EmuController, EmuMemory};
    // Regions that do not claim page atomicity: every completion is read
    // status dword first, then the entry, as on a real controller.
    let memory = EmuMemory::with_split_reads();
    let emu = EmuConfig {
        bytes: 8 << 20,
        block_size: 4096,
        ..EmuConfig::default()
    };
    let ctrl = EmuController::new(emu, memory.clone());
    let transport = PcieTransport::new(ctrl.clone(), memory);
    let dev = NvmeDevice::new(transport, StdClock::new(), DriverConfig::default(), 64).unwrap();
    let mut q = dev.open_queue().unwrap();
    for (seed, (lba, n)) in [(0u64, 1u32), (9, 2), (100, 5), (2000, 32)]
        .into_iter()
        .enumerate()
    {
        write_read_check(&dev, &ctrl, &mut q, lba, n, seed as u64);
    }
}
