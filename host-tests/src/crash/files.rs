//! The file workloads of the crash tests and their oracle, for any
//! device: run operations on a filesystem while its device records what
//! it is sent ([`run_ops`]), then check a crash state recovered from the
//! record ([`check_state`]): every file synced and untouched since has
//! exactly its synced contents and size; no file shows a byte it was
//! never given; fsck is clean; recovering twice gives the same state; and
//! the recovered filesystem keeps working: every file grown past its EOF
//! reads zeros there (no byte written before the crash past the durable
//! size comes back), files can be overwritten, removed and synced, and a
//! remount shows exactly that.

use std::collections::{BTreeMap, BTreeSet};

use pollfs_core::dev::BlockDevice;
use pollfs_core::{Allocate, Config, Fs};

use super::mount_checked;
use crate::model::pattern;
use crate::rng::Rng;
use crate::setup::config;

/// Cache pages of the filesystems the crash tests mount.
pub const CACHE: u32 = 48;
/// Largest offset the generated workloads write at.
pub const MAX_FILE: u64 = 48 * 1024;

/// The configuration of the crash tests' filesystems: no write-home
/// thread, whose writes would land between the workload's at times no
/// seed decides; the workloads drive its step themselves
/// ([`Op::WriteHome`]), so every run replays.
pub fn crash_config() -> Config {
    Config {
        background: None,
        ..config(CACHE)
    }
}

#[derive(Clone, Debug)]
pub enum Op {
    /// Create the file in slot `.0`.
    Create(usize),
    /// Create with a 255-byte name (slot, name variant).
    CreateLong(usize, usize),
    /// Write the file until the device is full.
    Fill(usize),
    /// Write `n` single pages, every other page from `first`: many extents.
    Fragment(usize, u64, u64),
    /// `Fs::sync`: every file and every name change.
    SyncFs,
    /// Write `.2` bytes at `.1`.
    Write(usize, u64, usize),
    /// `write_direct` of `n` pages from page `p`: (slot, p, n).
    WriteDirect(usize, u64, u64),
    /// Truncate or extend.
    SetLen(usize, u64),
    /// Punch a hole of `.2` bytes at `.1`.
    Punch(usize, u64, u64),
    /// `File::allocate` of `.2` bytes at `.1`, in mode `.3`.
    Allocate(usize, u64, u64, Allocate),
    /// Rename slot `.0` over slot `.1` (or to a new name).
    Rename(usize, usize),
    /// Remove the file.
    Remove(usize),
    /// `sync_data` the file.
    SyncData(usize),
    /// `sync_all` the file.
    SyncAll(usize),
    /// A sync of the file in slot `.0` beside a background checkpoint
    /// (`Session::background_step`, polled with it on this thread, the
    /// step first): the sync's log write lands after the checkpoint took
    /// its view of the log and before the checkpoint's superblock.
    SyncBesideCheckpoint(usize),
    /// From now on commits leave checkpoints to background steps until the
    /// log is three quarters full (`Fs::set_background_steps`).
    BackgroundSteps,
    /// One step of the background write-home (`Session::write_home_step`),
    /// as the write-home thread would take between operations.
    WriteHome,
}

/// What the oracle knows about one file (by model id).
#[derive(Clone, Debug, Default)]
struct ModelFile {
    name: String,
    data: Vec<u8>,
    live: bool,
    /// Every byte value ever written at each offset.
    history: BTreeMap<u64, BTreeSet<u8>>,
}

/// A sync that completed: the file's state then, and the event count when
/// it returned.
#[derive(Clone, Debug)]
struct Synced {
    id: usize,
    name: String,
    data: Vec<u8>,
    done_at: usize,
}

/// What a run taught the oracle.
#[derive(Clone, Debug)]
pub struct Oracle {
    syncs: Vec<Synced>,
    /// Per model id: event counts at which an operation touching it began.
    touched: BTreeMap<usize, Vec<usize>>,
    names: BTreeMap<String, BTreeSet<usize>>,
    files: Vec<ModelFile>,
    /// Creates the full device refused.
    pub refused: usize,
    /// Pages the write-home steps wrote home.
    pub homed: usize,
    /// Syncs that ended while a background checkpoint, its view taken,
    /// had its checkpoint still to write (`Op::SyncBesideCheckpoint`).
    pub beside: usize,
}

