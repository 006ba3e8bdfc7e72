//! The invariant checker: what must hold whenever no operation is running.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::inode::pages_for;
use super::Shared;
use crate::dev::BlockDevice;
use crate::persist::problems::Problem;
use crate::units::{InodeId, PageIndex};

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvariantError {
    /// A device block is mapped by two files, or twice by one.
    BlockOwnedTwice {
        /// The block.
        block: u64,
    },
    /// A block is both mapped by a file and free in the allocator.
    BlockMappedAndFree {
        /// The block.
        block: u64,
    },
    /// Blocks neither free nor mapped by any file.
    Leaked {
        /// How many.
        blocks: u64,
    },
    /// A file maps a block past its EOF page.
    MappedPastEof {
        /// The file.
        ino: InodeId,
        /// The file block.
        file_block: u64,
    },
    /// A page is cached past EOF.
    CachedPastEof {
        /// The file.
        ino: InodeId,
        /// The page.
        index: PageIndex,
    },
    /// The cache's dirty count disagrees with the dirty pages found.
    DirtyCount {
        /// Counted by the cache.
        counted: u64,
        /// Found by scanning.
        found: u64,
    },
    /// A lock is still held or waited for.
    LockBusy {
        /// The file.
        ino: InodeId,
    },
    /// The namespace tree breaks one of its invariants (the checks fsck
    /// runs on an image's tree).
    Tree(Problem),
    /// A live inode's link count differs from the tree's, or the tree has
    /// no node for it.
    LinkCount {
        /// The inode.
        ino: InodeId,
        /// Its link count.
        nlink: u32,
        /// The tree's count (0 if it has no node).
        counted: u32,
    },
}

pub(crate) fn run<D: BlockDevice>(fs: &Shared<D>) -> Result<(), InvariantError> {
    links(fs)?;
    let inodes: Vec<_> = fs.inodes.read().values().cloned().collect();
    // Inodes not in memory are what the durable view says: their blocks
    // are theirs (taken before the allocator's lock, which is a leaf).
    let in_memory: alloc::collections::BTreeSet<u64> = inodes.iter().map(|i| i.id.0).collect();
    let durable = fs.journal.durable_extents(|ino| in_memory.contains(&ino));
    let space = fs.space.lock();
    // Collect every mapped block as (start, len) runs, then sort and look
    // for overlaps; a per-block set would not scale to large devices.
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut dirty_found = 0;
    let mut mapped = 0;
    for inode in &inodes {
        if inode.reclaimed.load(Ordering::Acquire) {
            continue;
        }
        let size = inode.size();
        let eof_pages = pages_for(size);
        for e in inode.extents.read().extents() {
            if e.file_block + e.len > eof_pages {
                return Err(InvariantError::MappedPastEof {
                    ino: inode.id,
                    file_block: e.file_block + e.len - 1,
                });
            }
            runs.push((e.dev.0, e.len));
            mapped += e.len;
        }
        let mut past_eof = None;
        fs.cache.scan(
            &inode.pages,
            inode.id,
            PageIndex(0),
            PageIndex(u64::MAX),
            |i, _, d| {
                if i.0 >= eof_pages && past_eof.is_none() {
                    past_eof = Some(i);
                }
                if d {
                    dirty_found += 1;
                }
            },
        );
        if let Some(index) = past_eof {
            return Err(InvariantError::CachedPastEof {
                ino: inode.id,
                index,
            });
        }
        if !inode.inode_lock.is_idle() || !inode.gate.is_idle() || !inode.extent_lock_idle() {
            return Err(InvariantError::LockBusy { ino: inode.id });
        }
    }
    for (ino, size, extents) in durable {
        let eof_pages = pages_for(size);
        for e in extents {
            if e.file_block + e.len > eof_pages {
                return Err(InvariantError::MappedPastEof {
                    ino: InodeId(ino),
                    file_block: e.file_block + e.len - 1,
                });
            }
            runs.push((e.dev.0, e.len));
            mapped += e.len;
        }
    }
    // The checkpoint's blocks are neither a file's nor free.
    let meta_runs = fs.journal.meta_runs();
    let meta: u64 = meta_runs.iter().map(|r| r.1).sum();
    runs.extend(meta_runs);
    runs.sort_unstable();
    for w in runs.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(InvariantError::BlockOwnedTwice { block: w[1].0 });
        }
    }
    let free: BTreeMap<u64, u64> = space.free_extents().map(|(b, l)| (b.0, l)).collect();
    for &(start, len) in &runs {
        if let Some((&fs_, &fl)) = free.range(..start + len).next_back() {
            if fs_ + fl > start {
                return Err(InvariantError::BlockMappedAndFree {
                    block: start.max(fs_),
                });
            }
        }
    }
    // Blocks freed in memory but still referenced by durable metadata are
    // neither mapped nor free yet.
    let held: u64 = fs.journal.held_blocks();
    let accounted = mapped + meta + space.free_blocks() + held;
    if accounted != space.total_blocks() {
        return Err(InvariantError::Leaked {
            blocks: space.total_blocks().saturating_sub(accounted),
        });
    }
    let counted = fs.cache.dirty_pages();
    if counted != dirty_found {
        return Err(InvariantError::DirtyCount {
            counted,
            found: dirty_found,
        });
    }
    Ok(())
}

/// The namespace tree holds its invariants (fsck's [`Tree::problems`]),
/// and every live inode's link count is the tree's.
///
/// [`Tree::problems`]: crate::persist::tree::Tree::problems
fn links<D: BlockDevice>(fs: &Shared<D>) -> Result<(), InvariantError> {
    let tree = fs.tree.read();
    if let Some(p) = tree.problems().into_iter().next() {
        return Err(InvariantError::Tree(p));
    }
    let inodes = fs.inodes.read();
    for (id, inode) in inodes.iter() {
        let nlink = inode.nlink.load(Ordering::Acquire);
        let counted = tree.node(id.0).map_or(0, |n| n.nlink);
        if nlink != counted {
            return Err(InvariantError::LinkCount {
                ino: *id,
                nlink,
                counted,
            });
        }
    }
    Ok(())
}
