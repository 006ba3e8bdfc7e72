//! The namespace against its reference model: random sequences of mkdir,
//! create, link, symlink, unlink, rmdir and rename (with NOREPLACE and
//! EXCHANGE) must succeed or fail as the model says, leave the same tree,
//! and survive a remount; listings stay whole while entries come and go.
//! The namespace state machine alone (no device) follows the model too,
//! and replaying the records it applied rebuilds it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::error::NamespaceError;
use pollfs_core::persist::record::{InodeMeta, Record};
use pollfs_core::persist::tree::Tree;
use pollfs_core::units::ROOT_INO;
use pollfs_core::{Error, Fs, InodeId, Kind, NewInode, RenameFlags};
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::config;
use pollfs_host_tests::tree::{MErr, Snapshot, TreeModel, ROOT};

const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

fn run(seed: u64, steps: usize) {
    let ram = RamDevice::new(16 << 20, 4096, 96).unwrap();
    let fs = Fs::format(ram.clone(), config(64), seed).unwrap();
    let who = NewInode::new(0o640, 7, 8);
    let mut m = TreeModel::default();
    let mut ino = std::collections::BTreeMap::from([(ROOT, InodeId::ROOT)]);
    let mut r = Rng::new(seed);
    for step in 0..steps {
        let dirs = m.dirs();
        let d = dirs[r.below(dirs.len() as u64) as usize];
        let name = NAMES[r.below(5) as usize];
        let mut next = m.clone();
        let (want, got): (
            Result<Option<u64>, MErr>,
            pollfs_core::Result<Option<InodeId>>,
        ) = match r.below(8) {
            0 => (
                next.mkdir(d, name).map(Some),
                fs.mkdir_in(ino[&d], name, who).map(Some),
            ),
            1 | 2 => (
                next.create(d, name).map(Some),
                fs.create_in(ino[&d], name, who).map(|f| Some(f.ino())),
            ),
            3 => (
                next.symlink(d, name, "t").map(Some),
                fs.symlink_in(ino[&d], name, "t", who).map(Some),
            ),
            4 => {
                let files = m.files();
                if files.is_empty() {
                    continue;
                }
                let f = files[r.below(files.len() as u64) as usize];
                (
                    next.link(f, d, name).map(|()| None),
                    fs.link_in(ino[&f], ino[&d], name).map(|()| None),
                )
            }
            5 => (
                next.unlink(d, name).map(|_| None),
                fs.unlink_in(ino[&d], name).map(|()| None),
            ),
            6 => (
                next.rmdir(d, name).map(|()| None),
                fs.rmdir_in(ino[&d], name).map(|()| None),
            ),
            _ => {
                let to = dirs[r.below(dirs.len() as u64) as usize];
                let tname = NAMES[r.below(5) as usize];
                let flags = match r.below(4) {
                    0 => RenameFlags {
                        noreplace: true,
                        ..RenameFlags::default()
                    },
                    1 => RenameFlags {
                        exchange: true,
                        ..RenameFlags::default()
                    },
                    _ => RenameFlags::default(),
                };
                (
                    next.rename(d, name, to, tname, flags.noreplace, flags.exchange)
                        .map(|_| None),
                    fs.rename_in(ino[&d], name, ino[&to], tname, flags)
                        .map(|()| None),
                )
            }
        };
        match (want, got) {
            (Ok(new), Ok(i)) => {
                if let (Some(id), Some(i)) = (new, i) {
                    ino.insert(id, i);
                }
                m = next;
            }
            (Err(w), Err(g)) => assert!(w.matches(&g), "seed {seed} step {step}: {w:?} vs {g}"),
            (w, g) => panic!("seed {seed} step {step}: model {w:?}, engine {g:?}"),
        }
        if step % 25 == 0 {
            fs.check_invariants().unwrap();
            assert_eq!(
                Snapshot::of(&fs).unwrap().0,
                m.snapshot(),
                "seed {seed} step {step}"
            );
        }
    }
    let want = m.snapshot();
    assert_eq!(Snapshot::of(&fs).unwrap().0, want);
    // Attributes came through: owner and permission bits.
    if let Some((_, &id)) = m.paths().iter().next() {
        let a = fs.attr(ino[&id]).unwrap();
        assert_eq!((a.uid, a.gid), (7, 8));
    }
    fs.unmount().unwrap();
    let fs = Fs::mount(ram, config(64)).unwrap();
    fs.check_invariants().unwrap();
    assert_eq!(
        Snapshot::of(&fs).unwrap().0,
        want,
        "seed {seed}: after a remount"
    );
}

