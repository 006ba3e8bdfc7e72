//! The test target's side of DH-HMAC-CHAP (NVMe Base 2.0, 8.13.5): it
//! asks every queue to authenticate when [`TargetAuth`] is set, picks
//! the configured hash and group, checks the host's response, answers
//! the host's challenge with its own key (a wrong one makes an
//! impostor), and refuses every other command until the queue is
//! authenticated. Messages are built here byte by byte, apart from the
//! driver's encoders, so the two sides do not share a layout mistake.

use alloc::vec::Vec;

use crate::auth::dh::{Group, EXPONENT_LEN};
use crate::auth::hash::Side;
use crate::auth::keyfile::os_random;
use crate::auth::{DhchapSecret, Hash};
use crate::spec::auth::{dhgroup, id, reason, HEADER_LEN};

/// What the target demands of hosts.
#[derive(Clone, Debug)]
pub struct TargetAuth {
    /// The secret it expects hosts to hold (`dhchap_key`).
    pub host_key: DhchapSecret,
    /// The secret it answers host challenges with (`dhchap_ctrl_key`);
    /// none: it cannot, and fails a host that asks.
    pub ctrl_key: Option<DhchapSecret>,
    /// The hash it picks.
    pub hash: Hash,
    /// The DH group it picks.
    pub dhgroup: u8,
    /// On a failed check, close the connection without sending
    /// AUTH_Failure1 (what Linux's target may do when it tears the
    /// controller down before the message leaves).
    pub silent_failure: bool,
}

/// Where a queue's transaction is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    /// Waiting for AUTH_Negotiate.
    Negotiate,
    /// Waiting for the Receive that fetches the challenge.
    Challenge,
    /// Waiting for the reply.
    Reply,
    /// Waiting for the Receive that fetches success1 (R2 if asked).
    Success1(Option<Vec<u8>>),
    /// Waiting for success2.
    Success2,
    /// Waiting for the Receive that fetches AUTH_Failure1.
    Failure1(u8),
    /// Authenticated.
    Done,
    /// Failed; the queue stays refused.
    Failed,
}

/// One queue's transaction.
#[derive(Debug)]
pub(super) struct CtrlAuth {
    step: Step,
    t_id: u16,
    s1: u32,
    c1: Vec<u8>,
    y: Vec<u8>,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([
        b.get(at).copied().unwrap_or(0),
        b.get(at + 1).copied().unwrap_or(0),
    ])
}

fn random(n: usize) -> Vec<u8> {
    let mut v = alloc::vec![0u8; n];
    if !os_random(&mut v) {
        v.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    }
    v
}

impl CtrlAuth {
    pub(super) fn new() -> CtrlAuth {
        CtrlAuth {
            step: Step::Negotiate,
            t_id: 0,
            s1: 0,
            c1: Vec::new(),
            y: Vec::new(),
        }
    }
    /// True once the host has authenticated.
    pub(super) fn done(&self) -> bool {
        self.step == Step::Done
    }
    /// True once the transaction failed.
    pub(super) fn failed(&self) -> bool {
        self.step == Step::Failed
    }
    /// True when the next receive would fetch AUTH_Failure1.
    pub(super) fn failing(&self) -> bool {
        matches!(self.step, Step::Failure1(_))
    }

    fn augment(cfg: &TargetAuth, session: &Option<Vec<u8>>, c: &[u8]) -> Vec<u8> {
        match session {
            Some(k) => cfg.hash.hmac(&cfg.hash.digest(k), &[c]).to_vec(),
            None => c.to_vec(),
        }
    }

    /// An Authentication Send carrying `m` from host `hostnqn` to
    /// subsystem `subnqn`.
    pub(super) fn on_send(&mut self, cfg: &TargetAuth, m: &[u8], hostnqn: &[u8], subnqn: &[u8]) {
        let (ty, aid, t_id) = (m.first().copied(), m.get(1).copied(), le16(m, 4));
        self.step = match (&self.step, ty, aid) {
            (Step::Negotiate, Some(0), Some(id::NEGOTIATE)) if m.len() >= 72 => {
                self.t_id = t_id;
                let (halen, dhlen) = (usize::from(m[10]), usize::from(m[11]));
                let hashes = m.get(12..12 + halen.min(30)).unwrap_or(&[]);
                let groups = m.get(42..42 + dhlen.min(30)).unwrap_or(&[]);
                if !hashes.contains(&cfg.hash.id()) {
                    Step::Failure1(reason::HASH_UNUSABLE)
                } else if !groups.contains(&cfg.dhgroup) {
                    Step::Failure1(reason::DHGROUP_UNUSABLE)
                } else {
                    Step::Challenge
                }
            }
            (Step::Reply, Some(1), Some(id::REPLY)) => self.reply(cfg, m, hostnqn, subnqn),
            (Step::Success2, Some(1), Some(id::SUCCESS2)) if t_id == self.t_id => Step::Done,
            (_, Some(0), Some(id::FAILURE2)) => Step::Failed,
            _ => Step::Failure1(reason::INCORRECT_MESSAGE),
        };
    }

