//! Concurrent writes, reads, truncates, extends, punches, syncs and
//! sequential (readahead) reads on a tiny cache, under a fuzzed schedule
//! and device completion order. A failure panics with the readable trace.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pollfs_fuzz::input::RaceInput;
use pollfs_host_tests::sched::{self, Options};

fuzz_target!(|input: RaceInput| {
    let (scenario, schedule) = input.decode();
    if let Err(f) = sched::run(&scenario, schedule, Options::default()) {
        panic!("{f}");
    }
});
