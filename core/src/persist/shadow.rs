//! Replay: the durable view a crash would leave, rebuilt from a checkpoint
//! image and the log records after it.
//!
//! A [`Shadow`] is the namespace [`Tree`] (the same state machine the
//! mounted filesystem changes) plus what the tree does not hold: each
//! inode's attributes and extents ([`InodeMeta`]) and the live data (pages
//! whose durable bytes are in a data record rather than in their block)
//! and every inode's extended attributes.
//! Replay feeds each record to [`Shadow::apply`], which hands namespace
//! changes to [`Tree::apply`] and copies the link counts and parents they
//! change into the inodes' records, so an image written from the shadow
//! carries them.
//!
//! The journal keeps one to write checkpoints from (so a checkpoint never
//! references data that is not durable); recovery, fsck and repair build
//! one from the device.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::format::{Enc, Layout};
use super::problems::{space_problems, xattr_problems, Problem};
use super::record::{
    encode_data, encode_inode, xattr_len, InodeMeta, Kind, Record, DATA_RECORD_LEN,
};
use super::tree::{Effects, Node, Tree};
use crate::error::{Damage, ReplayDamage};
use crate::space::Extent;
use crate::units::ROOT_INO;

/// The metadata a crash would leave: the checkpoint plus every durable
/// log record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shadow {
    /// Inode -> its state. Link counts and parents are copies of the
    /// tree's.
    pub inodes: BTreeMap<u64, InodeMeta>,
    /// The namespace.
    pub tree: Tree,
    /// Live data: (inode, page) -> (its block, its bytes), for pages whose
    /// durable bytes are in a data record rather than in their block. The
    /// bytes are shared, so a checkpoint's view takes them without a copy.
    data: BTreeMap<(u64, u64), LiveData>,
    /// Extended attributes: (inode, name) -> value.
    pub xattrs: BTreeMap<(u64, String), Vec<u8>>,
    /// Bytes of this state's inode, attribute and data records in a checkpoint image
    /// (the tree counts its entries').
    image_len: u64,
    /// Inodes whose items may differ from the index's since the last
    /// checkpoint's view ([`Shadow::take_dirty`]).
    dirty: Dirty,
}

/// The inodes a checkpoint must write again: bookkeeping of a
/// [`Shadow`], not part of the state it describes (two shadows with the
/// same state are equal whatever each has yet to write).
#[derive(Clone, Debug, Default)]
pub struct Dirty(BTreeSet<u64>);

impl PartialEq for Dirty {
    fn eq(&self, _: &Dirty) -> bool {
        true
    }
}
impl Eq for Dirty {}

/// A page of live data: its block and its bytes, shared.
pub type LiveData = (u64, Arc<[u8]>);

/// The device block `m` maps page `page` to, if any.
fn block_of(m: &InodeMeta, page: u64) -> Option<u64> {
    m.extents
        .iter()
        .find(|x| x.file_block <= page && page - x.file_block < x.len)
        .map(|x| x.dev.0 + (page - x.file_block))
}

impl Shadow {
    /// An empty filesystem: a root directory owned by `uid`/`gid`.
    pub fn empty(uid: u32, gid: u32, now: u64) -> Shadow {
        let mut root = InodeMeta::new(Kind::Dir, 0o755, uid, gid, now);
        root.nlink = 2;
        root.parent = ROOT_INO;
        let mut s = Shadow::default();
        s.put_inode(ROOT_INO, root);
        s.tree = Tree::with_root();
        s
    }

    /// Marks `ino`'s items for the next checkpoint.
    fn touch(&mut self, ino: u64) {
        self.dirty.0.insert(ino);
    }

    /// Marks every inode, so the next checkpoint writes the whole view
    /// (after repair changed it in ways no record describes).
    pub fn touch_all(&mut self) {
        let all: Vec<u64> = self.inodes.keys().copied().collect();
        self.dirty.0.extend(all);
    }

    /// The inodes whose items changed since the last call (or were marked
    /// again by a failed checkpoint, [`Shadow::retouch`]), in order.
    pub fn take_dirty(&mut self) -> BTreeSet<u64> {
        core::mem::take(&mut self.dirty.0)
    }

    /// Marks `inos` again: a checkpoint that took them did not land.
    pub fn retouch(&mut self, inos: impl IntoIterator<Item = u64>) {
        self.dirty.0.extend(inos);
    }

    fn put_inode(&mut self, ino: u64, meta: InodeMeta) {
        self.touch(ino);
        self.image_len += meta.record_len();
        if let Some(old) = self.inodes.insert(ino, meta) {
            self.image_len -= old.record_len();
        }
        self.prune_data(ino);
    }

