//! Replays the committed corpus of the `auth_messages` fuzz target (see
//! `fuzz/src/auth.rs`): hostile DH-HMAC-CHAP messages into the host's
//! parsers and exchange give errors, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

#[path = "../../fuzz/src/auth.rs"]
mod auth;

#[test]
fn auth_messages_corpus_passes() {
    common::replay_corpus("auth_messages", auth::run);
}
