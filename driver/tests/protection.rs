//! End-to-end protection information on the emulated controller: a
//! namespace formatted with 8-byte PI (types 1, 2 and 3) is driven with
//! PRACT and PRCHK; good I/O passes and leaves the PI the spec asks for, a
//! corrupted guard, reference tag or data byte and a misdirected read are
//! each reported as the named check error (never as wrong bytes) and
//! counted, and formats with metadata the driver cannot use are refused
//! by name at bring-up. The engine on a protected namespace formats,
//! checks clean, and gets the named error for a damaged page of a file,
//! never its wrong bytes.

// Test helpers outside #[test] functions unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use pollfs_core::dev::{BlockDevice, Command, DevError, FrameArena};
use pollfs_core::units::{FrameId, Lba, PAGE_SIZE};
use pollfs_driver::emu::{EmuConfig, EmuController, EmulatedDevice, Faults, Metadata};
use pollfs_driver::error::DriverError;
use pollfs_driver::spec::identify::IdentifyError;
use pollfs_driver::spec::protection::{guard, PiCheck, PiTuple, PiType};
use pollfs_driver::{DriverConfig, NvmeDevice};

fn protected(pi_type: PiType, block_size: u32) -> (EmulatedDevice, std::sync::Arc<EmuController>) {
    let emu = EmuConfig {
        bytes: 8 << 20,
        block_size,
        metadata: Metadata::pi(pi_type),
        ..EmuConfig::default()
    };
    device(emu, DriverConfig::default(), 64)
}

/// Writes frame 0 (patterned by `seed`) at `lba`.
fn write_page(
    dev: &EmulatedDevice,
    q: &mut <EmulatedDevice as BlockDevice>::Queue,
    lba: u64,
    seed: u64,
) -> Vec<u8> {
    let data = pages::fill(dev.frames(), &[FrameId(0)], seed).unwrap();
    let w = Command::Write {
        lba: Lba(lba),
        frames: &[FrameId(0)],
        fua: false,
    };
    run(q, w).unwrap();
    data
}

/// Reads one page at `lba` into frame 1; its bytes, or the error.
fn read_page(
    dev: &EmulatedDevice,
    q: &mut <EmulatedDevice as BlockDevice>::Queue,
    lba: u64,
) -> Result<Vec<u8>, DevError> {
    dev.frames().fill(FrameId(1), 0, PAGE_SIZE, 0xee).unwrap();
    let r = Command::Read {
        lba: Lba(lba),
        frames: &[FrameId(1)],
    };
    run(q, r)?;
    Ok(contents(dev.frames(), &[FrameId(1)]))
}

#[test]
fn good_io_passes_and_leaves_the_pi_the_spec_asks_for() {
    for pi_type in [PiType::Type1, PiType::Type2, PiType::Type3] {
        for bs in [512u32, 4096] {
            let (dev, ctrl) = protected(pi_type, bs);
            let p = dev.controller().info().protection.unwrap();
            assert_eq!(p.pi_type, pi_type);
            let mut q = dev.open_queue().unwrap();
            let bpp = dev.geometry().blocks_per_page();
            let cap = dev.geometry().capacity;
            for (i, lba) in [0, 3, 1000, cap - 32 * bpp].into_iter().enumerate() {
                write_read_check(&dev, &ctrl, &mut q, lba, 32, i as u64 + 1);
            }
            // Each block's PI: the CRC of its data, application tag 0,
            // and (types 1 and 2) the low 32 bits of its LBA.
            let mut block = vec![0u8; bs as usize];
            for lba in [1000, 1001, 1000 + 32 * bpp - 1] {
                ctrl.read_medium(lba * u64::from(bs), &mut block);
                let t = ctrl.pi_tuple(lba).unwrap();
                assert_eq!(t.guard, guard(&block), "{pi_type:?} bs {bs} lba {lba}");
                assert_eq!(t.app_tag, 0);
                if pi_type != PiType::Type3 {
                    assert_eq!(t.ref_tag, lba as u32);
                }
            }
            // Zeroed blocks carry PI for their zeroes; deallocated ones
            // read back as unwritten, which no check trips on.
            let zero = Command::WriteZeroes {
                lba: Lba(1000),
                blocks: 8 * bpp,
            };
            run(&mut q, zero).unwrap();
            let t = ctrl.pi_tuple(1001).unwrap();
            assert_eq!((t.guard, t.app_tag), (0, 0));
            if pi_type != PiType::Type3 {
                assert_eq!(t.ref_tag, 1001);
            }
            assert_eq!(read_page(&dev, &mut q, 1000).unwrap(), vec![0u8; PAGE_SIZE]);
            let trim = Command::Deallocate {
                lba: Lba(1000 + 8 * bpp),
                blocks: 8 * bpp,
            };
            run(&mut q, trim).unwrap();
            assert_eq!(ctrl.pi_tuple(1000 + 8 * bpp), Some(PiTuple::UNWRITTEN));
            assert_eq!(
                read_page(&dev, &mut q, 1000 + 8 * bpp).unwrap(),
                vec![0u8; PAGE_SIZE]
            );
            let s = ctrl.stats();
            assert_eq!(s.pi_errors, 0);
            assert_eq!(s.pi_commands, s.reads + s.writes + s.write_zeroes);
            assert_eq!(dev.controller().integrity_errors(), 0);
        }
    }
}

