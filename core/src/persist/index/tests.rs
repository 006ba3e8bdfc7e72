//! The index against a `BTreeMap` model, on a simulated device that
//! keeps what a crash would leave.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;

use super::page::{self, Stamp, HEADER};
use super::*;
use crate::persist::format::crc32c;
use crate::rng::SplitMix64;
use crate::units::PAGE_SIZE;

const UUID: u64 = 0x5eed;

/// Blocks of a simulated device, and which are free.
#[derive(Clone, Default)]
struct Disk {
    blocks: BTreeMap<u64, Vec<u8>>,
    free: Vec<u64>,
    next: u64,
}

impl Disk {
    fn alloc(&mut self, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                self.free.pop().unwrap_or_else(|| {
                    self.next += 1;
                    self.next
                })
            })
            .collect()
    }

    fn read(&self, block: u64) -> Vec<u8> {
        self.blocks
            .get(&block)
            .cloned()
            .unwrap_or_else(|| vec![0; PAGE_SIZE])
    }
}

/// Runs `op` on `ix`, reading the pages it misses from `disk`.
fn run<T>(
    ix: &mut Index,
    disk: &Disk,
    mut op: impl FnMut(&mut Index) -> Result<T, IndexError>,
) -> T {
    loop {
        match op(ix) {
            Err(IndexError::Miss { block, generation }) => ix
                .load(block, generation, &disk.read(block))
                .expect("a page the tree wrote reads back"),
            Err(e) => panic!("index error {e:?}"),
            Ok(v) => return v,
        }
    }
}

/// Commits `ix` to `disk` as `generation`, writing every page and then
/// freeing what it replaced; the new root.
fn commit(ix: &mut Index, disk: &mut Disk, generation: u64) -> (Root, usize) {
    let blocks = disk.alloc(ix.dirty_pages());
    let c = ix.commit(generation, &blocks).expect("commit");
    let n = c.writes.len();
    for (b, p) in c.writes {
        disk.blocks.insert(b, p);
    }
    disk.free.extend(c.freed);
    (c.root, n)
}

fn scan(ix: &mut Index, disk: &Disk) -> Vec<(Key, Vec<u8>)> {
    let mut out = Vec::new();
    let mut from = Key::MIN;
    loop {
        let found = run(ix, disk, |ix| {
            Ok(ix.next(&from)?.map(|(k, v)| (k, v.to_vec())))
        });
        let Some((k, v)) = found else { break };
        out.push((k, v));
        match k.successor() {
            Some(n) => from = n,
            None => break,
        }
    }
    out
}

type Entries = Vec<(Key, Vec<u8>)>;

fn verified(disk: &Disk, root: Root) -> Result<(TreeFacts, Entries), VerifyError<()>> {
    let mut seen = Vec::new();
    let facts = verify(
        UUID,
        root,
        &mut |b| Ok::<_, ()>(disk.read(b)),
        &mut |k, v| seen.push((k, v.to_vec())),
    )?;
    Ok((facts, seen))
}

