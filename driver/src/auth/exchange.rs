//! [`Exchange`]: one DH-HMAC-CHAP transaction on one queue, as the host
//! runs it (NVMe Base 2.0, 8.13.5.3 to 8.13.5.7). It builds the host's
//! messages and checks the controller's; it does no I/O.
//!
//! The values (Linux computes the same, `drivers/nvme/host/auth.c`):
//!
//! - Ca = HMAC(H(session key), C) with a DH group; C itself with NULL;
//! - R1 = HMAC(Kh, Ca1 || S1 || T_ID || 00h || "HostHost" || NQNh || 00h || NQNc);
//! - R2 = HMAC(Kc, Ca2 || S2 || T_ID || 00h || "Controller" || NQNc || 00h || NQNh);
//!
//! with integers little-endian, HMAC and H the hash the controller
//! picked, Kh the host secret transformed with NQNh and Kc the
//! controller secret transformed with NQNc.

use alloc::vec::Vec;

use zeroize::Zeroizing;

use super::dh::{Group, EXPONENT_LEN};
use super::hash::{Hash, Side};
use super::{AuthError, DhchapConfig};
use crate::spec::auth::{self, dhgroup, Challenge, Received, Success1};

/// Every DH group the host offers, NULL first.
const GROUPS: [u8; 6] = [
    dhgroup::NULL,
    dhgroup::FFDHE2048,
    dhgroup::FFDHE3072,
    dhgroup::FFDHE4096,
    dhgroup::FFDHE6144,
    dhgroup::FFDHE8192,
];

/// The host's side of one transaction.
#[derive(Debug)]
pub struct Exchange<'a> {
    config: &'a DhchapConfig,
    hostnqn: &'a [u8],
    subnqn: &'a [u8],
    t_id: u16,
    /// The hash the controller picked, once the challenge came.
    hash: Option<Hash>,
    /// R2, when the host challenged the controller.
    expected: Option<Zeroizing<Vec<u8>>>,
}

/// Constant-time equality of two byte strings of the same length.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

impl<'a> Exchange<'a> {
    /// A transaction `t_id` between host `hostnqn` and subsystem
    /// `subnqn`.
    pub fn new(
        config: &'a DhchapConfig,
        hostnqn: &'a [u8],
        subnqn: &'a [u8],
        t_id: u16,
    ) -> Exchange<'a> {
        Exchange {
            config,
            hostnqn,
            subnqn,
            t_id,
            hash: None,
            expected: None,
        }
    }

    /// The transaction id.
    pub fn t_id(&self) -> u16 {
        self.t_id
    }

    /// AUTH_Negotiate: every hash and every group.
    pub fn negotiate(&self) -> Vec<u8> {
        let hashes = Hash::ALL.map(Hash::id);
        auth::negotiate(self.t_id, &hashes, &GROUPS)
    }

    /// The reply to the controller's challenge `msg`, with a fresh DH
    /// exponent and, when the host checks the controller, a fresh
    /// challenge and sequence number.
    pub fn reply(&mut self, msg: &[u8]) -> Result<Vec<u8>, AuthError> {
        let mut x = Zeroizing::new([0u8; EXPONENT_LEN]);
        let mut c2 = Zeroizing::new([0u8; 64]);
        let mut s2 = [0u8; 4];
        let random = self.config.random;
        if !(random(&mut x[..]) && random(&mut c2[..]) && random(&mut s2)) {
            return Err(AuthError::Random);
        }
        // S2 is never 0 (0 says "no challenge").
        let s2 = u32::from_le_bytes(s2).max(1);
        self.reply_with(msg, &x[..], &c2[..], s2)
    }

    /// [`reply`](Self::reply) with the exponent `x`, the host's challenge
    /// `c2` (its first HL bytes) and sequence number `s2` given.
    pub fn reply_with(
        &mut self,
        msg: &[u8],
        x: &[u8],
        c2: &[u8],
        s2: u32,
    ) -> Result<Vec<u8>, AuthError> {
        let c = match Challenge::parse(msg)? {
            Received::Message(c) => c,
            Received::Failure(f) => {
                return Err(AuthError::Refused {
                    explanation: f.explanation,
                })
            }
        };
        if c.t_id != self.t_id {
            return Err(AuthError::TransactionId);
        }
        let hash = Hash::from_id(c.hashid).ok_or(AuthError::UnsupportedHash(c.hashid))?;
        let hl = hash.output_len();
        let (session, public) = if c.dhgid == dhgroup::NULL {
            if !c.dh_value.is_empty() {
                return Err(AuthError::Malformed);
            }
            (None, Zeroizing::new(Vec::new()))
        } else {
            let group = Group::from_id(c.dhgid).ok_or(AuthError::UnsupportedGroup(c.dhgid))?;
            let session = group.session(x, c.dh_value)?;
            (Some(session), group.public(x))
        };
        let augment = |challenge: &[u8]| match &session {
            Some(k) => hash.hmac(&hash.digest(k), &[challenge]),
            None => Zeroizing::new(challenge.to_vec()),
        };
        let kh = self.config.host.transformed(self.hostnqn);
        let ca1 = augment(c.value);
        let r1 = hash.response(
            &kh,
            &ca1,
            c.seqnum,
            self.t_id,
            Side::Host,
            self.hostnqn,
            self.subnqn,
        );
        let c2 = c2.get(..hl).ok_or(AuthError::Random)?;
        let challenge = match &self.config.ctrl {
            Some(ctrl) => {
                let kc = ctrl.transformed(self.subnqn);
                let ca2 = augment(c2);
                self.expected = Some(hash.response(
                    &kc,
                    &ca2,
                    s2,
                    self.t_id,
                    Side::Controller,
                    self.hostnqn,
                    self.subnqn,
                ));
                Some((c2, s2))
            }
            None => None,
        };
        self.hash = Some(hash);
        Ok(auth::reply(self.t_id, &r1, challenge, &public))
    }

    /// Checks the controller's success1 `msg`: the host is authenticated;
    /// when it challenged the controller, the controller's response must
    /// be R2, and the host's success2 is returned to be sent.
    pub fn finish(&mut self, msg: &[u8]) -> Result<Option<Vec<u8>>, AuthError> {
        let hl = self
            .hash
            .map(Hash::output_len)
            .ok_or(AuthError::Unexpected {
                auth_id: auth::id::SUCCESS1,
            })?;
        let s = match Success1::parse(msg, hl)? {
            Received::Message(s) => s,
            Received::Failure(f) => {
                return Err(AuthError::Refused {
                    explanation: f.explanation,
                })
            }
        };
        if s.t_id != self.t_id {
            return Err(AuthError::TransactionId);
        }
        let Some(expected) = &self.expected else {
            return Ok(None);
        };
        match s.response {
            Some(r) if same(r, expected) => Ok(Some(auth::success2(self.t_id))),
            Some(_) => Err(AuthError::ControllerFailed),
            None => Err(AuthError::ControllerSilent),
        }
    }

    /// AUTH_Failure2 telling the controller why the host gave up.
    pub fn failure2(&self, e: AuthError) -> Vec<u8> {
        auth::failure2(self.t_id, e.explanation())
    }
}
