//! Model tests: long random sequences of file operations, one task, checked
//! byte for byte against the in-memory reference after every step.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::dev::fault::FaultPlan;
use pollfs_core::dev::{BlockDevice, CommandKind, DevError};
use pollfs_core::{Allocate, Error, Fs};
use pollfs_host_tests::model::{pattern, ModelFile};
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::{faulty_fs, faulty_nvme_fs};

const FILES: usize = 3;

/// Every mode `File::allocate` supports.
const ALLOCATE: [Allocate; 5] = [
    Allocate::Reserve { keep_size: false },
    Allocate::Reserve { keep_size: true },
    Allocate::ZeroRange { keep_size: false },
    Allocate::ZeroRange { keep_size: true },
    Allocate::PunchHole,
];

struct Case {
    seed: u64,
    /// Run on the emulated NVMe controller through the real driver instead
    /// of the RAM device.
    nvme: bool,
    steps: usize,
    block_size: u32,
    cache_pages: u32,
    max_file: u64,
    faults: bool,
}

/// Picks an offset that likes page boundaries, block boundaries and EOF.
fn pick_offset(rng: &mut Rng, size: u64, max: u64) -> u64 {
    match rng.below(6) {
        0 => rng.below(max / 4096 + 1) * 4096,
        1 => size,
        2 => size.saturating_sub(rng.below(5000)),
        3 => rng.below(max / 512 + 1) * 512 + rng.below(2),
        _ => rng.below(max),
    }
}

fn pick_len(rng: &mut Rng) -> u64 {
    match rng.below(5) {
        0 => 4096,
        1 => rng.below(16) + 1,
        2 => rng.below(3 * 4096) + 1,
        3 => 4096 * (rng.below(40) + 1),
        _ => rng.below(70_000),
    }
}

/// Rounds a picked range to whole pages, for direct I/O.
fn pages(off: u64, len: u64) -> (u64, usize) {
    (off / 4096 * 4096, len.div_ceil(4096) as usize * 4096)
}

fn check_read<D: BlockDevice>(
    f: &pollfs_core::File<D>,
    m: &ModelFile,
    off: u64,
    len: usize,
    ctx: &str,
) -> bool {
    check_read_how(f, m, off, len, false, ctx)
}

/// Reads through the cache, or past it (`direct`), and compares.
fn check_read_how<D: BlockDevice>(
    f: &pollfs_core::File<D>,
    m: &ModelFile,
    off: u64,
    len: usize,
    direct: bool,
    ctx: &str,
) -> bool {
    let mut buf = vec![0xeeu8; len];
    let r = if direct {
        f.read_direct(&mut buf, off)
    } else {
        f.read_at(&mut buf, off)
    };
    match r {
        Ok(n) => {
            let want = m.read(off, len);
            assert_eq!(n, want.len(), "{ctx}: read length at {off}+{len}");
            if buf[..n] != *want {
                let i = (0..n).find(|&i| buf[i] != want[i]).unwrap_or(0);
                panic!(
                    "{ctx}: byte {} differs: got {:#04x}, want {:#04x}",
                    off + i as u64,
                    buf[i],
                    want[i]
                );
            }
            true
        }
        Err(Error::Io(_)) => false,
        Err(e) => panic!("{ctx}: read failed: {e}"),
    }
}

/// Runs one case; returns how many device commands were failed on purpose.
fn run(case: Case) -> u64 {
    if case.nvme {
        let (fs, plan) = faulty_nvme_fs(64 << 20, case.block_size, case.cache_pages);
        run_on(&fs, &plan, &case)
    } else {
        let (fs, plan) = faulty_fs(64 << 20, case.block_size, case.cache_pages);
        run_on(&fs, &plan, &case)
    }
}