#[test]
fn namespace_follows_the_model() {
    for seed in 0..40 {
        run(seed, 300);
    }
}

/// A listing in small batches while entries are added and removed between
/// them: no entry twice, none missing that existed throughout.
#[test]
fn a_listing_stays_whole_while_entries_come_and_go() {
    let fs = pollfs_host_tests::setup::ram_fs(16 << 20, 64);
    let who = NewInode::new(0o644, 0, 0);
    let d = fs.mkdir("d").unwrap();
    for i in 0..40 {
        fs.create_in(d, &format!("keep{i}"), who).unwrap();
        fs.create_in(d, &format!("gone{i}"), who).unwrap();
    }
    let mut seen = BTreeSet::new();
    let mut after = 0;
    let mut round = 0;
    loop {
        let batch = fs.read_dir(d, after, 3).unwrap();
        let Some(last) = batch.last() else { break };
        after = last.cookie;
        for e in &batch {
            assert!(seen.insert(e.name.clone()), "{} listed twice", e.name);
        }
        // Between batches: remove one of the temporary entries, add one
        // (for a while: entries added keep the listing going).
        if round < 40 {
            let _ = fs.unlink_in(d, &format!("gone{round}"));
            fs.create_in(d, &format!("new{round}"), who).unwrap();
        }
        round += 1;
    }
    for i in 0..40 {
        assert!(seen.contains(&format!("keep{i}")), "keep{i} was skipped");
    }
    // Entries added during the listing come where their names' hashes put
    // them: listed once (checked above) if after the listing's place, else
    // not at all.
}

/// The tree as an engine would drive it: a request checked with `may`,
/// then its records applied and kept as the log; an inode left with no
/// link is freed at once (no handle holds it).
struct Driven {
    tree: Tree,
    log: Vec<Record>,
    next: u64,
}

impl Driven {
    fn apply(&mut self, r: Record) {
        let effects = self.tree.apply(&r).expect("a checked request applies");
        self.log.push(r);
        if let Some(ino) = effects.unlinked {
            let free = Record::Free { ino };
            self.tree.apply(&free).expect("an inode with no link frees");
            self.log.push(free);
        }
    }

    fn make(&mut self, dir: u64, name: &str, kind: Kind) -> Result<u64, NamespaceError> {
        self.tree.may_create(dir, name, kind)?;
        let ino = self.next;
        self.next += 1;
        let mut meta = InodeMeta::new(kind, 0o644, 0, 0, 0);
        if kind == Kind::Symlink {
            meta.target = "t".into();
            meta.size = 1;
        }
        self.apply(Record::Inode { ino, meta });
        self.apply(Record::Link {
            parent: dir,
            name: name.into(),
            ino,
        });
        Ok(ino)
    }
}