    /// Drops live data of `ino` that its state no longer maps where the
    /// data says (truncated, punched or remapped since), or all of it if
    /// the inode is gone or not a file.
    fn prune_data(&mut self, ino: u64) {
        let pages: Vec<u64> = self
            .data
            .range((ino, 0)..=(ino, u64::MAX))
            .filter(|(&(_, page), &(block, _))| {
                self.inodes
                    .get(&ino)
                    .is_none_or(|m| block_of(m, page) != Some(block))
            })
            .map(|(&(_, page), _)| page)
            .collect();
        for page in pages {
            self.drop_data(ino, page);
        }
    }

    fn drop_data(&mut self, ino: u64, page: u64) {
        if self.data.remove(&(ino, page)).is_some() {
            self.touch(ino);
            self.image_len -= DATA_RECORD_LEN;
        }
    }

    /// Live data: `((ino, page), (block, bytes))` in inode and page order.
    pub fn data(&self) -> impl Iterator<Item = (&(u64, u64), &LiveData)> {
        self.data.iter()
    }

    /// Live data of `ino`: `(page, (block, bytes))` in page order.
    pub fn data_of(&self, ino: u64) -> impl Iterator<Item = (u64, &LiveData)> {
        self.data
            .range((ino, 0)..=(ino, u64::MAX))
            .map(|(&(_, page), d)| (page, d))
    }

    /// Pages of live data.
    pub fn data_pages(&self) -> usize {
        self.data.len()
    }

    /// Forgets all live data (once it is written to its blocks).
    pub fn clear_data(&mut self) {
        let inos: BTreeSet<u64> = self.data.keys().map(|&(ino, _)| ino).collect();
        self.dirty.0.extend(inos);
        self.image_len -= DATA_RECORD_LEN * self.data.len() as u64;
        self.data.clear();
    }

    /// Loads one record of a checkpoint image: taken as it is, with no
    /// link counting (the image's inode records carry their counts).
    pub fn load(&mut self, r: &Record) -> Result<(), Damage> {
        self.tree.load(r)?;
        match r {
            Record::Inode { ino, meta } => self.put_inode(*ino, meta.clone()),
            Record::Xattr { ino, name, value } => self.put_xattr(*ino, name, value.as_deref())?,
            _ => {}
        }
        Ok(())
    }

    /// Sets or removes one extended attribute of `ino`, which must exist.
    fn put_xattr(&mut self, ino: u64, name: &str, value: Option<&[u8]>) -> Result<(), Damage> {
        if !self.inodes.contains_key(&ino) {
            return Err(Damage::Replay(ReplayDamage::NoInode(ino)));
        }
        self.touch(ino);
        let key = (ino, String::from(name));
        let old = match value {
            Some(v) => {
                self.image_len += xattr_len(name, Some(v));
                self.xattrs.insert(key, v.to_vec())
            }
            None => self.xattrs.remove(&key),
        };
        if let Some(old) = old {
            self.image_len -= xattr_len(name, Some(&old));
        }
        Ok(())
    }

    /// Keeps the extended attributes of `ino` in name order while their
    /// total stays within [`INODE_TOTAL_MAX`](super::xattr::INODE_TOTAL_MAX),
    /// and drops the rest (for repair).
    pub fn trim_xattrs(&mut self, ino: u64) {
        let mut total = 0;
        let over: Vec<String> = self
            .xattrs_of(ino)
            .filter(|(n, v)| {
                total += super::xattr::cost(n, v);
                total > super::xattr::INODE_TOTAL_MAX
            })
            .map(|(n, _)| String::from(n))
            .collect();
        for name in over {
            // The inode exists: it has attributes.
            let _ = self.put_xattr(ino, &name, None);
        }
    }

    /// The extended attributes of `ino`: (name, value) in name order.
    pub fn xattrs_of(&self, ino: u64) -> impl Iterator<Item = (&str, &[u8])> {
        self.xattrs
            .range((ino, String::new())..)
            .take_while(move |((i, _), _)| *i == ino)
            .map(|((_, n), v)| (n.as_str(), v.as_slice()))
    }

