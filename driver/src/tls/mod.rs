//! TLS 1.3 with a pre-shared key on NVMe/TCP (NVMe/TCP Transport 1.0c,
//! 3.6, from TP 8011): the secure channel a connection opens before its
//! ICReq, so every PDU after it travels inside TLS records.
//!
//! - [`psk`] (`no_std`): the configured PSK's interchange form
//!   (`NVMeTLSkey-1:`), the retained PSK, the PSK identity and the TLS
//!   PSK, derived as Linux's nvme-cli derives them for `tlshd`.
//! - `channel` (feature `tls`): the handshake and the records, over the
//!   system's OpenSSL 3, and the non-blocking stream the queue pair runs
//!   on. Without the feature (std only), `channel` is a stand-in of the
//!   same shape whose client refuses every PSK with
//!   [`TlsError::NotBuilt`]: the connector is written once, and a device
//!   name that asks for TLS fails by name, not by an unknown option.
//!
//! Why a feature: OpenSSL is a C library, and building the `openssl`
//! crate needs its headers and pkg-config (Debian: libssl-dev,
//! pkg-config). A default build (the bench, `cargo test --workspace`)
//! needs only a Rust toolchain, so TLS is opt-in. The PSK ([`psk`]) and
//! the device name's TLS options are always there: they are `no_std`
//! and need no C.
//!
//! Why OpenSSL: TLS 1.3 external PSKs (RFC 8446, 2.2 and 4.2.11) are
//! what NVMe/TCP uses, with no certificates. rustls offers only
//! resumption PSKs, not external ones; OpenSSL offers them, is what
//! Linux's `tlshd` peers are tested against, and the `openssl` crate
//! wraps it with the PSK callbacks this needs. The handshake, the
//! record layer and the cipher suites are not written here.
//!
//! What the spec asks and where it is kept: TLS 1.3 only
//! (`channel`); TLS_AES_128_GCM_SHA256 for a SHA-256 PSK (SHA-384 PSKs
//! and TLS_AES_256_GCM_SHA384 are refused: the `openssl` crate's PSK
//! callback fixes a PSK's hash to SHA-256); no header or data digests
//! under TLS (the device name refuses them, [`crate::tcp::address`]);
//! the TLS PSK and its identity ([`psk`]).

use core::fmt;

pub mod psk;

// The one place the feature decides: everything else (the connector,
// the options, the errors) is the same with and without TLS.
#[cfg(feature = "tls")]
pub mod channel;
#[cfg(all(feature = "std", not(feature = "tls")))]
#[path = "no_channel.rs"]
pub mod channel;

/// Why the secure channel could not be set up or failed. The ones that
/// trying again cannot mend are [`final`](TlsError::is_final).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsError {
    /// The target refused the handshake with an alert: it holds another
    /// key for this identity, or none.
    Refused,
    /// The target answered without TLS (a plain NVMe/TCP port).
    NotTls,
    /// The target closed the connection during the handshake.
    Closed,
    /// The handshake completed without the PSK (the target offered a
    /// certificate instead): not the target the key is shared with.
    NoPsk,
    /// The PSK is for a cipher suite this host does not offer.
    UnsupportedHash,
    /// The handshake failed otherwise.
    Handshake,
    /// A TLS record failed its check after the handshake (corrupted or
    /// forged data), or the target sent an alert.
    Record,
    /// The TLS library could not be set up.
    Setup,
    /// This build has no TLS: pollfs-driver was built without its `tls`
    /// feature (the CLI's `tls` feature turns it on).
    NotBuilt,
}

impl TlsError {
    /// True when trying again cannot help: the same key meets the same
    /// refusal.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TlsError::Refused
                | TlsError::NotTls
                | TlsError::NoPsk
                | TlsError::UnsupportedHash
                | TlsError::Setup
                | TlsError::NotBuilt
        )
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsError::Refused => {
                "TLS: the target refused the handshake (wrong PSK, or none for this host and \
                 subsystem)"
            }
            TlsError::NotTls => {
                "TLS required, and the target answered without TLS (a port without TLS?)"
            }
            TlsError::Closed => {
                "TLS: the target closed the connection during the handshake (a port without \
                 TLS, or no PSK for this host and subsystem)"
            }
            TlsError::NoPsk => {
                "TLS: the target completed the handshake without the PSK: refused (not the \
                 target the key is shared with)"
            }
            TlsError::UnsupportedHash => {
                "TLS: SHA-384 PSKs (NVMeTLSkey-1:02, TLS_AES_256_GCM_SHA384) are not supported; \
                 use a SHA-256 one (NVMeTLSkey-1:01)"
            }
            TlsError::Handshake => "TLS handshake failed",
            TlsError::Record => "TLS: a record failed its check, or the target sent an alert",
            TlsError::Setup => "TLS: the TLS library could not be set up",
            TlsError::NotBuilt => {
                "this build has no TLS: build pollfs with the `tls` feature (`--features \
                 tls`; it needs the system's OpenSSL: libssl-dev and pkg-config)"
            }
        })
    }
}

impl core::error::Error for TlsError {}
