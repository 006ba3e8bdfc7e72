//! libpollfs: pollfs for programs not written in Rust, through a C ABI
//! (`libpollfs.so.0`, `libpollfs.a`, `include/pollfs.h`, `pollfs.pc`).
//!
//! ```text
//! PollfsFs    pollfs_mount / pollfs_format / pollfs_unmount / pollfs_sync,
//!  │          open, remove, rename, mkdir, rmdir, stat, readdir  (fs)
//!  │          credentials, symlink, link, readlink, chmod, chown,
//!  │          utimens, access, the xattr calls                 (posix)
//!  ├─ PollfsFile   pread/pwrite(v), fsync, fdatasync, ftruncate,
//!  │               fallocate, fstat                          (file)
//!  ├─ PollfsQueue  a thread's submit/complete queue          (queue)
//!  └─ PollfsStats  pollfs_fs_stats: counters and gauges      (stats)
//! ```
//!
//! - Calls on `PollfsFs` and `PollfsFile` are thread-safe: each runs in
//!   the calling thread's engine session (its own device queue), so
//!   threads share handles without a lock of ours. A `PollfsQueue` is
//!   one session, driven by one thread at a time.
//! - Errors are negative errno values; `pollfs_last_error()` says what
//!   went wrong (`error`). No panic crosses the boundary: one is caught
//!   and returned as `-EIO` with its message, and the handle it was
//!   working on is poisoned (`poison`): later calls on it fail with
//!   `-ENOTRECOVERABLE`.
//! - `hook`: points where this crate's unit tests crash or panic an
//!   operation (`cfg(test)` only).
//! - `raw`: every pointer from C becomes a reference there; what the code
//!   cannot check is each exported function's `# Safety` contract.
//! - `device`: the device a spec names; [`embed`]: a filesystem a Rust
//!   caller mounted (on any device, its own included) as a C handle.
#![warn(missing_docs)]

mod device;
pub mod embed;
mod error;
mod file;
mod fs;
mod hook;
mod poison;
mod posix;
mod queue;
mod raw;
mod stats;

use core::ffi::c_char;

pub use device::Dev;
pub use error::pollfs_last_error;
pub use file::*;
pub use fs::*;
pub use posix::*;
pub use queue::*;
pub use stats::*;

/// The library's version, as "MAJOR.MINOR.PATCH". Thread-safe.
#[no_mangle]
pub extern "C" fn pollfs_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
