//! Hosted test harness for pollfs.
//!
//! - [`model`]: a plain in-memory reference file (fsx's `good_buf` oracle);
//! - [`rng`]: a small seeded generator, so every failure replays from its seed;
//! - [`watchdog`]: turns a hang into a failure that names the stuck operations;
//! - [`deadline`]: the same for one test: worker threads under a deadline,
//!   cancelled and reported if they stall;
//! - [`image`]: reads and crafts on-disk images (superblocks, log writes);
//! - [`setup`]: filesystems on RAM devices with test-friendly configs;
//! - [`cached`]: one cached file and random overwrites of it, shared by
//!   the overwrite bench and the cost examples;
//! - [`delayed`]: a device that answers after a delay of wall-clock time;
//! - [`deferred`]: a device whose commands run late and out of order;
//! - [`crash`], [`sched`]: crash images and the deterministic race harness.

// A test harness: a failed setup step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod cached;
pub mod crash;
pub mod deadline;
pub mod deferred;
pub mod delayed;
pub mod heap;
pub mod image;
pub mod model;
pub mod rng;
pub mod sched;
pub mod setup;
pub mod tree;
pub mod watchdog;

/// The files of the committed corpus `tests/corpus/NAME`, sorted (the
/// fuzz targets' minimised inputs, replayed by `cargo test`).
pub fn corpus(name: &str) -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus at {}", dir.display());
    files
}
