//! Deterministic race runs: fixed seeds, and the committed fuzz corpus.
//!
//! The corpus in `tests/corpus/races` holds minimised inputs of the `races`
//! fuzz target; every file is run here through the same harness.
//!
//! Replay one seed with `POLLFS_RACE_SEED=<n> cargo test -p pollfs-host-tests
//! --test races replay -- --nocapture`, or a `races` fuzz input (a crash
//! artifact or a corpus file) with `POLLFS_RACE_FILE=<path>`.

#![allow(clippy::expect_used)]

use arbitrary::{Arbitrary, Unstructured};
use pollfs_host_tests::sched::{self, Options};

/// The fuzz input type, shared with `fuzz/` so the corpus decodes the same
/// way on stable.
#[path = "../../fuzz/src/input.rs"]
mod input;
/// The `nvme_completions` fuzz input, shared the same way.
#[path = "../../fuzz/src/nvme.rs"]
mod nvme;

/// Seeds every default run covers.
const SEEDS: u64 = 300;

#[test]
fn seeds_pass() {
    for seed in 0..SEEDS {
        if let Err(f) = sched::run_seed(seed, Options::default()) {
            panic!("seed {seed} failed: {f}\nreplay: POLLFS_RACE_SEED={seed} cargo test -p pollfs-host-tests --test races replay");
        }
    }
}

#[test]
fn replay() {
    if let Ok(seed) = std::env::var("POLLFS_RACE_SEED") {
        let seed: u64 = seed.parse().expect("POLLFS_RACE_SEED is a number");
        if let Err(f) = sched::run_seed(seed, Options::default()) {
            panic!("seed {seed} failed: {f}");
        }
    }
    if let Ok(path) = std::env::var("POLLFS_RACE_FILE") {
        let bytes = std::fs::read(&path).expect("POLLFS_RACE_FILE is readable");
        let (scenario, schedule) = decode(&bytes).decode();
        if let Err(f) = sched::run(&scenario, schedule, Options::default()) {
            panic!("{path} failed: {f}");
        }
    }
}

/// Lists every failing seed (a survey, not a check): `POLLFS_RACE_SURVEY=<n>`.
#[test]
fn survey() {
    let Ok(n) = std::env::var("POLLFS_RACE_SURVEY") else {
        return;
    };
    let strict = Options {
        strict_length: std::env::var("POLLFS_RACE_STRICT").is_ok(),
    };
    for seed in 0..n.parse::<u64>().expect("a number") {
        if let Err(f) = sched::run_seed(seed, strict) {
            println!("seed {seed}: {}", f.message);
        }
    }
}

/// Regression: seed 183 once showed a read of [4096, +6144) on a 20,480
/// byte file, preempted mid-copy by `set_len(0)`, return 4096 bytes: a
/// length no size of the file explains. A read that meets a concurrent
/// truncate now answers as if it came after it.
#[test]
fn read_racing_truncate_returns_a_length_the_file_had() {
    sched::run_seed(183, Options::default()).expect("a length the file had");
}

/// Decodes a file of `races` fuzz-target bytes as libFuzzer's
/// `fuzz_target!` does.
use pollfs_host_tests::corpus;

fn decode(bytes: &[u8]) -> input::RaceInput {
    input::RaceInput::arbitrary_take_rest(Unstructured::new(bytes)).expect("decodable input")
}

/// The `nvme_completions` corpus: hostile completions through the real
/// driver must give errors, not panics or hangs.
#[test]
fn nvme_corpus_passes() {
    for path in corpus("nvme_completions") {
        let bytes = std::fs::read(&path).expect("corpus file");
        let input = nvme::NvmeInput::arbitrary_take_rest(Unstructured::new(&bytes))
            .expect("decodable input");
        nvme::run(&input);
    }
}

#[test]
fn corpus_passes() {
    for path in corpus("races") {
        let bytes = std::fs::read(&path).expect("corpus file");
        let (scenario, schedule) = decode(&bytes).decode();
        if let Err(f) = sched::run(&scenario, schedule, Options::default()) {
            panic!("{} failed: {f}", path.display());
        }
    }
}

/// The executor itself: a task that waits without arranging a wake-up is a
/// deadlock, reported as such rather than a hang.
#[test]
fn a_lost_wake_up_is_reported_as_a_deadlock() {
    use sched::exec::{Clock, Exec, Stuck};
    let ctl = sched::device::HeldDevice::new(
        pollfs_core::dev::ram::RamDevice::new(1 << 20, 4096, 4).expect("ram"),
    )
    .controller();
    let tasks: Vec<sched::exec::Task> = vec![Box::pin(async {}), Box::pin(std::future::pending())];
    let exec = Exec::new(
        tasks,
        sched::choice::Choices::from_seed(1),
        ctl,
        Clock::default(),
        0,
    );
    assert_eq!(exec.run(1000), Err(Stuck::Deadlock));
}

