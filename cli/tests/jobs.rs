//! fio-style job files end to end: sections that run together, stonewalls
//! and groups, `number_ios` and `ramp_time`, the JSON and terse outputs,
//! jobs named on the command line, and errors that name line and key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{pollfs, Scratch};
use serde_json::Value;

fn run_json(args: &[&str]) -> Value {
    let (ok, out, err) = pollfs(args);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// The fio entry of `job` (the pollfs engine's).
fn entry<'v>(v: &'v Value, job: &str) -> &'v Value {
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["jobname"] == job && j["pollfs"]["engine"] == "pollfs")
        .unwrap_or_else(|| panic!("no job {job} in {v}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn a_job_file_runs_to_its_counts_and_reports_them_as_fio_does() {
    let dir = Scratch::new("jobs");
    let file = dir.path("t.fio");
    // a and b run together on one file; c waits for both and runs alone
    // with a ramp; d starts a new group but runs with c.
    std::fs::write(
        &file,
        "[global]\n\
         runtime=30s\n\
         size=1m\n\
         [a]\n\
         filename=shared\n\
         rw=randread\n\
         numjobs=2\n\
         number_ios=300\n\
         [b]\n\
         filename=shared\n\
         rw=randwrite\n\
         fdatasync=1\n\
         number_ios=200\n\
         [c]\n\
         stonewall\n\
         rw=randrw\n\
         rwmixread=50\n\
         bs=8k\n\
         iodepth=4\n\
         ramp_time=50ms\n\
         number_ios=400\n\
         [d]\n\
         new_group\n\
         rw=write\n\
         number_ios=100\n",
    )
    .unwrap();
    let v = run_json(&["bench", file.to_str().unwrap(), "--device", "ram", "--json"]);
    assert!(v["fio version"].as_str().unwrap().starts_with("pollfs-"));
    let (a, b, c, d) = (
        entry(&v, "a"),
        entry(&v, "b"),
        entry(&v, "c"),
        entry(&v, "d"),
    );
    assert_eq!(
        [&a["groupid"], &b["groupid"], &c["groupid"], &d["groupid"]],
        [0, 0, 1, 2]
    );
    // number_ios is per thread: a has two.
    assert_eq!(u(&a["read"]["total_ios"]), 600);
    assert_eq!(u(&a["write"]["total_ios"]), 0);
    assert_eq!(u(&a["read"]["io_bytes"]), 600 * 4096);
    assert_eq!(u(&a["read"]["io_kbytes"]), 600 * 4);
    assert_eq!(u(&b["write"]["total_ios"]), 200);
    assert_eq!(u(&b["sync"]["total_ios"]), 200);
    assert_eq!(u(&b["sync"]["lat_ns"]["N"]), 200);
    // A mix counted after its ramp: reads and writes add up to number_ios.
    let (cr, cw) = (u(&c["read"]["total_ios"]), u(&c["write"]["total_ios"]));
    assert_eq!(cr + cw, 400);
    assert!(cr > 0 && cw > 0);
    assert_eq!(
        u(&c["read"]["io_bytes"]) + u(&c["write"]["io_bytes"]),
        400 * 8192
    );
    assert_eq!(u(&c["read"]["clat_ns"]["N"]), cr);
    assert_eq!(u(&d["write"]["total_ios"]), 100);
    // Latency as fio gives it: percentiles keyed like "99.000000", in
    // order, between min and max.
    let clat = &a["read"]["clat_ns"];
    let p = &clat["percentile"];
    let (p50, p99) = (u(&p["50.000000"]), u(&p["99.000000"]));
    assert!(
        u(&clat["min"]) <= p50 && p50 <= p99 && p99 <= u(&clat["max"]),
        "{clat}"
    );
    assert_eq!(a["slat_ns"], Value::Null);
    assert_eq!(u(&a["read"]["slat_ns"]["N"]), 0);
    assert_eq!(a["job options"]["number_ios"], "300");
    assert_eq!(a["job options"]["filename"], "shared");
    // a and b ran on one filesystem at the same time; c did not.
    let together = a["pollfs"]["counters"]["jobs"].as_array().unwrap();
    assert_eq!(together.len(), 2);
    let alone = &c["pollfs"]["counters"]["jobs"];
    assert_eq!(
        alone.as_array().unwrap().len(),
        2,
        "c and d run together: {alone}"
    );
    // No ramp for b: its syncs are in the counters of its phase.
    assert!(u(&b["pollfs"]["counters"]["dev_flushes"]) >= 200);
}

#[test]
fn terse_lines_have_fios_version_3_fields() {
    let (ok, out, err) = pollfs(&[
        "bench",
        "--device",
        "ram",
        "--size",
        "1m",
        "--runtime",
        "10s",
        "--number_ios",
        "500",
        "--rw",
        "randread",
        "--output-format=terse",
    ]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let f: Vec<&str> = lines[0].split(';').collect();
    // 5 + 41 (read) + 41 (write) + 5 (cpu) + 7 (depths) + 10 + 12
    // (latency buckets) + 1 (where fio puts the description).
    assert_eq!(f.len(), 122, "{}", lines[0]);
    assert_eq!((f[0], f[2], f[3], f[4]), ("3", "job", "0", "0"));
    // Read: KiB, KiB/s, IOPS, runtime; then slat (empty), clat, 20
    // percentiles.
    assert_eq!(f[5], (500 * 4).to_string());
    assert!(f[17].starts_with("1.000000%="), "{}", f[17]);
    // Write side: nothing.
    assert_eq!(f[46], "0");
    // The latency buckets add up to 100%.
    let sum: f64 = f[99..121]
        .iter()
        .map(|x| x.trim_end_matches('%').parse::<f64>().unwrap())
        .sum();
    assert!((sum - 100.0).abs() < 0.1, "{sum}");
    assert_eq!(f[121], "pollfs");
}

#[test]
fn names_on_the_command_line_start_jobs_that_run_together() {
    let v = run_json(&[
        "bench",
        "--device",
        "ram",
        "--size",
        "1m",
        "--runtime=10s",
        "--name=r",
        "--rw=randread",
        "--number_ios=100",
        "--name=w",
        "--rw",
        "randwrite",
        "--number_ios",
        "50",
        "--stonewall",
        "--json",
    ]);
    let (r, w) = (entry(&v, "r"), entry(&v, "w"));
    assert_eq!(u(&r["read"]["total_ios"]), 100);
    assert_eq!(u(&w["write"]["total_ios"]), 50);
    assert_eq!((u(&r["groupid"]), u(&w["groupid"])), (0, 1));
    assert_eq!(w["job options"]["stonewall"], "1");
}

#[test]
fn job_file_errors_name_the_file_line_and_key() {
    let dir = Scratch::new("jobs-bad");
    for (text, want) in [
        (
            "[a]\nrw=read\nbogus=1\n",
            "t.fio: line 3: unknown job key 'bogus'",
        ),
        ("[a]\nioengine=libaio\n", "t.fio: line 2: ioengine=libaio"),
        ("[a]\nbs\n", "t.fio: line 2: bs: needs a value"),
        ("[a]\nnumber_ios=lots\n", "t.fio: line 2: number_ios=lots"),
        ("[global]\nsize=1m\n", "defines no job"),
    ] {
        let file = dir.path("t.fio");
        std::fs::write(&file, text).unwrap();
        let (ok, _, err) = pollfs(&["bench", file.to_str().unwrap()]);
        assert!(!ok && err.contains(want), "{text:?}: {err}");
    }
    let (ok, _, err) = pollfs(&["bench", "--output-format=xml"]);
    assert!(!ok && err.contains("--output-format=xml"), "{err}");
    let (ok, _, err) = pollfs(&["bench", "--rw", "randread", "--name", "a", "--name", "a"]);
    assert!(!ok && err.contains("two jobs named 'a'"), "{err}");
}

#[test]
fn direct_jobs_reach_the_device_at_every_depth() {
    let v = run_json(&[
        "bench",
        "--size=4m",
        "--cache=1m",
        "--runtime=30s",
        "--direct=1",
        "--name=qd1",
        "--rw=randread",
        "--number_ios=300",
        "--name=qd8",
        "--stonewall",
        "--rw=randread",
        "--iodepth=8",
        "--number_ios=400",
        "--name=writes",
        "--stonewall",
        "--rw=randwrite",
        "--bs=8k",
        "--iodepth=4",
        "--number_ios=200",
        "--json",
    ]);
    for (job, ios) in [("qd1", 300), ("qd8", 400)] {
        let j = entry(&v, job);
        assert_eq!(u(&j["read"]["total_ios"]), ios);
        let c = &j["pollfs"]["counters"];
        // Every read went to the device: the files were filled through the
        // cache and dropped from it before the run.
        assert!(u(&c["dev_reads"]) >= ios, "{job}: {c}");
        assert_eq!(u(&c["dev_read_bytes"]), ios * 4096, "{job}: {c}");
    }
    let w = entry(&v, "writes");
    assert_eq!(u(&w["write"]["total_ios"]), 200);
    let c = &w["pollfs"]["counters"];
    assert!(u(&c["dev_write_bytes"]) >= 200 * 8192, "{c}");
    // An unaligned direct job is refused before anything runs.
    let (ok, _, err) = pollfs(&["bench", "--direct=1", "--offset=512"]);
    assert!(!ok && err.contains("offset=512"), "{err}");
}
