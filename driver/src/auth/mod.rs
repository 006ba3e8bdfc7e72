//! NVMe in-band authentication: DH-HMAC-CHAP (NVMe Base 2.0, 8.13.5),
//! the host's side.
//!
//! After a Fabrics Connect whose response asks for it (AUTHREQ.ATR), the
//! host runs one transaction on that queue over Authentication Send and
//! Receive: negotiate (hashes and DH groups offered), challenge (the
//! controller's pick, C1, S1 and its DH value), reply (the host's
//! response R1, its DH value and, when it checks the controller too, its
//! own challenge C2 and S2), success1 (the controller's response R2),
//! success2. [`Exchange`] computes the messages and checks the
//! controller's; the transport sends and receives them.
//!
//! - [`secret`]: the `DHHC-1:` secret form and the key transformation.
//! - [`hash`]: SHA-256/384/512 and their HMACs (`sha2`, `hmac`).
//! - [`dh`]: the RFC 7919 groups ([`ffdhe`]) with `num-bigint`.
//! - `keyfile` (std): secrets read from files named in the device name.
//!
//! The wire formats are in [`crate::spec::auth`].

pub mod dh;
mod exchange;
pub mod ffdhe;
pub mod hash;
#[cfg(feature = "std")]
pub mod keyfile;
pub mod secret;

#[cfg(test)]
mod tests;

use core::fmt;

pub use exchange::Exchange;
pub use hash::Hash;
pub use secret::{DhchapSecret, SecretError};

use crate::spec::auth::reason;

/// Fills a buffer with unpredictable bytes; false if it cannot.
pub type FillRandom = fn(&mut [u8]) -> bool;

/// What the host authenticates with: its secret, the controller's secret
/// when the host checks the controller too (bidirectional), and where
/// its random numbers come from.
#[derive(Clone)]
pub struct DhchapConfig {
    /// The host's secret (`dhchap_key` on a Linux target).
    pub host: DhchapSecret,
    /// The controller's secret (`dhchap_ctrl_key`), for bidirectional
    /// authentication.
    pub ctrl: Option<DhchapSecret>,
    /// The source of challenges, sequence numbers and DH exponents.
    pub random: FillRandom,
}

impl fmt::Debug for DhchapConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DhchapConfig")
            .field("host", &self.host)
            .field("ctrl", &self.ctrl)
            .finish_non_exhaustive()
    }
}

impl PartialEq for DhchapConfig {
    fn eq(&self, other: &Self) -> bool {
        self.host == other.host && self.ctrl == other.ctrl
    }
}

impl Eq for DhchapConfig {}

/// Why authentication failed. Each is final for the connection and is
/// not retried: a key that is wrong now is wrong on the next try too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthError {
    /// The controller requires authentication and no key is configured.
    NoKey,
    /// The controller requires a secure channel (AUTHREQ.ASCR), which
    /// this host does not set up.
    SecureChannel,
    /// The controller refused the host (AUTH_Failure1 with this reason
    /// code explanation): a wrong key, or one it does not hold for this
    /// host, or nothing offered that it can use.
    Refused {
        /// Reason code explanation (8.13.5.8).
        explanation: u8,
    },
    /// The controller closed the connection after the host's response
    /// instead of answering (Linux's target tears the controller down on
    /// a failed authentication, and the AUTH_Failure1 it queued may not
    /// leave first): it refused the host's key.
    ClosedAfterReply,
    /// The controller's response to the host's challenge is wrong: it
    /// does not hold the controller key, so it is not the controller
    /// the host was configured to trust.
    ControllerFailed,
    /// The host challenged the controller and the controller did not
    /// answer (Success1 without a response).
    ControllerSilent,
    /// The controller picked a hash function the host does not know.
    UnsupportedHash(u8),
    /// The controller picked a DH group the host does not know.
    UnsupportedGroup(u8),
    /// A message shorter than its lengths or with inconsistent lengths.
    Malformed,
    /// Another message than the one the exchange is at (its AUTH_ID).
    Unexpected {
        /// AUTH_ID received.
        auth_id: u8,
    },
    /// A message from another transaction.
    TransactionId,
    /// The controller's DH value is not a valid group element.
    BadDhValue,
    /// No random numbers could be drawn.
    Random,
}

impl AuthError {
    /// The reason code explanation the host sends in AUTH_Failure2.
    pub fn explanation(self) -> u8 {
        match self {
            AuthError::UnsupportedHash(_) => reason::HASH_UNUSABLE,
            AuthError::UnsupportedGroup(_) => reason::DHGROUP_UNUSABLE,
            AuthError::Malformed | AuthError::BadDhValue => reason::INCORRECT_PAYLOAD,
            AuthError::Unexpected { .. } | AuthError::TransactionId => reason::INCORRECT_MESSAGE,
            _ => reason::FAILED,
        }
    }
}

impl From<crate::spec::auth::MessageError> for AuthError {
    fn from(e: crate::spec::auth::MessageError) -> Self {
        match e {
            crate::spec::auth::MessageError::Unexpected { auth_id, .. } => {
                AuthError::Unexpected { auth_id }
            }
            _ => AuthError::Malformed,
        }
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AuthError::NoKey => f.write_str(
                "the target requires DH-HMAC-CHAP authentication and no key is configured \
                 (dhchap_key_file=PATH)",
            ),
            AuthError::SecureChannel => {
                f.write_str("the target requires a secure channel (TLS), which is not supported")
            }
            AuthError::Refused { explanation } => match explanation {
                reason::FAILED => f.write_str(
                    "the target refused this host's key (wrong key, or not the key it holds \
                     for this host NQN)",
                ),
                reason::HASH_UNUSABLE => {
                    f.write_str("the target refused authentication: no usable hash function")
                }
                reason::DHGROUP_UNUSABLE => {
                    f.write_str("the target refused authentication: no usable DH group")
                }
                e => write!(
                    f,
                    "the target refused authentication (reason code explanation {e:#04x})"
                ),
            },
            AuthError::ClosedAfterReply => f.write_str(
                "the target closed the connection after the host's response: it refused this \
                 host's key (wrong key, or not the key it holds for this host NQN)",
            ),
            AuthError::ControllerFailed => f.write_str(
                "the target failed the host's check: it does not hold the controller key \
                 (an impostor, or the wrong dhchap_ctrl_key)",
            ),
            AuthError::ControllerSilent => f.write_str(
                "the target did not answer the host's challenge (bidirectional authentication \
                 asked, no controller key configured on the target?)",
            ),
            AuthError::UnsupportedHash(h) => {
                write!(
                    f,
                    "the target picked hash function {h:#04x}, which is not supported"
                )
            }
            AuthError::UnsupportedGroup(g) => {
                write!(
                    f,
                    "the target picked DH group {g:#04x}, which is not supported"
                )
            }
            AuthError::Malformed => f.write_str("malformed authentication message"),
            AuthError::Unexpected { auth_id } => {
                write!(
                    f,
                    "unexpected authentication message (AUTH_ID {auth_id:#04x})"
                )
            }
            AuthError::TransactionId => {
                f.write_str("authentication message from another transaction")
            }
            AuthError::BadDhValue => f.write_str("the target's DH value is not valid"),
            AuthError::Random => f.write_str("no random numbers for authentication"),
        }
    }
}

impl core::error::Error for AuthError {}
