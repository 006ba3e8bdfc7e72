//! The secure channel of a build without TLS (std, no feature `tls`):
//! the same names as the OpenSSL channel (`channel.rs`), so the
//! connector (`tcp::net`) is written once, but no client can be made:
//! [`TlsClient::new`] says [`TlsError::NotBuilt`]. With no client there
//! is no stream either, and both types have no values, so the
//! connector's TLS arms are never reached.

use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use super::psk::TlsPsk;
use super::TlsError;
use crate::tcp::stream::{LinkError, Stream};

/// The host's side: never made in this build.
#[derive(Clone, Debug)]
pub enum TlsClient {}

impl TlsClient {
    /// Always [`TlsError::NotBuilt`]: this build has no TLS.
    pub fn new(_psk: Arc<TlsPsk>) -> Result<TlsClient, TlsError> {
        Err(TlsError::NotBuilt)
    }

    /// Never called: there is no client.
    pub fn handshake(&self, _sock: TcpStream, _timeout: Duration) -> Result<TlsStream, LinkError> {
        match *self {}
    }
}

/// A connection inside TLS: none in this build.
#[derive(Debug)]
pub enum TlsStream {}

impl Stream for TlsStream {
    fn send(&mut self, _bufs: &[&[u8]]) -> Result<usize, LinkError> {
        match *self {}
    }
    fn recv(&mut self, _bufs: &mut [&mut [u8]]) -> Result<usize, LinkError> {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::TcpListener;

    use super::*;
    use crate::controller::DriverConfig;
    use crate::device::NvmeDevice;
    use crate::error::DriverError;
    use crate::qpair::ProtocolError;
    use crate::tcp::address::TcpAddress;
    use crate::tcp::net::NetConnector;
    use crate::tcp::TcpError;

    #[test]
    fn a_connector_asked_for_tls_says_this_build_has_none() {
        let psk = crate::tls::psk::ConfiguredPsk::parse(
            "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
        )
        .unwrap()
        .tls(b"host", b"sub", Default::default())
        .unwrap();
        let addr = "127.0.0.1:4420".parse().unwrap();
        let err = NetConnector::to(addr, Duration::from_secs(1))
            .with_tls(Some(Arc::new(psk)))
            .unwrap_err();
        assert_eq!(err, TlsError::NotBuilt);
        assert!(err.is_final(), "building again is the only mend");
        let shown = err.to_string();
        assert!(
            shown.contains("no TLS") && shown.contains("`tls` feature"),
            "{shown}"
        );
    }

    #[test]
    fn a_device_name_with_a_tls_key_file_fails_by_name_before_connecting() {
        // Nobody listens: the refusal comes before any connection.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(std::format!("pollfs-no-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("tls.key");
        let mut f = std::fs::File::create(&key).unwrap();
        writeln!(
            f,
            "NVMeTLSkey-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
        )
        .unwrap();
        let name = std::format!(
            "nvme-tcp://127.0.0.1:{port}/sub?tls_key_file={}",
            key.display()
        );
        // The name itself is fine: its TLS options parse in every build.
        let address = TcpAddress::parse(&name).unwrap();
        assert!(address.tls);
        let options = address.load_options().unwrap();
        let err = NvmeDevice::tcp_with(&address, options, DriverConfig::default(), 64)
            .map(|_| ())
            .unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        match &err {
            DriverError::Protocol(ProtocolError::Transport(TcpError::Link(LinkError::Tls(
                TlsError::NotBuilt,
            )))) => {}
            other => panic!("{other:?}"),
        }
        let shown = err.to_string();
        assert!(shown.contains("this build has no TLS"), "{shown}");
    }
}
