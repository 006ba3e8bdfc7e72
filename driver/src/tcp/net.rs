//! The TCP transport over the operating system's sockets (std): a
//! non-blocking `std::net::TcpStream` per queue pair with Nagle off, its
//! data moved by direct `readv` and `send`/`sendmsg` calls (`tcp::sys`), and
//! [`NvmeDevice::tcp`], a device from an `nvme-tcp://` name.

use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use std::vec::Vec;

use pollfs_core::units::Nanos;

use super::address::TcpAddress;
use super::frames::TcpFrames;
use super::stream::{Connector, LinkError, Stream};
use super::sys::{self, Moved};
use super::transport::{TcpOptions, TcpTransport};
use crate::auth::keyfile::{os_random, read_secret, read_tls_psk, KeyFileError};
use crate::auth::DhchapConfig;
use crate::controller::DriverConfig;
use crate::device::NvmeDevice;
use crate::error::DriverError;
use crate::tcp::TcpError;
use crate::tls::channel::{TlsClient, TlsStream};
use crate::tls::psk::TlsPsk;
use crate::tls::TlsError;

/// The stream error an I/O error of the socket means.
pub(crate) fn link_error(e: &std::io::Error) -> LinkError {
    match e.kind() {
        ErrorKind::ConnectionRefused => LinkError::Refused,
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            LinkError::Reset
        }
        ErrorKind::TimedOut => LinkError::TimedOut,
        ErrorKind::UnexpectedEof | ErrorKind::NotConnected => LinkError::Closed,
        ErrorKind::AddrNotAvailable | ErrorKind::InvalidInput | ErrorKind::NotFound => {
            LinkError::Unreachable
        }
        _ => LinkError::Other,
    }
}

/// A connected, non-blocking TCP stream, in the clear or inside TLS. The
/// clear data path calls the socket directly (`tcp::sys`); the
/// `TcpStream` owns the descriptor.
#[derive(Debug)]
pub struct NetStream(Link);

#[derive(Debug)]
enum Link {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Stream for NetStream {
    #[inline(always)]
    fn send(&mut self, bufs: &[&[u8]]) -> Result<usize, LinkError> {
        let s = match &mut self.0 {
            Link::Plain(s) => s,
            Link::Tls(t) => return tls_send(t, bufs),
        };
        match sys::send(s.as_raw_fd(), bufs) {
            Ok(Moved::Bytes(k)) => Ok(k),
            Ok(Moved::NotNow) => Ok(0),
            Err(e) => Err(link_error(&e)),
        }
    }
    #[inline(always)]
    fn recv(&mut self, bufs: &mut [&mut [u8]]) -> Result<usize, LinkError> {
        let s = match &mut self.0 {
            Link::Plain(s) => s,
            Link::Tls(t) => return tls_recv(t, bufs),
        };
        match sys::recv(s.as_raw_fd(), bufs) {
            // Nothing read into room: the peer closed.
            Ok(Moved::Bytes(0)) if bufs.iter().take(sys::RECV_IOV).any(|b| !b.is_empty()) => {
                Err(LinkError::Closed)
            }
            Ok(Moved::Bytes(k)) => Ok(k),
            Ok(Moved::NotNow) => Ok(0),
            Err(e) => Err(link_error(&e)),
        }
    }
}

// Out of line: the clear path stays as small as it was.
#[inline(never)]
fn tls_send(t: &mut TlsStream, bufs: &[&[u8]]) -> Result<usize, LinkError> {
    t.send(bufs)
}

#[inline(never)]
fn tls_recv(t: &mut TlsStream, bufs: &mut [&mut [u8]]) -> Result<usize, LinkError> {
    t.recv(bufs)
}

/// Connects to one address (the first of a name's that answers).
#[derive(Debug, Clone)]
pub struct NetConnector {
    addrs: Vec<SocketAddr>,
    timeout: Duration,
    /// TLS on every connection, when required.
    tls: Option<TlsClient>,
}

impl NetConnector {
    /// Resolves `host:port` now; each connection attempt then waits at
    /// most `timeout`.
    pub fn new(host: &str, port: u16, timeout: Duration) -> Result<NetConnector, LinkError> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| link_error(&e))?
            .collect();
        if addrs.is_empty() {
            return Err(LinkError::Unreachable);
        }
        Ok(NetConnector {
            addrs,
            timeout,
            tls: None,
        })
    }
    /// A connector for one socket address.
    pub fn to(addr: SocketAddr, timeout: Duration) -> NetConnector {
        NetConnector {
            addrs: std::vec![addr],
            timeout,
            tls: None,
        }
    }
    /// This connector with TLS on every connection, with `psk` (none:
    /// in the clear).
    pub fn with_tls(mut self, psk: Option<Arc<TlsPsk>>) -> Result<NetConnector, TlsError> {
        self.tls = psk.map(TlsClient::new).transpose()?;
        Ok(self)
    }
}

