//! Inode numbers and attributes as the kernel sees them.
//!
//! FUSE's root directory is inode 1, and so is pollfs's
//! ([`InodeId::ROOT`]): a FUSE inode number is the pollfs inode number
//! ([`FuseIno`]), converted here and nowhere else. What
//! `stat` shows is the engine's [`Metadata`]: kind, permission bits,
//! owner, link count (0 for a removed file still open), size, blocks and
//! the three times.

use std::time::{Duration, SystemTime};

use fuser::{FileAttr, FileType, INodeNo};
use pollfs_core::{InodeId, Kind, Metadata};

/// A FUSE inode number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FuseIno(pub u64);

impl FuseIno {
    /// The root directory.
    pub const ROOT: FuseIno = FuseIno(InodeId::ROOT.get());

    /// The pollfs inode this number names (the same number).
    pub fn engine(self) -> InodeId {
        InodeId(self.0)
    }
}

impl From<InodeId> for FuseIno {
    fn from(i: InodeId) -> FuseIno {
        FuseIno(i.get())
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

/// How long the kernel may keep names and attributes without asking, in
/// direct mode. The mount is the only way to change the filesystem, so the
/// kernel's copies are kept right by the kernel itself (it updates the
/// size on writes and takes or drops an inode's attributes with each
/// request that changes them); what it cannot know is the block count and
/// the times a write sets, which this bounds.
pub const TTL: Duration = Duration::from_secs(1);

/// The same in kernel mode, where the kernel keeps a file's size and
/// times itself and drops the block count when it writes: only a block
/// count that writeback changes after the kernel last asked can be stale,
/// and for at most this long.
pub const KERNEL_TTL: Duration = Duration::from_secs(60);

/// Who makes a new inode: the caller of the request, whose ids and umask
/// the kernel sends with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The caller's file-system user id.
    pub uid: u32,
    /// The caller's file-system group id.
    pub gid: u32,
    /// The caller's umask, which the server applies (`FUSE_DONT_MASK`)
    /// unless the directory has a default ACL ([`acl`](super::acl)).
    pub umask: u16,
}

/// The FUSE kind of a pollfs inode kind.
pub fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
    }
}

/// A time from the engine: nanoseconds since the Unix epoch, signed (see
/// [`nanos`]).
pub fn time(nanos: u64) -> SystemTime {
    let signed = nanos as i64;
    let d = Duration::from_nanos(signed.unsigned_abs());
    if signed < 0 {
        SystemTime::UNIX_EPOCH - d
    } else {
        SystemTime::UNIX_EPOCH + d
    }
}

/// A time for the engine: nanoseconds since the epoch as a signed 64-bit
/// count (two's complement in the engine's `u64`), so times before 1970
/// are kept as ext4 and tmpfs keep them (xfstests generic/258); clamped
/// to what it holds (1677 to 2262), as the VFS clamps a time to the range
/// a filesystem can store.
pub fn nanos(t: SystemTime) -> u64 {
    let signed = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    };
    signed as u64
}

/// What `stat` shows for an inode.
pub fn attr(m: &Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(m.ino.get()),
        size: m.len,
        // st_blocks counts 512-byte units; pollfs blocks are 4 KiB.
        blocks: m.blocks.saturating_mul(8),
        atime: time(m.atime),
        mtime: time(m.mtime),
        ctime: time(m.ctime),
        // Linux has no creation time in stat (statx's btime stays unset).
        crtime: time(m.ctime),
        kind: file_type(m.kind),
        perm: m.perm,
        nlink: m.nlink,
        uid: m.uid,
        gid: m.gid,
        // The kernel's device numbers fit its 32-bit encoding; one made
        // through the engine's API that does not shows as 0.
        rdev: u32::try_from(m.rdev).unwrap_or(0),
        blksize: pollfs_core::units::PAGE_SIZE as u32,
        flags: 0,
    }
}

/// What a lookup of a name that is not there replies: inode 0, which the
/// kernel keeps for the entry timeout as "no such name" (a negative
/// entry), so a second look for it is answered without a request. A
/// name made through the mount replaces it at once.
pub fn absent() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_and_pollfs_number_inodes_alike_and_the_root_is_1() {
        assert_eq!(FuseIno::ROOT, FuseIno(1));
        assert_eq!(FuseIno(7).engine(), InodeId(7));
        assert_eq!(FuseIno::from(InodeId(8)), FuseIno(8));
        assert_eq!(FuseIno::from(INodeNo(9)), FuseIno(9));
    }

    #[test]
    fn times_round_trip_to_the_nanosecond_and_clamp_outside_the_range() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        assert_eq!(nanos(t), 1_700_000_000_123_456_789);
        assert_eq!(time(nanos(t)), t);
        let before = SystemTime::UNIX_EPOCH - Duration::new(10, 7);
        assert_eq!(nanos(before) as i64, -10_000_000_007);
        assert_eq!(time(nanos(before)), before);
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(600 * 365 * 86_400);
        assert_eq!(nanos(far), i64::MAX as u64);
        let long_ago = SystemTime::UNIX_EPOCH - Duration::from_secs(600 * 365 * 86_400);
        assert_eq!(nanos(long_ago) as i64, i64::MIN);
    }
}
