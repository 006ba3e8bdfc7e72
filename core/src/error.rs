//! Errors: one small enum per kind of operation, joined into [`Error`].

pub use crate::persist::damage::{
    CheckpointDamage, IndexDamage, RecordDamage, ReplayDamage, SuperblockField,
};
use core::fmt;

use crate::dev::DevError;

/// Problems with a file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`crate::units::MAX_NAME_LEN`] bytes.
    TooLong,
    /// The name contains a NUL byte or `/`.
    BadByte,
    /// The name is `.` or `..`.
    Dots,
}

/// Errors of the namespace operations (`create`, `open`, `remove`, `rename`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NamespaceError {
    /// No file has that name.
    NotFound,
    /// A file with that name already exists.
    Exists,
    /// The name is not valid.
    Name(NameError),
    /// A directory was needed (a path component, a parent, `rmdir`'s
    /// target, a rename over a directory by a non-directory's name).
    NotADirectory,
    /// A directory where a file was needed (`unlink`, `open`, a rename of
    /// a file over a directory).
    IsADirectory,
    /// The directory is not empty.
    NotEmpty,
    /// A rename would move a directory under itself.
    InvalidMove,
    /// The inode has the most links it may have.
    TooManyLinks,
    /// Not allowed: a hard link to a directory, removing or renaming the
    /// root.
    NotPermitted,
    /// `readlink` of something other than a symbolic link.
    NotASymlink,
    /// A symbolic link where a file or directory was needed: paths are not
    /// followed through links (resolve the link's target and use that).
    IsASymlink,
    /// A FIFO, socket or device node where a regular file was needed
    /// (`open`): the engine keeps its inode, not what it stands for.
    Special,
    /// `mknod` of a directory or symbolic link (they have their own
    /// calls).
    BadKind,
}

/// Errors of extended-attribute operations (the limits are
/// [`persist::xattr`](crate::persist::xattr)'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum XattrError {
    /// The inode has no attribute of that name.
    NotFound,
    /// `XATTR_CREATE` and the attribute exists.
    Exists,
    /// The name is empty or longer than 255 bytes.
    NameLength,
    /// The name is in no namespace pollfs keeps (`user.`, `trusted.`,
    /// `security.`, `system.posix_acl_access`/`_default`).
    Namespace,
    /// The value is larger than 64 KiB.
    ValueTooLarge,
    /// The inode's attributes would pass their total.
    Full,
}

impl fmt::Display for XattrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XattrError::NotFound => write!(f, "no such extended attribute"),
            XattrError::Exists => write!(f, "the extended attribute exists"),
            XattrError::NameLength => {
                write!(f, "an extended attribute's name is empty or longer than 255 bytes")
            }
            XattrError::Namespace => write!(
                f,
                "extended attribute names start with user., trusted., security. or are system.posix_acl_access/default"
            ),
            XattrError::ValueTooLarge => {
                write!(f, "an extended attribute's value is larger than 64 KiB")
            }
            XattrError::Full => write!(
                f,
                "the inode's extended attributes would pass their 256 KiB total (remove some)"
            ),
        }
    }
}

/// Refusals of the POSIX policy ([`fs::posix`](crate::fs::posix)):
/// permissions, ownership and ACL values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PosixError {
    /// The caller's credentials do not grant the access (EACCES).
    AccessDenied,
    /// Only the owner (or root) may do that: chmod, chown, set times
    /// explicitly, set an ACL (EPERM).
    NotOwner,
    /// An ACL value is malformed: size, tag, permission or order
    /// (EINVAL).
    BadAcl,
    /// An ACL value of a version other than 2 (EOPNOTSUPP).
    AclVersion,
    /// An ACL where there can be none: on a symbolic link (EOPNOTSUPP).
    NoAclHere,
    /// A default ACL on something other than a directory (EACCES).
    DefaultAclNotDir,
}

impl fmt::Display for PosixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PosixError::AccessDenied => write!(f, "permission denied"),
            PosixError::NotOwner => write!(f, "operation not permitted: not the owner"),
            PosixError::BadAcl => write!(f, "malformed POSIX ACL"),
            PosixError::AclVersion => write!(f, "POSIX ACL of an unknown version"),
            PosixError::NoAclHere => write!(f, "symbolic links take no ACL"),
            PosixError::DefaultAclNotDir => write!(f, "only directories take a default ACL"),
        }
    }
}

