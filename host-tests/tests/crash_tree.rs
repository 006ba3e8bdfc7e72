//! Crash consistency of the namespace: workloads of mkdir, nested creates,
//! hard and symbolic links, FIFOs, sockets and device nodes (their device
//! numbers kept), unlink (of open files too), rmdir, and renames
//! within and across directories (over an existing file, of a directory,
//! exchanges), extended attributes set (with XATTR_CREATE and
//! XATTR_REPLACE), replaced and removed on every kind of inode, mixed
//! with writes and with syncs of files, of directories and of everything;
//! every engine answer is checked against the reference model's (which
//! operations POSIX refuses). At every write boundary of the recorded run,
//! every crash image is recovered and checked:
//!
//! - fsck is clean: the tree is connected and acyclic, `..` is right, link
//!   counts match the entries, no inode is orphaned unrecorded;
//! - the tree and every inode's extended attributes are exactly the
//!   model's after some prefix of the namespace and attribute operations,
//!   at least every one made before a sync that finished before the
//!   crash: a synced rename is there whole (the old name or the new, never
//!   both, never neither), and nothing half-made;
//! - every synced, untouched file has exactly its synced bytes, and no file
//!   has a byte it was never given;
//! - growing every file shows zeros past its old end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use pollfs_core::error::XattrError;
use pollfs_core::{Error, Fs, InodeId, Kind, NewInode, RenameFlags, XattrMode};
use pollfs_host_tests::crash::files::crash_config;
use pollfs_host_tests::crash::{
    assert_fsck_clean, crash_images, device_from, mount_checked, Event, RecordingDevice,
};
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::tree::{MErr, Snapshot, TreeModel, ROOT};

const DEV_BYTES: u64 = 8 << 20;
const FRAMES: u32 = 96;
const NAMES: [&str; 4] = ["a", "b", "c", "dd"];
/// Attribute names: the engine keeps an ACL's bytes as it keeps any.
const XNAMES: [&str; 3] = ["user.a", "trusted.b", "system.posix_acl_access"];

/// Every inode's extended attributes, by model inode.
type Xattrs = BTreeMap<u64, BTreeMap<String, Vec<u8>>>;

#[derive(Clone, Copy, Debug)]
enum Op {
    Mkdir(usize, usize),
    Create(usize, usize),
    Symlink(usize, usize),
    Mknod(usize, usize),
    Link(usize, usize, usize),
    Unlink(usize, usize),
    Rmdir(usize, usize),
    Rename(usize, usize, usize, usize, u8),
    /// Sets attribute `XNAMES[.1]` of an inode, `.2` of 0 (any), 1
    /// (create) or 2 (replace), with a value of `.3` bytes.
    SetXattr(usize, usize, u8, usize),
    RemoveXattr(usize, usize),
    Write(usize, u64, usize),
    Open(usize),
    Close,
    SyncFile(usize),
    SyncDir(usize),
    SyncFs,
}

/// One file's history, by model inode.
#[derive(Clone, Debug, Default)]
struct Data {
    bytes: Vec<u8>,
    seen: BTreeMap<u64, std::collections::BTreeSet<u8>>,
    /// Event counts when writes to it began.
    writes: Vec<usize>,
}

/// A sync that finished: namespace operations it covers, and the files
/// whose bytes it made durable.
struct Synced {
    done_at: usize,
    ns_ops: usize,
    files: Vec<(u64, Vec<u8>, usize)>,
}

struct Run {
    events: Vec<Event>,
    base: Vec<u8>,
    /// The model's snapshot after each namespace or attribute operation
    /// (index 0: none), when the operation ran (event count), and every
    /// inode's attributes then.
    states: Vec<(Snapshot, BTreeMap<String, u64>, usize, Xattrs)>,
    syncs: Vec<Synced>,
    data: BTreeMap<u64, Data>,
}

fn pick(list: &[u64], i: usize) -> Option<u64> {
    (!list.is_empty()).then(|| list[i % list.len()])
}

