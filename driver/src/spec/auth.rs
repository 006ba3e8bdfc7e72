//! NVMe in-band authentication on the wire: the Fabrics Authentication
//! Send and Receive commands (NVMe Base 2.0, 6.2 and 6.3) and the
//! DH-HMAC-CHAP messages they carry (8.13.5). Encoding and checked
//! parsing only; the arithmetic lives in [`crate::auth`].
//!
//! Every message starts with AUTH_TYPE and AUTH_ID and has the
//! transaction id (T_ID) in bytes 5:4. The controller answers an
//! Authentication Receive with as many bytes as the host allowed, so a
//! received message is followed by padding: the parser reads the
//! lengths the header names and never beyond the bytes it was given.

use alloc::vec::Vec;

use super::command::SubmissionEntry;
use super::fabrics::fctype;

/// Security protocol of DH-HMAC-CHAP (SECP, NVMe Base 2.0, 8.13.5).
pub const SECP_DHCHAP: u8 = 0xe9;
/// SPSP0 and SPSP1 for DH-HMAC-CHAP: both 01h.
pub const SPSP_DHCHAP: u8 = 0x01;
/// Authentication id of DH-HMAC-CHAP in a protocol descriptor.
pub const AUTHID_DHCHAP: u8 = 0x01;

/// Connect response DW0 bit 17: authentication required (ATR).
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;
/// Connect response DW0 bit 18: authentication and secure channel
/// required (ASCR).
pub const CONNECT_AUTHREQ_ASCR: u32 = 1 << 18;

/// AUTH_TYPE: messages common to every protocol (negotiate, failures).
pub const TYPE_COMMON: u8 = 0x00;
/// AUTH_TYPE: DH-HMAC-CHAP messages.
pub const TYPE_DHCHAP: u8 = 0x01;

/// AUTH_ID values (8.13.5.1 to 8.13.5.8).
pub mod id {
    /// AUTH_Negotiate (common).
    pub const NEGOTIATE: u8 = 0x00;
    /// DH-HMAC-CHAP_Challenge.
    pub const CHALLENGE: u8 = 0x01;
    /// DH-HMAC-CHAP_Reply.
    pub const REPLY: u8 = 0x02;
    /// DH-HMAC-CHAP_Success1.
    pub const SUCCESS1: u8 = 0x03;
    /// DH-HMAC-CHAP_Success2.
    pub const SUCCESS2: u8 = 0x04;
    /// AUTH_Failure2 (host to controller, common).
    pub const FAILURE2: u8 = 0xf0;
    /// AUTH_Failure1 (controller to host, common).
    pub const FAILURE1: u8 = 0xf1;
}

/// Reason code explanations of a failure message (8.13.5.8).
pub mod reason {
    /// Authentication failed.
    pub const FAILED: u8 = 0x01;
    /// Authentication protocol not usable.
    pub const NOT_USABLE: u8 = 0x02;
    /// Secure channel concatenation mismatch.
    pub const CONCAT_MISMATCH: u8 = 0x03;
    /// Hash function not usable.
    pub const HASH_UNUSABLE: u8 = 0x04;
    /// DH group not usable.
    pub const DHGROUP_UNUSABLE: u8 = 0x05;
    /// Incorrect payload.
    pub const INCORRECT_PAYLOAD: u8 = 0x06;
    /// Incorrect protocol message.
    pub const INCORRECT_MESSAGE: u8 = 0x07;
}

/// Reason code of a failure message: authentication failure.
pub const RESCODE_FAILED: u8 = 0x01;

/// Hash function identifiers (8.13.5.2).
pub mod hash {
    /// SHA-256.
    pub const SHA256: u8 = 0x01;
    /// SHA-384.
    pub const SHA384: u8 = 0x02;
    /// SHA-512.
    pub const SHA512: u8 = 0x03;
}

/// Diffie-Hellman group identifiers (8.13.5.2).
pub mod dhgroup {
    /// No Diffie-Hellman exchange.
    pub const NULL: u8 = 0x00;
    /// RFC 7919 ffdhe2048.
    pub const FFDHE2048: u8 = 0x01;
    /// ffdhe3072.
    pub const FFDHE3072: u8 = 0x02;
    /// ffdhe4096.
    pub const FFDHE4096: u8 = 0x03;
    /// ffdhe6144.
    pub const FFDHE6144: u8 = 0x04;
    /// ffdhe8192.
    pub const FFDHE8192: u8 = 0x05;
}