/// Errors of data and size operations (`read_at`, `write_at`, `set_len`,
/// `punch_hole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RangeError {
    /// `offset + len` overflows `u64`.
    Overflow,
    /// The range ends past [`crate::units::MAX_FILE_SIZE`].
    TooLarge,
    /// The file ended before the buffer was filled (`read_exact_at`).
    EndOfFile,
    /// Direct I/O at an offset or of a length that is not a multiple of
    /// the page size (4 KiB).
    Unaligned,
    /// An empty range where one byte at least is needed (`allocate`).
    Empty,
}

/// A configuration that does not fit the device, or a call with what it
/// cannot use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The device's DMA arena has `frames` frames; the engine keeps
    /// `metadata` of them for metadata I/O and needs `needed` more.
    FewFrames {
        /// Frames the device offers.
        frames: u32,
        /// Frames kept for metadata I/O.
        metadata: u32,
        /// Frames needed beyond those.
        needed: u32,
    },
    /// `Config::cache_pages` asks for more pages than the frames left
    /// after the metadata's.
    CacheBeyondFrames {
        /// Pages asked for.
        cache_pages: u32,
        /// Frames there are for them.
        usable: u32,
    },
    /// `Config::cache_pages` is below the least the cache works with.
    CacheTooSmall {
        /// Pages asked for.
        cache_pages: u32,
        /// The least it works with.
        min: u32,
    },
    /// The device is too small for a filesystem.
    DeviceTooSmall {
        /// Its capacity in 4 KiB blocks.
        blocks: u64,
    },
    /// A session was asked to work on a file of another filesystem.
    ForeignFile,
}

/// Why a repair could not make an image consistent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RepairError {
    /// After repair, metadata still claims the block `block` twice (or a
    /// block outside the data area): the image needs more than this repair
    /// can do.
    StillOverlaps {
        /// The first block claimed twice.
        block: u64,
    },
}

/// Resource exhaustion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpaceError {
    /// No free blocks are left on the device.
    DeviceFull,
    /// The metadata does not fit in the free space left for it.
    MetadataFull,
    /// Every inode number has been used.
    InodeNumbers,
    /// The log's sequence numbers or the superblock's generations have
    /// reached their limit (2^62; only a crafted image gets there): nothing
    /// more is written, so the image stays as it is.
    SequenceExhausted,
}

/// Any pollfs error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// See [`NamespaceError`].
    Namespace(NamespaceError),
    /// See [`RangeError`].
    Range(RangeError),
    /// See [`SpaceError`].
    Space(SpaceError),
    /// See [`XattrError`].
    Xattr(XattrError),
    /// See [`PosixError`].
    Posix(PosixError),
    /// The device failed a command. For writeback failures the dirty data is
    /// kept in the cache and every later sync reports the error until the
    /// data is written.
    Io(DevError),
    /// The engine's configuration does not fit the device, or a call was
    /// made with what it cannot use (see [`ConfigError`]).
    Config(ConfigError),
    /// A repair could not make the image consistent (see [`RepairError`]).
    Repair(RepairError),
    /// The on-disk image is damaged: which block, and what is wrong.
    Corrupt {
        /// The block (4 KiB units) where the problem was found.
        block: u64,
        /// What is wrong.
        damage: Damage,
    },
}