fn run_workload(ops: &[Op]) -> Run {
    let ram = pollfs_core::dev::ram::RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    drop(Fs::format(ram.clone(), crash_config(), 0x7EE).unwrap());
    let mut base = vec![0u8; DEV_BYTES as usize];
    ram.read_raw(0, &mut base);
    let dev = RecordingDevice::new(ram);
    let fs = Fs::mount(dev.clone(), crash_config()).unwrap();
    let who = NewInode::new(0o644, 0, 0);
    let mut m = TreeModel::default();
    let mut ino: BTreeMap<u64, InodeId> = BTreeMap::from([(ROOT, InodeId::ROOT)]);
    let mut data: BTreeMap<u64, Data> = BTreeMap::new();
    let mut open: Vec<(u64, pollfs_core::File<RecordingDevice>)> = Vec::new();
    let mut xattrs: Xattrs = BTreeMap::new();
    let mut states = vec![(m.snapshot(), m.paths(), 0, xattrs.clone())];
    let mut syncs = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let dirs = m.dirs();
        let files = m.files();
        let start = dev.len();
        let look = ino.clone();
        let e = |id: u64| look[&id];
        // Namespace operations: the model predicts, the engine must agree.
        let ns: Option<(Result<(), MErr>, pollfs_core::Result<()>)> = match *op {
            Op::Mkdir(d, k) => {
                let d = pick(&dirs, d).unwrap();
                let mut next = m.clone();
                let want = next.mkdir(d, NAMES[k]);
                let got = fs.mkdir_in(e(d), NAMES[k], who);
                if let (Ok(id), Ok(i)) = (want, &got) {
                    ino.insert(id, *i);
                    m = next;
                }
                Some((want.map(|_| ()), got.map(|_| ())))
            }
            Op::Create(d, k) | Op::Symlink(d, k) => {
                let d = pick(&dirs, d).unwrap();
                let mut next = m.clone();
                let (want, got) = if matches!(op, Op::Create(..)) {
                    (
                        next.create(d, NAMES[k]),
                        fs.create_in(e(d), NAMES[k], who).map(|f| f.ino()),
                    )
                } else {
                    let target = format!("../t{n}");
                    (
                        next.symlink(d, NAMES[k], &target),
                        fs.symlink_in(e(d), NAMES[k], &target, who),
                    )
                };
                if let (Ok(id), Ok(i)) = (want, &got) {
                    ino.insert(id, *i);
                    if matches!(op, Op::Create(..)) {
                        data.insert(id, Data::default());
                    }
                    m = next;
                }
                Some((want.map(|_| ()), got.map(|_| ())))
            }
            Op::Mknod(d, k) => {
                let d = pick(&dirs, d).unwrap();
                let kind = [Kind::Fifo, Kind::Socket, Kind::CharDev, Kind::BlockDev][n % 4];
                let rdev = (n as u64) << 8 | 1;
                let mut next = m.clone();
                let want = next.mknod(d, NAMES[k], kind, rdev);
                let got = fs.mknod_in(e(d), NAMES[k], kind, rdev, who);
                if let (Ok(id), Ok(i)) = (want, &got) {
                    ino.insert(id, *i);
                    m = next;
                }
                Some((want.map(|_| ()), got.map(|_| ())))
            }
            Op::Link(f, d, k) => match pick(&files, f) {
                None => None,
                Some(f) => {
                    let d = pick(&dirs, d).unwrap();
                    let mut next = m.clone();
                    let want = next.link(f, d, NAMES[k]);
                    let got = fs.link_in(e(f), e(d), NAMES[k]);
                    if want.is_ok() {
                        m = next;
                    }
                    Some((want, got))
                }
            },
            Op::Unlink(d, k) | Op::Rmdir(d, k) => {
                let d = pick(&dirs, d).unwrap();
                let mut next = m.clone();
                let (want, got) = if matches!(op, Op::Unlink(..)) {
                    (
                        next.unlink(d, NAMES[k]).map(|_| ()),
                        fs.unlink_in(e(d), NAMES[k]),
                    )
                } else {
                    (next.rmdir(d, NAMES[k]), fs.rmdir_in(e(d), NAMES[k]))
                };
                if want.is_ok() {
                    m = next;
                }
                Some((want, got))
            }
            Op::Rename(fd, fk, td, tk, flags) => {
                let (fd, td) = (pick(&dirs, fd).unwrap(), pick(&dirs, td).unwrap());
                let flags = RenameFlags {
                    noreplace: flags == 1,
                    exchange: flags == 2,
                };
                let mut next = m.clone();
                let want = next
                    .rename(
                        fd,
                        NAMES[fk],
                        td,
                        NAMES[tk],
                        flags.noreplace,
                        flags.exchange,
                    )
                    .map(|_| ());
                let got = fs.rename_in(e(fd), NAMES[fk], e(td), NAMES[tk], flags);
                if want.is_ok() {
                    m = next;
                }
                Some((want, got))
            }
            _ => None,
        };
        if let Some((want, got)) = ns {
            match (&want, &got) {
                (Ok(()), Ok(())) => states.push((m.snapshot(), m.paths(), start, xattrs.clone())),
                (Err(w), Err(g)) => {
                    assert!(w.matches(g), "op {n} {op:?}: model {w:?}, engine {g:?}")
                }
                _ => panic!("op {n} {op:?}: model {want:?}, engine {got:?}"),
            }
            continue;
        }
        match *op {
            Op::SetXattr(i, k, ..) | Op::RemoveXattr(i, k) => {
                let linked: std::collections::BTreeSet<u64> = m.paths().values().copied().collect();
                let Some(id) = pick(&linked.into_iter().collect::<Vec<_>>(), i) else {
                    continue;
                };
                let name = XNAMES[k];
                let has = xattrs.get(&id).is_some_and(|a| a.contains_key(name));
                let (want, got) = match *op {
                    Op::SetXattr(_, _, how, len) => {
                        let mode = [XattrMode::Any, XattrMode::Create, XattrMode::Replace]
                            [how as usize % 3];
                        let value = pattern(n as u64 + 7, 0, len);
                        let want = match (mode, has) {
                            (XattrMode::Create, true) => Err(XattrError::Exists),
                            (XattrMode::Replace, false) => Err(XattrError::NotFound),
                            _ => Ok(()),
                        };
                        let got = fs.set_xattr(e(id), name, &value, mode);
                        if want.is_ok() {
                            xattrs
                                .entry(id)
                                .or_default()
                                .insert(name.to_string(), value);
                        }
                        (want, got)
                    }
                    _ => {
                        let want = if has {
                            Ok(())
                        } else {
                            Err(XattrError::NotFound)
                        };
                        let got = fs.remove_xattr(e(id), name);
                        if has {
                            xattrs.entry(id).or_default().remove(name);
                        }
                        (want, got)
                    }
                };
                match (want, got) {
                    (Ok(()), Ok(())) => {
                        states.push((m.snapshot(), m.paths(), start, xattrs.clone()))
                    }
                    (Err(w), Err(Error::Xattr(g))) if w == g => {}
                    (w, g) => panic!("op {n} {op:?}: model {w:?}, engine {g:?}"),
                }
            }
            Op::Write(f, off, len) => {
                let Some(f) = pick(&files, f) else { continue };
                let h = fs.open_ino(e(f)).unwrap();
                let bytes = pattern(n as u64 + 1, off, len);
                h.write_all_at(&bytes, off).unwrap();
                let d = data.get_mut(&f).unwrap();
                let end = off as usize + len;
                if d.bytes.len() < end {
                    d.bytes.resize(end, 0);
                }
                d.bytes[off as usize..end].copy_from_slice(&bytes);
                for (i, b) in bytes.iter().enumerate() {
                    d.seen.entry(off + i as u64).or_default().insert(*b);
                }
                d.writes.push(start);
            }
            Op::Open(f) => {
                if let Some(f) = pick(&files, f) {
                    open.push((f, fs.open_ino(e(f)).unwrap()));
                }
            }
            Op::Close => {
                open.pop();
            }
            Op::SyncFile(f) => {
                let Some(f) = pick(&files, f) else { continue };
                fs.open_ino(e(f)).unwrap().sync_all().unwrap();
                syncs.push(Synced {
                    done_at: dev.len(),
                    ns_ops: states.len() - 1,
                    files: vec![(f, data[&f].bytes.clone(), start)],
                });
            }
            Op::SyncDir(d) => {
                let d = pick(&dirs, d).unwrap();
                fs.sync_dir(e(d)).unwrap();
                syncs.push(Synced {
                    done_at: dev.len(),
                    ns_ops: states.len() - 1,
                    files: Vec::new(),
                });
            }
            Op::SyncFs => {
                fs.sync().unwrap();
                let linked = m.files();
                syncs.push(Synced {
                    done_at: dev.len(),
                    ns_ops: states.len() - 1,
                    files: linked
                        .iter()
                        .map(|f| (*f, data[f].bytes.clone(), start))
                        .collect(),
                });
            }
            // A link with no file to link: nothing to do.
            _ => {}
        }
    }
    Run {
        events: dev.events(),
        base,
        states,
        syncs,
        data,
    }
}

