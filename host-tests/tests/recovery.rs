//! Damaged and crafted images, and hostile metadata bytes: the committed
//! corpora of the `recovery` and `log_record` fuzz targets, replayed on
//! stable through the same checks the targets run (shared with `fuzz/` by
//! path).
//!
//! Replay one input (a crash artifact or a corpus file) with
//! `POLLFS_RECOVERY_FILE=<path> cargo test -p pollfs-host-tests --test
//! recovery replay -- --nocapture` (or `POLLFS_LOG_RECORD_FILE` for a
//! `log_record` input); the decoded mutations are printed first.

#![allow(clippy::expect_used)]

use arbitrary::{Arbitrary, Unstructured};

/// The `log_record` checks.
#[path = "../../fuzz/src/log_record.rs"]
mod log_record;
/// The `recovery` input and its checks.
#[path = "../../fuzz/src/recovery/mod.rs"]
mod recovery;

/// Decodes a `recovery` input as libFuzzer's `fuzz_target!` does.
use pollfs_host_tests::corpus;

fn decode(bytes: &[u8]) -> recovery::RecoveryInput {
    recovery::RecoveryInput::arbitrary_take_rest(Unstructured::new(bytes)).expect("decodable input")
}

#[test]
fn recovery_corpus_passes() {
    for path in corpus("recovery") {
        let bytes = std::fs::read(&path).expect("corpus file");
        let input = decode(&bytes);
        let run = std::panic::catch_unwind(|| recovery::run(&input));
        assert!(run.is_ok(), "{} failed: {input:#?}", path.display());
    }
}

#[test]
fn log_record_corpus_passes() {
    for path in corpus("log_record") {
        let bytes = std::fs::read(&path).expect("corpus file");
        let run = std::panic::catch_unwind(|| log_record::run(&bytes));
        assert!(run.is_ok(), "{} failed", path.display());
    }
}

/// The base image itself is clean, mounts, and passes every check.
#[test]
fn the_unchanged_image_passes() {
    recovery::run(&recovery::RecoveryInput {
        mutations: Vec::new(),
    });
}

#[test]
fn replay() {
    if let Ok(path) = std::env::var("POLLFS_RECOVERY_FILE") {
        let input = decode(&std::fs::read(&path).expect("POLLFS_RECOVERY_FILE is readable"));
        println!("{input:#?}");
        recovery::run(&input);
    }
    if let Ok(path) = std::env::var("POLLFS_LOG_RECORD_FILE") {
        log_record::run(&std::fs::read(&path).expect("POLLFS_LOG_RECORD_FILE is readable"));
    }
}

/// A `recovery` input kept under `tests/corpus/regressions`.
fn regression(name: &str) -> recovery::RecoveryInput {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/regressions")
        .join(name);
    decode(&std::fs::read(path).expect("regression input"))
}

/// Runs a regression input with every check strict.
fn strict(name: &str) {
    recovery::run(&regression(name));
}

/// Found by the `recovery` target on format 2: an intact log write with
/// the largest accepted sequence number (`MAX_SEQUENCE`, 2^62) after the
/// live log. Mount refuses the log hole and check reports it; `repair`
/// used to write checkpoints with `ckpt_lsn = MAX_SEQUENCE + 1`, which
/// `Superblock::decode` refuses, leaving no usable superblock. Now the
/// log refuses to go past `MAX_SEQUENCE` (`SequenceExhausted`), so repair
/// fails with an error and writes nothing. The input appends one empty
/// log write with that sequence number.
#[test]
fn repair_keeps_a_usable_superblock_past_a_log_write_at_max_sequence() {
    strict("repair-log-write-at-max-sequence");
}

/// Found by the `recovery` target on format 2: a superblock whose
/// generation is `MAX_SEQUENCE` mounts, and the next checkpoint (an
/// unmount's) used to write generation `MAX_SEQUENCE + 1`, which does not
/// decode; the next mount fell back to the older copy, whose checkpoint
/// was long reused, and failed. Now the unmount fails with
/// `SequenceExhausted` and the image still mounts with what was synced.
/// The input sets the newest copy's generation to `MAX_SEQUENCE` with a
/// valid checksum.
#[test]
fn an_unmount_from_generation_max_sequence_leaves_a_mountable_image() {
    strict("unmount-generation-at-max-sequence");
}

/// Found by the `recovery` target on format 3: a checkpoint image whose
/// root directory has a `parent` other than itself. Check reports
/// `BadDirLinks` for the root and mount refuses; repair used to fix
/// `BadDirLinks` only by making `..` agree with the entry naming the
/// directory, and no entry names the root, so it returned `Ok` with the
/// problem still there and the image never mounted. Now repair makes the
/// root its own `..`. The input sets the root's `parent` to 2 in the
/// checkpoint image.
#[test]
fn repair_fixes_a_root_whose_parent_is_not_itself() {
    strict("repair-root-parent");
}

/// Found by the `recovery` target on format 3: a directory with no links
/// that still holds entries. The input drops the checkpoint image's record
/// of `/d1/d2`; repair dropped the dangling entries and set `d3`'s link
/// count to 0 while `d3` still held `hard`, a second link to `/d1/05-...`.
/// Check called that clean, mount reclaimed `d3` as an orphan, and the
/// first sync's `Free` left `hard` dangling: the next mount failed. Now a
/// directory that no entry names but that holds entries is unreachable:
/// check reports it and repair links it into the root.
#[test]
fn a_directory_with_no_links_and_entries_is_not_left_to_mount() {
    strict("orphan-directory-with-entries");
}

/// Found by the `recovery` target on format 3: repair of an image with no
/// root directory panicked on `Shadow::image`'s length assertion (left
/// 7641, right 7577): the fix for `Problem::NoRoot` put the new root into
/// the view's inodes directly, past its image-length count. Now the root
/// goes in through the view's own bookkeeping. The input drops the root's
/// record from the checkpoint image.
#[test]
fn repair_makes_a_root_without_panicking() {
    strict("repair-without-root");
}