/// What is wrong with an on-disk image (see [`Error::Corrupt`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Damage {
    /// Neither superblock copy is a pollfs superblock.
    NotPollfs,
    /// A superblock fails its checksum.
    SuperblockChecksum,
    /// The image was written in a format version this code does not read.
    Version {
        /// The image's version.
        found: u32,
        /// The version this code reads and writes.
        supported: u32,
    },
    /// The image uses feature flags this code does not know.
    Features(u32),
    /// Superblock fields contradict each other.
    SuperblockFields(SuperblockField),
    /// The filesystem is larger than the device it is on.
    DeviceTooSmall {
        /// Blocks the filesystem spans.
        fs_blocks: u64,
        /// Blocks the device has.
        device_blocks: u64,
    },
    /// The filesystem was made for another logical block size.
    BlockSize {
        /// The block size in the superblock.
        fs: u32,
        /// The device's block size.
        device: u32,
    },
    /// A checkpoint frame is missing, damaged or out of place.
    Checkpoint(CheckpointDamage),
    /// The metadata index (a page or an item) is damaged.
    Index(IndexDamage),
    /// A metadata record is malformed or out of range.
    Record(RecordDamage),
    /// A record contradicts the metadata before it.
    Replay(ReplayDamage),
    /// A log write is damaged (or missing) while later log writes follow
    /// it: the log has a hole, not an end.
    LogHole {
        /// The sequence number that should come next.
        lsn: u64,
        /// A later sequence number found, intact, further on.
        later_lsn: u64,
    },
    /// The metadata breaks an invariant (fsck lists each problem).
    Inconsistent {
        /// How many problems.
        problems: usize,
    },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::NotPollfs => write!(f, "bad magic (not a pollfs filesystem)"),
            Damage::SuperblockChecksum => write!(f, "superblock checksum mismatch"),
            Damage::Version { found, supported } => write!(
                f,
                "format version {found}, but this pollfs reads version {supported} \
                 (make a new filesystem with `pollfs mkfs`)"
            ),
            Damage::Features(x) => write!(f, "unknown feature flags {x:#x}"),
            Damage::SuperblockFields(what) => write!(f, "superblock is inconsistent: {what}"),
            Damage::DeviceTooSmall {
                fs_blocks,
                device_blocks,
            } => write!(
                f,
                "the filesystem spans {fs_blocks} blocks but the device has only \
                 {device_blocks} (truncated image?)"
            ),
            Damage::BlockSize { fs, device } => write!(
                f,
                "formatted for {fs}-byte device blocks, but the device has {device}-byte blocks"
            ),
            Damage::Checkpoint(what) => write!(f, "checkpoint: {what}"),
            Damage::Index(what) => write!(f, "metadata index: {what}"),
            Damage::Record(what) => write!(f, "malformed record: {what}"),
            Damage::Replay(what) => write!(f, "record does not apply: {what}"),
            Damage::LogHole { lsn, later_lsn } => write!(
                f,
                "log write {lsn} is damaged but log write {later_lsn} follows it \
                 (run `pollfs fsck --repair` to keep what precedes the damage)"
            ),
            Damage::Inconsistent { problems } => write!(
                f,
                "metadata is inconsistent ({problems} problems; run `pollfs fsck` for details)"
            ),
        }
    }
}

impl From<PosixError> for Error {
    fn from(e: PosixError) -> Self {
        Error::Posix(e)
    }
}
impl From<XattrError> for Error {
    fn from(e: XattrError) -> Self {
        Error::Xattr(e)
    }
}
impl From<NamespaceError> for Error {
    fn from(e: NamespaceError) -> Self {
        Error::Namespace(e)
    }
}
impl From<NameError> for Error {
    fn from(e: NameError) -> Self {
        Error::Namespace(NamespaceError::Name(e))
    }
}
impl From<RangeError> for Error {
    fn from(e: RangeError) -> Self {
        Error::Range(e)
    }
}
impl From<SpaceError> for Error {
    fn from(e: SpaceError) -> Self {
        Error::Space(e)
    }
}
impl From<DevError> for Error {
    fn from(e: DevError) -> Self {
        Error::Io(e)
    }
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => write!(f, "empty file name"),
            NameError::TooLong => write!(
                f,
                "file name longer than {} bytes",
                crate::units::MAX_NAME_LEN
            ),
            NameError::BadByte => write!(f, "file name contains NUL or '/'"),
            NameError::Dots => write!(f, "file name is '.' or '..'"),
        }
    }
}

impl fmt::Display for NamespaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamespaceError::NotFound => write!(f, "no such file"),
            NamespaceError::Exists => write!(f, "file exists"),
            NamespaceError::Name(e) => e.fmt(f),
            NamespaceError::NotADirectory => write!(f, "not a directory"),
            NamespaceError::IsADirectory => write!(f, "is a directory"),
            NamespaceError::NotEmpty => write!(f, "directory not empty"),
            NamespaceError::InvalidMove => {
                write!(f, "cannot move a directory under itself")
            }
            NamespaceError::TooManyLinks => write!(f, "too many links"),
            NamespaceError::NotPermitted => write!(f, "operation not permitted"),
            NamespaceError::NotASymlink => write!(f, "not a symbolic link"),
            NamespaceError::IsASymlink => write!(
                f,
                "a symbolic link where a file or directory was needed (links are not followed)"
            ),
            NamespaceError::Special => write!(
                f,
                "a FIFO, socket or device node, not a regular file (open it through a mount)"
            ),
            NamespaceError::BadKind => write!(
                f,
                "mknod makes files, FIFOs, sockets and device nodes (use mkdir or symlink)"
            ),
        }
    }
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangeError::Overflow => write!(f, "offset + length overflows"),
            RangeError::TooLarge => write!(
                f,
                "range ends past the maximum file size ({} bytes)",
                crate::units::MAX_FILE_SIZE
            ),
            RangeError::EndOfFile => write!(f, "the file ends before the buffer is full"),
            RangeError::Unaligned => write!(
                f,
                "direct I/O needs an offset and a length that are multiples of 4096"
            ),
            RangeError::Empty => write!(f, "the range is empty: give a length of 1 or more"),
        }
    }
}

