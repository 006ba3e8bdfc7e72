//! The host's DH-HMAC-CHAP under arbitrary controller messages: the
//! challenge and success1 parsers, the exchange that acts on them, and
//! the `DHHC-1:` secret parser. No input may panic; a challenge the
//! host accepts gives a reply of exactly the length its header names; a
//! success1 is accepted only with the exact controller response.
//!
//! Input layout (no `arbitrary`, so the corpus stays readable):
//!
//! - byte 0: bit 0 the host checks the controller too (bidirectional);
//!   bit 1 the bytes are the answer to the reply (success1) after a
//!   valid challenge with the NULL group and SHA-256; bit 2 they are also
//!   read as a secret's text;
//! - the rest: the controller's message, as an Authentication Receive
//!   returns it.
//!
//! Shared with `driver/tests/auth_corpus.rs` (by path), which replays the
//! committed corpus on stable.

use pollfs_driver::auth::{AuthError, DhchapConfig, DhchapSecret, Exchange};
use pollfs_driver::spec::auth::{Challenge, Success1, HEADER_LEN};

/// 32 bytes of 01h and their CRC-32, no transformation.
const KEY: &str = "DHHC-1:00:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQHMnzFi:";
const HOSTNQN: &[u8] = b"nqn.2014-08.org.nvmexpress:uuid:fuzz";
const SUBNQN: &[u8] = b"nqn.2024-01.io.pollfs:fuzz";
const T_ID: u16 = 7;

fn counting(b: &mut [u8]) -> bool {
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(31) ^ 0xa5;
    }
    true
}

/// A well-formed challenge: SHA-256, the NULL group.
fn challenge() -> Vec<u8> {
    let mut m = vec![1, 1, 0, 0];
    m.extend_from_slice(&T_ID.to_le_bytes());
    m.extend_from_slice(&[32, 0, 1, 0, 0, 0, 9, 0, 0, 0]);
    m.extend_from_slice(&[0x42; 32]);
    m
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&flags, msg)) = data.split_first() else {
        return;
    };
    let Ok(key) = DhchapSecret::parse(KEY) else {
        panic!("the harness key does not parse");
    };
    let config = DhchapConfig {
        host: key.clone(),
        ctrl: (flags & 1 != 0).then_some(key),
        random: counting,
    };
    // The parsers alone.
    if let Ok(pollfs_driver::spec::auth::Received::Message(c)) = Challenge::parse(msg) {
        assert!(HEADER_LEN + c.value.len() + c.dh_value.len() <= msg.len());
    }
    for hl in [32, 48, 64] {
        if let Ok(pollfs_driver::spec::auth::Received::Message(s)) = Success1::parse(msg, hl) {
            assert!(s.response.is_none_or(|r| r.len() == hl));
        }
    }
    if flags & 4 != 0 {
        let _ = DhchapSecret::parse(&String::from_utf8_lossy(msg));
    }
    let mut ex = Exchange::new(&config, HOSTNQN, SUBNQN, T_ID);
    if flags & 2 == 0 {
        if let Ok(reply) = ex.reply(msg) {
            let hl = usize::from(reply[6]);
            let dhvlen = usize::from(u16::from_le_bytes([reply[10], reply[11]]));
            assert_eq!(reply.len(), HEADER_LEN + 2 * hl + dhvlen);
            assert_eq!(u16::from_le_bytes([reply[4], reply[5]]), T_ID);
        }
        return;
    }
    let Ok(_) = ex.reply(&challenge()) else {
        panic!("a valid challenge was refused");
    };
    match ex.finish(msg) {
        // Accepting a controller the host checks takes R2 itself, which
        // no input the fuzzer finds by chance holds.
        Ok(Some(_)) => assert!(flags & 1 != 0),
        Ok(None) => assert!(flags & 1 == 0),
        Err(
            AuthError::Malformed
            | AuthError::Unexpected { .. }
            | AuthError::TransactionId
            | AuthError::Refused { .. }
            | AuthError::ControllerFailed
            | AuthError::ControllerSilent,
        ) => {}
        Err(e) => panic!("success1 gave {e:?}"),
    }
}