/// Length of the header of the challenge, reply, success1 and success2
/// messages.
pub const HEADER_LEN: usize = 16;
/// Length of a negotiate message with one protocol descriptor.
pub const NEGOTIATE_LEN: usize = 8 + DESCRIPTOR_LEN;
/// Length of one protocol descriptor.
const DESCRIPTOR_LEN: usize = 64;
/// Offset of the DH group ids in a descriptor's id list.
const DH_IDS_AT: usize = 30;
/// Length of a failure message.
pub const FAILURE_LEN: usize = 8;
/// What the host allows for every Authentication Receive: enough for a
/// challenge with an ffdhe8192 value (16 + 64 + 1024 bytes).
pub const RECEIVE_LEN: usize = 4096;

impl SubmissionEntry {
    /// Authentication Send (NVMe Base 2.0, 6.2) of `tl` bytes of
    /// DH-HMAC-CHAP message.
    pub fn auth_send(tl: u32) -> SubmissionEntry {
        let mut e = SubmissionEntry::fabrics(fctype::AUTH_SEND);
        // Byte 40 reserved, 41 SPSP0, 42 SPSP1, 43 SECP; TL in 47:44.
        e.dw[10] = u32::from_le_bytes([0, SPSP_DHCHAP, SPSP_DHCHAP, SECP_DHCHAP]);
        e.dw[11] = tl;
        e
    }
    /// Authentication Receive (6.3) of at most `al` bytes.
    pub fn auth_receive(al: u32) -> SubmissionEntry {
        let mut e = SubmissionEntry::auth_send(al);
        e.dw[1] = u32::from(fctype::AUTH_RECEIVE);
        e
    }
}

fn header(buf: &mut Vec<u8>, auth_type: u8, auth_id: u8, t_id: u16) {
    buf.extend_from_slice(&[auth_type, auth_id, 0, 0]);
    buf.extend_from_slice(&t_id.to_le_bytes());
}

/// AUTH_Negotiate (8.13.5.2): one DH-HMAC-CHAP descriptor offering
/// `hashes` and `groups` (at most 30 of each), no secure channel.
pub fn negotiate(t_id: u16, hashes: &[u8], groups: &[u8]) -> Vec<u8> {
    let hashes = hashes.get(..hashes.len().min(DH_IDS_AT)).unwrap_or(&[]);
    let groups = groups.get(..groups.len().min(DH_IDS_AT)).unwrap_or(&[]);
    let mut b = Vec::with_capacity(NEGOTIATE_LEN);
    header(&mut b, TYPE_COMMON, id::NEGOTIATE, t_id);
    // SC_C 0 (no secure channel concatenation), NAPD 1.
    b.extend_from_slice(&[0, 1]);
    b.extend_from_slice(&[AUTHID_DHCHAP, 0, hashes.len() as u8, groups.len() as u8]);
    let mut ids = [0u8; DESCRIPTOR_LEN - 4];
    for (d, s) in ids.iter_mut().zip(hashes) {
        *d = *s;
    }
    for (d, s) in ids.iter_mut().skip(DH_IDS_AT).zip(groups) {
        *d = *s;
    }
    b.extend_from_slice(&ids);
    b
}

/// DH-HMAC-CHAP_Reply (8.13.5.4): the response, the host's challenge
/// for the controller (bidirectional, with its sequence number) and the
/// host's DH value. `response` and a present `challenge` have the same
/// length.
pub fn reply(
    t_id: u16,
    response: &[u8],
    challenge: Option<(&[u8], u32)>,
    dh_value: &[u8],
) -> Vec<u8> {
    let hl = response.len();
    let mut b = Vec::with_capacity(HEADER_LEN + 2 * hl + dh_value.len());
    header(&mut b, TYPE_DHCHAP, id::REPLY, t_id);
    let (cvalid, seqnum) = challenge.map_or((0, 0), |(_, s)| (1, s));
    b.extend_from_slice(&[hl as u8, 0, cvalid, 0]);
    b.extend_from_slice(&(dh_value.len() as u16).to_le_bytes());
    b.extend_from_slice(&seqnum.to_le_bytes());
    b.extend_from_slice(response);
    match challenge {
        Some((c, _)) => b.extend_from_slice(c),
        None => b.resize(b.len() + hl, 0),
    }
    b.extend_from_slice(dh_value);
    b
}

