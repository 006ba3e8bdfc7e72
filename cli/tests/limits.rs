//! `bench` refuses, before allocating or creating anything, what the
//! machine or the device cannot give, and every setting out of range; it
//! reads sizes and times as fio writes them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{pollfs, spec, Scratch};

/// Runs the bench with `args`; expects a refusal that says `want`.
fn refused(args: &[&str], want: &str) {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    let (ok, _, err) = pollfs(&all);
    assert!(!ok, "bench {args:?} ran");
    assert!(
        err.contains(want),
        "bench {args:?}: wanted '{want}' in: {err}"
    );
}

#[test]
fn caches_and_sizes_beyond_memory_are_refused_and_create_nothing() {
    // Far beyond any machine's memory; on the emulated device the device
    // itself is memory too.
    refused(&["--cache", "100t"], "of memory");
    refused(&["--size", "10t"], "of memory");
    let dir = Scratch::new("limits");
    let dev = spec(&dir.path("dev.img"));
    refused(&["--device", &dev, "--cache", "100t"], "of memory");
    // The default cache holds every file: 10 TiB of them is memory too.
    refused(&["--device", &dev, "--size", "10t"], "of memory");
    // With a small cache, a file device needs the disk instead.
    refused(
        &["--device", &dev, "--size", "15t", "--cache", "64m"],
        "free",
    );
    assert!(dir.is_empty(), "a refused bench left a device file behind");
}

#[test]
fn threads_beyond_the_emulated_controllers_queues_are_refused() {
    refused(&["--numjobs", "65"], "offers 64 I/O queues");
    refused(&["--numjobs", "100000"], "offers 64 I/O queues");
    refused(&["--numjobs", "0"], "at least 1");
    refused(
        &["--device", "ram", "--numjobs", "100000"],
        "more than 1024",
    );
    // The limit is the real one: every one of 64 threads gets its queue.
    let (ok, out, err) = pollfs(&[
        "bench",
        "--numjobs",
        "64",
        "--size",
        "1m",
        "--runtime",
        "0.05",
    ]);
    assert!(ok && out.contains("numjobs=64"), "{err}");
}

#[test]
fn settings_out_of_range_are_errors_not_clamps() {
    refused(
        &["--rwmixread", "200"],
        "rwmixread=200: a percentage, 0 to 100",
    );
    refused(&["--cold=7"], "cold=7: use 0 or 1");
    refused(&["--cache", "1k"], "at least 16 KiB");
    refused(&["--cache", "10k"], "whole number of 4 KiB pages");
    refused(&["--bs", "0"], "bs must be 1 byte to 16 MiB");
    refused(&["--bs", "32m"], "bs must be 1 byte to 16 MiB");
    refused(&["--iodepth", "65537"], "iodepth=65537");
    refused(&["--runtime", "0"], "runtime must be more than 0");
    refused(&["--runtime", "2d"], "at most 1d");
    refused(&["--runtime", "3y"], "runtime=3y: not a time");
    refused(
        &["--size", "1.3k"],
        "size=1.3k: not a whole number of bytes",
    );
    refused(&["--size", "20t"], "largest file");
    refused(&["--direct", "2"], "direct=2: use 0 or 1");
    refused(
        &["--direct", "1", "--bs", "6k"],
        "direct=1 needs bs to be a multiple of 4 KiB",
    );
    refused(
        &["--kernel-dir", "/nonexistent"],
        "--kernel-dir /nonexistent: not a directory",
    );
}

#[test]
fn an_odd_block_size_runs_and_is_shown_exactly() {
    let (ok, out, err) = pollfs(&["bench", "--bs", "3", "--size", "64k", "--runtime", "0.05"]);
    assert!(ok, "{err}");
    assert!(out.contains("bs=3 B size=65535 B"), "{out}");
}

#[test]
fn fio_sizes_and_times_are_understood() {
    let dir = Scratch::new("fio");
    let job = dir.path("t.fio");
    std::fs::write(
        &job,
        "[global]\nruntime=150ms\n[a]\nsize=1.5M\nbs=8KiB\n[b]\nsize=1mb\nbs=4Ki\ncache=1MiB\n",
    )
    .unwrap();
    let (ok, out, err) = pollfs(&["bench", job.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("a (groupid=0): rw=randrw bs=8 KiB size=1536 KiB")
            && out.contains("runtime=0.15s"),
        "{out}"
    );
    assert!(
        out.contains("b (groupid=0): rw=randrw bs=4 KiB size=1 MiB"),
        "{out}"
    );
}