fn check_run(run: &Run, seed: u64, label: &str) -> usize {
    let mut rng = Rng::new(seed ^ 0x7EE5);
    let mut checked = 0;
    let boundaries: Vec<usize> = (0..=run.events.len()).collect();
    for at in boundaries {
        for (desc, image) in crash_images(&run.base, &run.events, at, &mut rng) {
            let ctx = format!("{label}: {desc}");
            let dev = device_from(&image, FRAMES);
            assert_fsck_clean(&dev, &format!("{ctx}: fsck"));
            let fs = mount_checked(dev.clone(), crash_config(), &ctx);
            let (snap, inos) = Snapshot::of(&fs).unwrap();
            // The namespace is the model's after some prefix of operations:
            // at least those every finished sync covered, at most those
            // begun before the crash.
            let low = run
                .syncs
                .iter()
                .filter(|s| s.done_at <= at)
                .map(|s| s.ns_ops)
                .max()
                .unwrap_or(0);
            let high = run.states.iter().rposition(|s| s.2 <= at).unwrap_or(0);
            // Two files exchanged look alike to the snapshot: try every
            // prefix that matches, and take the first whose bytes check.
            let candidates: Vec<usize> = (low..=high.max(low))
                .rev()
                .filter(|&k| run.states[k].0 == snap)
                .collect();
            assert!(
                !candidates.is_empty(),
                "{ctx}: the tree is no prefix of the operations in {low}..={high}\n got {:?}\n at {low}: {:?}",
                snap.0,
                run.states[low].0 .0
            );
            let verdicts: Vec<Result<(), String>> = candidates
                .iter()
                .map(|&k| {
                    check_xattrs(run, &fs, &inos, k)?;
                    check_bytes(run, &fs, &inos, k, at)
                })
                .collect();
            if !verdicts.iter().any(Result::is_ok) {
                panic!("{ctx}: {}", verdicts[0].clone().unwrap_err());
            }
            grow_every_file(&fs, &inos, &ctx);
            checked += 1;
        }
    }
    checked
}