#[test]
fn a_corrupted_guard_ref_tag_or_data_byte_is_the_named_error() {
    for bs in [512u32, 4096] {
        let (dev, ctrl) = protected(PiType::Type1, bs);
        let mut q = dev.open_nvme_queue().unwrap();
        let bpp = dev.geometry().blocks_per_page();
        let lba = 40 * bpp;
        let data = write_page(&dev, &mut q, lba, 7);
        assert_eq!(read_page(&dev, &mut q, lba).unwrap(), data);
        let victim = lba + bpp - 1; // the page's last block
        let good = ctrl.pi_tuple(victim).unwrap();

        // A stored guard that no longer matches the data.
        ctrl.set_pi_tuple(
            victim,
            PiTuple {
                guard: good.guard ^ 0x0100,
                ..good
            },
        );
        let e = read_page(&dev, &mut q, lba).unwrap_err();
        assert_eq!(PiCheck::of(e), Some(PiCheck::Guard), "{e}");
        assert_eq!(e, DevError::Status(0x0282));

        // A stored reference tag of another block.
        ctrl.set_pi_tuple(
            victim,
            PiTuple {
                ref_tag: good.ref_tag + 8,
                ..good
            },
        );
        let e = read_page(&dev, &mut q, lba).unwrap_err();
        assert_eq!(PiCheck::of(e), Some(PiCheck::RefTag), "{e}");

        // Good PI again, then a bit flipped in the data on the medium.
        ctrl.set_pi_tuple(victim, good);
        assert_eq!(read_page(&dev, &mut q, lba).unwrap(), data);
        let mut byte = [0u8];
        let at = victim * u64::from(bs) + 17;
        ctrl.read_medium(at, &mut byte);
        ctrl.write_medium(at, &[byte[0] ^ 0x20]);
        let e = read_page(&dev, &mut q, lba).unwrap_err();
        assert_eq!(PiCheck::of(e), Some(PiCheck::Guard), "{e}");

        // Each failed attempt is counted (the driver retries a status
        // without Do Not Retry, and the corruption stays).
        let attempts = 3 * (1 + u64::from(DriverConfig::default().max_retries));
        assert_eq!(q.stats().integrity_errors, attempts);
        assert_eq!(dev.controller().integrity_errors(), attempts);
        assert_eq!(ctrl.stats().pi_errors, attempts);
        // Rewriting the page makes it good again.
        let data = write_page(&dev, &mut q, lba, 8);
        assert_eq!(read_page(&dev, &mut q, lba).unwrap(), data);
    }
}

#[test]
fn a_misdirected_read_is_caught_by_the_reference_tag() {
    let (dev, ctrl) = protected(PiType::Type1, 4096);
    let mut q = dev.open_queue().unwrap();
    let a = write_page(&dev, &mut q, 10, 1);
    let b = write_page(&dev, &mut q, 20, 2);
    ctrl.set_faults(|f| f.misdirect_read = Some((10, 20)));
    // Block 20's data with block 20's PI: the guard matches, the
    // reference tag names the wrong block.
    let e = read_page(&dev, &mut q, 10).unwrap_err();
    assert_eq!(PiCheck::of(e), Some(PiCheck::RefTag), "{e}");
    assert_eq!(read_page(&dev, &mut q, 20).unwrap(), b);
    ctrl.set_faults(|f| *f = Faults::default());
    assert_eq!(read_page(&dev, &mut q, 10).unwrap(), a);

    // Type 3 has no reference tag: the same fault goes unseen there, as it
    // does on a namespace without PI (wrong bytes, no error).
    for metadata in [Metadata::pi(PiType::Type3), Metadata::default()] {
        let emu = EmuConfig {
            bytes: 8 << 20,
            block_size: 4096,
            metadata,
            ..EmuConfig::default()
        };
        let (dev, ctrl) = device(emu, DriverConfig::default(), 64);
        let mut q = dev.open_queue().unwrap();
        write_page(&dev, &mut q, 10, 1);
        let b = write_page(&dev, &mut q, 20, 2);
        ctrl.set_faults(|f| f.misdirect_read = Some((10, 20)));
        assert_eq!(read_page(&dev, &mut q, 10).unwrap(), b, "{metadata:?}");
    }
}