fn value(rng: &mut SplitMix64, big: bool) -> Vec<u8> {
    let n = if big {
        rng.below(MAX_VALUE as u64 + 1)
    } else {
        rng.below(40)
    };
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

fn key(rng: &mut SplitMix64, spread: u64) -> Key {
    Key::new(1 + rng.below(spread), rng.below(3) as u8, rng.below(4))
}

/// Random inserts and removals, with large and small values, commits,
/// a cache a few pages big and reopening from the root: the tree always
/// holds what the model holds, and every committed root verifies.
#[test]
fn the_index_holds_what_a_map_holds() {
    for seed in 0..12u64 {
        let mut rng = SplitMix64::new(seed);
        let mut disk = Disk::default();
        let mut ix = Index::new(UUID, 6);
        let mut model: BTreeMap<Key, Vec<u8>> = BTreeMap::new();
        let mut generation = 0;
        let spread = [50, 400, 3000][seed as usize % 3];
        let big = seed % 2 == 0;
        for step in 0..3000 {
            let k = key(&mut rng, spread);
            if rng.chance(60) {
                let v = value(&mut rng, big);
                let old = run(&mut ix, &disk, |ix| ix.insert(k, &v));
                assert_eq!(old, model.insert(k, v), "seed {seed} step {step}");
            } else {
                let old = run(&mut ix, &disk, |ix| ix.remove(&k));
                assert_eq!(old, model.remove(&k), "seed {seed} step {step}");
            }
            let got = run(&mut ix, &disk, |ix| Ok(ix.get(&k)?.map(<[u8]>::to_vec)));
            assert_eq!(got.as_ref(), model.get(&k));
            ix.trim();
            if step % 97 == 96 {
                generation += 1;
                let (root, _) = commit(&mut ix, &mut disk, generation);
                let (facts, seen) = verified(&disk, root).expect("a committed tree verifies");
                assert_eq!(facts.entries as usize, model.len());
                assert!(seen.iter().map(|(k, v)| (k, v)).eq(model.iter()));
                if rng.chance(30) {
                    ix = Index::open(UUID, root, 6);
                }
            }
        }
        let all = scan(&mut ix, &disk);
        assert!(
            all.iter().map(|(k, v)| (k, v)).eq(model.iter()),
            "seed {seed}"
        );
        // Every key removed leaves one empty leaf.
        for k in model.keys() {
            run(&mut ix, &disk, |ix| ix.remove(k));
        }
        generation += 1;
        let (root, _) = commit(&mut ix, &mut disk, generation);
        assert_eq!(root.level, 0);
        let (facts, _) = verified(&disk, root).expect("the empty tree verifies");
        assert_eq!((facts.entries, facts.pages), (0, 1));
        // Every block but the root's is free again.
        assert_eq!(disk.free.len() as u64, disk.next - 1, "seed {seed}");
    }
}

/// What a checkpoint writes grows with what changed, not with what the
/// tree holds: one changed key costs one page per level, at 2,000 keys
/// and at 200,000 alike.
#[test]
fn a_commit_writes_the_changed_path_only() {
    let mut depths = Vec::new();
    for n in [2_000u64, 200_000] {
        let mut disk = Disk::default();
        let mut ix = Index::new(UUID, 64);
        for i in 0..n {
            run(&mut ix, &disk, |ix| ix.insert(Key::new(i, 1, 0), &[7; 100]));
        }
        let (_, first) = commit(&mut ix, &mut disk, 1);
        assert!(first as u64 > n / 40, "the first commit writes every page");
        ix.trim();
        for (g, i) in [(2, 0), (3, n / 2), (4, n - 1)] {
            run(&mut ix, &disk, |ix| ix.insert(Key::new(i, 1, 0), &[8; 100]));
            let (root, written) = commit(&mut ix, &mut disk, g);
            assert_eq!(written, usize::from(root.level) + 1, "{n} keys, key {i}");
        }
        // A thousand changed keys in a row share their leaves.
        for i in 0..1000 {
            run(&mut ix, &disk, |ix| ix.insert(Key::new(i, 1, 0), &[9; 100]));
        }
        let (root, written) = commit(&mut ix, &mut disk, 5);
        assert!(
            written <= 1000 * 119 / 4056 + 2 * usize::from(root.level) + 2,
            "{written}"
        );
        // Cold, with a cache of 64 pages: a lookup reads one page per
        // level, and the cache stays within its budget.
        let mut cold = Index::open(UUID, root, 64);
        let before = cold.stats().loads;
        run(&mut cold, &disk, |ix| {
            Ok(ix.get(&Key::new(n / 3, 1, 0))?.is_some())
        });
        assert_eq!(cold.stats().loads - before, u64::from(root.level) + 1);
        for i in (0..n).step_by(97) {
            assert!(run(&mut cold, &disk, |ix| Ok(ix
                .get(&Key::new(i, 1, 0))?
                .is_some())));
            cold.trim();
            assert!(cold.cached_pages() <= 64);
        }
        depths.push(root.level);
    }
    assert!(
        depths[1] > depths[0],
        "the larger tree is deeper: {depths:?}"
    );
}

/// Writes `c` to `disk` up to a crash after `k` of its page writes; the
/// superblock (the root) goes last, after a flush, so it is never durable
/// before every page is.
fn crash_after(disk: &Disk, writes: &[(u64, Vec<u8>)], k: usize) -> Disk {
    let mut d = disk.clone();
    for (b, p) in &writes[..k] {
        d.blocks.insert(*b, p.clone());
    }
    d
}

/// A crash at any point of a commit leaves the old root whole, and after
/// the superblock the new one whole; a page written after the superblock
/// (a child after its parent's commit point) is caught as a page of the
/// wrong generation or none.
#[test]
fn a_crash_during_a_commit_leaves_one_whole_tree() {
    for seed in 0..8u64 {
        let mut rng = SplitMix64::new(100 + seed);
        let mut disk = Disk::default();
        let mut ix = Index::new(UUID, 1 << 20);
        let mut model = BTreeMap::new();
        let mut old_root: Option<(Root, BTreeMap<Key, Vec<u8>>)> = None;
        for generation in 1..=6u64 {
            for _ in 0..400 {
                let k = key(&mut rng, 600);
                if rng.chance(70) {
                    let v = value(&mut rng, seed % 2 == 0);
                    run(&mut ix, &disk, |ix| ix.insert(k, &v));
                    model.insert(k, v);
                } else {
                    run(&mut ix, &disk, |ix| ix.remove(&k));
                    model.remove(&k);
                }
            }
            let blocks = disk.alloc(ix.dirty_pages());
            let c = ix.commit(generation, &blocks).expect("commit");
            if let Some((root, ref old_model)) = old_root {
                for k in 0..=c.writes.len() {
                    let d = crash_after(&disk, &c.writes, k);
                    let (_, seen) = verified(&d, root).expect("the old tree survives");
                    assert!(seen.iter().map(|(k, v)| (k, v)).eq(old_model.iter()));
                }
                // The planted bug: the first page (a leaf) deferred past
                // the superblock. A crash between them must be caught.
                let d = crash_after(&disk, &c.writes[1..], c.writes.len() - 1);
                let err = verified(&d, c.root).expect_err("a missing child is found");
                assert!(
                    matches!(
                        err,
                        VerifyError::Damage {
                            damage: PageDamage::Stale { .. } | PageDamage::Magic,
                            ..
                        }
                    ),
                    "{err:?}"
                );
            }
            for (b, p) in &c.writes {
                disk.blocks.insert(*b, p.clone());
            }
            let (_, seen) = verified(&disk, c.root).expect("the new tree is whole");
            assert!(seen.iter().map(|(k, v)| (k, v)).eq(model.iter()));
            // The replaced pages are freed only now, and the next commit
            // reuses them: their old contents must never pass for new.
            disk.free.extend(c.freed);
            old_root = Some((c.root, model.clone()));
        }
    }
}

fn sample_page() -> (Vec<u8>, Stamp) {
    let node = Node::Leaf {
        keys: vec![Key::new(1, 1, 0), Key::new(2, 1, 5)],
        vals: vec![vec![1, 2, 3], vec![]],
    };
    let stamp = Stamp {
        uuid: UUID,
        generation: 9,
        block: 77,
    };
    (page::encode(&node, stamp), stamp)
}

fn reseal(p: &mut [u8]) {
    p[12..16].fill(0);
    let crc = crc32c(&[p]);
    p[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// Each kind of damage to a page is named, checksum or not.
#[test]
fn damaged_pages_are_named() {
    let (good, stamp) = sample_page();
    assert!(page::decode(&good, stamp).is_ok());
    let mut p = good.clone();
    p[100] ^= 1;
    assert_eq!(page::decode(&p, stamp), Err(PageDamage::Checksum));
    assert_eq!(
        page::decode(&good, Stamp { block: 78, ..stamp }),
        Err(PageDamage::Misplaced { written_for: 77 })
    );
    assert_eq!(
        page::decode(
            &good,
            Stamp {
                generation: 10,
                ..stamp
            }
        ),
        Err(PageDamage::Stale { found: 9 })
    );
    assert_eq!(
        page::decode(&good, Stamp { uuid: 1, ..stamp }),
        Err(PageDamage::Uuid)
    );
    assert_eq!(
        page::decode(&vec![0; PAGE_SIZE], stamp),
        Err(PageDamage::Magic)
    );
    assert_eq!(page::decode(&good[..100], stamp), Err(PageDamage::Length));
    // Resealed, so only the field itself is wrong.
    let mut p = good.clone();
    p[HEADER..HEADER + 8].copy_from_slice(&9u64.to_le_bytes());
    reseal(&mut p);
    assert_eq!(page::decode(&p, stamp), Err(PageDamage::Order));
    let mut p = good.clone();
    p[HEADER + 17..HEADER + 19].copy_from_slice(&2000u16.to_le_bytes());
    reseal(&mut p);
    assert_eq!(page::decode(&p, stamp), Err(PageDamage::ValueTooLarge));
    let mut p = good.clone();
    p[4] = 16;
    reseal(&mut p);
    assert_eq!(page::decode(&p, stamp), Err(PageDamage::Header));
}

/// Any bytes, resealed so the checksum passes, decode to a node or an
/// error; a node decoded is well formed.
#[test]
fn crafted_pages_never_panic() {
    let (good, stamp) = sample_page();
    let mut rng = SplitMix64::new(7);
    for _ in 0..20_000 {
        let mut p = good.clone();
        for _ in 0..1 + rng.below(6) {
            let at = (HEADER as u64 / 2 + rng.below(120)) as usize;
            p[at] = rng.next_u64() as u8;
        }
        reseal(&mut p);
        if let Ok(n) = page::decode(&p, stamp) {
            if let Node::Leaf { keys, vals } = &n {
                assert!(keys.windows(2).all(|w| w[0] < w[1]));
                assert!(vals.iter().all(|v| v.len() <= MAX_VALUE));
            }
            assert_eq!(
                page::encode(&n, stamp),
                p,
                "a decoded page encodes to itself"
            );
        }
    }
}

/// A tree whose pages were damaged on the device gives errors from
/// every operation, never a panic or a wrong answer taken for right.
#[test]
fn operations_on_a_damaged_tree_fail_cleanly() {
    let mut disk = Disk::default();
    let mut ix = Index::new(UUID, 8);
    for i in 0..5000u64 {
        run(&mut ix, &disk, |ix| ix.insert(Key::new(i, 1, 0), &[1; 64]));
    }
    let (root, _) = commit(&mut ix, &mut disk, 1);
    let mut rng = SplitMix64::new(3);
    let blocks: Vec<u64> = disk.blocks.keys().copied().collect();
    for _ in 0..200 {
        let mut d = disk.clone();
        let b = blocks[rng.below(blocks.len() as u64) as usize];
        let p = d.blocks.get_mut(&b).expect("a page");
        let at = rng.below(PAGE_SIZE as u64) as usize;
        p[at] ^= 1 << rng.below(8);
        // Resealed, a flip in a value is a different good page; without,
        // the checksum must stop every read of it.
        let resealed = rng.chance(50);
        if resealed {
            reseal(p);
        }
        let mut ix = Index::open(UUID, root, 8);
        for i in (0..5000u64).step_by(7) {
            let k = Key::new(i, 1, 0);
            let r = loop {
                match ix.get(&k) {
                    Err(IndexError::Miss { block, generation }) => {
                        if let Err(e) = ix.load(block, generation, &d.read(block)) {
                            break Err(e);
                        }
                    }
                    other => break other.map(|v| v.map(<[u8]>::to_vec)),
                }
            };
            if let (false, Ok(Some(v))) = (resealed, r) {
                assert_eq!(v, [1; 64]);
            }
        }
        let _ = verified(&d, root);
    }
}

/// A durable view made by random namespace work: directories, files with
/// extents, symbolic links with long targets, hard links, renames,
/// removals, extended attributes large and small, and live data.
fn random_view(seed: u64) -> crate::persist::shadow::Shadow {
    use crate::persist::record::{InodeMeta, Kind, Record};
    use crate::space::Extent;
    use crate::units::{BlockNo, ROOT_INO};
    use alloc::format;
    use alloc::string::String;
    let mut rng = SplitMix64::new(seed);
    let mut s = crate::persist::shadow::Shadow::empty(0, 0, 1);
    let mut dirs = vec![ROOT_INO];
    let mut named: Vec<(u64, String, u64)> = Vec::new();
    let mut files = Vec::new();
    let mut next_block = 1000u64;
    for ino in 2..300u64 {
        let kind = match rng.below(10) {
            0..=2 => Kind::Dir,
            3 => Kind::Symlink,
            4 => Kind::CharDev,
            _ => Kind::File,
        };
        let mut meta = InodeMeta::new(kind, 0o640, 1000, 100, rng.next_u64() >> 2);
        match kind {
            Kind::Symlink => {
                let n = 1 + rng.below(4095) as usize;
                meta.target = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
                meta.size = n as u64;
            }
            Kind::CharDev => meta.rdev = 0x0501,
            Kind::File => {
                let mut fb = 0;
                for _ in 0..rng.below(40) {
                    fb += rng.below(5);
                    let len = 1 + rng.below(8);
                    meta.extents.push(Extent {
                        file_block: fb,
                        dev: BlockNo(next_block),
                        len,
                    });
                    next_block += len + rng.below(3);
                    fb += len;
                }
                meta.size = fb * 4096;
            }
            _ => {}
        }
        s.apply(&Record::Inode { ino, meta }).expect("inode");
        let parent = dirs[rng.below(dirs.len() as u64) as usize];
        // Long names, so buckets and leaves fill.
        let name = format!("{}-{ino}", "n".repeat(rng.below(200) as usize));
        s.apply(&Record::Link {
            parent,
            name: name.clone(),
            ino,
        })
        .expect("link");
        named.push((parent, name, ino));
        match kind {
            Kind::Dir => dirs.push(ino),
            Kind::File => files.push(ino),
            _ => {}
        }
        if rng.chance(20) {
            let v: Vec<u8> = (0..rng.below(9000)).map(|i| i as u8).collect();
            s.apply(&Record::Xattr {
                ino,
                name: format!("user.attr{}", rng.below(3)),
                value: Some(v),
            })
            .expect("xattr");
        }
    }
    // A second name for some files, some names removed.
    for &f in files.iter().step_by(7) {
        s.apply(&Record::Link {
            parent: ROOT_INO,
            name: format!("hard-{f}"),
            ino: f,
        })
        .expect("hard link");
    }
    for (parent, name, ino) in named.iter().step_by(11) {
        if files.contains(ino) {
            s.apply(&Record::Unlink {
                parent: *parent,
                name: name.clone(),
            })
            .expect("unlink");
        }
    }
    // Live data on mapped pages.
    for &f in files.iter().step_by(3) {
        let m = s.inodes[&f].clone();
        if let Some(x) = m.extents.first() {
            s.apply(&Record::Data {
                ino: f,
                page: x.file_block,
                block: x.dev.0,
                bytes: vec![f as u8; PAGE_SIZE],
            })
            .expect("data");
        }
    }
    s
}

/// A durable view written to the index as items and read back is the same
/// view: every inode, extent, target, entry, attribute and page of live
/// data.
#[test]
fn a_view_survives_the_index() {
    use super::image::{items_of, records_of};
    for seed in 0..6 {
        let view = random_view(seed);
        assert!(view.data_pages() > 10 && view.xattrs.len() > 10);
        assert!(view
            .inodes
            .values()
            .any(|m| m.target.len() > 3 * super::items::CHUNK));
        assert!(view
            .xattrs
            .values()
            .any(|v| v.len() > 5 * super::items::CHUNK));
        let key = (seed, !seed);
        let mut disk = Disk::default();
        let mut copy_blocks = disk.alloc(view.data_pages());
        let items = items_of(&view, key, &mut || copy_blocks.pop()).expect("items");
        let mut ix = Index::new(UUID, 1 << 20);
        for (k, v) in &items.items {
            run(&mut ix, &disk, |ix| ix.insert(*k, v));
        }
        for (b, bytes) in &items.copies {
            disk.blocks.insert(*b, bytes.to_vec());
        }
        let (root, _) = commit(&mut ix, &mut disk, 1);
        let (facts, seen) = verified(&disk, root).expect("the tree verifies");
        assert_eq!(facts.entries as usize, items.items.len());
        let records = records_of(seen.iter().map(|(k, v)| (*k, v.as_slice())), &mut |b| {
            disk.blocks.get(&b).cloned()
        })
        .expect("records");
        let mut back = crate::persist::shadow::Shadow::default();
        let end = records
            .iter()
            .position(|r| *r == crate::persist::record::Record::ImageEnd)
            .expect("an end");
        for r in &records[..end] {
            back.load(r).expect("load");
        }
        for r in &records[end + 1..] {
            back.apply(r).expect("apply");
        }
        assert_eq!(back.inodes, view.inodes, "seed {seed}");
        assert_eq!(back.xattrs, view.xattrs, "seed {seed}");
        assert_eq!(back.tree, view.tree, "seed {seed}");
        assert!(back.data().eq(view.data()), "seed {seed}");
        assert!(
            back == view,
            "seed {seed}: the whole view, its image size included"
        );
    }
}