    fn reply(&mut self, cfg: &TargetAuth, m: &[u8], hostnqn: &[u8], subnqn: &[u8]) -> Step {
        let hl = cfg.hash.output_len();
        let dhvlen = usize::from(le16(m, 10));
        if le16(m, 4) != self.t_id
            || m.len() < HEADER_LEN + 2 * hl + dhvlen
            || usize::from(m[6]) != hl
        {
            return Step::Failure1(reason::INCORRECT_PAYLOAD);
        }
        let cvalid = m[8] & 1 != 0;
        let s2 = u32::from_le_bytes([m[12], m[13], m[14], m[15]]);
        let r1 = &m[HEADER_LEN..HEADER_LEN + hl];
        let c2 = &m[HEADER_LEN + hl..HEADER_LEN + 2 * hl];
        let dhv = &m[HEADER_LEN + 2 * hl..HEADER_LEN + 2 * hl + dhvlen];
        let session = match Group::from_id(cfg.dhgroup) {
            Some(g) => match g.session(&self.y, dhv) {
                Ok(k) => Some(k.to_vec()),
                Err(_) => return Step::Failure1(reason::INCORRECT_PAYLOAD),
            },
            None => None,
        };
        let kh = cfg.host_key.transformed(hostnqn);
        let ca1 = Self::augment(cfg, &session, &self.c1);
        let expect = cfg
            .hash
            .response(&kh, &ca1, self.s1, self.t_id, Side::Host, hostnqn, subnqn);
        if expect.as_slice() != r1 {
            return Step::Failure1(reason::FAILED);
        }
        if !cvalid {
            return Step::Success1(None);
        }
        let Some(ctrl) = &cfg.ctrl_key else {
            return Step::Failure1(reason::FAILED);
        };
        let kc = ctrl.transformed(subnqn);
        let ca2 = Self::augment(cfg, &session, c2);
        let r2 = cfg
            .hash
            .response(&kc, &ca2, s2, self.t_id, Side::Controller, hostnqn, subnqn);
        Step::Success1(Some(r2.to_vec()))
    }

    /// An Authentication Receive of at most `al` bytes: the next message,
    /// padded to `al`.
    pub(super) fn on_receive(&mut self, cfg: &TargetAuth, al: usize) -> Vec<u8> {
        let t = self.t_id.to_le_bytes();
        let mut m = Vec::with_capacity(al);
        match core::mem::replace(&mut self.step, Step::Failed) {
            Step::Challenge => {
                let hl = cfg.hash.output_len();
                self.c1 = random(hl);
                self.s1 = u32::from_le_bytes([1, 2, 3, 4]) ^ u32::from(self.t_id);
                let public = match Group::from_id(cfg.dhgroup) {
                    Some(g) => {
                        self.y = random(EXPONENT_LEN);
                        g.public(&self.y).to_vec()
                    }
                    None => Vec::new(),
                };
                let gid = if public.is_empty() {
                    dhgroup::NULL
                } else {
                    cfg.dhgroup
                };
                m.extend_from_slice(&[1, id::CHALLENGE, 0, 0, t[0], t[1], hl as u8, 0]);
                m.extend_from_slice(&[cfg.hash.id(), gid]);
                m.extend_from_slice(&(public.len() as u16).to_le_bytes());
                m.extend_from_slice(&self.s1.to_le_bytes());
                m.extend_from_slice(&self.c1);
                m.extend_from_slice(&public);
                self.step = Step::Reply;
            }
            Step::Success1(r2) => {
                let hl = cfg.hash.output_len() as u8;
                let rvalid = u8::from(r2.is_some());
                m.extend_from_slice(&[1, id::SUCCESS1, 0, 0, t[0], t[1], hl, 0, rvalid]);
                m.resize(HEADER_LEN, 0);
                m.extend_from_slice(r2.as_deref().unwrap_or(&[]));
                self.step = if r2.is_some() {
                    Step::Success2
                } else {
                    Step::Done
                };
            }
            Step::Failure1(why) => {
                m.extend_from_slice(&[0, id::FAILURE1, 0, 0, t[0], t[1], 1, why]);
            }
            other => {
                m.extend_from_slice(&[0, id::FAILURE1, 0, 0, t[0], t[1], 1]);
                m.push(reason::INCORRECT_MESSAGE);
                if other == Step::Done {
                    self.step = Step::Done;
                }
            }
        }
        m.resize(al.max(m.len()), 0);
        m
    }
}
