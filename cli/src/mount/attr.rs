//! Inode numbers and attributes as the kernel sees them.
//!
//! FUSE's root directory is inode 1, and so is pollfs's ([`ROOT_INO`]):
//! a FUSE inode number is the pollfs inode number ([`FuseIno`]).
//!
//! pollfs keeps no owner, mode or times, so what `stat` shows is fixed
//! (see docs/design.md, "FUSE"): files are 0644 and the root 0755, owned by
//! the user who mounted; every time is the moment the mount started. Only
//! the mount's owner can reach it (no `allow_other`), so the fixed modes
//! grant nobody else anything.

use std::time::{Duration, SystemTime};

use fuser::{FileAttr, FileType, INodeNo};
use pollfs_core::{Metadata, ROOT_INO};

/// A FUSE inode number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FuseIno(pub u64);

impl FuseIno {
    /// The root directory.
    pub const ROOT: FuseIno = FuseIno(ROOT_INO);

    /// The FUSE number of pollfs inode `ino`: the same number.
    pub fn from_engine(ino: u64) -> FuseIno {
        FuseIno(ino)
    }

    /// The pollfs inode this number names, or `None` for the root (and
    /// for 0, which FUSE never uses).
    pub fn engine(self) -> Option<u64> {
        Some(self.0).filter(|&n| n > ROOT_INO)
    }
}

impl From<INodeNo> for FuseIno {
    fn from(i: INodeNo) -> FuseIno {
        FuseIno(i.0)
    }
}

impl From<FuseIno> for INodeNo {
    fn from(i: FuseIno) -> INodeNo {
        INodeNo(i.0)
    }
}

/// Mode bits of every file.
pub const FILE_PERM: u16 = 0o644;
/// Mode bits of the root directory.
pub const ROOT_PERM: u16 = 0o755;
/// How long the kernel may keep names and attributes without asking. The
/// mount is the only way to change the filesystem, so the kernel's copies
/// of names and sizes are kept right by the kernel itself (it updates the
/// size on writes and forgets attributes on truncate, fallocate, unlink
/// and rename); what it cannot know is the block count, which this bounds.
pub const TTL: Duration = Duration::from_secs(1);

/// What every attribute reply shares: the owner and the time.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    /// The user and group who mounted.
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
    /// When the mount started: every inode's atime, mtime and ctime.
    pub started: SystemTime,
}

impl Owner {
    fn attr(&self, ino: FuseIno, kind: FileType, perm: u16) -> FileAttr {
        FileAttr {
            ino: ino.into(),
            size: 0,
            blocks: 0,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink: 1,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: pollfs_core::units::PAGE_SIZE as u32,
            flags: 0,
        }
    }

    /// The root directory's attributes.
    pub fn root(&self) -> FileAttr {
        FileAttr {
            nlink: 2,
            ..self.attr(FuseIno::ROOT, FileType::Directory, ROOT_PERM)
        }
    }

    /// A file's attributes. `nlink` is 1 even for a file that was removed
    /// but is still open: the engine does not say whether a file is named.
    pub fn file(&self, m: &Metadata) -> FileAttr {
        FileAttr {
            size: m.len,
            // st_blocks counts 512-byte units; pollfs blocks are 4 KiB.
            blocks: m.blocks.saturating_mul(8),
            ..self.attr(
                FuseIno::from_engine(m.ino),
                FileType::RegularFile,
                FILE_PERM,
            )
        }
    }

    /// True if a chmod/chown to these values would change nothing that
    /// `stat` shows (so it can succeed without storing anything).
    pub fn unchanged(
        &self,
        perm: u16,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> bool {
        mode.is_none_or(|m| m & 0o7777 == u32::from(perm))
            && uid.is_none_or(|u| u == self.uid)
            && gid.is_none_or(|g| g == self.gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_and_pollfs_number_inodes_alike_and_the_root_is_1() {
        assert_eq!(FuseIno::ROOT, FuseIno(1));
        assert_eq!(FuseIno::from_engine(2), FuseIno(2));
        assert_eq!(FuseIno(2).engine(), Some(2));
        assert_eq!(FuseIno::ROOT.engine(), None);
        assert_eq!(FuseIno(0).engine(), None);
        let max = pollfs_core::units::MAX_INODE;
        assert_eq!(FuseIno::from_engine(max).engine(), Some(max));
    }

    #[test]
    fn only_the_shown_mode_and_owner_count_as_unchanged() {
        let o = Owner {
            uid: 7,
            gid: 8,
            started: SystemTime::UNIX_EPOCH,
        };
        assert!(o.unchanged(FILE_PERM, Some(0o100644), Some(7), None));
        assert!(o.unchanged(FILE_PERM, None, None, None));
        assert!(!o.unchanged(FILE_PERM, Some(0o100600), None, None));
        assert!(!o.unchanged(FILE_PERM, None, Some(0), None));
        assert!(!o.unchanged(ROOT_PERM, None, None, Some(9)));
    }
}
