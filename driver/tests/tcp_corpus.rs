//! Replays the committed corpus of the `tcp_receive` fuzz target (see
//! `fuzz/src/tcp.rs`): hostile byte streams into the NVMe/TCP receive
//! path give errors and reconnects, never a panic or a hang.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

#[path = "../../fuzz/src/tcp.rs"]
mod tcp;

#[test]
fn tcp_receive_corpus_passes() {
    common::replay_corpus("tcp_receive", tcp::run);
}
