//! The `recovery` fuzz input: changes to a small valid image, raw (bytes
//! flipped or set in the superblocks, log writes, checkpoint frames,
//! anywhere) and crafted with valid checksums (superblock fields, frame
//! headers, records with values at and past their limits, new log writes
//! with the next sequence number, the checkpoint moved). Then:
//!
//! - `persist::check` returns a report, never panics;
//! - `Fs::mount` returns, never panics or hangs; it mounts exactly the
//!   images `check` calls clean;
//! - a mounted image: every file reads (to its length where it is small,
//!   at every size and extent edge the records name otherwise), the
//!   invariants hold, a write, a sync and a remount work and keep the data;
//! - an image `check` finds problems in: `persist::repair` fails, or leaves
//!   an image `check` calls clean and that mounts and passes the above.
//!
//! Shared with host-tests (by path), which replays the committed corpus.

pub mod base;
pub mod edit;
pub mod model;
pub mod values;

use arbitrary::Arbitrary;
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::error::Error;
use pollfs_core::persist::format::Superblock;
use pollfs_core::persist::CheckReport;
use pollfs_core::{Fs, MAX_FILE_SIZE};
use pollfs_host_tests::model::pattern;

use edit::{Mutation, MAX_MUTATIONS};
use model::Model;

/// A whole fuzzed run: the changes, applied in order (raw byte changes
/// after the crafted ones).
#[derive(Arbitrary, Clone, Debug)]
pub struct RecoveryInput {
    /// The changes (at most [`MAX_MUTATIONS`] are used).
    pub mutations: Vec<Mutation>,
}

/// Runs one input; panics if the engine does, or if a check fails.
pub fn run(input: &RecoveryInput) {
    let base = base::base();
    let muts = &input.mutations[..input.mutations.len().min(MAX_MUTATIONS)];
    let mut model = Model::new(base);
    edit::apply(&mut model, muts);
    let raw: Vec<_> = muts
        .iter()
        .filter_map(|m| match *m {
            Mutation::Raw(region, offset, op) => Some((region, offset, op)),
            _ => None,
        })
        .collect();
    let dev = base::fresh_device();
    model.write(&dev, &raw);
    verify(&dev, &model.offsets());
}

/// The checks on a changed image; `offsets` are file offsets worth reading.
pub fn verify(dev: &RamDevice, offsets: &[u64]) {
    let report = fsck(dev);
    match Fs::mount(dev.clone(), base::config()) {
        Ok(fs) => {
            assert!(
                report.problems.is_empty(),
                "mount accepted an image check finds problems in: {:?}",
                report.problems
            );
            exercise(fs, dev, offsets);
        }
        Err(e) => {
            assert!(
                !report.problems.is_empty(),
                "mount refused an image check calls clean: {e:?}"
            );
            repair(dev, offsets);
        }
    }
}

/// `persist::check`, which answers a RAM device with a report.
fn fsck(dev: &RamDevice) -> CheckReport {
    match pollfs_core::persist::check(dev, base::config().clock, base::config().idle) {
        Ok(r) => r,
        Err(e) => panic!("check failed instead of reporting: {e:?}"),
    }
}

fn repair(dev: &RamDevice, offsets: &[u64]) {
    let config = base::config();
    let Ok(rep) = pollfs_core::persist::repair(dev, config.clock, config.idle) else {
        return;
    };
    assert!(
        rep.after.problems.is_empty(),
        "repair left problems: {:?} (repairs: {:?})",
        rep.after.problems,
        rep.repaired
    );
    let again = fsck(dev);
    assert!(
        again.problems.is_empty(),
        "check after repair: {:?}",
        again.problems
    );
    match Fs::mount(dev.clone(), config) {
        Ok(fs) => exercise(fs, dev, offsets),
        Err(e) => panic!(
            "a repaired image does not mount: {e:?} (repairs: {:?})",
            rep.repaired
        ),
    }
}

/// Errors a write or a sync may give on a full or crafted filesystem.
fn acceptable(e: &Error) -> bool {
    matches!(e, Error::Space(_))
}

/// The file every mounted image gets.
const NEW: &str = "fuzz.new";