    /// Applies one record, as the engine did when it made the change (see
    /// [`Tree::apply`]). A record that makes no sense against the state is
    /// an error: the image is corrupt.
    pub fn apply(&mut self, r: &Record) -> Result<(), Damage> {
        let effects = self.tree.apply(r)?;
        match r {
            Record::Inode { ino, meta } => self.put_inode(*ino, meta.clone()),
            Record::Free { ino } => self.reclaim(*ino),
            Record::Data {
                ino,
                page,
                block,
                bytes,
            } => {
                let m = self
                    .inodes
                    .get(ino)
                    .ok_or(Damage::Replay(ReplayDamage::NoInode(*ino)))?;
                if m.kind != Kind::File || block_of(m, *page) != Some(*block) {
                    return Err(Damage::Replay(ReplayDamage::DataUnmapped {
                        ino: *ino,
                        page: *page,
                        block: *block,
                    }));
                }
                if self
                    .data
                    .insert((*ino, *page), (*block, Arc::from(bytes.as_slice())))
                    .is_none()
                {
                    self.image_len += DATA_RECORD_LEN;
                }
                self.touch(*ino);
            }
            Record::Home { ino, page } => self.drop_data(*ino, *page),
            Record::Xattr { ino, name, value } => self.put_xattr(*ino, name, value.as_deref())?,
            // A directory's entries are its items.
            Record::Link { parent, .. } | Record::Unlink { parent, .. } => self.touch(*parent),
            Record::Rename { from, to, .. } => {
                self.touch(*from);
                self.touch(*to);
            }
            Record::ImageEnd => {}
        }
        self.follow(&effects);
        Ok(())
    }

    /// Copies the tree's link counts and parents into the inodes' records.
    fn follow(&mut self, effects: &Effects) {
        for &(ino, node) in &effects.changed {
            if let Some(m) = self.inodes.get_mut(&ino) {
                m.nlink = node.nlink;
                m.parent = node.parent;
                self.dirty.0.insert(ino);
            }
        }
    }

    /// Every problem with this state on `layout`, given the checkpoint
    /// chain's blocks: the space's ([`space_problems`]), the tree's
    /// ([`Tree::problems`]) and the extended attributes' totals.
    pub fn problems(&self, layout: &Layout, chain: &[(u64, u64)]) -> Vec<Problem> {
        let mut out = space_problems(&self.inodes, layout, chain);
        out.extend(self.tree.problems());
        out.extend(xattr_problems(self.xattrs.iter()));
        out
    }

    /// Inodes no entry names and no link keeps: unlinked while open when
    /// the filesystem stopped. Recovery reclaims them.
    pub fn orphans(&self) -> Vec<u64> {
        self.inodes
            .iter()
            .filter(|(&ino, m)| ino != ROOT_INO && m.nlink == 0)
            .map(|(&ino, _)| ino)
            .collect()
    }

    /// Drops an orphan (see [`Shadow::orphans`]).
    pub fn reclaim(&mut self, ino: u64) {
        self.touch(ino);
        self.tree.drop_node(ino);
        if let Some(old) = self.inodes.remove(&ino) {
            self.image_len -= old.record_len();
        }
        let names: Vec<String> = self.xattrs_of(ino).map(|(n, _)| String::from(n)).collect();
        for name in names {
            if let Some(old) = self.xattrs.remove(&(ino, name.clone())) {
                self.image_len -= xattr_len(&name, Some(&old));
            }
        }
        self.prune_data(ino);
    }

    /// Bytes of this state's checkpoint image ([`Shadow::image`] encoded).
    pub fn image_len(&self) -> u64 {
        self.image_len + self.tree.entry_bytes() + 1
    }

