//! File handles: owned, cheap to clone, `Send + Sync`, valid until the last
//! clone drops (an unlinked file keeps its data until then).
//!
//! The operations run in a [`Session`]: pass one explicitly
//! (`session.read_at(&file, ..)`, the way for `no_std` users and for code
//! that keeps one session per thread), or, on a hosted build, call the
//! handle's own methods (`file.read_at(..)`), which borrow the calling
//! thread's session for the filesystem (made on first use) and give it back
//! when the operation ends. Their futures (`read_at_async`, ...) carry the
//! session they borrowed, so they are `Send` and may move between threads
//! while they wait.

use alloc::sync::Arc;
use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::read::Readahead;
use super::Fs;
use crate::dev::BlockDevice;
use crate::persist::record::Kind;
use crate::units::InodeId;

/// An open file. Clones share the file; each keeps it open.
pub struct File<D: BlockDevice> {
    pub(crate) fs: Fs<D>,
    pub(crate) inode: Arc<Inode>,
    pub(crate) readahead: Readahead,
}

impl<D: BlockDevice> core::fmt::Debug for File<D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("File")
            .field("ino", &self.inode.id)
            .finish_non_exhaustive()
    }
}

impl<D: BlockDevice> Clone for File<D> {
    fn clone(&self) -> Self {
        // The file is open (this handle holds it), so it cannot be
        // reclaimed meanwhile: a plain increment is enough.
        self.inode.open.fetch_add(1, Ordering::AcqRel);
        File::new(self.fs.clone(), self.inode.clone())
    }
}

impl<D: BlockDevice> Drop for File<D> {
    fn drop(&mut self) {
        self.fs.shared.close(&self.inode);
    }
}

/// An inode's attributes, as [`File::metadata`] and
/// [`Fs::attr`](super::Fs::attr) report them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metadata {
    /// Inode number.
    pub ino: InodeId,
    /// File, directory, symbolic link, FIFO, socket or device node.
    pub kind: Kind,
    /// A device node's device number (0 for anything else).
    pub rdev: u64,
    /// Permission bits.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links.
    pub nlink: u32,
    /// Size in bytes (a symbolic link: its target's length; a directory:
    /// 0).
    pub len: u64,
    /// Device blocks (4 KiB) mapped to the file.
    pub blocks: u64,
    /// Last access (nanoseconds since the Unix epoch, as a two's-complement
    /// `i64`, so a time before 1970 reads back negative; pollfs does not
    /// update it on reads: noatime).
    pub atime: u64,
    /// Last modification of the contents.
    pub mtime: u64,
    /// Last change of the contents or attributes.
    pub ctime: u64,
}

impl Metadata {
    pub(crate) fn of(inode: &Inode) -> Metadata {
        let owner = *inode.owner.lock();
        Metadata {
            ino: inode.id,
            kind: inode.kind,
            rdev: inode.rdev,
            perm: owner.perm,
            uid: owner.uid,
            gid: owner.gid,
            nlink: inode.nlink.load(Ordering::Acquire),
            len: inode.size(),
            blocks: inode.extents.read().mapped_blocks(),
            atime: inode.atime.load(Ordering::Relaxed),
            mtime: inode.mtime.load(Ordering::Relaxed),
            ctime: inode.ctime.load(Ordering::Relaxed),
        }
    }
}

impl<D: BlockDevice> File<D> {
    /// A handle on `inode`, which the caller has opened (counted).
    pub(crate) fn new(fs: Fs<D>, inode: Arc<Inode>) -> File<D> {
        File {
            fs,
            inode,
            readahead: Readahead::default(),
        }
    }

    /// The file's size in bytes.
    pub fn len(&self) -> u64 {
        self.inode.size()
    }

    /// True if the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file's inode number.
    pub fn ino(&self) -> InodeId {
        self.inode.id
    }

    /// Whether the file has any extended attribute: one load, no lock, so
    /// a write can skip looking for one it must take away (Linux's
    /// `file_remove_privs`) on the many files that have none.
    pub fn has_xattrs(&self) -> bool {
        self.inode.xattr_len.load(Ordering::Acquire) > 0
    }

    /// The file's attributes.
    pub fn metadata(&self) -> Metadata {
        Metadata::of(&self.inode)
    }

    /// The filesystem the file is on.
    pub fn fs(&self) -> &Fs<D> {
        &self.fs
    }
}
