//! The byte streams the TCP transport runs on, as two small traits, so the
//! queue logic is `no_std` and can run over anything that moves bytes in
//! order: `std::net::TcpStream` in [`super::net`], an in-memory stream in
//! the tests and the fuzz target.
//!
//! Both directions are non-blocking: `Ok(0)` means "not now", and the
//! queue's owner polls again later. Nothing here waits.

use core::fmt;

use crate::tls::TlsError;

/// Why a stream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkError {
    /// The peer closed the connection (end of stream).
    Closed,
    /// The peer reset or aborted the connection.
    Reset,
    /// Nobody listens at the address.
    Refused,
    /// Connecting took too long.
    TimedOut,
    /// The address cannot be reached or resolved.
    Unreachable,
    /// Any other failure of the operating system's socket.
    Other,
    /// The secure channel (TLS) could not be set up, or failed.
    Tls(TlsError),
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkError::Tls(e) => return fmt::Display::fmt(e, f),
            LinkError::Closed => "closed by the peer",
            LinkError::Reset => "reset by the peer",
            LinkError::Refused => "refused",
            LinkError::TimedOut => "timed out",
            LinkError::Unreachable => "address unreachable",
            LinkError::Other => "socket error",
        })
    }
}

impl core::error::Error for LinkError {}

/// One connected, ordered, reliable byte stream, used without blocking.
pub trait Stream: Send + 'static {
    /// Sends from `bufs`, in order, as much as fits now; `Ok(0)` when
    /// nothing does.
    fn send(&mut self, bufs: &[&[u8]]) -> Result<usize, LinkError>;
    /// Receives into `bufs`, in order, what has arrived; `Ok(0)` when
    /// nothing has, [`LinkError::Closed`] at the end of the stream. The
    /// queue passes at most three buffers, and an implementation may fill
    /// only the first three. Filling less than all of them says nothing
    /// more had arrived: the queue does not ask again in the same poll.
    fn recv(&mut self, bufs: &mut [&mut [u8]]) -> Result<usize, LinkError>;
}

/// Opens connections to one NVMe/TCP controller.
pub trait Connector: Send + Sync + 'static {
    /// The stream a connection gives.
    type Stream: Stream;
    /// Something that can end the connection from another thread (a
    /// controller reset drops queues that other threads own).
    type Handle: Send + 'static;
    /// Opens a connection (this may block up to a bounded time).
    fn connect(&self) -> Result<(Self::Stream, Self::Handle), LinkError>;
    /// Ends the connection behind `handle`: its owner's next receive sees
    /// the end of the stream.
    fn shut(&self, handle: &Self::Handle);
    /// Called between failed connection attempts while reconnecting (the
    /// hosted connector sleeps briefly; the default spins once).
    fn pause(&self) {
        core::hint::spin_loop();
    }
}

/// An in-memory stream for tests and fuzzing: bytes pushed with
/// [`MemoryStream::feed`] are received (at most `max_recv` per call, to
/// exercise partial reads); what the host sends is kept for inspection.
/// Clones share the same state.
#[derive(Clone, Debug, Default)]
pub struct MemoryStream {
    inner: alloc::sync::Arc<spin::Mutex<MemoryInner>>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    incoming: alloc::collections::VecDeque<u8>,
    sent: alloc::vec::Vec<u8>,
    max_recv: usize,
    max_send: usize,
    eof: bool,
    recvs: usize,
}

impl MemoryStream {
    /// A stream taking at most `max_send` bytes per send and giving at
    /// most `max_recv` per receive (0: no limit).
    pub fn new(max_send: usize, max_recv: usize) -> MemoryStream {
        let s = MemoryStream::default();
        {
            let mut i = s.inner.lock();
            i.max_send = max_send;
            i.max_recv = max_recv;
        }
        s
    }
    /// Bytes for the host to receive.
    pub fn feed(&self, bytes: &[u8]) {
        self.inner.lock().incoming.extend(bytes.iter().copied());
    }
    /// After the fed bytes, the peer closes.
    pub fn close(&self) {
        self.inner.lock().eof = true;
    }
    /// Takes what the host has sent so far.
    pub fn take_sent(&self) -> alloc::vec::Vec<u8> {
        core::mem::take(&mut self.inner.lock().sent)
    }
    /// Bytes fed and not yet received.
    pub fn pending(&self) -> usize {
        self.inner.lock().incoming.len()
    }
    /// Calls to `recv` so far.
    pub fn recv_calls(&self) -> usize {
        self.inner.lock().recvs
    }
}

impl Stream for MemoryStream {
    fn send(&mut self, bufs: &[&[u8]]) -> Result<usize, LinkError> {
        let mut i = self.inner.lock();
        let mut room = if i.max_send == 0 {
            usize::MAX
        } else {
            i.max_send
        };
        let mut n = 0;
        for b in bufs {
            let k = b.len().min(room);
            i.sent.extend_from_slice(b.get(..k).unwrap_or(&[]));
            n += k;
            room -= k;
            if room == 0 {
                break;
            }
        }
        Ok(n)
    }
    fn recv(&mut self, bufs: &mut [&mut [u8]]) -> Result<usize, LinkError> {
        let mut i = self.inner.lock();
        i.recvs += 1;
        if i.incoming.is_empty() {
            return if i.eof { Err(LinkError::Closed) } else { Ok(0) };
        }
        let mut room = if i.max_recv == 0 {
            usize::MAX
        } else {
            i.max_recv
        };
        let mut n = 0;
        for b in bufs.iter_mut() {
            for byte in b.iter_mut() {
                if room == 0 {
                    return Ok(n);
                }
                let Some(x) = i.incoming.pop_front() else {
                    return Ok(n);
                };
                *byte = x;
                n += 1;
                room -= 1;
            }
        }
        Ok(n)
    }
}