    /// This state as a checkpoint image, encoded: every inode, every
    /// extended attribute, every entry, the [`Record::ImageEnd`] marker,
    /// and the live data.
    pub fn image(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(self.image_len() as usize));
        for (&ino, m) in &self.inodes {
            encode_inode(&mut e, ino, m);
        }
        for ((ino, name), value) in &self.xattrs {
            Record::Xattr {
                ino: *ino,
                name: name.clone(),
                value: Some(value.clone()),
            }
            .encode(&mut e);
        }
        for (parent, name, ino) in self.tree.entries() {
            Record::Link {
                parent,
                name: String::from(name),
                ino,
            }
            .encode(&mut e);
        }
        Record::ImageEnd.encode(&mut e);
        for (&(ino, page), (block, bytes)) in &self.data {
            encode_data(&mut e, ino, page, *block, bytes);
        }
        debug_assert_eq!(e.0.len() as u64, self.image_len());
        e.0
    }

    /// Drops the extents of `ino` that `keep` refuses (for repair).
    pub fn retain_extents(&mut self, ino: u64, mut keep: impl FnMut(&Extent) -> bool) {
        self.dirty.0.insert(ino);
        if let Some(m) = self.inodes.get_mut(&ino) {
            self.image_len -= m.record_len();
            m.extents.retain(|x| keep(x));
            self.image_len += m.record_len();
        }
        self.prune_data(ino);
    }

    /// Removes the entry `(parent, name)` as it is, counting nothing (for
    /// repair).
    pub fn drop_entry(&mut self, parent: u64, name: &str) {
        self.touch(parent);
        self.tree.take_entry(parent, name);
    }

    /// Replaces whatever inode 1 is with an empty root directory (for
    /// repair of an image that has no root).
    pub fn make_root(&mut self) {
        let mut root = InodeMeta::new(Kind::Dir, 0o755, 0, 0, 0);
        root.nlink = 2;
        root.parent = ROOT_INO;
        self.put_inode(ROOT_INO, root);
        self.tree.put_node(ROOT_INO, Node::root());
    }

    /// Sets directory `ino`'s `..` (for repair).
    pub fn set_parent(&mut self, ino: u64, parent: u64) {
        self.touch(ino);
        if let Some(m) = self.inodes.get_mut(&ino) {
            m.parent = parent;
        }
        self.tree.set_parent(ino, parent);
    }

    /// Sets `ino`'s link count (for repair).
    pub fn set_nlink(&mut self, ino: u64, nlink: u32) {
        self.touch(ino);
        if let Some(m) = self.inodes.get_mut(&ino) {
            m.nlink = nlink;
        }
        self.tree.set_nlink(ino, nlink);
    }

    /// Links `ino` into the root as `#<ino>` (fsck's lost+found), making a
    /// directory's `..` the root; counts nothing (for repair).
    pub fn attach_to_root(&mut self, ino: u64) {
        let name = alloc::format!("#{ino}");
        if self.inodes.get(&ino).is_some_and(|m| m.kind == Kind::Dir) {
            self.set_parent(ino, ROOT_INO);
        }
        self.touch(ROOT_INO);
        self.tree.put_entry(ROOT_INO, &name, ino);
    }

    /// Every file with its path, for reports: `ino -> "/a/b"` (the first
    /// path found for a file with several links).
    pub fn paths(&self) -> BTreeMap<u64, String> {
        let mut out = BTreeMap::new();
        out.insert(ROOT_INO, String::from("/"));
        let mut todo = alloc::vec![(ROOT_INO, String::new())];
        let mut seen = BTreeSet::new();
        while let Some((dir, path)) = todo.pop() {
            if !seen.insert(dir) {
                continue;
            }
            for (name, ino) in self.tree.entries_of(dir) {
                let p = alloc::format!("{path}/{name}");
                out.entry(ino).or_insert_with(|| p.clone());
                if self.tree.is_dir(ino) {
                    todo.push((ino, p));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::problems::Owner;
    use crate::persist::record::tests::{ext, inode, link, rename};

    /// A tree: /d (dir 2), /d/f (file 3, also linked as /g), /e (dir 4).
    fn tree() -> Shadow {
        let mut s = Shadow::empty(0, 0, 0);
        for r in [
            Record::Inode {
                ino: 2,
                meta: inode(Kind::Dir),
            },
            link(ROOT_INO, "d", 2),
            Record::Inode {
                ino: 3,
                meta: inode(Kind::File),
            },
            link(2, "f", 3),
            link(ROOT_INO, "g", 3),
            Record::Inode {
                ino: 4,
                meta: inode(Kind::Dir),
            },
            link(ROOT_INO, "e", 4),
        ] {
            s.apply(&r).unwrap();
        }
        s
    }

    #[test]
    fn links_count_and_directories_know_their_parent() {
        let mut s = tree();
        let layout = Layout::for_blocks(100_000).unwrap();
        assert_eq!(s.problems(&layout, &[]), []);
        assert_eq!(s.inodes[&ROOT_INO].nlink, 4, "., two subdirectories' ..");
        assert_eq!(s.inodes[&2].nlink, 2);
        assert_eq!(s.inodes[&3].nlink, 2);
        // A directory moves: its `..` and both parents' counts follow.
        s.apply(&rename(ROOT_INO, "e", 2, "e", false)).unwrap();
        assert_eq!(s.inodes[&4].parent, 2);
        assert_eq!((s.inodes[&ROOT_INO].nlink, s.inodes[&2].nlink), (3, 3));
        // Exchange swaps entries; renaming over a file unlinks it.
        s.apply(&rename(2, "f", 2, "e", true)).unwrap();
        assert_eq!(s.tree.get(2, "f"), Some(4));
        s.apply(&Record::Unlink {
            parent: ROOT_INO,
            name: "g".into(),
        })
        .unwrap();
        assert_eq!(s.inodes[&3].nlink, 1);
        assert_eq!(s.problems(&layout, &[]), []);
        // The image loads back to the same state.
        let mut again = Shadow::default();
        let mut in_image = true;
        for r in Record::decode_all(&s.image()).unwrap() {
            if r == Record::ImageEnd {
                in_image = false;
            } else {
                assert!(in_image);
                again.load(&r).unwrap();
            }
        }
        assert_eq!(again, s);
        assert_eq!(s.image().len() as u64, s.image_len());
    }

    #[test]
    fn records_that_make_no_sense_are_refused() {
        use crate::error::ReplayDamage as R;
        let mut s = tree();
        let refused = |s: &mut Shadow, r: &Record| match s.apply(r) {
            Err(Damage::Replay(why)) => why,
            other => panic!("{r:?}: {other:?}"),
        };
        let over = refused(&mut s, &link(ROOT_INO, "d", 3));
        assert_eq!(over, R::LinkInto { parent: 1, ino: 3 });
        let into_file = refused(&mut s, &link(3, "x", 2));
        assert_eq!(into_file, R::LinkInto { parent: 3, ino: 2 });
        let unlink = Record::Unlink {
            parent: ROOT_INO,
            name: "nope".into(),
        };
        assert_eq!(refused(&mut s, &unlink), R::NoEntry { dir: ROOT_INO });
        let no_entry = rename(ROOT_INO, "nope", ROOT_INO, "x", false);
        assert_eq!(refused(&mut s, &no_entry), R::NoEntry { dir: ROOT_INO });
        let free = Record::Free { ino: 3 };
        assert_eq!(refused(&mut s, &free), R::FreeLinked { ino: 3, nlink: 2 });
        assert_eq!(refused(&mut s, &Record::ImageEnd), R::ImageEnd);
        let data = Record::Data {
            ino: 3,
            page: 0,
            block: 5000,
            bytes: alloc::vec![0; 4096],
        };
        let unmapped = refused(&mut s, &data);
        assert_eq!(
            unmapped,
            R::DataUnmapped {
                ino: 3,
                page: 0,
                block: 5000
            }
        );
        assert_eq!(
            alloc::format!("{}", Damage::Replay(unmapped)),
            "record does not apply: data for page 0 of inode 3, which does not map it to block 5000"
        );
    }

    #[test]
    fn tree_problems_are_found() {
        let layout = Layout::for_blocks(100_000).unwrap();
        // A cycle: /d/e/d's parent chain never reaches the root.
        let mut s = tree();
        s.drop_entry(ROOT_INO, "d");
        s.tree.put_entry(4, "d", 2);
        s.set_parent(2, 4);
        s.tree.put_entry(2, "e2", 4);
        let p = s.problems(&layout, &[]);
        assert!(
            p.iter()
                .any(|p| matches!(p, Problem::BadDirLinks { ino: 4 })),
            "{p:?}"
        );
        // A dangling entry and a wrong count.
        let mut s = tree();
        s.tree.put_entry(ROOT_INO, "ghost", 99);
        s.set_nlink(3, 7);
        let p = s.problems(&layout, &[]);
        assert!(p.contains(&Problem::DanglingEntry {
            parent: ROOT_INO,
            name: "ghost".into()
        }));
        assert!(p.contains(&Problem::LinkCount {
            ino: 3,
            recorded: 7,
            counted: 2
        }));
        // An unreachable directory.
        let mut s = tree();
        s.drop_entry(ROOT_INO, "d");
        s.tree.put_entry(4, "d", 2);
        let p = s.problems(&layout, &[]);
        assert!(
            p.iter()
                .any(|p| matches!(p, Problem::BadDirLinks { ino: 2 })),
            "{p:?}"
        );
        // An orphan (no link, count 0) is no problem: recovery reclaims it.
        let mut s = tree();
        s.apply(&Record::Inode {
            ino: 9,
            meta: inode(Kind::File),
        })
        .unwrap();
        assert_eq!(s.problems(&layout, &[]), []);
        assert_eq!(s.orphans(), [9]);
    }

    #[test]
    fn blocks_owned_twice_are_reported() {
        let mut s = tree();
        let mut a = inode(Kind::File);
        a.size = 8 * 4096;
        a.extents = alloc::vec![ext(0, 5000, 8)];
        s.apply(&Record::Inode { ino: 3, meta: a }).unwrap();
        let layout = Layout::for_blocks(100_000).unwrap();
        let p = s.problems(&layout, &[(5006, 1)]);
        assert!(p.contains(&Problem::OwnedTwice {
            block: 5006,
            first: Owner::Inode(3),
            second: Owner::Checkpoint
        }));
    }
}
