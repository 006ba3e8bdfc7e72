//! Hosted test harness for pollfs.
//!
//! - [`model`]: a plain in-memory reference file (fsx's `good_buf` oracle);
//! - [`rng`]: a small seeded generator, so every failure replays from its seed;
//! - [`watchdog`]: turns a hang into a failure that names the stuck operations;
//! - [`deadline`]: the same for one test: worker threads under a deadline,
//!   cancelled and reported if they stall;
//! - [`image`]: reads and crafts on-disk images (superblocks, log writes);
//! - [`setup`]: filesystems on RAM devices with test-friendly configs;
//! - [`delayed`]: a device that answers after a delay of wall-clock time;
//! - [`deferred`]: a device whose commands run late and out of order;
//! - [`crash`], [`sched`]: crash images and the deterministic race harness.

// A test harness: a failed setup step should stop the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod crash;
pub mod deadline;
pub mod deferred;
pub mod delayed;
pub mod image;
pub mod model;
pub mod rng;
pub mod sched;
pub mod setup;
pub mod tree;
pub mod watchdog;
