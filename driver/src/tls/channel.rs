//! The secure channel over a TCP connection (std): a TLS 1.3 handshake
//! with the external PSK of [`super::psk`], then records both ways, with
//! OpenSSL doing the cryptography.
//!
//! The handshake blocks, as connecting does, bounded by the connection's
//! setup time (every read waits at most what is left of it). After it,
//! the socket is non-blocking and [`TlsStream`] is a [`Stream`] like the
//! plain one: `Ok(0)` when nothing can move now, never a wait.
//!
//! Sending never leaves OpenSSL half way through a record: the
//! ciphertext of what [`TlsStream::send`] accepts is queued here in
//! whole records and handed to the socket as it takes it. New plaintext
//! is accepted only when that queue is empty, and every receive pushes
//! it on too, so ciphertext never waits behind a queue that is only
//! receiving (a queue that has sent is waiting for an answer, so it
//! keeps receiving).

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};
use std::vec::Vec;

use openssl::ssl::{
    ErrorCode, HandshakeError, Ssl, SslContext, SslMethod, SslStream, SslVerifyMode, SslVersion,
};

use super::psk::{PskHash, TlsPsk};
use super::TlsError;
use crate::tcp::net::link_error;
use crate::tcp::stream::{LinkError, Stream};

/// Reasons OpenSSL gives (`ssl/sslerr.h`) that classify a failed
/// handshake. Alerts from the peer are 1000 plus the alert number.
mod reason {
    pub const CERTIFICATE_VERIFY_FAILED: i32 = 134;
    pub const PACKET_LENGTH_TOO_LONG: i32 = 198;
    pub const WRONG_VERSION_NUMBER: i32 = 267;
    pub const UNEXPECTED_EOF_WHILE_READING: i32 = 294;
    pub const ALERTS: core::ops::Range<i32> = 1000..1256;
}

/// Plaintext one send takes at most: it bounds the ciphertext queued
/// when the socket is full.
const SEND_BATCH: usize = 256 << 10;

/// The host's side: a TLS context for one PSK, shared by every
/// connection of a transport.
#[derive(Clone)]
pub struct TlsClient {
    context: SslContext,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsClient")
    }
}

impl TlsClient {
    /// A client offering `psk` under its identity, TLS 1.3 only, with
    /// the one cipher suite of the PSK's hash, and no certificates: a
    /// server that does not take the PSK cannot complete the handshake
    /// with a certificate instead.
    pub fn new(psk: Arc<TlsPsk>) -> Result<TlsClient, TlsError> {
        // The `openssl` crate's PSK callback is OpenSSL's older one,
        // which ties a PSK to SHA-256 under TLS 1.3.
        if psk.hash != PskHash::Sha256 {
            return Err(TlsError::UnsupportedHash);
        }
        let setup = |_| TlsError::Setup;
        let mut b = SslContext::builder(SslMethod::tls_client()).map_err(setup)?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))
            .map_err(setup)?;
        b.set_max_proto_version(Some(SslVersion::TLS1_3))
            .map_err(setup)?;
        b.set_ciphersuites(psk.hash.cipher_suite()).map_err(setup)?;
        // Certificates are never trusted: there is no store to check
        // them against, and verification is required.
        b.set_verify(SslVerifyMode::PEER);
        b.set_psk_client_callback(move |_ssl, _hint, identity, key| {
            let id = psk.identity.as_bytes();
            let (Some(id_dst), Some(key_dst)) = (
                identity.get_mut(..id.len() + 1),
                key.get_mut(..psk.key.len()),
            ) else {
                return Ok(0);
            };
            id_dst[..id.len()].copy_from_slice(id);
            id_dst[id.len()] = 0;
            key_dst.copy_from_slice(&psk.key);
            Ok(psk.key.len())
        });
        Ok(TlsClient { context: b.build() })
    }

    /// Runs the handshake on connected `sock` within `timeout`, then
    /// makes the socket non-blocking.
    pub fn handshake(&self, sock: TcpStream, timeout: Duration) -> Result<TlsStream, LinkError> {
        let deadline = Instant::now() + timeout;
        sock.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| link_error(&e))?;
        let wire = Wire {
            sock,
            out: Vec::new(),
            sent: 0,
            deadline: Some(deadline),
        };
        let ssl = Ssl::new(&self.context).map_err(|_| LinkError::Tls(TlsError::Setup))?;
        let mut ssl = match ssl.connect(wire) {
            Ok(s) => s,
            Err(HandshakeError::SetupFailure(_)) => return Err(LinkError::Tls(TlsError::Setup)),
            Err(HandshakeError::Failure(mid)) => return Err(classify(mid.error(), true)),
            Err(HandshakeError::WouldBlock(_)) => return Err(LinkError::TimedOut),
        };
        // Under TLS 1.3 an accepted external PSK counts as a resumed
        // session; anything else authenticated the server by other means.
        if !ssl.ssl().session_reused() {
            return Err(LinkError::Tls(TlsError::NoPsk));
        }
        let wire = ssl.get_mut();
        wire.deadline = None;
        wire.sock
            .set_read_timeout(None)
            .and_then(|()| wire.sock.set_write_timeout(None))
            .and_then(|()| wire.sock.set_nonblocking(true))
            .map_err(|e| link_error(&e))?;
        Ok(TlsStream { ssl })
    }
}

