//! For Rust programs that mount a filesystem themselves and hand it to C
//! code linked into the same program (the SQLite VFS's crash test mounts
//! one on its recording device, passed in with
//! `pollfs_device::AnyDevice::from_device`).

use pollfs_core::Fs;

use crate::device::Dev;
use crate::fs::PollfsFs;

/// `fs` as a C handle, to pass to C (`pollfs_sqlite_register`, say); free
/// it with `pollfs_unmount`.
pub fn into_handle(fs: Fs<Dev>) -> *mut PollfsFs {
    Box::into_raw(Box::new(PollfsFs::new(fs)))
}
