//! Replays the committed corpus of the `tcp_receive` fuzz target (see
//! `fuzz/src/tcp.rs`): hostile byte streams into the NVMe/TCP receive
//! path give errors and reconnects, never a panic or a hang.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../fuzz/src/tcp.rs"]
mod tcp;

#[test]
fn tcp_receive_corpus_passes() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/tcp_receive");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus at {}", dir.display());
    for path in files {
        let bytes = std::fs::read(&path).expect("corpus file");
        let result = std::panic::catch_unwind(|| tcp::run(&bytes));
        assert!(result.is_ok(), "{} failed", path.display());
    }
}