impl Connector for NetConnector {
    type Stream = NetStream;
    type Handle = TcpStream;

    fn connect(&self) -> Result<(NetStream, TcpStream), LinkError> {
        let mut last = LinkError::Unreachable;
        for a in &self.addrs {
            match TcpStream::connect_timeout(a, self.timeout) {
                Ok(s) => {
                    let handle = s
                        .set_nodelay(true)
                        .and_then(|()| s.try_clone())
                        .map_err(|e| link_error(&e))?;
                    let link = match &self.tls {
                        None => {
                            s.set_nonblocking(true).map_err(|e| link_error(&e))?;
                            Link::Plain(s)
                        }
                        Some(tls) => Link::Tls(Box::new(tls.handshake(s, self.timeout)?)),
                    };
                    return Ok((NetStream(link), handle));
                }
                Err(e) => last = link_error(&e),
            }
        }
        Err(last)
    }
    fn shut(&self, handle: &TcpStream) {
        let _ = handle.shutdown(Shutdown::Both);
    }
    fn pause(&self) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl TcpAddress {
    /// [`options`](TcpAddress::options) with the DH-HMAC-CHAP secrets and
    /// the TLS PSK read from the files the name gives, and the system's
    /// random source.
    pub fn load_options(&self) -> Result<TcpOptions, KeyFileError> {
        let mut o = self.options();
        if let Some(path) = &self.tls_key_file {
            let psk = read_tls_psk(path)?
                .tls(
                    o.hostnqn.as_bytes(),
                    o.subnqn.as_bytes(),
                    self.tls_derivation,
                )
                .map_err(|error| KeyFileError::Psk {
                    path: path.clone(),
                    error,
                })?;
            o.tls = Some(Arc::new(psk));
        }
        if let Some(path) = &self.dhchap_key_file {
            let host = read_secret(path)?;
            let ctrl = self
                .dhchap_ctrl_key_file
                .as_deref()
                .map(read_secret)
                .transpose()?;
            o.dhchap = Some(Arc::new(DhchapConfig {
                host,
                ctrl,
                random: os_random,
            }));
        }
        Ok(o)
    }
}

/// A monotonic clock from the process's `Instant`.
pub fn std_clock() -> impl Fn() -> Nanos + Send + Sync + Clone + 'static {
    let start = Instant::now();
    move || Nanos(start.elapsed().as_nanos() as u64)
}

/// The device type of an NVMe/TCP namespace over the system's sockets.
pub type TcpDevice = NvmeDevice<TcpTransport<NetConnector>>;

