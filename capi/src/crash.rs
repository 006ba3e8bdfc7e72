//! For the SQLite VFS's crash test (feature `crash-test`): a filesystem
//! the test mounted on its recording device, handed to C as a handle.

use pollfs_core::Fs;

use crate::device::Dev;
use crate::fs::PollfsFs;

/// `fs` as a C handle, to pass to `pollfs_sqlite_register`; free it with
/// `pollfs_unmount`.
pub fn into_handle(fs: Fs<Dev>) -> *mut PollfsFs {
    Box::into_raw(Box::new(PollfsFs::new(fs)))
}