/// What a failed TLS call means for the connection. `handshake`: during
/// the handshake, where a peer that is not speaking TLS shows.
pub fn classify(e: &openssl::ssl::Error, handshake: bool) -> LinkError {
    match (e.code(), e.io_error()) {
        (ErrorCode::ZERO_RETURN, _) => return LinkError::Closed,
        (ErrorCode::SYSCALL, Some(io)) => {
            return match io.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut => LinkError::TimedOut,
                _ => link_error(io),
            }
        }
        (ErrorCode::SYSCALL, None) if handshake => return LinkError::Tls(TlsError::Closed),
        (ErrorCode::SYSCALL, None) => return LinkError::Closed,
        (ErrorCode::WANT_READ | ErrorCode::WANT_WRITE, _) => return LinkError::TimedOut,
        _ => {}
    }
    let reasons = e.ssl_error().map(|s| s.errors()).unwrap_or(&[]);
    let any = |f: &dyn Fn(i32) -> bool| reasons.iter().any(|r| f(r.reason_code()));
    let tls = if !handshake {
        if any(&|r| r == reason::UNEXPECTED_EOF_WHILE_READING) {
            return LinkError::Closed;
        }
        TlsError::Record
    } else if any(&|r| reason::ALERTS.contains(&r)) {
        TlsError::Refused
    } else if any(&|r| r == reason::WRONG_VERSION_NUMBER || r == reason::PACKET_LENGTH_TOO_LONG) {
        TlsError::NotTls
    } else if any(&|r| r == reason::UNEXPECTED_EOF_WHILE_READING) {
        TlsError::Closed
    } else if any(&|r| r == reason::CERTIFICATE_VERIFY_FAILED) {
        TlsError::NoPsk
    } else {
        TlsError::Handshake
    };
    LinkError::Tls(tls)
}

/// The socket under OpenSSL: reads pass through (bounded by the
/// handshake's deadline while there is one); writes are queued whole and
/// pushed to the socket as far as it takes them, so OpenSSL never sees a
/// write that would block.
struct Wire {
    sock: TcpStream,
    out: Vec<u8>,
    sent: usize,
    deadline: Option<Instant>,
}

impl Wire {
    /// Hands queued ciphertext to the socket until it is all sent or the
    /// socket takes no more now.
    fn push(&mut self) -> io::Result<()> {
        while let Some(rest) = self.out.get(self.sent..).filter(|r| !r.is_empty()) {
            match self.sock.write(rest) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        }
        Ok(())
    }
    fn idle(&self) -> bool {
        self.out.is_empty()
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ErrorKind::TimedOut.into());
            }
            self.sock.set_read_timeout(Some(left))?;
        }
        self.sock.read(buf)
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.extend_from_slice(buf);
        self.push()?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.push()
    }
}

/// A connection inside TLS, used without blocking.
pub struct TlsStream {
    ssl: SslStream<Wire>,
}

impl fmt::Debug for TlsStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsStream")
            .field("queued", &self.ssl.get_ref().out.len())
            .finish_non_exhaustive()
    }
}

impl TlsStream {
    fn push(&mut self) -> Result<(), LinkError> {
        self.ssl.get_mut().push().map_err(|e| link_error(&e))
    }
}

impl Stream for TlsStream {
    fn send(&mut self, bufs: &[&[u8]]) -> Result<usize, LinkError> {
        self.push()?;
        if !self.ssl.get_ref().idle() {
            return Ok(0);
        }
        let mut n = 0;
        for b in bufs.iter().filter(|b| !b.is_empty()) {
            let b = b.get(..SEND_BATCH - n).unwrap_or(b);
            match self.ssl.ssl_write(b) {
                Ok(k) => n += k,
                // What was accepted counts; the error comes again next
                // time.
                Err(_) if n > 0 => break,
                Err(e) => return Err(classify(&e, false)),
            }
            if n >= SEND_BATCH || !self.ssl.get_ref().idle() {
                break;
            }
        }
        Ok(n)
    }

    fn recv(&mut self, bufs: &mut [&mut [u8]]) -> Result<usize, LinkError> {
        self.push()?;
        let mut n = 0;
        for b in bufs.iter_mut().take(3) {
            let mut at = 0;
            while let Some(room) = b.get_mut(at..).filter(|r| !r.is_empty()) {
                match self.ssl.ssl_read(room) {
                    Ok(k) => at += k,
                    Err(e) if e.code() == ErrorCode::WANT_READ => return Ok(n + at),
                    // Bytes already taken count; the error comes again.
                    Err(_) if n + at > 0 => return Ok(n + at),
                    Err(e) => return Err(classify(&e, false)),
                }
            }
            n += at;
        }
        Ok(n)
    }
}
