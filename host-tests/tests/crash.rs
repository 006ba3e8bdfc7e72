//! Crash consistency: run a workload on a recording device, then at every
//! write boundary build the images a power cut could leave, recover each,
//! and check it against the workload's oracle (`crash::files`): synced
//! files exact, no byte from elsewhere, fsck clean, the same state on a
//! second recovery, and a filesystem that keeps working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_host_tests::crash::files::{
    checkpoint_beside, generated, home_over_trim, until_full, workloads, write_home, Op,
};
use pollfs_host_tests::crash::run::{check_run, run_workload};

#[test]
fn generated_workloads_survive_every_crash_point() {
    let mut total = 0;
    let mut homed = 0;
    for seed in 0..workloads() {
        // One seed in three on a device without FUA.
        let run = run_workload(&generated(seed, 40), seed % 3 != 2);
        homed += run.oracle.homed;
        total += check_run(&run, seed, &format!("seed {seed}"));
    }
    println!("crash states checked: {total}; pages written home off the sync path: {homed}");
    assert!(total > 500, "only {total} crash states");
    assert!(homed > 0, "no write-home step found logged pages due");
}

#[test]
fn a_crash_during_a_background_write_home_loses_no_synced_byte() {
    let mut total = 0;
    for fua in [true, false] {
        let run = run_workload(&write_home(), fua);
        // Every step past the low-water mark wrote pages home.
        assert!(
            run.oracle.homed >= 16,
            "fua {fua}: {} pages written home",
            run.oracle.homed
        );
        total += check_run(&run, 21, &format!("write-home (fua {fua})"));
    }
    println!("crash states checked: {total}");
}

#[test]
fn a_crash_while_a_checkpoint_is_written_beside_commits_loses_no_synced_byte() {
    let mut total = 0;
    for fua in [true, false] {
        let run = run_workload(&checkpoint_beside(), fua);
        assert!(
            run.oracle.beside >= 3,
            "fua {fua}: {} syncs ended inside a background checkpoint",
            run.oracle.beside
        );
        total += check_run(&run, 22, &format!("checkpoint beside (fua {fua})"));
    }
    println!("crash states checked: {total}");
}

/// Seed 87 of 200 generated workloads, reduced: a write-home to blocks
/// whose trim is not yet flushed (see `files::home_over_trim`).
#[test]
fn a_write_home_over_an_unflushed_trim_loses_no_synced_byte() {
    for fua in [true, false] {
        let run = run_workload(&home_over_trim(), fua);
        assert!(
            run.oracle.homed >= 4,
            "fua {fua}: {} pages written home",
            run.oracle.homed
        );
        check_run(&run, 87, &format!("home over trim (fua {fua})"));
    }
}

#[test]
fn running_out_of_space_survives_every_crash_point() {
    let mut total = 0;
    for seed in 0..2 {
        let run = run_workload(&until_full(seed), seed % 2 == 0);
        assert!(
            run.oracle.refused > 0,
            "seed {seed}: the device never filled up"
        );
        total += check_run(&run, seed, &format!("until-full seed {seed}"));
    }
    println!("crash states checked: {total}");
    assert!(total > 100, "only {total} crash states");
}

#[test]
fn known_bug_classes_survive_every_crash_point() {
    use Op::*;
    let cases: Vec<(&str, Vec<Op>)> = vec![
        (
            "append then fsync",
            vec![
                Create(0),
                Write(0, 0, 5000),
                SyncAll(0),
                Write(0, 5000, 9000),
                SyncData(0),
            ],
        ),
        (
            "truncate, extend, fsync",
            vec![
                Create(0),
                Write(0, 0, 20_000),
                SyncAll(0),
                SetLen(0, 3000),
                SetLen(0, 30_000),
                SyncAll(0),
            ],
        ),
        (
            "punch then fsync",
            vec![
                Create(0),
                Write(0, 0, 40_000),
                SyncAll(0),
                Punch(0, 4096, 20_000),
                SyncData(0),
            ],
        ),
        (
            "fallocate across EOF inside its last page, each mode, fsync",
            vec![
                Create(0),
                Write(0, 0, 5000),
                SyncAll(0),
                Allocate(
                    0,
                    0,
                    8000,
                    pollfs_core::Allocate::Reserve { keep_size: false },
                ),
                SyncData(0),
                Allocate(
                    0,
                    100,
                    30_000,
                    pollfs_core::Allocate::Reserve { keep_size: true },
                ),
                Allocate(
                    0,
                    7000,
                    2000,
                    pollfs_core::Allocate::ZeroRange { keep_size: false },
                ),
                SyncAll(0),
                Allocate(
                    0,
                    50,
                    100,
                    pollfs_core::Allocate::ZeroRange { keep_size: true },
                ),
                SyncData(0),
            ],
        ),
        (
            "rename over a synced file",
            vec![
                Create(0),
                Write(0, 0, 8000),
                SyncAll(0),
                Create(1),
                Write(1, 0, 3000),
                SyncAll(1),
                Rename(1, 0),
                SyncAll(1),
            ],
        ),
        (
            "fsync of a file whose freed blocks another file reused",
            vec![
                Create(0),
                Write(0, 0, 40_000),
                SyncAll(0),
                SetLen(0, 0),
                Create(1),
                Write(1, 0, 40_000),
                SyncAll(1),
                SyncAll(0),
            ],
        ),
        (
            "a logged page overwritten in place and synced",
            vec![
                Create(0),
                Write(0, 0, 4096),
                SyncData(0),
                Write(0, 0, 40_000),
                SyncData(0),
                Write(0, 8192, 100),
                SyncData(0),
            ],
        ),
        (
            "a logged page punched, its block reused, then synced",
            vec![
                Create(0),
                Write(0, 0, 40_000),
                SyncAll(0),
                Write(0, 4096, 4096),
                SyncData(0),
                Punch(0, 4096, 4096),
                SyncData(0),
                Write(0, 4096, 4096),
                SyncData(0),
                Write(0, 0, 40_000),
                SyncData(0),
            ],
        ),
        (
            "logged appends, then a truncate below them and an extend",
            vec![
                Create(0),
                Write(0, 0, 3000),
                SyncData(0),
                Write(0, 3000, 3000),
                SyncAll(0),
                SetLen(0, 1000),
                SetLen(0, 9000),
                SyncData(0),
            ],
        ),
    ];
    let mut total = 0;
    for (i, (name, ops)) in cases.iter().enumerate() {
        for fua in [true, false] {
            let run = run_workload(ops, fua);
            total += check_run(&run, i as u64, &format!("{name} (fua {fua})"));
        }
    }
    println!("crash states checked: {total}");
}