/// Runs `ops` on `fs` and returns what the oracle learned; `position()`
/// is the number of device events recorded so far (where a crash could
/// cut the run).
pub fn run_ops<D: BlockDevice>(fs: &Fs<D>, position: &dyn Fn() -> usize, ops: &[Op]) -> Oracle {
    let mut files: Vec<ModelFile> = Vec::new();
    let mut syncs = Vec::new();
    let mut touched: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut names: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    let mut op_no = 0u64;
    let mut refused = 0;
    let mut homed = 0;
    let mut beside = 0;
    // Operations name a slot; each create gives the slot a new model id, so
    // every inode keeps its own history.
    let mut slots: BTreeMap<usize, usize> = BTreeMap::new();
    for op in ops {
        op_no += 1;
        let start = position();
        let op = match *op {
            Op::Create(slot) | Op::CreateLong(slot, _) => {
                if slots.get(&slot).is_some_and(|&id| files[id].live) {
                    continue;
                }
                let name = match *op {
                    Op::CreateLong(_, v) => long_name(slot, v),
                    _ => format!("f{slot}"),
                };
                // A full device refuses a create: that is an answer, not
                // a failure.
                match fs.create(&name) {
                    Ok(_) => {}
                    Err(pollfs_core::Error::Space(_)) => {
                        refused += 1;
                        continue;
                    }
                    Err(_) => continue,
                }
                let id = files.len();
                files.push(ModelFile {
                    name: name.clone(),
                    live: true,
                    ..ModelFile::default()
                });
                slots.insert(slot, id);
                names.entry(name).or_default().insert(id);
                touched.entry(id).or_default().push(start);
                continue;
            }
            Op::Write(slot, a, b) => {
                Op::Write(slots.get(&slot).copied().unwrap_or(usize::MAX), a, b)
            }
            Op::WriteDirect(slot, a, b) => {
                Op::WriteDirect(slots.get(&slot).copied().unwrap_or(usize::MAX), a, b)
            }
            Op::Fill(slot) => Op::Fill(slots.get(&slot).copied().unwrap_or(usize::MAX)),
            Op::Fragment(slot, a, b) => {
                Op::Fragment(slots.get(&slot).copied().unwrap_or(usize::MAX), a, b)
            }
            Op::SyncFs => Op::SyncFs,
            Op::WriteHome => Op::WriteHome,
            Op::BackgroundSteps => Op::BackgroundSteps,
            Op::SetLen(slot, a) => Op::SetLen(slots.get(&slot).copied().unwrap_or(usize::MAX), a),
            Op::Punch(slot, a, b) => {
                Op::Punch(slots.get(&slot).copied().unwrap_or(usize::MAX), a, b)
            }
            Op::Allocate(slot, a, b, what) => {
                Op::Allocate(slots.get(&slot).copied().unwrap_or(usize::MAX), a, b, what)
            }
            Op::Rename(a, b) => Op::Rename(
                slots.get(&a).copied().unwrap_or(usize::MAX),
                slots.get(&b).copied().unwrap_or(usize::MAX),
            ),
            Op::Remove(slot) => Op::Remove(slots.get(&slot).copied().unwrap_or(usize::MAX)),
            Op::SyncData(slot) => Op::SyncData(slots.get(&slot).copied().unwrap_or(usize::MAX)),
            Op::SyncAll(slot) => Op::SyncAll(slots.get(&slot).copied().unwrap_or(usize::MAX)),
            Op::SyncBesideCheckpoint(slot) => {
                Op::SyncBesideCheckpoint(slots.get(&slot).copied().unwrap_or(usize::MAX))
            }
        };
        let op = &op;
        match op {
            Op::Create(_) | Op::CreateLong(..) => {}
            // Writes bytes the log already holds: it touches no file.
            Op::WriteHome => homed += fs.session().unwrap().write_home_step().unwrap(),
            Op::BackgroundSteps => fs.set_background_steps(true),
            Op::Fill(id) => {
                let Some(f) = files.get_mut(*id).filter(|f| f.live) else {
                    continue;
                };
                let h = fs.open(&f.name).unwrap();
                let mut off = f.data.len() as u64;
                loop {
                    let data = pattern(op_no, off, 64 * 1024);
                    let n = match h.write_at(&data, off) {
                        Ok(n) => n,
                        Err(pollfs_core::Error::Space(_)) => break,
                        Err(e) => panic!("fill: {e}"),
                    };
                    model_write(f, off, &data[..n]);
                    off += n as u64;
                    if n < data.len() {
                        break;
                    }
                }
                touched.entry(*id).or_default().push(start);
            }
            Op::Fragment(id, first, n) => {
                let Some(f) = files.get_mut(*id).filter(|f| f.live) else {
                    continue;
                };
                let h = fs.open(&f.name).unwrap();
                for i in 0..*n {
                    let off = (first + 2 * i) * 4096;
                    let data = pattern(op_no + i, off, 4096);
                    match h.write_at(&data, off) {
                        Ok(n) => model_write(f, off, &data[..n]),
                        Err(pollfs_core::Error::Space(_)) => break,
                        Err(e) => panic!("fragment: {e}"),
                    }
                }
                touched.entry(*id).or_default().push(start);
            }
            Op::SyncFs => {
                fs.sync().unwrap();
                for (id, f) in files.iter().enumerate().filter(|(_, f)| f.live) {
                    syncs.push(Synced {
                        id,
                        name: f.name.clone(),
                        data: f.data.clone(),
                        done_at: position(),
                    });
                }
            }
            Op::Write(id, off, len) => {
                let Some(f) = files.get_mut(*id).filter(|f| f.live) else {
                    continue;
                };
                let h = fs.open(&f.name).unwrap();
                let data = pattern(op_no, *off, *len);
                // On a full device a write may stop short: model what it
                // wrote.
                let mut done = 0;
                while done < data.len() {
                    match h.write_at(&data[done..], off + done as u64) {
                        Ok(n) => done += n,
                        Err(pollfs_core::Error::Space(_)) => break,
                        Err(e) => panic!("write: {e}"),
                    }
                }
                model_write(f, *off, &data[..done]);
                touched.entry(*id).or_default().push(start);
            }
            Op::WriteDirect(id, page, pages) => {
                let Some(f) = files.get_mut(*id).filter(|f| f.live) else {
                    continue;
                };
                let h = fs.open(&f.name).unwrap();
                let off = page * 4096;
                let data = pattern(op_no, off, (pages * 4096) as usize);
                let mut done = 0;
                while done < data.len() {
                    match h.write_direct(&data[done..], off + done as u64) {
                        Ok(n) => done += n,
                        Err(pollfs_core::Error::Space(_)) => break,
                        Err(e) => panic!("direct write: {e}"),
                    }
                }
                model_write(f, off, &data[..done]);
                touched.entry(*id).or_default().push(start);
            }
            Op::SetLen(id, len) => {
                let Some(f) = files.get_mut(*id).filter(|f| f.live) else {
                    continue;
                };
                fs.open(&f.name).unwrap().set_len(*len).unwrap();
                f.data.resize(*len as usize, 0);
                touched.entry(*id).or_default().push(start);
            }
            Op::Punch(id, off, len) => {
                let Some(f) = files.get_mut(*id).filter(|f| f.live) else {
                    continue;
                };
                fs.open(&f.name).unwrap().punch_hole(*off, *len).unwrap();
                let size = f.data.len() as u64;
                let (a, b) = ((*off).min(size), (off + len).min(size));
                f.data[a as usize..b as usize].fill(0);
                touched.entry(*id).or_default().push(start);
            }
            Op::Allocate(id, off, len, what) => {
                let Some(f) = files.get_mut(*id).filter(|f| f.live) else {
                    continue;
                };
                fs.open(&f.name)
                    .unwrap()
                    .allocate(*off, *len, *what)
                    .unwrap();
                let mut model = crate::model::ModelFile {
                    data: core::mem::take(&mut f.data),
                };
                model.allocate(*off, *len, *what);
                f.data = model.data;
                touched.entry(*id).or_default().push(start);
            }
            Op::Rename(from, to) => {
                if from == to || !files.get(*from).is_some_and(|f| f.live) {
                    continue;
                }
                let to_name = format!("r{op_no}");
                let to_name = match files.get(*to).filter(|f| f.live) {
                    Some(t) => t.name.clone(),
                    None => to_name,
                };
                fs.rename(&files[*from].name.clone(), &to_name).unwrap();
                for f in files.iter_mut() {
                    if f.live && f.name == to_name {
                        f.live = false;
                    }
                }
                let id = *from;
                files[id].name = to_name.clone();
                files[id].live = true;
                names.entry(to_name.clone()).or_default().insert(id);
                for (i, f) in files.iter().enumerate() {
                    if f.name == to_name || i == id {
                        touched.entry(i).or_default().push(start);
                    }
                }
                if *to != usize::MAX {
                    touched.entry(*to).or_default().push(start);
                }
            }
            Op::Remove(id) => {
                let Some(f) = files.get_mut(*id).filter(|f| f.live) else {
                    continue;
                };
                fs.remove(&f.name).unwrap();
                f.live = false;
                touched.entry(*id).or_default().push(start);
            }
            Op::SyncData(id) | Op::SyncAll(id) | Op::SyncBesideCheckpoint(id) => {
                let Some(f) = files.get(*id).filter(|f| f.live) else {
                    continue;
                };
                let h = fs.open(&f.name).unwrap();
                match op {
                    Op::SyncAll(_) => h.sync_all().unwrap(),
                    Op::SyncBesideCheckpoint(_) => {
                        let (sync, step, inside) = sync_beside_checkpoint(fs, &h);
                        sync.unwrap();
                        step.unwrap();
                        beside += usize::from(inside);
                    }
                    _ => h.sync_data().unwrap(),
                }
                syncs.push(Synced {
                    id: *id,
                    name: f.name.clone(),
                    data: f.data.clone(),
                    done_at: position(),
                });
            }
        }
    }
    Oracle {
        syncs,
        touched,
        names,
        files,
        refused,
        homed,
        beside,
    }
}

