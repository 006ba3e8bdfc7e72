//! The test target's side of TLS (NVMe/TCP 1.0c, 3.6): when a PSK is
//! set, every connection starts with a TLS 1.3 handshake that only that
//! PSK's identity and key pass, and carries its PDUs in records after
//! it. Built on OpenSSL's server side, apart from the host's client
//! (feature `tls`); a build without the feature fails every handshake
//! (counted in `tls_failures`), as it has no TLS to serve.

use alloc::boxed::Box;
use std::io::{self, Read, Write};
use std::net::TcpStream;

pub(super) use server::accept;
use server::Session;

/// A connection's bytes, in the clear or inside TLS.
pub(super) enum Wire {
    Plain(TcpStream),
    Tls(Box<Session>),
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read(buf),
            Wire::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Wire::Plain(s) => s.write(buf),
            Wire::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Wire::Plain(s) => s.flush(),
            Wire::Tls(s) => s.flush(),
        }
    }
}

#[cfg(feature = "tls")]
mod server {
    use std::io;
    use std::net::TcpStream;
    use std::time::Duration;

    use openssl::ssl::{Ssl, SslContext, SslMethod, SslStream, SslVersion};

    use crate::tls::psk::TlsPsk;

    /// A connection inside TLS.
    pub(crate) type Session = SslStream<TcpStream>;

    /// Runs the server's handshake on `sock` for `psk`, within two seconds.
    /// An identity other than the PSK's gets no key, so OpenSSL fails the
    /// handshake (there is no certificate to fall back on) with an alert.
    pub(crate) fn accept(sock: TcpStream, psk: &TlsPsk) -> io::Result<Session> {
        let err = |e: openssl::error::ErrorStack| io::Error::other(e);
        let mut b = SslContext::builder(SslMethod::tls_server()).map_err(err)?;
        b.set_min_proto_version(Some(SslVersion::TLS1_3))
            .map_err(err)?;
        b.set_max_proto_version(Some(SslVersion::TLS1_3))
            .map_err(err)?;
        b.set_ciphersuites(psk.hash.cipher_suite()).map_err(err)?;
        b.set_num_tickets(0).map_err(err)?;
        let (identity, key) = (psk.identity.clone(), psk.key.clone());
        b.set_psk_server_callback(move |_ssl, id, dst| {
            match (id == Some(identity.as_bytes()), dst.get_mut(..key.len())) {
                (true, Some(dst)) => {
                    dst.copy_from_slice(&key);
                    Ok(key.len())
                }
                _ => Ok(0),
            }
        });
        let ctx = b.build();
        let ssl = Ssl::new(&ctx).map_err(err)?;
        let timeout = Some(Duration::from_secs(2));
        sock.set_read_timeout(timeout)?;
        let s = ssl
            .accept(sock)
            .map_err(|e| io::Error::other(alloc::format!("TLS handshake: {e}")))?;
        s.get_ref()
            .set_read_timeout(Some(Duration::from_millis(10)))?;
        Ok(s)
    }
}

#[cfg(not(feature = "tls"))]
mod server {
    use std::io::{self, Read, Write};
    use std::net::TcpStream;

    use crate::tls::psk::TlsPsk;
    use crate::tls::TlsError;

    /// A connection inside TLS: none in this build.
    pub(crate) enum Session {}

    impl Read for Session {
        fn read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
            match *self {}
        }
    }

    impl Write for Session {
        fn write(&mut self, _buf: &[u8]) -> io::Result<usize> {
            match *self {}
        }
        fn flush(&mut self) -> io::Result<()> {
            match *self {}
        }
    }

    /// Always fails: this build has no TLS.
    pub(crate) fn accept(_sock: TcpStream, _psk: &TlsPsk) -> io::Result<Session> {
        Err(io::Error::other(TlsError::NotBuilt))
    }
}
