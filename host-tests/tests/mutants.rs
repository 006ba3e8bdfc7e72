//! Planted bugs: the race harness must find each one from fixed seeds, and
//! the same seeds must pass with no bug planted; the crash harness must
//! find each durability bug in a fixed workload that passes with none.
//! The switches are global to the process, so one test turns them on one
//! at a time.
//!
//! The switches exist only under `--cfg pollfs_mutants` (`just mutants`
//! sets it; CI runs that recipe), so that no product build can carry them;
//! without the cfg this file compiles to nothing.
#![cfg(pollfs_mutants)]

use pollfs_core::mutants::{self, Mutant};
use pollfs_host_tests::crash::bitmap;
use pollfs_host_tests::crash::{files, run};
use pollfs_host_tests::sched::{self, Options};

/// Seeds tried per mutant before giving up.
const BUDGET: u64 = 10_000;

/// A way to run one seed: the general scenarios, or the sync-heavy ones.
type Runner = fn(u64, Options) -> Result<(), sched::Failure>;

/// The first seed in `0..BUDGET` that fails under `run`, with its report.
fn first_failure(run: Runner) -> Option<(u64, String)> {
    (0..BUDGET).find_map(|seed| {
        run(seed, Options::default())
            .err()
            .map(|f| (seed, f.to_string()))
    })
}

#[test]
fn every_mutant_is_found() {
    let general: Runner = sched::run_seed;
    let syncs: Runner = sched::run_sync_seed;
    let all = [
        (Mutant::PunchDropsBeforeGate, general),
        (Mutant::TruncateSkipsDrain, general),
        (Mutant::ExtendWithoutInodeLock, general),
        (Mutant::ReadSkipsVersionCheck, general),
        (Mutant::SyncHoldsWriteback, syncs),
    ];
    let mut found = Vec::new();
    for (m, run) in all {
        mutants::set(m, true);
        let hit = first_failure(run);
        // Same input, same run: the failing seed replays to the same trace.
        let again = hit
            .as_ref()
            .and_then(|(seed, _)| run(*seed, Options::default()).err());
        mutants::set(m, false);
        let (seed, report) = hit.unwrap_or_else(|| panic!("{m:?} not found in {BUDGET} seeds"));
        assert_eq!(
            again.map(|f| f.to_string()).as_deref(),
            Some(report.as_str()),
            "{m:?}: seed {seed} did not replay"
        );
        println!("{m:?}: found at seed {seed} (run {})\n{report}", seed + 1);
        found.push((m, seed, run));
    }
    for &(m, last, run) in &found {
        for seed in 0..=last {
            if let Err(f) = run(seed, Options::default()) {
                panic!("seed {seed} (the runner of {m:?}) fails with no mutant: {f}");
            }
        }
    }
    // Durability bugs, found by the crash harness: the workload passes
    // with none planted and fails with each.
    // Each with the devices it shows on: a FUA write over an unflushed
    // trim needs FUA.
    let crashes = [
        (
            Mutant::HomeBeforeDurable,
            files::write_home(),
            &[true, false][..],
        ),
        (
            Mutant::HomeOverUnflushed,
            files::home_over_trim(),
            &[true][..],
        ),
    ];
    for (m, ops, devices) in crashes {
        for &fua in devices {
            let label = format!("{m:?} (fua {fua})");
            mutants::set(m, true);
            let planted = run::run_workload(&ops, fua);
            mutants::set(m, false);
            // The harness reports a lost byte by panicking: caught here,
            // its message printed once, without a backtrace.
            let hook = std::panic::take_hook();
            std::panic::set_hook(Box::new(|_| {}));
            let caught = std::panic::catch_unwind(|| run::check_run(&planted, 0, &label));
            std::panic::set_hook(hook);
            let Err(report) = caught else {
                panic!("{label}: the crash states all passed");
            };
            let report = report
                .downcast_ref::<String>()
                .map_or("(no message)", String::as_str);
            println!("found by the crash harness: {report}");
            run::check_run(&run::run_workload(&ops, fua), 0, "no mutant");
        }
    }
    let found: Vec<_> = found.iter().map(|&(m, seed, _)| (m, seed)).collect();
    println!("found: {found:?}");
    // `POLLFS_MUTANT_SURVEY=<n>`: how many of the first n seeds each
    // mutant fails (a measure of how sharp the harness is, not a check).
    if let Some(n) = std::env::var("POLLFS_MUTANT_SURVEY")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        for (m, run) in all {
            mutants::set(m, true);
            let hits = (0..n)
                .filter(|&s| run(s, Options::default()).is_err())
                .count();
            mutants::set(m, false);
            println!("{m:?}: {hits} of {n} seeds fail");
        }
    }
}

/// The mirror's bitmap bugs, found by its crash test
/// (`tests/crash_bitmap.rs` passes the same workload with none planted).
/// They touch only the mirror, which the race harness above never uses.
#[test]
fn bitmap_mutants_are_found_by_the_crash_test() {
    for m in [Mutant::BitmapSkipsMark, Mutant::BitmapClearsBeforeFlush] {
        mutants::set(m, true);
        let found = bitmap::run(&bitmap::workload()).and_then(|run| bitmap::check(&run, 1));
        mutants::set(m, false);
        match found {
            Err(report) => println!("{m:?}: {report}"),
            Ok(n) => panic!("{m:?} not found in {n} crash states"),
        }
    }
}