/// Records in the model that `data` was written at `off`.
fn model_write(f: &mut ModelFile, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if data.is_empty() {
        return;
    }
    if f.data.len() < end {
        f.data.resize(end, 0);
    }
    f.data[off as usize..end].copy_from_slice(data);
    for (i, b) in data.iter().enumerate() {
        f.history.entry(off + i as u64).or_default().insert(*b);
    }
}

/// A 255-byte name for `slot`.
fn long_name(slot: usize, variant: usize) -> String {
    let mut s = format!("L{slot}-{variant}-");
    s.extend(std::iter::repeat_n(
        'n',
        pollfs_core::MAX_NAME_LEN - s.len(),
    ));
    s
}

/// Checks the crash state on `dev`: a crash after `at` recorded events
/// (`in_flight`: during event `at`, which was under way). `fresh` gives
/// another device holding the same state, for the keeps-working check.
pub fn check_state<D: BlockDevice + Clone>(
    oracle: &Oracle,
    at: usize,
    in_flight: bool,
    dev: &D,
    fresh: &dyn Fn() -> D,
    ctx: &str,
) {
    let state = read_state(dev, ctx);
    // Fully synced files untouched since their last completed sync.
    let mut last: BTreeMap<usize, &Synced> = BTreeMap::new();
    for s in oracle.syncs.iter().filter(|s| s.done_at <= at) {
        last.insert(s.id, s);
    }
    for (id, s) in last {
        let later = oracle.touched.get(&id).is_some_and(|t| {
            t.iter()
                .any(|&e| e >= s.done_at && (e < at || (in_flight && e == at)))
        });
        if later {
            continue;
        }
        let got = state
            .get(&s.name)
            .unwrap_or_else(|| panic!("{ctx}: synced file {} is missing", s.name));
        assert_eq!(
            got.len(),
            s.data.len(),
            "{ctx}: synced file {} has the wrong size",
            s.name
        );
        if *got != s.data {
            let i = got
                .iter()
                .zip(&s.data)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            panic!("{ctx}: synced file {} differs at byte {i}", s.name);
        }
    }
    // No byte from elsewhere.
    for (name, bytes) in &state {
        let ids = oracle
            .names
            .get(name)
            .unwrap_or_else(|| panic!("{ctx}: unknown file {name}"));
        for (off, b) in bytes.iter().enumerate() {
            if *b == 0 {
                continue;
            }
            let ok = ids.iter().any(|&id| {
                oracle.files[id]
                    .history
                    .get(&(off as u64))
                    .is_some_and(|h| h.contains(b))
            });
            assert!(
                ok,
                "{ctx}: file {name} byte {off} = {b:#04x} was never written there"
            );
        }
    }
    // fsck, and a second recovery.
    super::assert_fsck_clean(dev, &format!("{ctx}: fsck"));
    assert_eq!(
        read_state(dev, ctx),
        state,
        "{ctx}: a second recovery differs"
    );
    keeps_working(fresh, &state, ctx);
}