impl fmt::Display for SpaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpaceError::DeviceFull => write!(f, "no space left on device"),
            SpaceError::MetadataFull => write!(f, "no free space left for the metadata"),
            SpaceError::InodeNumbers => write!(f, "inode numbers exhausted"),
            SpaceError::SequenceExhausted => {
                write!(
                    f,
                    "log sequence numbers or superblock generations exhausted"
                )
            }
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::FewFrames {
                frames,
                metadata,
                needed,
            } => write!(
                f,
                "the device offers {frames} DMA frames; metadata I/O keeps {metadata} and the \
                 page cache needs at least {needed} more: give the device more DMA memory"
            ),
            ConfigError::CacheBeyondFrames {
                cache_pages,
                usable,
            } => write!(
                f,
                "cache_pages is {cache_pages} but the device has {usable} DMA frames for the \
                 cache: ask for fewer pages or give the device more frames"
            ),
            ConfigError::CacheTooSmall { cache_pages, min } => write!(
                f,
                "cache_pages is {cache_pages}; the page cache needs at least {min}"
            ),
            ConfigError::DeviceTooSmall { blocks } => write!(
                f,
                "the device has {blocks} blocks of 4 KiB, too few for a filesystem"
            ),
            ConfigError::ForeignFile => write!(
                f,
                "the file belongs to another filesystem than the session: use a session of \
                 the file's own filesystem"
            ),
        }
    }
}

impl fmt::Display for RepairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RepairError::StillOverlaps { block } => write!(
                f,
                "after repair, metadata still claims block {block} twice or outside the data \
                 area: the image needs more than fsck --repair can do"
            ),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Namespace(e) => e.fmt(f),
            Error::Range(e) => e.fmt(f),
            Error::Space(e) => e.fmt(f),
            Error::Xattr(e) => e.fmt(f),
            Error::Posix(e) => e.fmt(f),
            Error::Corrupt { block, damage } => {
                write!(f, "corrupted image at block {block}: {damage}")
            }
            Error::Io(e) => write!(f, "device I/O error: {e}"),
            Error::Config(e) => write!(f, "bad configuration: {e}"),
            Error::Repair(e) => write!(f, "repair failed: {e}"),
        }
    }
}

impl core::error::Error for NameError {}
impl core::error::Error for NamespaceError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            NamespaceError::Name(e) => Some(e),
            _ => None,
        }
    }
}
impl core::error::Error for RangeError {}
impl core::error::Error for SpaceError {}
impl core::error::Error for XattrError {}
impl core::error::Error for PosixError {}
impl core::error::Error for Damage {}
impl core::error::Error for ConfigError {}
impl core::error::Error for RepairError {}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::Namespace(e) => Some(e),
            Error::Range(e) => Some(e),
            Error::Space(e) => Some(e),
            Error::Xattr(e) => Some(e),
            Error::Posix(e) => Some(e),
            Error::Io(e) => Some(e),
            Error::Corrupt { damage, .. } => Some(damage),
            Error::Config(e) => Some(e),
            Error::Repair(e) => Some(e),
        }
    }
}