fn run_on<D: BlockDevice>(fs: &Fs<D>, plan: &FaultPlan, case: &Case) -> u64 {
    let names: Vec<String> = (0..FILES).map(|i| format!("file{i}")).collect();
    let mut models = vec![ModelFile::default(); FILES];
    let mut files: Vec<_> = names.iter().map(|n| fs.create(n).unwrap()).collect();
    let mut rng = Rng::new(case.seed);
    // POLLFS_TRACE=1 prints every step, for replaying a failing seed.
    let trace = std::env::var_os("POLLFS_TRACE").is_some();
    for step in 0..case.steps {
        let which = rng.below(FILES as u64) as usize;
        let f = &files[which];
        let m = &mut models[which];
        let size = m.data.len() as u64;
        if case.faults {
            arm_fault(&mut rng, plan);
        }
        let op = rng.below(100);
        let ctx = format!("seed {} step {step} file {which} size {size}", case.seed);
        if trace {
            eprintln!("{ctx} op {op}");
        }
        match op {
            28..=34 => {
                // Past the cache. A failed write leaves its range
                // unspecified: heal and write the rest until it is all
                // there, so the model stays exact.
                let off = pick_offset(&mut rng, size, case.max_file);
                let len = pick_len(&mut rng).min(case.max_file.saturating_sub(off));
                let (off, len) = pages(off, len);
                let data = pattern(step as u64, off, len);
                let mut done = 0;
                while done < len {
                    let r = f.write_direct(&data[done..], off + done as u64);
                    if trace {
                        eprintln!(
                            "  direct write {}+{} -> {r:?}",
                            off + done as u64,
                            len - done
                        );
                    }
                    match r {
                        Ok(n) => done += n,
                        Err(Error::Io(_)) => {}
                        Err(e) => panic!("{ctx}: direct write {off}+{len}: {e}"),
                    }
                    if done < len {
                        plan.heal();
                    }
                }
                m.write(off, &data);
            }
            0..=27 => {
                let off = pick_offset(&mut rng, size, case.max_file);
                let len = pick_len(&mut rng).min(case.max_file.saturating_sub(off)) as usize;
                let data = pattern(step as u64, off, len);
                let r = f.write_at(&data, off);
                if trace {
                    eprintln!("  write {off}+{len} -> {r:?}");
                }
                match r {
                    Ok(n) => m.write(off, &data[..n]),
                    Err(Error::Io(_)) => {}
                    Err(e) => panic!("{ctx}: write {off}+{len}: {e}"),
                }
            }
            35..=50 => {
                let off = pick_offset(&mut rng, size, case.max_file);
                let len = pick_len(&mut rng) as usize;
                check_read(f, m, off, len, &ctx);
            }
            51..=57 => {
                // Every mode, at offsets and lengths that are and are not
                // page-aligned, the old EOF anywhere. A device error leaves
                // part of it done; each mode is idempotent, so heal and run
                // it again until it succeeds.
                let off = pick_offset(&mut rng, size, case.max_file);
                let len = pick_len(&mut rng)
                    .min(case.max_file.saturating_sub(off))
                    .max(1);
                let what = ALLOCATE[rng.below(ALLOCATE.len() as u64) as usize];
                loop {
                    let r = f.allocate(off, len, what);
                    if trace {
                        eprintln!("  allocate {what:?} {off}+{len} -> {r:?}");
                    }
                    match r {
                        Ok(()) => break,
                        Err(Error::Io(_)) => plan.heal(),
                        Err(e) => panic!("{ctx}: allocate {what:?} {off}+{len}: {e}"),
                    }
                }
                m.allocate(off, len, what);
                assert_eq!(f.len(), m.data.len() as u64, "{ctx}: size after allocate");
            }
            58..=64 => {
                let off = pick_offset(&mut rng, size, case.max_file);
                let (off, len) = pages(off, pick_len(&mut rng));
                check_read_how(f, m, off, len, true, &ctx);
            }
            65..=74 => {
                let new = match rng.below(4) {
                    0 => 0,
                    1 => size + rng.below(20_000),
                    2 => rng.below(size + 1),
                    _ => rng.below(case.max_file / 4096 + 1) * 4096,
                };
                let r = f.set_len(new);
                if trace {
                    eprintln!("  set_len {new} -> {r:?}");
                }
                match r {
                    Ok(()) => m.set_len(new),
                    Err(Error::Io(_)) => {}
                    Err(e) => panic!("{ctx}: set_len {new}: {e}"),
                }
            }
            75..=84 => {
                let off = pick_offset(&mut rng, size, case.max_file);
                let len = pick_len(&mut rng);
                let r = f.punch_hole(off, len);
                if trace {
                    eprintln!("  punch {off}+{len} -> {r:?}");
                }
                match r {
                    Ok(()) => m.punch(off, len),
                    Err(Error::Io(_)) => {}
                    Err(e) => panic!("{ctx}: punch {off}+{len}: {e}"),
                }
            }
            85..=91 => match f.sync_data() {
                Ok(()) | Err(Error::Io(_)) => {}
                Err(e) => panic!("{ctx}: sync: {e}"),
            },
            92..=95 => {
                // Close and reopen: nothing may depend on the handle.
                let reopened = fs.open(&names[which]).unwrap();
                files[which] = reopened;
            }
            _ => {
                plan.heal();
                assert_eq!(
                    files[which].len(),
                    models[which].data.len() as u64,
                    "{ctx}: size"
                );
                fs.check_invariants()
                    .unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
            }
        }
    }
    // Heal the device, write everything back, and check every byte of every
    // file twice: from the cache, and again after the cache was recycled.
    plan.heal();
    for (i, f) in files.iter().enumerate() {
        f.sync_data().unwrap();
        let len = models[i].data.len();
        assert!(check_read(f, &models[i], 0, len + 10, "final"));
    }
    fs.check_invariants().unwrap();
    let scratch = fs.create("scratch").unwrap();
    let junk = pattern(u64::MAX, 0, (case.cache_pages as usize + 8) * 4096);
    scratch.write_all_at(&junk, 0).unwrap();
    scratch.sync_data().unwrap();
    for (i, f) in files.iter().enumerate() {
        let len = models[i].data.len();
        assert!(check_read(f, &models[i], 0, len, "after eviction"));
    }
    drop(scratch);
    fs.remove("scratch").unwrap();
    drop(files);
    for n in &names {
        fs.remove(n).unwrap();
    }
    fs.check_invariants().unwrap();
    assert_eq!(
        fs.free_blocks(),
        fs.geometry().capacity_pages(),
        "blocks leaked after remove"
    );
    plan.injected()
}