/// Mounts `dev` and reads every file (after the invariant check).
pub fn read_state<D: BlockDevice + Clone>(dev: &D, ctx: &str) -> BTreeMap<String, Vec<u8>> {
    let fs = mount_checked(dev.clone(), crash_config(), ctx);
    let mut out = BTreeMap::new();
    for name in fs.list() {
        let f = fs.open(&name).unwrap();
        let mut buf = vec![0u8; f.len() as usize];
        let n = f.read_at(&mut buf, 0).unwrap();
        assert_eq!(n, buf.len(), "{ctx}: short read of {name}");
        out.insert(name, buf);
    }
    out
}

/// The recovered filesystem keeps working: every file grown by a few pages
/// and an odd number of bytes reads zeros past its old size (a block past
/// the durable EOF may hold bytes written before the crash: they must
/// never come back); the largest file removed, a page of each other one
/// overwritten, everything synced, and a remount shows exactly that, with
/// fsck clean.
fn keeps_working<D: BlockDevice + Clone>(
    fresh: &dyn Fn() -> D,
    state: &BTreeMap<String, Vec<u8>>,
    ctx: &str,
) {
    let dev = fresh();
    let mut expect = state.clone();
    {
        let fs = Fs::mount(dev.clone(), crash_config()).unwrap();
        // The largest file goes first, so a full device has room for the
        // writes below once its blocks are free (which needs a commit the
        // engine starts by itself).
        let largest = expect
            .iter()
            .max_by_key(|(_, b)| b.len())
            .map(|(n, _)| n.clone());
        if let Some(name) = largest {
            fs.remove(&name).unwrap();
            expect.remove(&name);
        }
        for (i, (name, bytes)) in expect.iter_mut().enumerate() {
            let f = fs.open(name).unwrap();
            let old = bytes.len() as u64;
            // Grown by set_len, or by a direct write a page past the next
            // page boundary; either way what lies between reads as zeros.
            let grown = if i % 2 == 0 {
                let grown = old + 3 * 4096 + 123;
                f.set_len(grown).unwrap();
                grown
            } else {
                let at = old.div_ceil(4096) * 4096 + 4096;
                let page = pattern(0xD1EC7, at, 4096);
                assert_eq!(f.write_direct(&page, at).unwrap(), 4096, "{ctx}");
                at
            };
            let mut tail = vec![0xAAu8; (grown - old) as usize];
            assert_eq!(f.read_at(&mut tail, old).unwrap(), tail.len());
            if let Some(i) = tail.iter().position(|&b| b != 0) {
                panic!(
                    "{ctx}: {name} grown from {old} shows byte {:#04x} at {} (stale bytes past EOF)",
                    tail[i],
                    old + i as u64
                );
            }
            bytes.resize(grown as usize, 0);
            if i % 2 == 1 {
                bytes.extend_from_slice(&pattern(0xD1EC7, grown, 4096));
            }
            let at = old / 2;
            let page = pattern(0xAF7E5, at, 4096);
            f.write_all_at(&page, at).unwrap();
            bytes[at as usize..at as usize + 4096].copy_from_slice(&page);
        }
        fs.unmount().unwrap();
    }
    super::assert_fsck_clean(&dev, &format!("{ctx}: fsck after more work"));
    assert_eq!(
        read_state(&dev, ctx),
        expect,
        "{ctx}: after growing, overwriting, removing and remounting"
    );
}