impl Error {
    /// The Linux errno that best says what went wrong, if one does
    /// (`read_exact_at` past EOF has none: `std` reports it as
    /// `ErrorKind::UnexpectedEof` with no code).
    pub fn errno(&self) -> Option<i32> {
        // Linux values, written out so that the `no_std` build has them.
        const EPERM: i32 = 1;
        const ENOENT: i32 = 2;
        const EIO: i32 = 5;
        const EBADF: i32 = 9;
        const EEXIST: i32 = 17;
        const ENOTDIR: i32 = 20;
        const EISDIR: i32 = 21;
        const EMLINK: i32 = 31;
        const ENOTEMPTY: i32 = 39;
        const ELOOP: i32 = 40;
        const ENXIO: i32 = 6;
        const E2BIG: i32 = 7;
        const ERANGE: i32 = 34;
        const ENODATA: i32 = 61;
        const EOPNOTSUPP: i32 = 95;
        const EINVAL: i32 = 22;
        const EFBIG: i32 = 27;
        const ENOSPC: i32 = 28;
        const ENAMETOOLONG: i32 = 36;
        const EUCLEAN: i32 = 117;
        const EACCES: i32 = 13;
        Some(match self {
            Error::Namespace(NamespaceError::NotFound) => ENOENT,
            Error::Namespace(NamespaceError::Exists) => EEXIST,
            Error::Namespace(NamespaceError::Name(NameError::TooLong)) => ENAMETOOLONG,
            Error::Namespace(NamespaceError::Name(_)) => EINVAL,
            Error::Namespace(NamespaceError::NotADirectory) => ENOTDIR,
            Error::Namespace(NamespaceError::IsADirectory) => EISDIR,
            Error::Namespace(NamespaceError::NotEmpty) => ENOTEMPTY,
            Error::Namespace(NamespaceError::InvalidMove) => EINVAL,
            Error::Namespace(NamespaceError::TooManyLinks) => EMLINK,
            Error::Namespace(NamespaceError::NotPermitted) => EPERM,
            // As readlink(2) says of a file that is not a link.
            Error::Namespace(NamespaceError::NotASymlink) => EINVAL,
            // As open(2) with O_NOFOLLOW, and openat2(2) with
            // RESOLVE_NO_SYMLINKS, say of a link met on the path.
            Error::Namespace(NamespaceError::IsASymlink) => ELOOP,
            // As open(2) says of a socket, and of a device with no driver.
            Error::Namespace(NamespaceError::Special) => ENXIO,
            // As mknod(2) says of a mode that is not a file, FIFO, socket
            // or device.
            Error::Namespace(NamespaceError::BadKind) => EINVAL,
            Error::Range(RangeError::Overflow) => EINVAL,
            Error::Range(RangeError::TooLarge) => EFBIG,
            Error::Range(RangeError::EndOfFile) => return None,
            Error::Range(RangeError::Unaligned) => EINVAL,
            Error::Range(RangeError::Empty) => EINVAL,
            Error::Xattr(XattrError::NotFound) => ENODATA,
            Error::Xattr(XattrError::Exists) => EEXIST,
            // As setxattr(2) says of a name too long.
            Error::Xattr(XattrError::NameLength) => ERANGE,
            Error::Xattr(XattrError::Namespace) => EOPNOTSUPP,
            Error::Xattr(XattrError::ValueTooLarge) => E2BIG,
            Error::Xattr(XattrError::Full) => ENOSPC,
            Error::Posix(PosixError::AccessDenied | PosixError::DefaultAclNotDir) => EACCES,
            Error::Posix(PosixError::NotOwner) => EPERM,
            Error::Posix(PosixError::BadAcl) => EINVAL,
            Error::Posix(PosixError::AclVersion | PosixError::NoAclHere) => EOPNOTSUPP,
            Error::Space(_) => ENOSPC,
            Error::Io(_) => EIO,
            Error::Corrupt { .. } => EUCLEAN,
            // A handle used with another filesystem's session, as a
            // descriptor used where it is not valid.
            Error::Config(ConfigError::ForeignFile) => EBADF,
            Error::Config(_) => EINVAL,
            Error::Repair(_) => EUCLEAN,
        })
    }
}

#[cfg(feature = "std")]
impl From<Error> for std::io::Error {
    /// An error Linux has an errno for becomes that OS error, so
    /// `raw_os_error` and `kind` mean what they mean for a kernel
    /// filesystem (ENOENT, EEXIST, ENAMETOOLONG, EINVAL, EFBIG, ENOSPC,
    /// EIO). A damaged image and a bad configuration keep their message
    /// (kinds `InvalidData`, `InvalidInput`), and `read_exact_at` past EOF
    /// is `UnexpectedEof`, as in `std`.
    fn from(e: Error) -> std::io::Error {
        use std::io::ErrorKind;
        match e {
            Error::Corrupt { .. } | Error::Repair(_) => {
                std::io::Error::new(ErrorKind::InvalidData, e)
            }
            Error::Config(ConfigError::ForeignFile) => std::io::Error::from_raw_os_error(9),
            Error::Config(_) => std::io::Error::new(ErrorKind::InvalidInput, e),
            _ => match e.errno() {
                Some(errno) => std::io::Error::from_raw_os_error(errno),
                None => std::io::Error::new(ErrorKind::UnexpectedEof, e),
            },
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
