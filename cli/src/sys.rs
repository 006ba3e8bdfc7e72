//! The one system call the CLI makes directly (the standard library has no
//! `statvfs`). The only unsafe code in the crate.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Bytes available to unprivileged users on the filesystem holding `path`
/// (`f_bavail * f_frsize`), or `None` if `statvfs` fails.
pub fn statvfs_available(path: &Path) -> Option<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call,
    // and `st` points to writable memory the size of a `statvfs`, which
    // the call fills in when it returns 0.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it initialised `st` (and it was
    // zeroed before, so every byte is initialised either way).
    let st = unsafe { st.assume_init() };
    #[allow(clippy::useless_conversion)] // the field types differ by platform
    let (avail, frsize) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
    Some(avail.saturating_mul(frsize))
}
