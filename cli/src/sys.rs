//! The system calls the CLI makes directly, which the standard library
//! lacks (`statvfs`, `sched_setaffinity`). The only unsafe code in the
//! crate.
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

/// Pins the calling thread to CPU `cpu`.
pub fn pin_to_cpu(cpu: usize) -> Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!(
            "CPU {cpu}: beyond the {} a CPU set holds",
            libc::CPU_SETSIZE
        ));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set (what CPU_ZERO makes).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so the bit is
    // inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is an initialised cpu_set_t and the size passed is
    // its size; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(format!(
            "pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
