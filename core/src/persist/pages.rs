//! The metadata index on the device: its operations driven through
//! [`MetaIo`] (a page an operation misses is read and handed in), the
//! whole tree read back for recovery, and a checkpoint's changes applied.
//! The tree itself ([`index`](super::index)) does no I/O.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::sync::Arc;
use alloc::vec::Vec;

use super::format::Layout;
use super::index::image::{inode_items, records_of, ImageError, InodeItems};
use super::index::items::{LiveItem, LIVE};
use super::index::verify::Walk;
use super::index::{Index, IndexError, Key, PageDamage, Root, MAX_LEVELS};
use super::metaio::MetaIo;
use super::record::Record;
use super::shadow::Shadow;
use crate::error::{Damage, Error, IndexDamage, Result};
use crate::units::PAGE_SIZE;

/// Pages of the index kept in memory between checkpoints (16 MiB).
pub(crate) const CACHE_PAGES: usize = 4096;

fn corrupt(block: u64, damage: IndexDamage) -> Error {
    Error::Corrupt {
        block,
        damage: Damage::Index(damage),
    }
}

fn image_error(e: ImageError) -> Error {
    match e {
        ImageError::Item(key, damage) => corrupt(0, IndexDamage::Item { key, damage }),
        ImageError::Orphan(key) => corrupt(0, IndexDamage::Orphan(key)),
        ImageError::BucketFull(key) => corrupt(0, IndexDamage::BucketFull(key)),
        ImageError::Read(block) => corrupt(block, IndexDamage::Page(PageDamage::Pointer)),
        ImageError::NoSpace => crate::error::SpaceError::MetadataFull.into(),
    }
}

/// Runs `op` on `index`, reading through `io` each page it misses and
/// running it again. An operation misses at most a path and its siblings
/// before it completes; more is a tree that leads it in circles.
pub(crate) async fn run<M: MetaIo, T>(
    io: &M,
    index: &mut Index,
    mut op: impl FnMut(&mut Index) -> core::result::Result<T, IndexError>,
) -> Result<T> {
    for _ in 0..4 * MAX_LEVELS {
        match op(index) {
            Ok(t) => return Ok(t),
            Err(IndexError::Miss { block, generation }) => {
                let bytes = io.read(block, 1).await?;
                index
                    .load(block, generation, &bytes)
                    .map_err(|e| index_error(block, e))?;
            }
            Err(e) => return Err(index_error(0, e)),
        }
    }
    Err(corrupt(0, IndexDamage::Page(PageDamage::Pointer)))
}

fn index_error(at: u64, e: IndexError) -> Error {
    match e {
        IndexError::Damage { block, damage } => corrupt(block, IndexDamage::Page(damage)),
        IndexError::Miss { block, .. } => corrupt(block, IndexDamage::Page(PageDamage::Pointer)),
        // A value too long or a commit given the wrong blocks: the caller's
        // mistake, reported on the page it was at.
        _ => corrupt(at, IndexDamage::Page(PageDamage::Header)),
    }
}

/// The items of inode `ino` in `index`, in key order.
async fn items_in<M: MetaIo>(io: &M, index: &mut Index, ino: u64) -> Result<Vec<(Key, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut from = Key::new(ino, 0, 0);
    loop {
        let found = run(io, index, |ix| {
            ix.next(&from).map(|o| o.map(|(k, v)| (k, v.to_vec())))
        })
        .await?;
        let Some((k, v)) = found.filter(|(k, _)| k.ino == ino) else {
            return Ok(out);
        };
        out.push((k, v));
        match k.successor() {
            Some(next) => from = next,
            None => return Ok(out),
        }
    }
}

/// What a checkpoint writes for the inodes that changed: their items as
/// the durable view has them when the checkpoint's view is taken.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Inode -> its items now (empty if it is gone).
    pub(crate) inodes: Vec<(u64, InodeItems)>,
}

impl Changes {
    /// The changes of `view` since the last call, names placed by
    /// `hash_key`. On an error the view keeps them marked.
    pub(crate) fn take(view: &mut Shadow, hash_key: (u64, u64)) -> Result<Changes> {
        let dirty = view.take_dirty();
        let mut inodes = Vec::with_capacity(dirty.len());
        for &ino in &dirty {
            match inode_items(view, ino, hash_key) {
                Ok(items) => inodes.push((ino, items)),
                Err(e) => {
                    view.retouch(dirty);
                    return Err(image_error(e));
                }
            }
        }
        Ok(Changes { inodes })
    }