/// Every linked inode's extended attributes are those of prefix state `k`.
fn check_xattrs<D: pollfs_core::dev::BlockDevice>(
    run: &Run,
    fs: &Fs<D>,
    inos: &BTreeMap<String, InodeId>,
    k: usize,
) -> Result<(), String> {
    let (_, paths, _, xattrs) = &run.states[k];
    for (path, id) in paths {
        let ino = inos[path];
        let mut got = BTreeMap::new();
        for name in fs
            .list_xattr(ino)
            .map_err(|e| format!("list {path}: {e}"))?
        {
            let v = fs
                .get_xattr(ino, &name)
                .map_err(|e| format!("get {path} {name}: {e}"))?;
            got.insert(name, v);
        }
        let want = xattrs.get(id).cloned().unwrap_or_default();
        if got != want {
            return Err(format!(
                "{path}: attributes {:?}, the model's after operation {k} {:?}",
                got.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>()
            ));
        }
    }
    Ok(())
}

/// The bytes of every file in prefix state `k` after a crash at `at`:
/// every byte one that file was given; files synced and not written since
/// exactly their synced bytes.
fn check_bytes<D: pollfs_core::dev::BlockDevice>(
    run: &Run,
    fs: &Fs<D>,
    inos: &BTreeMap<String, InodeId>,
    k: usize,
    at: usize,
) -> Result<(), String> {
    // The last finished sync of each file, with when it began.
    let mut synced: BTreeMap<u64, (&Vec<u8>, usize)> = BTreeMap::new();
    for s in run.syncs.iter().filter(|s| s.done_at <= at) {
        for (f, bytes, start) in &s.files {
            synced.insert(*f, (bytes, *start));
        }
    }
    let mut done = std::collections::BTreeSet::new();
    for (path, id) in &run.states[k].1 {
        let Some(d) = run.data.get(id) else { continue };
        if !done.insert(*id) {
            continue;
        }
        let f = fs
            .open_ino(inos[path])
            .map_err(|e| format!("open {path}: {e}"))?;
        let mut got = vec![0u8; f.len() as usize];
        f.read_exact_at(&mut got, 0)
            .map_err(|e| format!("read {path}: {e}"))?;
        if let Some((want, start)) = synced.get(id) {
            let written_since = d.writes.iter().any(|&w| w >= *start && w <= at);
            if !written_since && got != **want {
                let i = got.iter().zip(want.iter()).position(|(a, b)| a != b);
                return Err(format!(
                    "synced file {path} differs: {} bytes, {} synced, first difference at {i:?}",
                    got.len(),
                    want.len()
                ));
            }
        }
        for (off, b) in got.iter().enumerate() {
            if *b != 0 && !d.seen.get(&(off as u64)).is_some_and(|s| s.contains(b)) {
                return Err(format!(
                    "{path} byte {off} = {b:#04x} was never written there"
                ));
            }
        }
    }
    Ok(())
}

