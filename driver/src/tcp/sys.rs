//! The two socket calls of the TCP data path, made straight to the C
//! library: `readv` for a receive into up to three buffers, `sendmsg`
//! with `MSG_NOSIGNAL` for a (gathering) send. std's `TcpStream` wrappers
//! cost more user-space instructions than the calls themselves (the
//! `io::Error` built and inspected for every `EAGAIN`, the slice-pattern
//! dispatch onto `read`/`read_vectored`), and its `write_vectored` is a
//! `writev`, which raises `SIGPIPE` on a closed connection. The leaf
//! module of the TCP transport with unsafe code.
#![allow(unsafe_code)]

use std::io::ErrorKind;
use std::os::fd::RawFd;

/// Buffers one call passes on at most.
pub(super) const IOV: usize = 12;

/// What a non-blocking call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Moved {
    /// `n` bytes (0 from a receive: the end of the stream).
    Bytes(usize),
    /// Nothing now (`EAGAIN`).
    NotNow,
}

/// Buffers one receive passes on at most: the receive path never asks
/// for more (a header region, data, a digest with the next header).
pub(super) const RECV_IOV: usize = 3;

const EMPTY: libc::iovec = libc::iovec {
    iov_base: core::ptr::null_mut(),
    iov_len: 0,
};

/// The result of a call that returned `r`: bytes, not now, or the error.
#[inline]
fn moved(r: isize) -> Result<Moved, std::io::Error> {
    if let Ok(n) = usize::try_from(r) {
        return Ok(Moved::Bytes(n));
    }
    let e = std::io::Error::last_os_error();
    match e.kind() {
        ErrorKind::WouldBlock => Ok(Moved::NotNow),
        _ => Err(e),
    }
}

/// Receives into `bufs` (the first [`RECV_IOV`]) from socket `fd`,
/// retrying when interrupted. Always inlined (with its caller in
/// `net.rs`): a call per receive counted about 30 instructions more per
/// read in `vm/io-cost.sh`.
#[inline(always)]
pub(super) fn recv(fd: RawFd, bufs: &mut [&mut [u8]]) -> Result<Moved, std::io::Error> {
    let mut iov = [EMPTY; RECV_IOV];
    let mut n = 0;
    for (slot, b) in iov.iter_mut().zip(bufs.iter_mut()) {
        *slot = libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        };
        n += 1;
    }
    loop {
        // SAFETY: each of the first `n` iovecs describes a live, writable
        // buffer borrowed mutably for this call, and `n <= RECV_IOV` is
        // the array's length; `readv` writes only inside them.
        let r = unsafe { libc::readv(fd, iov.as_ptr(), n as libc::c_int) };
        match moved(r) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Sends from `bufs` (the first [`IOV`]) on socket `fd` without raising
/// `SIGPIPE`, retrying when interrupted. Always inlined, as [`recv`] is.
#[inline(always)]
pub(super) fn send(fd: RawFd, bufs: &[&[u8]]) -> Result<Moved, std::io::Error> {
    if let [one] = bufs {
        // A batch of capsules: one buffer, no message header to build.
        loop {
            // SAFETY: `one` is a live buffer borrowed for this call, of
            // `one.len()` bytes; `send` only reads it.
            let r = unsafe { libc::send(fd, one.as_ptr().cast(), one.len(), libc::MSG_NOSIGNAL) };
            match moved(r) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
    let mut iov = [EMPTY; IOV];
    let mut n = 0;
    for (slot, b) in iov.iter_mut().zip(bufs) {
        *slot = libc::iovec {
            iov_base: b.as_ptr().cast_mut().cast(),
            iov_len: b.len(),
        };
        n += 1;
    }
    // SAFETY: `msghdr` is plain data; all zeroes is a valid empty header.
    let mut msg: libc::msghdr = unsafe { core::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = n as _;
    loop {
        // SAFETY: `msg` names the first `n` iovecs, each a live buffer
        // borrowed for this call; `sendmsg` only reads them (the mutable
        // pointer is the C type's, nothing is written through it).
        let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
        match moved(r) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}