/// Regression: a punch and a sync on one file once deadlocked (found by the
/// `races` fuzz target, minimised with `cargo fuzz tmin`). The sync's
/// writeback claimed pages and, finding a later page busy, waited for it,
/// pins included, before writing its claims; the punch held its edge page
/// pinned while waiting for those claims. Writeback now writes what it has
/// claimed before waiting, and does not wait on pins.
#[test]
fn punch_and_sync_no_longer_deadlock() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/regressions/punch-sync-deadlock");
    let bytes = std::fs::read(path).expect("regression input");
    let (scenario, schedule) = decode(&bytes).decode();
    if let Err(f) = sched::run(&scenario, schedule, Options::default()) {
        panic!("{f}");
    }
}

/// Sync-heavy seeds: several syncs of one file against writers on a cache
/// of a few pages, mostly through the journal (the shape of the deadlock
/// where two syncs each kept pages the other waited for).
#[test]
fn sync_seeds_pass() {
    for seed in 0..SYNC_SEEDS {
        if let Err(f) = sched::run_sync_seed(seed, Options::default()) {
            panic!("sync seed {seed} failed: {f}");
        }
    }
}

/// Sync-heavy seeds every default run covers.
const SYNC_SEEDS: u64 = 300;

/// The background step (`Session::background_step`, what the hosted
/// layer's thread drives) at points the schedule chooses among syncs,
/// writes and punches: every seed passes the oracles and the invariant
/// check, and across them the steps wrote pages home or checkpoints (so
/// they had work to race, and this test is not one of idle steps).
#[test]
fn background_seeds_pass() {
    let mut wrote = 0;
    for seed in 0..BACKGROUND_SEEDS {
        match sched::run_background_seed(seed, Options::default()) {
            Ok(n) => wrote += n,
            Err(f) => panic!("background seed {seed} failed: {f}"),
        }
    }
    assert!(
        wrote > 0,
        "no background step wrote anything in {BACKGROUND_SEEDS} seeds"
    );
    println!("background steps wrote {wrote} pages and checkpoints");
}

/// Background seeds every default run covers.
const BACKGROUND_SEEDS: u64 = 1000;

/// Lists failing sync-heavy seeds (a survey): `POLLFS_SYNC_SURVEY=<n>`.
#[test]
fn sync_survey() {
    let Ok(n) = std::env::var("POLLFS_SYNC_SURVEY") else {
        return;
    };
    for seed in 0..n.parse::<u64>().expect("a number") {
        if let Err(f) = sched::run_sync_seed(seed, Options::default()) {
            println!("sync seed {seed}: {}", f.message);
        }
    }
}

/// Namespace seeds: renames, unlinks, creates, mknods of special files
/// (FIFOs, sockets, device nodes) and lookups of the files' names racing
/// writes, reads and syncs through open handles.
#[test]
fn names_seeds_pass() {
    for seed in 0..NAMES_SEEDS {
        if let Err(f) = sched::run_names_seed(seed, Options::default()) {
            panic!("names seed {seed} failed: {f}");
        }
    }
}

/// Direct I/O seeds: direct writes and reads racing buffered ones,
/// truncates, punches and syncs of one file on a cache of a few pages.
#[test]
fn direct_seeds_pass() {
    for seed in 0..DIRECT_SEEDS {
        if let Err(f) = sched::run_direct_seed(seed, Options::default()) {
            panic!("direct seed {seed} failed: {f}");
        }
    }
}

/// Direct I/O seeds every default run covers.
const DIRECT_SEEDS: u64 = 300;

/// Lists failing direct I/O seeds (a survey): `POLLFS_DIRECT_SURVEY=<n>`.
#[test]
fn direct_survey() {
    let Ok(n) = std::env::var("POLLFS_DIRECT_SURVEY") else {
        return;
    };
    for seed in 0..n.parse::<u64>().expect("a number") {
        if let Err(f) = sched::run_direct_seed(seed, Options::default()) {
            println!("direct seed {seed}: {}", f.message);
        }
    }
}

/// Namespace seeds every default run covers.
const NAMES_SEEDS: u64 = 300;

/// Lists failing namespace seeds (a survey): `POLLFS_NAMES_SURVEY=<n>`.
#[test]
fn names_survey() {
    let Ok(n) = std::env::var("POLLFS_NAMES_SURVEY") else {
        return;
    };
    for seed in 0..n.parse::<u64>().expect("a number") {
        if let Err(f) = sched::run_names_seed(seed, Options::default()) {
            println!("names seed {seed}: {}", f.message);
        }
    }
}