    /// The inodes, to mark again if the checkpoint does not land.
    pub(crate) fn inos(&self) -> impl Iterator<Item = u64> + '_ {
        self.inodes.iter().map(|(ino, _)| *ino)
    }
}

/// What applying [`Changes`] to the index did besides changing its pages.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    /// (block, bytes): live pages' synced bytes to write before the tree.
    pub(crate) copies: Vec<(u64, Arc<[u8]>)>,
    /// Blocks of live pages' copies the index no longer names: free once
    /// the new root is durable.
    pub(crate) old_copies: Vec<u64>,
}

/// Makes `index` hold `changes`: each changed inode's items replace the
/// ones it had, an item that did not change is left alone (its page is
/// not written), and each live page gets a copy block from `alloc`
/// (listed in `out` as it is taken, so a failed call's blocks can go
/// back).
pub(crate) async fn apply<M: MetaIo>(
    io: &M,
    index: &mut Index,
    changes: &Changes,
    mut alloc: impl FnMut() -> Option<u64>,
    out: &mut Applied,
) -> Result<()> {
    for (ino, now) in &changes.inodes {
        let old = items_in(io, index, *ino).await?;
        let mut new: BTreeMap<Key, &[u8]> =
            now.items.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        let mut live = Vec::with_capacity(now.live.len());
        for (page, home, bytes) in &now.live {
            let copy = alloc().ok_or(crate::error::SpaceError::MetadataFull)?;
            out.copies.push((copy, bytes.clone()));
            live.push(InodeItems::live_item(*ino, *page, *home, copy));
        }
        for (k, v) in &live {
            new.insert(*k, v.as_slice());
        }
        for (k, v) in &old {
            if k.kind == LIVE {
                if let Ok(x) = LiveItem::decode(v) {
                    out.old_copies.push(x.copy);
                }
            }
            if !new.contains_key(k) {
                let key = *k;
                run(io, index, |ix| ix.remove(&key)).await?;
            }
        }
        let old: BTreeMap<Key, &[u8]> = old.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        for (k, v) in new {
            if old.get(&k) != Some(&v) {
                run(io, index, |ix| ix.insert(k, v)).await?;
            }
        }
        index.trim();
    }
    Ok(())
}

/// The tree under `root` read whole: the records of the image it holds
/// (loaded as a checkpoint's, see [`records_of`]) and every block it
/// occupies, its pages' and its live pages' copies.
pub(crate) async fn read_tree<M: MetaIo>(
    io: &M,
    uuid: u64,
    root: Root,
    layout: &Layout,
) -> Result<(Vec<Record>, BTreeSet<u64>)> {
    let page = |(block, damage)| corrupt(block, IndexDamage::Page(damage));
    let mut walk = Walk::new(uuid, root).map_err(page)?;
    let mut items: Vec<(Key, Vec<u8>)> = Vec::new();
    while let Some(block) = walk.next_block() {
        if !layout.in_data(block, 1) {
            return Err(corrupt(block, IndexDamage::Page(PageDamage::Pointer)));
        }
        let bytes = io.read(block, 1).await?;
        walk.feed(&bytes, &mut |k, v| items.push((k, v.to_vec())))
            .map_err(page)?;
    }
    let mut blocks = walk.facts().blocks;
    let mut copies: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for (k, v) in &items {
        if k.kind != LIVE {
            continue;
        }
        let x = LiveItem::decode(v)
            .map_err(|damage| corrupt(0, IndexDamage::Item { key: *k, damage }))?;
        if !layout.in_data(x.copy, 1) || !blocks.insert(x.copy) {
            return Err(corrupt(x.copy, IndexDamage::Orphan(*k)));
        }
        let mut bytes = io.read(x.copy, 1).await?;
        bytes.truncate(PAGE_SIZE);
        copies.insert(x.copy, bytes);
    }
    let records = records_of(items.iter().map(|(k, v)| (*k, v.as_slice())), &mut |b| {
        copies.remove(&b)
    })
    .map_err(image_error)?;
    drop(items);
    // What a record may say has one home, the log's decoder: the records
    // the items make pass it too (inode numbers, parents, sizes, extents in
    // order and disjoint, names, attribute names and values).
    let records =
        Record::decode_all(&Record::encode_all(&records)).map_err(|damage| Error::Corrupt {
            block: root.block,
            damage,
        })?;
    Ok((records, blocks))
}

/// `blocks` as runs of consecutive blocks, in order.
pub(crate) fn runs(blocks: impl IntoIterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for b in blocks {
        match out.last_mut() {
            Some((start, n)) if *start + *n == b => *n += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}