fn arm_fault(rng: &mut Rng, plan: &FaultPlan) {
    if rng.chance(3) {
        let kind = match rng.below(3) {
            0 => CommandKind::Read,
            1 => CommandKind::Write,
            _ => CommandKind::Flush,
        };
        plan.fail(kind, rng.below(3) + 1, DevError::Media);
    } else if rng.chance(10) {
        plan.heal();
    }
}

#[test]
fn model_large_cache_4k_blocks() {
    for seed in 0..6 {
        run(Case {
            seed,
            nvme: false,
            steps: steps(),
            block_size: 4096,
            cache_pages: 4096,
            max_file: 1 << 20,
            faults: false,
        });
    }
}

#[test]
fn model_tiny_cache_512_blocks_evicts_and_writes_back_under_pressure() {
    for seed in 100..106 {
        run(Case {
            seed,
            nvme: false,
            steps: steps(),
            block_size: 512,
            cache_pages: 24,
            max_file: 1 << 19,
            faults: false,
        });
    }
}

#[test]
fn model_with_injected_device_errors() {
    let mut injected = 0;
    for seed in 200..208 {
        injected += run(Case {
            seed,
            nvme: false,
            steps: steps(),
            block_size: 4096,
            cache_pages: 64,
            max_file: 1 << 19,
            faults: true,
        });
    }
    assert!(injected > 50, "only {injected} faults were injected");
}

#[test]
fn write_error_keeps_data_dirty_and_every_sync_reports_it_until_written() {
    let (fs, plan) = faulty_fs(8 << 20, 4096, 64);
    let f = fs.create("a").unwrap();
    let data = pattern(1, 0, 3 * 4096);
    f.write_all_at(&data, 0).unwrap();
    plan.fail(CommandKind::Write, u64::MAX, DevError::Media);
    assert_eq!(f.sync_data(), Err(Error::Io(DevError::Media)));
    assert_eq!(
        f.sync_data(),
        Err(Error::Io(DevError::Media)),
        "the error must be reported again"
    );
    assert_eq!(fs.dirty_pages(), 3, "failed pages stay dirty");
    plan.heal();
    f.sync_data().unwrap();
    assert_eq!(fs.dirty_pages(), 0);
    let mut back = vec![0; data.len()];
    f.read_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
}

#[test]
fn flush_error_redirties_the_pages_it_covered() {
    let (fs, plan) = faulty_fs(8 << 20, 4096, 64);
    let f = fs.create("a").unwrap();
    f.write_all_at(&pattern(2, 0, 8192), 0).unwrap();
    plan.fail(CommandKind::Flush, 1, DevError::Media);
    assert_eq!(f.sync_data(), Err(Error::Io(DevError::Media)));
    assert_eq!(
        fs.dirty_pages(),
        2,
        "data whose flush failed is written again"
    );
    let before = fs.stats();
    f.sync_data().unwrap();
    let d = fs.stats().since(&before);
    assert_eq!((d.dev_writes, d.dev_flushes), (1, 1));
}

#[test]
fn device_full_is_an_error_and_loses_nothing() {
    let (fs, _plan) = faulty_fs(64 * 4096, 4096, 32);
    let f = fs.create("big").unwrap();
    let data = pattern(3, 0, 70 * 4096);
    let n = f.write_at(&data, 0).unwrap();
    assert_eq!(n, 64 * 4096, "a write that fills the device stops short");
    assert_eq!(
        f.write_at(&data[..10], n as u64),
        Err(Error::Space(pollfs_core::error::SpaceError::DeviceFull))
    );
    let mut back = vec![0; n];
    assert_eq!(f.read_at(&mut back, 0).unwrap(), n);
    assert_eq!(back, data[..n]);
    f.set_len(4096).unwrap();
    let g = fs.create("other").unwrap();
    g.write_all_at(&data[..8192], 0).unwrap();
    fs.check_invariants().unwrap();
}

#[test]
fn fs_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Fs<pollfs_core::dev::ram::RamDevice>>();
}

fn steps() -> usize {
    if cfg!(feature = "soak") {
        60_000
    } else {
        5_000
    }
}

#[test]
fn model_on_the_emulated_nvme_controller() {
    for (seed, block_size) in [(300, 512), (301, 4096)] {
        run(Case {
            seed,
            nvme: true,
            steps: steps() / 2,
            block_size,
            cache_pages: 48,
            max_file: 1 << 19,
            faults: seed == 301,
        });
    }
}