/// A random workload of `len` operations on three files.
pub fn generated(seed: u64, len: usize) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = vec![Op::Create(0), Op::Create(1), Op::Create(2)];
    for _ in 0..len {
        let id = rng.below(3) as usize;
        let off = rng.below(MAX_FILE);
        ops.push(match rng.below(100) {
            0..=29 => Op::Write(id, off, (rng.below(12_000) + 1) as usize),
            30..=34 => Op::WriteDirect(id, off / 4096, 1 + rng.below(4)),
            35..=44 => Op::SetLen(id, rng.below(MAX_FILE)),
            45..=49 => Op::Punch(id, off, rng.below(20_000) + 1),
            50..=52 => {
                let modes = [
                    Allocate::Reserve { keep_size: false },
                    Allocate::Reserve { keep_size: true },
                    Allocate::ZeroRange { keep_size: false },
                    Allocate::ZeroRange { keep_size: true },
                ];
                let what = modes[rng.below(4) as usize];
                Op::Allocate(id, off, rng.below(20_000) + 1, what)
            }
            53..=57 => Op::Rename(id, rng.below(3) as usize),
            58..=61 => Op::Remove(id),
            62..=67 => Op::Create(id),
            68..=81 => Op::SyncData(id),
            82..=87 => Op::WriteHome,
            _ => Op::SyncAll(id),
        });
    }
    ops
}