impl NvmeDevice<TcpTransport<NetConnector>> {
    /// Connects to the subsystem named by `nvme-tcp://HOST:PORT/NQN?...`
    /// (see [`TcpAddress`]), with `frames` page-cache frames.
    pub fn tcp(
        name: &str,
        config: DriverConfig,
        frames: u32,
    ) -> Result<TcpDevice, DriverError<TcpError>> {
        let address = TcpAddress::parse(name)
            .map_err(|_| DriverError::Unsupported("nvme-tcp device name"))?;
        let options = address
            .load_options()
            .map_err(|_| DriverError::Unsupported("nvme-tcp key file"))?;
        Self::tcp_with(&address, options, config, frames)
    }
    /// Connects to `address` with explicit transport options.
    pub fn tcp_with(
        address: &TcpAddress,
        options: TcpOptions,
        config: DriverConfig,
        frames: u32,
    ) -> Result<TcpDevice, DriverError<TcpError>> {
        let clock = std_clock();
        let transport = Self::transport(address, options, clock.clone())?;
        NvmeDevice::new(transport, clock, config, frames)
    }
    /// As [`tcp_with`](Self::tcp_with), with page frames another device
    /// already has: the legs of a `pollfs_core::volume` share one arena.
    /// A TCP controller reaches any frame in ordinary memory, so every
    /// TCP device can serve the same [`TcpFrames`].
    pub fn tcp_on(
        address: &TcpAddress,
        options: TcpOptions,
        config: DriverConfig,
        arena: Arc<TcpFrames>,
    ) -> Result<TcpDevice, DriverError<TcpError>> {
        let clock = std_clock();
        let transport = Self::transport(address, options, clock.clone())?;
        NvmeDevice::with_arena(transport, clock, config, arena)
    }
    fn transport(
        address: &TcpAddress,
        options: TcpOptions,
        clock: impl Fn() -> Nanos + Send + Sync + Clone + 'static,
    ) -> Result<TcpTransport<NetConnector>, DriverError<TcpError>> {
        let timeout = Duration::from_nanos(options.setup_timeout.max(1));
        let link =
            |e| DriverError::Protocol(crate::qpair::ProtocolError::Transport(TcpError::Link(e)));
        let connector = NetConnector::new(&address.host, address.port, timeout)
            .map_err(link)?
            .with_tls(options.tls.clone())
            .map_err(|e| link(LinkError::Tls(e)))?;
        Ok(TcpTransport::new(connector, options, clock))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    /// A connected `NetStream` and the peer's end.
    fn pair() -> (NetStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (stream, _handle) = NetConnector::to(addr, Duration::from_secs(5))
            .connect()
            .unwrap();
        let (peer, _) = listener.accept().unwrap();
        (stream, peer)
    }

    /// Repeats a non-blocking call while it has nothing to report (the
    /// peer's bytes or its close are on their way through loopback).
    fn when_ready<T>(
        mut call: impl FnMut() -> Result<T, LinkError>,
        none: T,
    ) -> Result<T, LinkError>
    where
        T: PartialEq,
    {
        for _ in 0..10_000 {
            match call() {
                Ok(v) if v == none => std::thread::sleep(Duration::from_millis(1)),
                other => return other,
            }
        }
        panic!("the peer's bytes never arrived");
    }

    #[test]
    fn a_gathering_send_and_a_scattering_receive_keep_the_byte_order() {
        let (mut s, mut peer) = pair();
        assert_eq!(s.recv(&mut [&mut [0u8; 4]]).unwrap(), 0, "nothing yet");
        let sent = s.send(&[b"abc", b"", b"defgh", b"i"]).unwrap();
        assert_eq!(sent, 9);
        assert_eq!(s.send(&[b"jk"]).unwrap(), 2, "one buffer: send(2)");
        let mut got = [0u8; 11];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcdefghijk");
        // One write on loopback is one segment, there whole for the
        // receive.
        peer.write_all(b"0123456789").unwrap();
        let (mut a, mut b, mut c) = ([0u8; 2], [0u8; 3], [0u8; 5]);
        let n = when_ready(|| s.recv(&mut [&mut a, &mut b, &mut c]), 0).unwrap();
        assert_eq!(n, 10);
        assert_eq!((&a, &b, &c), (b"01", b"234", b"56789"));
    }

    #[test]
    fn the_peer_closing_is_the_end_of_the_stream_and_a_later_send_a_reset() {
        let (mut s, peer) = pair();
        drop(peer);
        let closed = when_ready(|| s.recv(&mut [&mut [0u8; 8]]), 0);
        assert_eq!(closed, Err(LinkError::Closed));
        // The first send may still be taken; the peer answers it with a
        // reset, and a later one fails (EPIPE or ECONNRESET; with
        // `MSG_NOSIGNAL`, not SIGPIPE, which this harness ignores anyway).
        let failed = when_ready(|| s.send(&[b"x", b"y"]).map(|_| ()), ()).err();
        assert_eq!(failed, Some(LinkError::Reset));
    }
}
