//! The system calls the CLI makes directly, where the standard library
//! has no wrapper: `statvfs`, `sched_setaffinity`, signal masks,
//! `umount2`, mount(2)'s remount, `syncfs`, `fork` and `setsid`. The only unsafe code in the crate.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::anyhow;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Bytes available to unprivileged users on the filesystem holding `path`
/// (`f_bavail * f_frsize`), or `None` if `statvfs` fails.
pub fn statvfs_available(path: &Path) -> Option<u64> {
    let c_path = c_path(path).ok()?;
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
pub fn pin_to_cpu(cpu: usize) -> anyhow::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(anyhow!(
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
        return Err(anyhow!(
            "pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The signals that end a mount: SIGINT, SIGTERM and SIGHUP.
#[derive(Clone, Copy)]
pub struct EndSignals(libc::sigset_t);

impl std::fmt::Debug for EndSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndSignals(SIGINT, SIGTERM, SIGHUP)")
    }
}

impl EndSignals {
    /// Blocks the signals in the calling thread, and so in every thread it
    /// starts afterwards; [`EndSignals::wait`] then receives them.
    pub fn block() -> io::Result<EndSignals> {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        // SAFETY: `set` is writable memory the size of a sigset_t, which
        // sigemptyset initialises; sigaddset then changes it in place.
        let set = unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(set.as_mut_ptr(), sig);
            }
            set.assume_init()
        };
        // SAFETY: `set` is an initialised signal set that outlives the
        // call; the old mask is not asked for (null).
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc == 0 {
            Ok(EndSignals(set))
        } else {
            Err(io::Error::from_raw_os_error(rc))
        }
    }

    /// Waits for one of the signals (blocked by [`EndSignals::block`]) and
    /// returns its number.
    pub fn wait(&self) -> io::Result<i32> {
        let mut sig: libc::c_int = 0;
        // SAFETY: `self.0` is an initialised signal set and `sig` a
        // writable int, both alive for the call.
        let rc = unsafe { libc::sigwait(&self.0, &mut sig) };
        if rc == 0 {
            Ok(sig)
        } else {
            Err(io::Error::from_raw_os_error(rc))
        }
    }
}

/// Unmounts the filesystem mounted on `path`; `lazy` detaches it now and
/// lets the kernel finish when the last user is gone (`umount -l`).
pub fn unmount(path: &Path, lazy: bool) -> io::Result<()> {
    let c_path = c_path(path)?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(c_path.as_ptr(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Changes the flags of the filesystem mounted on `path` (mount(2) with
/// `MS_REMOUNT`): `flags` are the `MS_*` bits it is to have from now on.
pub fn remount(path: &Path, flags: libc::c_ulong) -> io::Result<()> {
    let c_path = c_path(path)?;
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call;
    // a remount reads no source, type or data, so those may be null.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c_path.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | flags,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes everything written to the filesystem holding `path` durable
/// (syncfs(2)): the kernel's dirty pages reach the server, which syncs.
pub fn syncfs(path: &Path) -> io::Result<()> {
    let dir = std::fs::File::open(path)?;
    // SAFETY: the descriptor is open for the whole call.
    let rc = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Which side of a [`fork`] this is.
#[derive(Debug)]
pub enum Forked {
    /// The original process.
    Parent,
    /// The new process.
    Child,
}

/// Forks the process. Call it only while the process has one thread: the
/// child gets only the calling thread, and locks other threads held stay
/// locked in it forever.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: fork has no memory preconditions; the caller guarantees the
    // process is single-threaded, so the child's copy of every lock and
    // allocator state is consistent.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        _ => Ok(Forked::Parent),
    }
}

/// Makes the calling process the leader of a new session, with no
/// controlling terminal (so a terminal's Ctrl-C or hang-up does not reach
/// it).
pub fn setsid() -> io::Result<()> {
    // SAFETY: setsid takes no arguments and touches no memory of ours.
    if unsafe { libc::setsid() } == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Points standard input, output and error at /dev/null (a background
/// process, once nobody reads what it prints).
pub fn detach_stdio() -> io::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in 0..=2 {
        // SAFETY: dup2 takes two descriptors: `null` is open for the call,
        // and 0..=2 are the standard streams, which this replaces.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