/// Small syncs of two files, enough to pass the log's low-water mark for
/// data again and again, with write-home steps between them: crash states
/// with a background write-home in flight (its writes torn, lost or
/// landed), and with its home records staged or durable. Each step is
/// followed by a sync of the other file, whose commit carries the home
/// records of pages of a file untouched since its last sync (whose bytes
/// the oracle checks exactly), also on a device without FUA, where that
/// commit's log write and flush are two events.
pub fn write_home() -> Vec<Op> {
    let mut ops = Vec::new();
    for f in 0..2 {
        ops.extend([Op::Create(f), Op::Write(f, 0, 12 * 4096), Op::SyncAll(f)]);
    }
    for round in 0..8u64 {
        for i in 0..3 {
            // Pages 0..12, each once in every four rounds.
            let page = (round * 3 + i) * 5 % 12;
            ops.push(Op::Write(0, page * 4096 + 100 * round, 300));
            ops.push(Op::SyncData(0));
        }
        ops.push(Op::WriteHome);
        ops.push(Op::Write(1, (round % 12) * 4096 + 7, 200));
        ops.push(Op::SyncData(1));
    }
    ops
}

/// Small syncs of two files with commits leaving checkpoints to
/// background steps, every third sync made beside a background step
/// ([`Op::SyncBesideCheckpoint`]): crash states with a checkpoint's view
/// taken and a log write landed after it, before, during and after the
/// checkpoint's chain and superblock writes. The log of the crash tests'
/// device is half full every few dozen syncs.
pub fn checkpoint_beside() -> Vec<Op> {
    let mut ops = vec![Op::BackgroundSteps];
    for f in 0..2 {
        ops.extend([Op::Create(f), Op::Write(f, 0, 8 * 4096), Op::SyncAll(f)]);
    }
    for round in 0..96u64 {
        let f = (round % 2) as usize;
        ops.push(Op::Write(f, (round * 5 % 8) * 4096 + round, 500));
        ops.push(if round % 3 == 2 {
            Op::SyncBesideCheckpoint(f)
        } else {
            Op::SyncData(f)
        });
    }
    ops
}

