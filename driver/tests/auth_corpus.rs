//! Replays the committed corpus of the `auth_messages` fuzz target (see
//! `fuzz/src/auth.rs`): hostile DH-HMAC-CHAP messages into the host's
//! parsers and exchange give errors, never a panic.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../fuzz/src/auth.rs"]
mod auth;

#[test]
fn auth_messages_corpus_passes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/auth_messages");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus at {}", dir.display());
    for path in files {
        let bytes = std::fs::read(&path).expect("corpus file");
        let result = std::panic::catch_unwind(|| auth::run(&bytes));
        assert!(result.is_ok(), "{} failed", path.display());
    }
}
