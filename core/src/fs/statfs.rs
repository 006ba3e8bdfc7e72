//! What `statfs(2)` reports for a filesystem: the data area's size and
//! free space, and inode numbers. Read-only: it takes the allocator's and
//! the inode table's locks only long enough to read their counts.

use core::sync::atomic::Ordering;

use super::Fs;
use crate::dev::BlockDevice;
use crate::units::MAX_INODE;

/// Space and inode counts of a filesystem ([`Fs::statfs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatFs {
    /// Blocks (4 KiB) of the data area: file data and checkpoints; the
    /// superblocks and the log are outside it.
    pub blocks: u64,
    /// Blocks not in use. Blocks freed by a remove, truncate or punch-hole
    /// count as free at once: they wait for the next commit before they
    /// are reused, and a write that finds no other room forces one.
    pub free: u64,
    /// Free blocks that file data may take: `free` less the blocks held
    /// back so that a checkpoint of the metadata always fits.
    pub available: u64,
    /// Live inodes (linked, or unlinked and still open), the root among
    /// them.
    pub inodes: u64,
    /// Inode numbers not yet handed out (numbers are never reused).
    pub inodes_free: u64,
}

impl<D: BlockDevice> Fs<D> {
    /// Space and inode counts, as `statfs(2)` reports them.
    pub fn statfs(&self) -> StatFs {
        let shared = &self.shared;
        let held = shared.journal.held_blocks();
        let (blocks, free) = {
            let space = shared.space.lock();
            (space.total_blocks(), space.free_blocks() + held)
        };
        let reserve = shared.meta_reserve(0);
        let next = shared.next_ino.load(Ordering::Acquire);
        StatFs {
            blocks,
            free,
            available: free.saturating_sub(reserve),
            inodes: shared.inode_count.load(Ordering::Acquire),
            inodes_free: (MAX_INODE + 1).saturating_sub(next),
        }
    }
}