/// Polls a background step on another session and a sync of `h` in turn
/// on this thread, the step first, until both end: when a checkpoint is
/// due the step takes its view of the log and yields, and the sync's log
/// write lands before the step writes its checkpoint. Returns both
/// results, and whether the sync ended while the step, pending, had a
/// checkpoint still to write, which it then wrote. Pages due home are
/// written first, so the step's write-home part has nothing to wait for
/// (it waits for commits to carry its home records), and on the crash
/// tests' device every command completes when submitted: the step pends
/// only at the checkpoint's yield.
fn sync_beside_checkpoint<D: BlockDevice>(
    fs: &Fs<D>,
    h: &pollfs_core::File<D>,
) -> (pollfs_core::Result<()>, pollfs_core::Result<usize>, bool) {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    let step_session = fs.session().unwrap();
    while step_session.write_home_step().unwrap() > 0 {}
    let mut sync = pin!(h.sync_data_async());
    let mut step = pin!(step_session.background_step_async());
    let mut cx = Context::from_waker(Waker::noop());
    let (mut synced, mut stepped) = (None, None);
    let before = fs.stats().checkpoints;
    let (mut inside, mut step_began) = (false, false);
    for _ in 0..1_000_000 {
        if stepped.is_none() {
            step_began = true;
            if let Poll::Ready(r) = step.as_mut().poll(&mut cx) {
                stepped = Some(r);
            }
        }
        if synced.is_none() {
            if let Poll::Ready(r) = sync.as_mut().poll(&mut cx) {
                synced = Some(r);
                inside = step_began && stepped.is_none() && fs.stats().checkpoints == before;
            }
        }
        if synced.is_some() && stepped.is_some() {
            break;
        }
    }
    match (synced, stepped) {
        (Some(a), Some(b)) => (a, b, inside && fs.stats().checkpoints > before),
        _ => panic!("a sync beside a background step never ended"),
    }
}

/// A logged page written home by FUA to a block whose trim the device
/// may still hold in its volatile cache (seed 87 of the generated
/// workloads, reduced): a file's blocks are freed and trimmed after the
/// commit that drops them, with no flush after; another file gets them,
/// logs its pages with a small sync, and a write-home step writes them
/// home; the commit of a third file's sync retires their data. A crash
/// that lets the unflushed trims land after the FUA writes loses the
/// synced pages, unless the step flushes before writing.
pub fn home_over_trim() -> Vec<Op> {
    vec![
        Op::Create(0),
        Op::Write(0, 0, 4 * 4096),
        Op::SyncAll(0),
        Op::Create(1),
        Op::Create(2),
        Op::SyncAll(2),
        Op::SetLen(0, 0),
        // Its commit releases the blocks: trims, not flushed.
        Op::SyncAll(0),
        Op::Write(1, 0, 4 * 4096),
        Op::SyncAll(1),
        Op::WriteHome,
        Op::Write(2, 0, 100),
        Op::SyncData(2),
    ]
}

/// Generated workloads per run: `POLLFS_CRASH_WORKLOADS`, or 200 with the
/// `soak` feature, or 12.
pub fn workloads() -> u64 {
    std::env::var("POLLFS_CRASH_WORKLOADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(if cfg!(feature = "soak") { 200 } else { 12 })
}

/// A workload that runs the device out of space: a file filled to the
/// end, files with 255-byte names created until the device refuses them,
/// a fragmented file (many extents), removes that free space again, and
/// syncs of one file and of everything along the way.
pub fn until_full(seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = vec![Op::Create(0), Op::Write(0, 0, 20_000), Op::SyncAll(0)];
    ops.push(Op::Create(1));
    ops.push(Op::Fragment(1, rng.below(4), 40 + rng.below(60)));
    ops.push(Op::SyncData(1));
    ops.push(Op::Create(2));
    ops.push(Op::Fill(2));
    if rng.chance(50) {
        ops.push(Op::SyncData(2));
    }
    for v in 0..20 + rng.below(40) as usize {
        ops.push(Op::CreateLong(3 + v % 6, v));
        if rng.chance(20) {
            ops.push(Op::SyncFs);
        }
    }
    ops.push(Op::SyncFs);
    ops.push(Op::Remove(2));
    ops.push(Op::Write(1, rng.below(MAX_FILE), 9000));
    ops.push(Op::SyncFs);
    ops.push(Op::Create(2));
    ops.push(Op::Write(2, 0, 30_000));
    ops.push(Op::SyncAll(2));
    ops
}
