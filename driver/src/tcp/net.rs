//! The TCP transport over the operating system's sockets (std): a
//! non-blocking `std::net::TcpStream` per queue pair with Nagle off, its
//! data moved by direct `readv`/`sendmsg` calls ([`super::sys`]), and
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
use crate::controller::DriverConfig;
use crate::device::NvmeDevice;
use crate::error::DriverError;
use crate::tcp::TcpError;

fn link_error(e: &std::io::Error) -> LinkError {
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

/// A connected, non-blocking TCP stream. The data path calls the socket
/// directly ([`super::sys`]); the `TcpStream` owns the descriptor.
#[derive(Debug)]
pub struct NetStream(TcpStream);

impl Stream for NetStream {
    #[inline(always)]
    fn send(&mut self, bufs: &[&[u8]]) -> Result<usize, LinkError> {
        match sys::send(self.0.as_raw_fd(), bufs) {
            Ok(Moved::Bytes(k)) => Ok(k),
            Ok(Moved::NotNow) => Ok(0),
            Err(e) => Err(link_error(&e)),
        }
    }
    #[inline(always)]
    fn recv(&mut self, bufs: &mut [&mut [u8]]) -> Result<usize, LinkError> {
        match sys::recv(self.0.as_raw_fd(), bufs) {
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

/// Connects to one address (the first of a name's that answers).
#[derive(Debug, Clone)]
pub struct NetConnector {
    addrs: Vec<SocketAddr>,
    timeout: Duration,
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
        Ok(NetConnector { addrs, timeout })
    }
    /// A connector for one socket address.
    pub fn to(addr: SocketAddr, timeout: Duration) -> NetConnector {
        NetConnector {
            addrs: std::vec![addr],
            timeout,
        }
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
                    let setup = s
                        .set_nodelay(true)
                        .and_then(|()| s.set_nonblocking(true))
                        .and_then(|()| s.try_clone());
                    return match setup {
                        Ok(handle) => Ok((NetStream(s), handle)),
                        Err(e) => Err(link_error(&e)),
                    };
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
        Self::tcp_with(&address, address.options(), config, frames)
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
        let connector = NetConnector::new(&address.host, address.port, timeout).map_err(|e| {
            DriverError::Protocol(crate::qpair::ProtocolError::Transport(
                super::TcpError::Link(e),
            ))
        })?;
        Ok(TcpTransport::new(connector, options, clock))
    }
}
