//! The system calls the control socket needs that std does not offer:
//! the peer's uid (`SO_PEERCRED`), our own, and waiting for a connection
//! with a timeout (`poll(2)`).

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The effective uid of this process.
#[allow(unsafe_code)]
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}

/// The uid of the process at the other end of `stream`, as the kernel
/// recorded it when it connected.
#[allow(unsafe_code)]
pub(crate) fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are live locals the kernel writes at most
    // `len` bytes into; the descriptor is kept open by `stream`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Waits up to `timeout` for `socket` to be readable (a connection to
/// accept on a listener, bytes or the end on a stream): true if it is.
#[allow(unsafe_code)]
pub(crate) fn wait_readable(socket: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    let mut fd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one live `pollfd` for the duration of the call; its
    // descriptor is kept open by `socket`.
    let rc = unsafe { libc::poll(&mut fd, 1, ms) };
    match rc {
        0 => Ok(false),
        n if n > 0 => Ok(fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}