#[test]
fn formats_with_metadata_the_driver_cannot_use_are_refused_by_name() {
    let refused = |metadata: Metadata| {
        let emu = EmuConfig {
            bytes: 1 << 20,
            metadata,
            ..EmuConfig::default()
        };
        NvmeDevice::emulated_with(emu, DriverConfig::default(), 8, ticking_clock()).unwrap_err()
    };
    // Metadata without PI, more metadata than the PI (extended or not),
    // and a reserved PI type.
    let cases = [
        (
            Metadata {
                bytes: 8,
                extended: false,
                dps: 0,
            },
            IdentifyError::Metadata { bytes: 8 },
        ),
        (
            Metadata {
                bytes: 16,
                extended: true,
                dps: 1,
            },
            IdentifyError::Metadata { bytes: 16 },
        ),
        (
            Metadata {
                bytes: 64,
                extended: false,
                dps: 1 | 8,
            },
            IdentifyError::Metadata { bytes: 64 },
        ),
        (
            Metadata {
                bytes: 8,
                extended: false,
                dps: 5,
            },
            IdentifyError::ProtectionType,
        ),
    ];
    for (metadata, want) in cases {
        let e = refused(metadata);
        assert_eq!(e, DriverError::Identify(want), "{metadata:?}");
        assert!(e.to_string().contains("namespace"), "{e}");
    }
    assert!(refused(Metadata {
        bytes: 16,
        extended: false,
        dps: 0
    })
    .to_string()
    .contains("16 bytes of metadata"));
    // Extended or separate makes no difference to 8 bytes of PI with PRACT.
    let emu = EmuConfig {
        bytes: 1 << 20,
        metadata: Metadata {
            bytes: 8,
            extended: true,
            dps: 1 | 8,
        },
        ..EmuConfig::default()
    };
    let (dev, ctrl) = device(emu, DriverConfig::default(), 8);
    let p = dev.controller().info().protection.unwrap();
    assert!(p.extended && p.first_eight);
    let mut q = dev.open_queue().unwrap();
    write_read_check(&dev, &ctrl, &mut q, 8, 2, 3);
}

#[test]
fn the_engine_on_a_protected_namespace_gets_the_named_error_never_wrong_bytes() {
    use pollfs_core::persist::check;
    use pollfs_core::{Config, Error, Fs};
    use pollfs_driver::emu::{EmuMemory, StdClock};
    use pollfs_driver::PcieTransport;

    let memory = EmuMemory::new();
    let emu = EmuConfig {
        bytes: 16 << 20,
        block_size: 4096,
        metadata: Metadata::pi(PiType::Type1),
        ..EmuConfig::default()
    };
    let ctrl = EmuController::new(emu, memory.clone());
    let open = || {
        let transport = PcieTransport::new(ctrl.clone(), memory.clone());
        NvmeDevice::new(transport, StdClock::new(), DriverConfig::default(), 256).unwrap()
    };
    let config = Config {
        cache_pages: 128,
        ..pollfs_core::hosted::config()
    };
    let data: Vec<u8> = (0..64 * 1024).map(|i| pages::byte(5, i)).collect();
    let fs = Fs::format(open(), config, 7).unwrap();
    let f = fs.create("data").unwrap();
    f.write_all_at(&data, 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    fs.unmount().unwrap();
    let clock = pollfs_core::hosted::monotonic_clock;
    let report = check(&open(), clock, std::thread::yield_now).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // The file's fourth page, wherever the engine put it: a bit flipped
    // in every copy on the medium.
    let target = &data[3 * PAGE_SIZE..4 * PAGE_SIZE];
    let mut page = vec![0u8; PAGE_SIZE];
    let mut found = Vec::new();
    for lba in 0..(16 << 20) / PAGE_SIZE as u64 {
        ctrl.read_medium(lba * PAGE_SIZE as u64, &mut page);
        if page == target {
            found.push(lba);
            page[9] ^= 1;
            ctrl.write_medium(lba * PAGE_SIZE as u64, &page);
        }
    }
    assert!(!found.is_empty(), "the file's page is on the medium");

    let fs = Fs::mount(open(), config).unwrap();
    let f = fs.open("data").unwrap();
    let mut back = vec![0u8; data.len()];
    match f.read_exact_at(&mut back, 0) {
        Err(Error::Io(e)) => assert_eq!(PiCheck::of(e), Some(PiCheck::Guard), "{e}"),
        other => panic!("expected the guard check error, got {other:?}"),
    }
    // Written again, it reads back right after a remount.
    f.write_all_at(&data, 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    fs.unmount().unwrap();
    let fs = Fs::mount(open(), config).unwrap();
    let f = fs.open("data").unwrap();
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data, "the rewritten file reads back right");
    drop(f);
    fs.unmount().unwrap();
}
