//! The durable view ([`Shadow`]) as index items and back: what a
//! checkpoint into the index writes, and what mount reads from it.
//!
//! Items come out in key order, so building a tree from them is a run of
//! appends (whole leaves). Reading back takes items in key order too (as
//! [`verify`](super::verify) hands them over) and gives the records of a
//! checkpoint image, in the order recovery loads them: every inode, every
//! extended attribute, every entry, [`Record::ImageEnd`], then the live
//! data as data records.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::items::{
    self, bucket, chunks, Bucket, ExtentItem, InodeItem, LiveItem, XattrHead, CHUNK, ENTRIES,
    EXTENT, INODE, LIVE, TARGET, XATTR,
};
use super::Key;
use crate::persist::record::{InodeMeta, Kind, Record};
use crate::persist::shadow::Shadow;
use crate::space::Extent;
use crate::units::BlockNo;

/// Why a view does not become items, or items a view.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ImageError {
    /// An item is malformed.
    Item(Key, items::ItemDamage),
    /// An item that needs its inode's item comes without it, or items of
    /// one thing disagree (pieces missing, lengths that do not add up).
    Orphan(Key),
    /// Names of one directory, or attribute names of one inode, fill
    /// their bucket.
    BucketFull(Key),
    /// No block for a page of live data.
    NoSpace,
    /// A live data block could not be read.
    Read(u64),
}

/// A view as items, and the live pages to write beside them.
#[derive(Debug, Default)]
pub struct Items {
    /// Key and value, in key order.
    pub items: Vec<(Key, Vec<u8>)>,
    /// (block, bytes): each live page's synced bytes, to be written (and
    /// flushed) before the tree that names them.
    pub copies: Vec<(u64, Arc<[u8]>)>,
}

/// One inode's items in key order, but for its live data, which comes
/// apart: each page needs a block for its bytes before it is an item
/// ([`InodeItems::live_item`]).
#[derive(Debug, Default)]
pub struct InodeItems {
    /// Key and value, in key order (no live data items).
    pub items: Vec<(Key, Vec<u8>)>,
    /// (page, the block the file maps it to, its synced bytes).
    pub live: Vec<(u64, u64, Arc<[u8]>)>,
}

impl InodeItems {
    /// The item of live page `page` of `ino` whose bytes are in `copy`.
    pub fn live_item(ino: u64, page: u64, home: u64, copy: u64) -> (Key, Vec<u8>) {
        (Key::new(ino, LIVE, page), LiveItem { home, copy }.encode())
    }
}

/// The items of inode `ino` of `view` (none if it is gone), names placed
/// by `hash_key`: what a checkpoint writes for an inode that changed.
pub fn inode_items(
    view: &Shadow,
    ino: u64,
    hash_key: (u64, u64),
) -> Result<InodeItems, ImageError> {
    let mut map: BTreeMap<Key, Vec<u8>> = BTreeMap::new();
    if let Some(m) = view.inodes.get(&ino) {
        let item = InodeItem {
            kind: m.kind,
            perm: m.perm,
            uid: m.uid,
            gid: m.gid,
            nlink: m.nlink,
            parent: m.parent,
            size: m.size,
            atime: m.atime,
            mtime: m.mtime,
            ctime: m.ctime,
            rdev: m.rdev,
            generation: 0,
        };
        map.insert(Key::new(ino, INODE, 0), item.encode());
        for x in &m.extents {
            let v = ExtentItem {
                block: x.dev.0,
                len: x.len,
            };
            map.insert(Key::new(ino, EXTENT, x.file_block), v.encode());
        }
        for (k, c) in chunks(ino, TARGET, 0, m.target.as_bytes()) {
            map.insert(k, c.to_vec());
        }
    }
    let mut buckets: BTreeMap<Key, Bucket> = BTreeMap::new();
    for (name, child) in view.tree.entries_of(ino) {
        let key = Key::new(ino, ENTRIES, bucket(hash_key, name));
        let b = buckets.entry(key).or_default();
        b.add(name, child).ok_or(ImageError::BucketFull(key))?;
    }
    map.extend(buckets.into_iter().map(|(k, b)| (k, b.encode())));
    for (name, value) in view.xattrs_of(ino) {
        let base = bucket(hash_key, name) << 8;
        let head_key = Key::new(ino, XATTR, base);
        if map.contains_key(&head_key) {
            return Err(ImageError::BucketFull(head_key));
        }
        let (head, rest) = XattrHead::split(name, value);
        map.insert(head_key, head.encode());
        for (k, c) in chunks(ino, XATTR, base + 1, rest) {
            map.insert(k, c.to_vec());
        }
    }
    let live = view
        .data_of(ino)
        .map(|(page, (home, bytes))| (page, *home, bytes.clone()))
        .collect();
    Ok(InodeItems {
        items: map.into_iter().collect(),
        live,
    })
}

/// The items of `view`, names placed by `hash_key`; each page of live data
/// gets a block from `alloc`, in which it must be written.
pub fn items_of(
    view: &Shadow,
    hash_key: (u64, u64),
    alloc: &mut dyn FnMut() -> Option<u64>,
) -> Result<Items, ImageError> {
    let mut out = Items::default();
    let mut inos: alloc::collections::BTreeSet<u64> = view.inodes.keys().copied().collect();
    inos.extend(view.tree.entries().map(|(parent, _, _)| parent));
    for ino in inos {
        let one = inode_items(view, ino, hash_key)?;
        out.items.extend(one.items);
        for (page, home, bytes) in one.live {
            let copy = alloc().ok_or(ImageError::NoSpace)?;
            out.items.push(InodeItems::live_item(ino, page, home, copy));
            out.copies.push((copy, bytes));
        }
    }
    Ok(out)
}

