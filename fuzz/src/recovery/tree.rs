//! The base image's metadata index in the model: its pages as they lie
//! on the device, the records they hold (which the record and tree edits
//! change), and the tree built again from edited records, with a
//! crafting encoder of items that writes whatever the records say (raw
//! kind codes, names the engine refuses, out-of-range fields), so the
//! damage reaches the reader's checks of each item.

use std::collections::BTreeMap;

use pollfs_core::persist::index::items::{
    bucket, chunks, Bucket, ExtentItem, XattrHead, ENTRIES, EXTENT, INODE, TARGET, XATTR,
};
pub use pollfs_core::persist::index::page::seal;
use pollfs_core::persist::index::{Index, Key, Root, MAX_VALUE};

use super::values::{Rec, KIND_FILE, KIND_SYMLINK, TAG_INODE, TAG_LINK, TAG_XATTR};

/// The index as the model holds it.
#[derive(Clone, Debug)]
pub struct TreeModel {
    /// The filesystem's id, which every page carries.
    pub uuid: u64,
    /// The superblock's hash key.
    pub hash_key: (u64, u64),
    /// The root the newest superblock names.
    pub root: Root,
    /// (block, page) of every page, in walk order.
    pub pages: Pages,
    /// The records of the image the tree holds, in the order recovery
    /// loads them.
    pub recs: Vec<Rec>,
    /// Blocks a tree built again may use, in order: the base tree's,
    /// then blocks nothing in the base image uses.
    pub blocks: Vec<u64>,
    /// The pages changed: written back.
    pub dirty: bool,
}

/// The item of an inode record, whatever its fields are.
fn inode_value(r: &Rec) -> Vec<u8> {
    let mut v = Vec::with_capacity(70);
    v.push(r.kind);
    v.extend_from_slice(&r.perm.to_le_bytes());
    v.extend_from_slice(&r.uid.to_le_bytes());
    v.extend_from_slice(&r.gid.to_le_bytes());
    v.extend_from_slice(&r.nlink.to_le_bytes());
    v.extend_from_slice(&r.parent.to_le_bytes());
    v.extend_from_slice(&r.size.to_le_bytes());
    for t in r.times {
        v.extend_from_slice(&t.to_le_bytes());
    }
    // Device number and generation: none of the base image's inodes has
    // either.
    v.extend_from_slice(&0u64.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    v
}

/// The items `recs` make, as the engine's checkpoint would write them
/// for records that are valid, and whatever they say for records that
/// are not. Records with no item form (the log's changes, data records,
/// the end marker) make none.
pub fn items(recs: &[Rec], hash_key: (u64, u64)) -> Vec<(Key, Vec<u8>)> {
    let mut map: BTreeMap<Key, Vec<u8>> = BTreeMap::new();
    let mut buckets: BTreeMap<Key, Bucket> = BTreeMap::new();
    for r in recs {
        match r.tag {
            TAG_INODE => {
                map.insert(Key::new(r.ino, INODE, 0), inode_value(r));
                if r.kind == KIND_FILE {
                    for x in &r.extents {
                        let v = ExtentItem {
                            block: x[1],
                            len: x[2],
                        };
                        map.insert(Key::new(r.ino, EXTENT, x[0]), v.encode());
                    }
                }
                if r.kind == KIND_SYMLINK {
                    for (k, c) in chunks(r.ino, TARGET, 0, &r.target.bytes) {
                        map.insert(k, c.to_vec());
                    }
                }
            }
            TAG_LINK => {
                let name = String::from_utf8_lossy(&r.name.bytes);
                let key = Key::new(r.parent, ENTRIES, bucket(hash_key, &name));
                // A full bucket keeps what it has: the reader sees the rest
                // as missing entries.
                let _ = buckets.entry(key).or_default().add(&name, r.ino);
            }
            TAG_XATTR if r.flags == 1 => {
                let name = String::from_utf8_lossy(&r.name.bytes);
                let base = bucket(hash_key, &name) << 8;
                let (head, rest) = XattrHead::split(&name, &r.bytes);
                map.insert(Key::new(r.ino, XATTR, base), head.encode());
                for (k, c) in chunks(r.ino, XATTR, base + 1, rest) {
                    map.insert(k, c.to_vec());
                }
            }
            _ => {}
        }
    }
    map.extend(buckets.into_iter().map(|(k, b)| (k, b.encode())));
    map.into_iter().collect()
}

/// (block, page) writes.
pub type Pages = Vec<(u64, Vec<u8>)>;

/// A tree of `items` written as checkpoint `generation` into the first of
/// `blocks`: its root and its pages; `None` if they need more blocks than
/// there are. Items too long for a page are left out.
pub fn build(
    items: &[(Key, Vec<u8>)],
    uuid: u64,
    generation: u64,
    blocks: &[u64],
) -> Option<(Root, Pages)> {
    let mut index = Index::new(uuid, usize::MAX);
    for (k, v) in items.iter().filter(|(_, v)| v.len() <= MAX_VALUE) {
        index.insert(*k, v).ok()?;
    }
    let n = index.dirty_pages();
    let commit = index.commit(generation, blocks.get(..n)?).ok()?;
    Some((commit.root, commit.writes))
}

impl TreeModel {
    /// Builds the tree again from [`TreeModel::recs`] at the given
    /// blocks (the model's own if `None`); false if it does not fit
    /// (the model is then unchanged).
    pub fn rebuild(&mut self, at: Option<Vec<u64>>) -> bool {
        let blocks = at.unwrap_or_else(|| self.blocks.clone());
        let items = items(&self.recs, self.hash_key);
        match build(&items, self.uuid, self.root.generation, &blocks) {
            Some((root, pages)) => {
                self.root = root;
                self.pages = pages;
                self.dirty = true;
                true
            }
            None => false,
        }
    }
}