/// Reads every file, checks the invariants, writes, syncs and remounts.
fn exercise(fs: Fs<RamDevice>, dev: &RamDevice, offsets: &[u64]) {
    read_all(&fs, offsets);
    if let Err(e) = fs.check_invariants() {
        panic!("invariants after mount: {e:?}");
    }
    let data = pattern(7, 0, 8192);
    let wrote = {
        let s = fs.session().expect("a session");
        let written = match s.open_or_create(NEW) {
            Ok(f) => f.write_all_at(&data, 0).map(|()| true),
            Err(e) => Err(e),
        };
        let written = match written {
            Ok(w) => w,
            Err(e) if acceptable(&e) => false,
            Err(e) => panic!("writing a new file: {e:?}"),
        };
        // An existing file, inside its size.
        let other = fs.list().into_iter().find(|n| n != NEW);
        if let Some(f) = other.and_then(|n| s.open(&n).ok()) {
            let at = f.len().min(MAX_FILE_SIZE - 4096) / 2;
            match f.write_all_at(&data[..4096], at) {
                Ok(()) => {}
                Err(e) if acceptable(&e) => {}
                Err(e) => panic!("writing at {at} of a file of {} bytes: {e:?}", f.len()),
            }
        }
        match fs.sync() {
            Ok(()) => written,
            Err(e) if acceptable(&e) => false,
            Err(e) => panic!("sync: {e:?}"),
        }
    };
    if let Err(e) = fs.check_invariants() {
        panic!("invariants after a write and a sync: {e:?}");
    }
    // Remount twice: replaying the log the sync wrote, then from the
    // checkpoint an unmount writes.
    drop(fs);
    let fs = remount(
        dev,
        offsets,
        wrote.then_some(&data[..]),
        "a write and a sync",
    );
    let before = newest_generation(dev);
    match fs.unmount() {
        Ok(()) => {}
        Err(e) if acceptable(&e) => return,
        Err(e) => panic!("unmount: {e:?}"),
    }
    let after = newest_generation(dev);
    assert!(
        after > before,
        "the superblock an unmount wrote does not decode (newest generation {before:?}, then {after:?})"
    );
    remount(dev, offsets, wrote.then_some(&data[..]), "an unmount");
}

/// The highest generation of a superblock copy that decodes.
fn newest_generation(dev: &RamDevice) -> Option<u64> {
    let mut block = vec![0u8; 4096];
    (0..2)
        .filter_map(|b| {
            dev.read_raw(b * 4096, &mut block);
            Superblock::decode(&block).ok().map(|sb| sb.generation)
        })
        .max()
}

/// Mounts `dev` again after `what`: it must mount, read, pass the
/// invariants, and hold `data` in the new file if that was synced.
fn remount(dev: &RamDevice, offsets: &[u64], data: Option<&[u8]>, what: &str) -> Fs<RamDevice> {
    let fs = match Fs::mount(dev.clone(), base::config()) {
        Ok(fs) => fs,
        Err(e) => panic!("remount after {what}: {e:?}"),
    };
    read_all(&fs, offsets);
    if let Err(e) = fs.check_invariants() {
        panic!("invariants after a remount after {what}: {e:?}");
    }
    if let Some(data) = data {
        let s = fs.session().expect("a session");
        let f = s.open(NEW).expect("the synced file");
        let mut back = vec![0u8; data.len()];
        assert_eq!(f.read_at(&mut back, 0).ok(), Some(data.len()));
        assert!(back == data, "a synced write did not survive {what}");
    }
    fs
}

/// Files up to this size are read whole.
const READ_WHOLE: u64 = 256 << 10;

/// Reads every file: whole if small, else around `offsets` and its ends.
/// Every read returns exactly the bytes the file has there.
fn read_all(fs: &Fs<RamDevice>, offsets: &[u64]) {
    let s = fs.session().expect("a session");
    let mut buf = vec![0u8; 64 << 10];
    for name in fs.list() {
        let f = match s.open(&name) {
            Ok(f) => f,
            Err(e) => panic!("open {name:?}: {e:?}"),
        };
        let len = f.len();
        let mut at: Vec<u64> = if len <= READ_WHOLE {
            (0..len).step_by(buf.len()).collect()
        } else {
            let mut v: Vec<u64> = offsets.iter().map(|o| o / 4096 * 4096).collect();
            v.extend([0, len / 2, len - 1]);
            v
        };
        at.push(len);
        for off in at {
            let want = len.saturating_sub(off).min(buf.len() as u64) as usize;
            match f.read_at(&mut buf, off) {
                Ok(n) if n == want => {}
                other => panic!("read of {name:?} ({len} bytes) at {off}: {other:?}, not {want}"),
            }
        }
    }
}