/// One inode's items, gathered until the next inode's begin.
#[derive(Default)]
struct Gathering {
    ino: u64,
    item: Option<InodeItem>,
    extents: Vec<Extent>,
    target: Vec<u8>,
    xattr: Option<(Key, XattrHead, Vec<u8>)>,
}

/// The records of a checkpoint image from `items`, in key order; each page
/// of live data's bytes read with `read` from its copy block.
pub fn records_of<'a>(
    items: impl IntoIterator<Item = (Key, &'a [u8])>,
    read: &mut dyn FnMut(u64) -> Option<Vec<u8>>,
) -> Result<Vec<Record>, ImageError> {
    let mut inodes = Vec::new();
    let mut xattrs = Vec::new();
    let mut links = Vec::new();
    let mut data = Vec::new();
    let mut g = Gathering::default();
    for (key, v) in items {
        items::check(&key, v).map_err(|d| ImageError::Item(key, d))?;
        if key.ino != g.ino {
            finish(&mut g, &mut inodes, &mut xattrs)?;
            g = Gathering {
                ino: key.ino,
                ..Gathering::default()
            };
        }
        let orphan = || ImageError::Orphan(key);
        match key.kind {
            INODE => g.item = Some(InodeItem::decode(v).map_err(|d| ImageError::Item(key, d))?),
            EXTENT => {
                let x = ExtentItem::decode(&key, v).map_err(|d| ImageError::Item(key, d))?;
                g.extents.push(Extent {
                    file_block: key.off,
                    dev: BlockNo(x.block),
                    len: x.len,
                });
            }
            TARGET => {
                if key.off as usize * CHUNK != g.target.len() {
                    return Err(orphan());
                }
                g.target.extend_from_slice(v);
            }
            ENTRIES => {
                let b = Bucket::decode(v).map_err(|d| ImageError::Item(key, d))?;
                for e in b.0 {
                    links.push(Record::Link {
                        parent: key.ino,
                        name: e.name,
                        ino: e.ino,
                    });
                }
            }
            XATTR if key.off & 0xff == 0 => {
                finish_xattr(&mut g, &mut xattrs)?;
                let head = XattrHead::decode(v).map_err(|d| ImageError::Item(key, d))?;
                let bytes = head.first.clone();
                g.xattr = Some((key, head, bytes));
            }
            XATTR => {
                let Some((head_key, _, bytes)) = &mut g.xattr else {
                    return Err(orphan());
                };
                if key.off >> 8 != head_key.off >> 8 {
                    return Err(orphan());
                }
                bytes.extend_from_slice(v);
            }
            LIVE => {
                let x = LiveItem::decode(v).map_err(|d| ImageError::Item(key, d))?;
                let bytes = read(x.copy).ok_or(ImageError::Read(x.copy))?;
                data.push(Record::Data {
                    ino: key.ino,
                    page: key.off,
                    block: x.home,
                    bytes,
                });
            }
            _ => return Err(orphan()),
        }
    }
    finish(&mut g, &mut inodes, &mut xattrs)?;
    let mut out = inodes;
    out.extend(xattrs);
    out.extend(links);
    out.push(Record::ImageEnd);
    out.extend(data);
    Ok(out)
}

fn finish_xattr(g: &mut Gathering, xattrs: &mut Vec<Record>) -> Result<(), ImageError> {
    if let Some((key, head, bytes)) = g.xattr.take() {
        if bytes.len() != head.len as usize || g.item.is_none() {
            return Err(ImageError::Orphan(key));
        }
        xattrs.push(Record::Xattr {
            ino: g.ino,
            name: head.name,
            value: Some(bytes),
        });
    }
    Ok(())
}

fn finish(
    g: &mut Gathering,
    inodes: &mut Vec<Record>,
    xattrs: &mut Vec<Record>,
) -> Result<(), ImageError> {
    finish_xattr(g, xattrs)?;
    let Some(item) = g.item.take() else {
        // Entries of a directory with no inode item are caught by the
        // load that follows (an entry in no directory); anything else
        // here belongs to no inode.
        if !g.extents.is_empty() || !g.target.is_empty() {
            return Err(ImageError::Orphan(Key::new(g.ino, INODE, 0)));
        }
        return Ok(());
    };
    let target = String::from_utf8(core::mem::take(&mut g.target))
        .map_err(|_| ImageError::Orphan(Key::new(g.ino, TARGET, 0)))?;
    if !target.is_empty() && item.kind != Kind::Symlink {
        return Err(ImageError::Orphan(Key::new(g.ino, TARGET, 0)));
    }
    if !g.extents.is_empty() && item.kind != Kind::File {
        return Err(ImageError::Orphan(Key::new(g.ino, EXTENT, 0)));
    }
    inodes.push(Record::Inode {
        ino: g.ino,
        meta: InodeMeta {
            kind: item.kind,
            perm: item.perm,
            uid: item.uid,
            gid: item.gid,
            nlink: item.nlink,
            parent: item.parent,
            size: item.size,
            atime: item.atime,
            mtime: item.mtime,
            ctime: item.ctime,
            extents: core::mem::take(&mut g.extents),
            target,
            rdev: item.rdev,
        },
    });
    Ok(())
}
