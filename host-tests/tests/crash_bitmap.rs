//! Crash consistency of a mirror's write-intent bitmap: at every point of
//! a block workload in which leg 1 leaves and returns and regions are
//! marked and cleared, every crash state recovers (leg taken back, resync
//! run) to legs that agree on every byte and keep every synced write
//! (`pollfs_host_tests::crash::bitmap`). `tests/mutants.rs` plants the two
//! bitmap bugs this must find.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_host_tests::crash::bitmap::{check, run, workload, Step};

#[test]
fn every_crash_point_of_a_leg_leaving_and_returning_recovers_to_equal_legs() {
    let steps = workload();
    let run = run(&steps).unwrap();
    // The workload does what it is for: regions cleared while both legs
    // are in sync, none while leg 1 is out, cleared again once it is back.
    let fail = steps
        .iter()
        .position(|s| matches!(s, Step::Fail(_)))
        .unwrap();
    let rejoin = steps
        .iter()
        .position(|s| matches!(s, Step::Rejoin(_)))
        .unwrap();
    let dropped = |range: std::ops::Range<usize>| {
        range
            .clone()
            .skip(1)
            .any(|i| run.dirty[i] < run.dirty[i - 1])
    };
    assert!(
        dropped(0..fail),
        "no clear before the leg left: {:?}",
        run.dirty
    );
    assert!(
        !dropped(fail..rejoin),
        "cleared with a leg out: {:?}",
        run.dirty
    );
    assert!(
        dropped(rejoin..steps.len()),
        "no clear after: {:?}",
        run.dirty
    );
    let checked = check(&run, 1).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "bitmap crash states checked: {checked} over {} points",
        run.points()
    );
    assert!(checked > 200, "only {checked} states");
}