/// DH-HMAC-CHAP_Success2 (8.13.5.6).
pub fn success2(t_id: u16) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER_LEN);
    header(&mut b, TYPE_DHCHAP, id::SUCCESS2, t_id);
    b.resize(HEADER_LEN, 0);
    b
}

/// AUTH_Failure2 (8.13.5.8) with reason code explanation `explanation`.
pub fn failure2(t_id: u16, explanation: u8) -> Vec<u8> {
    let mut b = Vec::with_capacity(FAILURE_LEN);
    header(&mut b, TYPE_COMMON, id::FAILURE2, t_id);
    b.extend_from_slice(&[RESCODE_FAILED, explanation]);
    b
}

/// Why received bytes are not the message expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageError {
    /// Shorter than its header or than the lengths it names.
    Truncated,
    /// Another message than the one expected (AUTH_TYPE, AUTH_ID).
    Unexpected {
        /// AUTH_TYPE received.
        auth_type: u8,
        /// AUTH_ID received.
        auth_id: u8,
    },
    /// HL does not match the hash function's length, or names none.
    HashLength,
}

impl core::fmt::Display for MessageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MessageError::Truncated => f.write_str("message shorter than its lengths"),
            MessageError::Unexpected { auth_type, auth_id } => {
                write!(f, "unexpected message {auth_type:#04x}/{auth_id:#04x}")
            }
            MessageError::HashLength => f.write_str("hash length does not fit the hash"),
        }
    }
}

/// The length of hash function `hashid`'s output, if it is one.
pub fn hash_len(hashid: u8) -> Option<usize> {
    match hashid {
        hash::SHA256 => Some(32),
        hash::SHA384 => Some(48),
        hash::SHA512 => Some(64),
        _ => None,
    }
}

/// A DH-HMAC-CHAP_Challenge (8.13.5.3), checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Challenge<'a> {
    /// Transaction id.
    pub t_id: u16,
    /// Hash function id (not checked to be one the host knows).
    pub hashid: u8,
    /// DH group id (not checked).
    pub dhgid: u8,
    /// Sequence number S1.
    pub seqnum: u32,
    /// The challenge C1, HL bytes.
    pub value: &'a [u8],
    /// The controller's DH value, DHVLEN bytes (empty for the NULL group).
    pub dh_value: &'a [u8],
}

/// A DH-HMAC-CHAP_Success1 (8.13.5.5), checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Success1<'a> {
    /// Transaction id.
    pub t_id: u16,
    /// The controller's response R2, when RVALID says there is one.
    pub response: Option<&'a [u8]>,
}

/// An AUTH_Failure1 (8.13.5.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Transaction id.
    pub t_id: u16,
    /// Reason code.
    pub rescode: u8,
    /// Reason code explanation.
    pub explanation: u8,
}

/// What the controller sent in answer to an Authentication Receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received<T> {
    /// The message expected.
    Message(T),
    /// The controller failed the authentication.
    Failure(Failure),
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Reads the message type: a failure, the expected DH-HMAC-CHAP message
/// `auth_id` (its transaction id returned), or an error.
fn classify(b: &[u8], auth_id: u8) -> Result<Result<u16, Failure>, MessageError> {
    let (Some(&ty), Some(&id), Some(t_id)) = (b.first(), b.get(1), le16(b, 4)) else {
        return Err(MessageError::Truncated);
    };
    if (ty, id) == (TYPE_COMMON, id::FAILURE1) {
        let (Some(&rescode), Some(&explanation)) = (b.get(6), b.get(7)) else {
            return Err(MessageError::Truncated);
        };
        return Ok(Err(Failure {
            t_id,
            rescode,
            explanation,
        }));
    }
    if (ty, id) != (TYPE_DHCHAP, auth_id) {
        return Err(MessageError::Unexpected {
            auth_type: ty,
            auth_id: id,
        });
    }
    Ok(Ok(t_id))
}

