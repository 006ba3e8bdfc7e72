//! Finite-field Diffie-Hellman over the RFC 7919 groups, with the
//! arithmetic of `num-bigint`: the host's public value g^x mod p and the
//! session key (the controller's value)^x mod p, both big-endian and as
//! long as p (as Linux's kpp "ffdheN(dh)" produces and expects them).
//!
//! `num-bigint` is not constant-time (the exponent's bits may show in
//! the time a modular exponentiation takes) and its numbers cannot be
//! zeroed: the exponent's bytes are zeroed after the exchange, its
//! big-integer copies and the library's intermediate values are only
//! freed. The exponent is fresh for every exchange, so what remains in
//! freed memory concerns one finished session.

use alloc::vec::Vec;

use num_bigint::BigUint;
use zeroize::Zeroizing;

use super::ffdhe;
use super::AuthError;
use crate::spec::auth::dhgroup;

/// Length of the private exponent the host draws: 512 bits, at least
/// twice the security strength of every group (RFC 7919, 5.2).
pub const EXPONENT_LEN: usize = 64;

/// One RFC 7919 group.
#[derive(Clone, Debug)]
pub struct Group {
    p: BigUint,
    /// Length of p (and of every value) in bytes.
    size: usize,
}

impl Group {
    /// The group with DH group id `id` (not the NULL group).
    pub fn from_id(group_id: u8) -> Option<Group> {
        let hex = match group_id {
            dhgroup::FFDHE2048 => ffdhe::FFDHE2048,
            dhgroup::FFDHE3072 => ffdhe::FFDHE3072,
            dhgroup::FFDHE4096 => ffdhe::FFDHE4096,
            dhgroup::FFDHE6144 => ffdhe::FFDHE6144,
            dhgroup::FFDHE8192 => ffdhe::FFDHE8192,
            _ => return None,
        };
        let p = BigUint::parse_bytes(hex.as_bytes(), 16)?;
        let size = hex.len() / 2;
        Some(Group { p, size })
    }

    /// Length of the group's values in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The prime, for tests.
    pub fn prime(&self) -> &BigUint {
        &self.p
    }

    fn pad(&self, v: &BigUint) -> Zeroizing<Vec<u8>> {
        let b = Zeroizing::new(v.to_bytes_be());
        let mut out = Zeroizing::new(Vec::with_capacity(self.size));
        out.resize(self.size.saturating_sub(b.len()), 0);
        out.extend_from_slice(&b);
        out
    }

    /// The public value g^x mod p for the exponent `x` (big-endian).
    pub fn public(&self, x: &[u8]) -> Zeroizing<Vec<u8>> {
        let x = BigUint::from_bytes_be(x);
        self.pad(&BigUint::from(2u8).modpow(&x, &self.p))
    }

    /// The session key peer^x mod p. The peer's value must be as long as
    /// p and lie in [2, p - 2] (RFC 7919, 5.1), and the key must not be 1.
    pub fn session(&self, x: &[u8], peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, AuthError> {
        if peer.len() != self.size {
            return Err(AuthError::BadDhValue);
        }
        let y = BigUint::from_bytes_be(peer);
        let two = BigUint::from(2u8);
        if y < two || y > &self.p - &two {
            return Err(AuthError::BadDhValue);
        }
        let x = BigUint::from_bytes_be(x);
        let z = y.modpow(&x, &self.p);
        if z == BigUint::from(1u8) {
            return Err(AuthError::BadDhValue);
        }
        Ok(self.pad(&z))
    }
}
