//! Errors: one small enum per kind of operation, joined into [`Error`].

use core::fmt;

use crate::dev::DevError;

/// Problems with a file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`crate::MAX_NAME_LEN`] bytes.
    TooLong,
    /// The name contains a NUL byte or `/`.
    BadByte,
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
}

/// Errors of data and size operations (`read_at`, `write_at`, `set_len`,
/// `punch_hole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RangeError {
    /// `offset + len` overflows `u64`.
    Overflow,
    /// The range ends past [`crate::MAX_FILE_SIZE`].
    TooLarge,
}

/// Resource exhaustion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpaceError {
    /// No free blocks are left on the device.
    DeviceFull,
    /// The metadata no longer fits its checkpoint area (or one inode's
    /// extent list no longer fits one log write).
    MetadataFull,
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
    /// The device failed a command. For writeback failures the dirty data is
    /// kept in the cache and every later sync reports the error until the
    /// data is written.
    Io(DevError),
    /// The engine's configuration does not fit the device.
    Config(&'static str),
    /// The on-disk image is damaged: which block, and what is wrong.
    Corrupt {
        /// The block (4 KiB units) where the problem was found.
        block: u64,
        /// What is wrong.
        what: &'static str,
    },
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

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Namespace(NamespaceError::NotFound) => write!(f, "no such file"),
            Error::Namespace(NamespaceError::Exists) => write!(f, "file exists"),
            Error::Namespace(NamespaceError::Name(NameError::Empty)) => {
                write!(f, "empty file name")
            }
            Error::Namespace(NamespaceError::Name(NameError::TooLong)) => {
                write!(f, "file name longer than {} bytes", crate::MAX_NAME_LEN)
            }
            Error::Namespace(NamespaceError::Name(NameError::BadByte)) => {
                write!(f, "file name contains NUL or '/'")
            }
            Error::Range(RangeError::Overflow) => write!(f, "offset + length overflows"),
            Error::Range(RangeError::TooLarge) => {
                write!(
                    f,
                    "range ends past the maximum file size ({} bytes)",
                    crate::MAX_FILE_SIZE
                )
            }
            Error::Space(SpaceError::DeviceFull) => write!(f, "no space left on device"),
            Error::Space(SpaceError::MetadataFull) => write!(f, "metadata area full"),
            Error::Corrupt { block, what } => write!(f, "corrupted image at block {block}: {what}"),
            Error::Io(e) => write!(f, "device I/O error: {e}"),
            Error::Config(why) => write!(f, "bad configuration: {why}"),
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