impl<'a> Challenge<'a> {
    /// Checks `b` as a challenge (or a failure). HL must be the length of
    /// the hash named, when the host knows it; both lengths must fit.
    pub fn parse(b: &'a [u8]) -> Result<Received<Challenge<'a>>, MessageError> {
        let t_id = match classify(b, id::CHALLENGE)? {
            Ok(t) => t,
            Err(f) => return Ok(Received::Failure(f)),
        };
        let head = b.get(..HEADER_LEN).ok_or(MessageError::Truncated)?;
        let (hl, hashid, dhgid) = (usize::from(head[6]), head[8], head[9]);
        let dhvlen = usize::from(le16(head, 10).ok_or(MessageError::Truncated)?);
        let seqnum = le32(head, 12).ok_or(MessageError::Truncated)?;
        if hash_len(hashid).is_some_and(|n| n != hl) || hl == 0 {
            return Err(MessageError::HashLength);
        }
        let value = b
            .get(HEADER_LEN..HEADER_LEN + hl)
            .ok_or(MessageError::Truncated)?;
        let dh_value = b
            .get(HEADER_LEN + hl..HEADER_LEN + hl + dhvlen)
            .ok_or(MessageError::Truncated)?;
        Ok(Received::Message(Challenge {
            t_id,
            hashid,
            dhgid,
            seqnum,
            value,
            dh_value,
        }))
    }
}

impl<'a> Success1<'a> {
    /// Checks `b` as a success1 (or a failure) for a transaction whose
    /// hash is `hl` bytes long.
    pub fn parse(b: &'a [u8], hl: usize) -> Result<Received<Success1<'a>>, MessageError> {
        let t_id = match classify(b, id::SUCCESS1)? {
            Ok(t) => t,
            Err(f) => return Ok(Received::Failure(f)),
        };
        let head = b.get(..HEADER_LEN).ok_or(MessageError::Truncated)?;
        if usize::from(head[6]) != hl {
            return Err(MessageError::HashLength);
        }
        let response = if head[8] & 1 != 0 {
            Some(
                b.get(HEADER_LEN..HEADER_LEN + hl)
                    .ok_or(MessageError::Truncated)?,
            )
        } else {
            None
        };
        Ok(Received::Message(Success1 { t_id, response }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_carry_the_protocol_and_lengths() {
        let b = SubmissionEntry::auth_send(72).to_bytes();
        assert_eq!((b[0], b[4]), (0x7f, 0x05));
        assert_eq!(&b[40..44], &[0, 1, 1, 0xe9]);
        assert_eq!(&b[44..48], &72u32.to_le_bytes());
        let b = SubmissionEntry::auth_receive(4096).to_bytes();
        assert_eq!(b[4], 0x06);
        assert_eq!(&b[40..44], &[0, 1, 1, 0xe9]);
        assert_eq!(&b[44..48], &4096u32.to_le_bytes());
    }

    #[test]
    fn host_messages_have_the_spec_layout() {
        let n = negotiate(0x1234, &[1, 2, 3], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(n.len(), 72);
        assert_eq!(&n[..8], &[0, 0, 0, 0, 0x34, 0x12, 0, 1]);
        assert_eq!(&n[8..12], &[1, 0, 3, 6]);
        assert_eq!(&n[12..15], &[1, 2, 3]);
        assert_eq!(&n[42..48], &[0, 1, 2, 3, 4, 5]);
        let r = reply(7, &[0xaa; 32], Some((&[0xbb; 32], 0x0102_0304)), &[0xcc; 4]);
        assert_eq!(r.len(), 16 + 64 + 4);
        assert_eq!(&r[..16], &[1, 2, 0, 0, 7, 0, 32, 0, 1, 0, 4, 0, 4, 3, 2, 1]);
        assert_eq!((r[16], r[48], r[80]), (0xaa, 0xbb, 0xcc));
        let r = reply(7, &[0xaa; 48], None, &[]);
        assert_eq!(r.len(), 16 + 96);
        assert_eq!((r[8], r[10], r[12]), (0, 0, 0));
        assert!(r[64..].iter().all(|&x| x == 0));
        assert_eq!(
            success2(9),
            [1, 4, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(failure2(9, 6), [0, 0xf0, 0, 0, 9, 0, 1, 6]);
    }

    fn challenge_bytes(hl: u8, hashid: u8, dhvlen: u16) -> Vec<u8> {
        let mut b = vec![1, 1, 0, 0, 5, 0, hl, 0, hashid, 1];
        b.extend_from_slice(&dhvlen.to_le_bytes());
        b.extend_from_slice(&77u32.to_le_bytes());
        b.extend((0..usize::from(hl) + usize::from(dhvlen)).map(|i| i as u8));
        b.resize(RECEIVE_LEN, 0);
        b
    }

    #[test]
    fn a_challenge_parses_and_its_padding_is_ignored() {
        let b = challenge_bytes(32, 1, 256);
        let Received::Message(c) = Challenge::parse(&b).unwrap() else {
            panic!("not a challenge");
        };
        assert_eq!((c.t_id, c.hashid, c.dhgid, c.seqnum), (5, 1, 1, 77));
        assert_eq!(c.value.len(), 32);
        assert_eq!(c.dh_value.len(), 256);
        assert_eq!(c.dh_value[0], 32);
    }

    #[test]
    fn hostile_challenges_are_errors() {
        // Truncated anywhere before the lengths it names.
        let b = challenge_bytes(48, 2, 384);
        for n in 0..16 + 48 + 384 {
            assert!(Challenge::parse(&b[..n]).is_err(), "{n} bytes");
        }
        assert!(Challenge::parse(&b[..16 + 48 + 384]).is_ok());
        // HL that is not the hash's length, or zero.
        assert_eq!(
            Challenge::parse(&challenge_bytes(32, 3, 0)),
            Err(MessageError::HashLength)
        );
        assert_eq!(
            Challenge::parse(&challenge_bytes(0, 9, 0)),
            Err(MessageError::HashLength)
        );
        // An unknown hash with some length parses; the exchange refuses it.
        assert!(Challenge::parse(&challenge_bytes(20, 9, 0)).is_ok());
        // A DHVLEN running past the buffer.
        let mut b = challenge_bytes(32, 1, 0);
        b[10..12].copy_from_slice(&0xffffu16.to_le_bytes());
        assert_eq!(Challenge::parse(&b), Err(MessageError::Truncated));
        // Another message.
        let mut b = challenge_bytes(32, 1, 0);
        b[1] = id::SUCCESS1;
        assert_eq!(
            Challenge::parse(&b),
            Err(MessageError::Unexpected {
                auth_type: 1,
                auth_id: 3
            })
        );
        // A failure is reported as one.
        let f = [0, 0xf1, 0, 0, 5, 0, 1, 4];
        assert_eq!(
            Challenge::parse(&f),
            Ok(Received::Failure(Failure {
                t_id: 5,
                rescode: 1,
                explanation: 4
            }))
        );
        assert_eq!(Challenge::parse(&f[..7]), Err(MessageError::Truncated));
    }

    #[test]
    fn success1_with_and_without_response() {
        let mut b = vec![1, 3, 0, 0, 5, 0, 32, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        b.extend_from_slice(&[0x5a; 32]);
        let Ok(Received::Message(s)) = Success1::parse(&b, 32) else {
            panic!("not a success1");
        };
        assert_eq!((s.t_id, s.response), (5, Some(&[0x5a; 32][..])));
        assert_eq!(Success1::parse(&b[..47], 32), Err(MessageError::Truncated));
        assert_eq!(Success1::parse(&b, 48), Err(MessageError::HashLength));
        b[8] = 0;
        let Ok(Received::Message(s)) = Success1::parse(&b[..16], 32) else {
            panic!("not a success1");
        };
        assert_eq!(s.response, None);
        assert_eq!(Success1::parse(&b[..15], 32), Err(MessageError::Truncated));
    }
}