/// Every file grown past its end reads zeros there.
fn grow_every_file<D: pollfs_core::dev::BlockDevice>(
    fs: &Fs<D>,
    inos: &BTreeMap<String, InodeId>,
    ctx: &str,
) {
    let mut done = std::collections::BTreeSet::new();
    for (path, &ino) in inos {
        let Ok(f) = fs.open_ino(ino) else { continue };
        if !done.insert(ino) {
            continue;
        }
        let old = f.len();
        f.set_len(old + 5000).unwrap();
        let mut tail = vec![1u8; 5000];
        f.read_exact_at(&mut tail, old).unwrap();
        assert!(
            tail.iter().all(|&b| b == 0),
            "{ctx}: {path} grown shows old bytes"
        );
    }
}

fn generated(seed: u64, len: usize) -> Vec<Op> {
    let mut r = Rng::new(seed);
    let mut b = |n: u64| r.below(n) as usize;
    let mut ops = vec![Op::Mkdir(0, 0), Op::Create(1, 1)];
    for _ in 0..len {
        let op = match b(100) {
            0..=11 => Op::Mkdir(b(8), b(4)),
            12..=25 => Op::Create(b(8), b(4)),
            26..=27 => Op::Symlink(b(8), b(4)),
            28..=29 => Op::Mknod(b(8), b(4)),
            30..=35 => Op::Link(b(8), b(8), b(4)),
            36..=43 => Op::Unlink(b(8), b(4)),
            44..=48 => Op::Rmdir(b(8), b(4)),
            49..=63 => Op::Rename(b(8), b(4), b(8), b(4), [0, 0, 1, 2][b(4)] as u8),
            64..=70 => Op::Write(b(8), b(20_000) as u64, 1 + b(9000)),
            71..=74 => Op::SetXattr(b(16), b(3), b(3) as u8, b(600)),
            75 => Op::RemoveXattr(b(16), b(3)),
            76..=79 => Op::Open(b(8)),
            80..=81 => Op::Close,
            82..=89 => Op::SyncFile(b(8)),
            90..=94 => Op::SyncDir(b(8)),
            _ => Op::SyncFs,
        };
        ops.push(op);
    }
    ops
}

fn workloads() -> u64 {
    std::env::var("POLLFS_CRASH_WORKLOADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .map_or(16, |n: u64| n / 4)
}

#[test]
fn namespace_workloads_survive_every_crash_point() {
    let mut total = 0;
    for seed in 0..workloads() {
        let run = run_workload(&generated(seed, 60));
        total += check_run(&run, seed, &format!("tree seed {seed}"));
    }
    println!("namespace crash states checked: {total}");
    assert!(total > 200, "only {total} crash states");
}

#[test]
fn known_namespace_cases_survive_every_crash_point() {
    use Op::*;
    let cases: Vec<(&str, Vec<Op>)> = vec![
        (
            "rename of a file over a synced one, then a sync of the directory",
            vec![
                Create(0, 0),
                Write(0, 0, 5000),
                SyncFs,
                Create(0, 1),
                Write(1, 0, 3000),
                SyncFile(1),
                Rename(0, 1, 0, 0, 0),
                SyncDir(0),
            ],
        ),
        (
            "a directory moved under another, then a file synced after its rename",
            vec![
                Mkdir(0, 0),
                Mkdir(0, 1),
                Create(1, 2),
                Write(0, 0, 4000),
                SyncFs,
                Rename(0, 0, 2, 3, 0),
                Rename(1, 2, 1, 3, 0),
                SyncFile(0),
            ],
        ),
        (
            "unlink of an open file, then a sync",
            vec![
                Create(0, 0),
                Write(0, 0, 9000),
                SyncFs,
                Open(0),
                Unlink(0, 0),
                SyncFs,
                Write(0, 100, 100),
                Close,
                SyncFs,
            ],
        ),
        (
            "attributes set, replaced and removed around syncs and a rename",
            vec![
                Create(0, 0),
                Mkdir(0, 1),
                SetXattr(1, 0, 1, 40),
                SetXattr(0, 2, 0, 28),
                SyncFs,
                SetXattr(1, 0, 2, 3000),
                RemoveXattr(0, 2),
                Rename(0, 0, 0, 2, 0),
                SetXattr(1, 1, 0, 0),
                SyncFile(0),
                RemoveXattr(1, 0),
                SyncDir(0),
            ],
        ),
        (
            "hard links and an exchange",
            vec![
                Mkdir(0, 0),
                Create(0, 1),
                Link(0, 1, 2),
                SyncFs,
                Create(1, 3),
                Rename(0, 1, 1, 3, 2),
                SyncDir(1),
                Unlink(0, 1),
                SyncFs,
            ],
        ),
    ];
    let mut total = 0;
    for (i, (name, ops)) in cases.iter().enumerate() {
        let run = run_workload(ops);
        total += check_run(&run, i as u64, name);
    }
    println!("namespace crash states checked: {total}");
}