fn tree_run(seed: u64, steps: usize) {
    let mut t = Driven {
        tree: Tree::with_root(),
        log: Vec::new(),
        next: ROOT_INO + 1,
    };
    let mut m = TreeModel::default();
    let mut ino = std::collections::BTreeMap::from([(ROOT, ROOT_INO)]);
    let mut r = Rng::new(seed);
    for step in 0..steps {
        let dirs = m.dirs();
        let d = dirs[r.below(dirs.len() as u64) as usize];
        let name = NAMES[r.below(5) as usize];
        let mut next = m.clone();
        let (want, got): (
            Result<Option<u64>, MErr>,
            Result<Option<u64>, NamespaceError>,
        ) = match r.below(8) {
            0 => (
                next.mkdir(d, name).map(Some),
                t.make(ino[&d], name, Kind::Dir).map(Some),
            ),
            1 | 2 => (
                next.create(d, name).map(Some),
                t.make(ino[&d], name, Kind::File).map(Some),
            ),
            3 if r.below(2) == 0 => (
                next.symlink(d, name, "t").map(Some),
                t.make(ino[&d], name, Kind::Symlink).map(Some),
            ),
            3 => {
                let kind =
                    [Kind::Fifo, Kind::Socket, Kind::CharDev, Kind::BlockDev][r.below(4) as usize];
                (
                    next.mknod(d, name, kind, 0).map(Some),
                    t.make(ino[&d], name, kind).map(Some),
                )
            }
            4 => {
                let files = m.files();
                if files.is_empty() {
                    continue;
                }
                let f = files[r.below(files.len() as u64) as usize];
                let got = t.tree.may_link(ino[&f], ino[&d], name).map(|()| {
                    t.apply(Record::Link {
                        parent: ino[&d],
                        name: name.into(),
                        ino: ino[&f],
                    });
                    None
                });
                (next.link(f, d, name).map(|()| None), got)
            }
            5 | 6 => {
                let dir = r.below(2) == 0;
                let want = if dir {
                    next.rmdir(d, name).map(|()| None)
                } else {
                    next.unlink(d, name).map(|_| None)
                };
                let got = t.tree.may_remove(ino[&d], name, dir).map(|()| {
                    t.apply(Record::Unlink {
                        parent: ino[&d],
                        name: name.into(),
                    });
                    None
                });
                (want, got)
            }
            _ => {
                let to = dirs[r.below(dirs.len() as u64) as usize];
                let tname = NAMES[r.below(5) as usize];
                let (noreplace, exchange) = match r.below(4) {
                    0 => (true, false),
                    1 => (false, true),
                    _ => (false, false),
                };
                let got = t
                    .tree
                    .may_rename(ino[&d], name, ino[&to], tname, noreplace, exchange)
                    .map(|changes| {
                        if changes {
                            t.apply(Record::Rename {
                                from: ino[&d],
                                from_name: name.into(),
                                to: ino[&to],
                                to_name: tname.into(),
                                exchange,
                            });
                        }
                        None
                    });
                (
                    next.rename(d, name, to, tname, noreplace, exchange)
                        .map(|_| None),
                    got,
                )
            }
        };
        match (want, got) {
            (Ok(new), Ok(i)) => {
                if let (Some(id), Some(i)) = (new, i) {
                    ino.insert(id, i);
                }
                m = next;
            }
            (Err(w), Err(g)) => assert!(
                w.matches(&Error::Namespace(g)),
                "seed {seed} step {step}: {w:?} vs {g:?}"
            ),
            (w, g) => panic!("seed {seed} step {step}: model {w:?}, tree {g:?}"),
        }
        assert_eq!(t.tree.problems(), [], "seed {seed} step {step}");
        let entries: BTreeSet<(u64, String, u64)> = m
            .entries
            .iter()
            .map(|((d, n), id)| (ino[d], n.clone(), ino[id]))
            .collect();
        let got: BTreeSet<(u64, String, u64)> = t
            .tree
            .entries()
            .map(|(d, n, i)| (d, n.to_string(), i))
            .collect();
        assert_eq!(got, entries, "seed {seed} step {step}");
    }
    // Replay of the records rebuilds the same tree.
    let mut replayed = Tree::with_root();
    for r in &t.log {
        replayed.apply(r).unwrap();
    }
    assert!(replayed == t.tree, "seed {seed}: replay differs");
}

#[test]
fn the_namespace_state_machine_alone_follows_the_model() {
    for seed in 0..200 {
        tree_run(seed, 300);
    }
}
