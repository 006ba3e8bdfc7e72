//! Directories held open: a directory removed while something still has
//! it (an open descriptor, a working directory: what the kernel still
//! knows) stays an inode, with no link, no entries and no room for new
//! ones, until its last holder lets go, as a removed file stays until its
//! last close. Its removal is then logged (a `Free` record); after a crash
//! mount reclaims it as any orphan (section 7 of docs/design/format.md).

use alloc::sync::Arc;

use super::inode::Inode;
use super::Fs;
use crate::dev::BlockDevice;
use crate::error::{NamespaceError, Result};
use crate::persist::record::Kind;
use crate::units::InodeId;

/// A directory kept as an inode while this lives.
pub struct HeldDir<D: BlockDevice> {
    fs: Fs<D>,
    inode: Arc<Inode>,
}

impl<D: BlockDevice> core::fmt::Debug for HeldDir<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HeldDir")
            .field("ino", &self.inode.id)
            .finish_non_exhaustive()
    }
}

impl<D: BlockDevice> HeldDir<D> {
    /// The directory's inode number.
    pub fn ino(&self) -> InodeId {
        self.inode.id
    }
}

impl<D: BlockDevice> Drop for HeldDir<D> {
    fn drop(&mut self) {
        self.fs.shared.close(&self.inode);
    }
}

impl<D: BlockDevice> Fs<D> {
    /// Holds directory `ino` (linked, or removed and still held): while
    /// the result lives, [`Fs::attr`] answers for it (link count 0 once
    /// removed) and [`Fs::read_dir`] lists nothing.
    pub fn hold_dir(&self, ino: InodeId) -> Result<HeldDir<D>> {
        let inode = self.shared.inode(ino).ok_or(NamespaceError::NotFound)?;
        if inode.kind != Kind::Dir {
            return Err(NamespaceError::NotADirectory.into());
        }
        if !inode.try_open() {
            return Err(NamespaceError::NotFound.into());
        }
        Ok(HeldDir {
            fs: self.clone(),
            inode,
        })
    }
}
