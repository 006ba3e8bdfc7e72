//! The three hash functions of DH-HMAC-CHAP (NVMe Base 2.0, 8.13.5.2),
//! from the `sha2` and `hmac` crates.

use alloc::vec::Vec;

use hmac::{Mac, SimpleHmac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

use crate::spec::auth::hash as id;

/// A hash function DH-HMAC-CHAP names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    /// SHA-256 (id 01h).
    Sha256,
    /// SHA-384 (id 02h).
    Sha384,
    /// SHA-512 (id 03h).
    Sha512,
}

fn mac<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    // HMAC takes a key of any length.
    let Ok(mut m) = <M as hmac::digest::KeyInit>::new_from_slice(key) else {
        return Zeroizing::new(Vec::new());
    };
    for p in parts {
        m.update(p);
    }
    Zeroizing::new(m.finalize().into_bytes().to_vec())
}

impl Hash {
    /// Every hash, in the order the host offers them.
    pub const ALL: [Hash; 3] = [Hash::Sha256, Hash::Sha384, Hash::Sha512];

    /// A DH-HMAC-CHAP response (NVMe Base 2.0, 8.13.5.5): the HMAC under
    /// `key` of the (augmented) challenge `ca`, the sequence number, the
    /// transaction id, a zero byte, the side's label ("HostHost" or
    /// "Controller"), the side's own NQN, a zero byte and the other's.
    /// The host's R1 and the controller's R2, whoever computes them.
    #[allow(clippy::too_many_arguments)]
    pub fn response(
        self,
        key: &[u8],
        ca: &[u8],
        seqnum: u32,
        t_id: u16,
        side: Side,
        hostnqn: &[u8],
        subnqn: &[u8],
    ) -> Zeroizing<Vec<u8>> {
        let (label, own, other): (&[u8], _, _) = match side {
            Side::Host => (b"HostHost", hostnqn, subnqn),
            Side::Controller => (b"Controller", subnqn, hostnqn),
        };
        self.hmac(
            key,
            &[
                ca,
                &seqnum.to_le_bytes(),
                &t_id.to_le_bytes(),
                &[0],
                label,
                own,
                &[0],
                other,
            ],
        )
    }

    /// The hash with identifier `id`.
    pub fn from_id(hash_id: u8) -> Option<Hash> {
        match hash_id {
            id::SHA256 => Some(Hash::Sha256),
            id::SHA384 => Some(Hash::Sha384),
            id::SHA512 => Some(Hash::Sha512),
            _ => None,
        }
    }
    /// Its identifier.
    pub fn id(self) -> u8 {
        match self {
            Hash::Sha256 => id::SHA256,
            Hash::Sha384 => id::SHA384,
            Hash::Sha512 => id::SHA512,
        }
    }
    /// Output length in bytes.
    pub fn output_len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha384 => 48,
            Hash::Sha512 => 64,
        }
    }
    /// Its name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Hash::Sha256 => "SHA-256",
            Hash::Sha384 => "SHA-384",
            Hash::Sha512 => "SHA-512",
        }
    }
    /// HMAC keyed with `key` over the concatenation of `parts`.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
        match self {
            Hash::Sha256 => mac::<SimpleHmac<Sha256>>(key, parts),
            Hash::Sha384 => mac::<SimpleHmac<Sha384>>(key, parts),
            Hash::Sha512 => mac::<SimpleHmac<Sha512>>(key, parts),
        }
    }
    /// The hash of `data`.
    pub fn digest(self, data: &[u8]) -> Zeroizing<Vec<u8>> {
        Zeroizing::new(match self {
            Hash::Sha256 => Sha256::digest(data).to_vec(),
            Hash::Sha384 => Sha384::digest(data).to_vec(),
            Hash::Sha512 => Sha512::digest(data).to_vec(),
        })
    }
}

/// Which side a DH-HMAC-CHAP response proves itself as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The host (R1).
    Host,
    /// The controller (R2).
    Controller,
}
