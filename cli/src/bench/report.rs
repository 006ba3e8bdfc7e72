//! Tables, target checks and JSON.

use std::fmt::Write;

use super::job::Job;
use super::sample::Sample;

/// One job and what each engine did on it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct JobResult {
    pub job: Job,
    pub samples: Vec<Sample>,
}

impl JobResult {
    fn get(&self, prefix: &str) -> Option<&Sample> {
        self.samples
            .iter()
            .find(|s| s.engine == prefix || (prefix == "kernel" && s.engine.starts_with("kernel")))
    }
    fn ratio(&self, a: &str, b: &str) -> Option<f64> {
        Some(self.get(a)?.iops / self.get(b)?.iops)
    }
}

/// A target from the project's goals and what was measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Check {
    pub what: String,
    pub target: String,
    pub measured: f64,
    pub met: bool,
}

/// Everything, for `--json`.
#[derive(Debug, serde::Serialize)]
pub struct Report<'a> {
    pub device: &'a str,
    pub jobs: &'a [JobResult],
    pub checks: Vec<Check>,
}

impl<'a> Report<'a> {
    pub fn new(device: &'a str, jobs: &'a [JobResult]) -> Report<'a> {
        Report {
            device,
            jobs,
            checks: checks(jobs),
        }
    }
}

fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Exact: in MiB or KiB when it is a whole number of them, else in bytes.
fn bytes(b: u64) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{} MiB", b >> 20)
    } else if b % (1 << 10) == 0 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// One table per job, then the target checks.
pub fn render(device: &str, results: &[JobResult]) -> String {
    let mut out = String::new();
    let o = &mut out;
    let _ = writeln!(o, "pollfs bench on device '{device}'");
    for r in results {
        let j = &r.job;
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{}: rw={} bs={} size={} numjobs={} iodepth={} runtime={}s{}{}{}",
            j.name,
            j.rw,
            bytes(j.bs),
            bytes(j.file_size() * u64::from(j.nrfiles)),
            j.numjobs,
            j.iodepth,
            j.runtime,
            if j.rw == super::job::Pattern::RandRw {
                format!(" rwmixread={}", j.rwmixread)
            } else {
                String::new()
            },
            if j.fsync > 0 {
                format!(" fsync={}", j.fsync)
            } else if j.fdatasync > 0 {
                format!(" fdatasync={}", j.fdatasync)
            } else {
                String::new()
            },
            if j.cold { " (cold cache)" } else { "" },
        );
        let _ = writeln!(
            o,
            "  {:<20} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8}",
            "engine",
            "IOPS",
            "MiB/s",
            "min us",
            "mean us",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "max us",
            "pollfs/x"
        );
        let pollfs = r.get("pollfs").map_or(0.0, |s| s.iops);
        for s in &r.samples {
            let l = &s.latency;
            let _ = writeln!(
                o,
                "  {:<20} {:>9} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.1} {:>7.2}x",
                s.engine,
                si(s.iops),
                s.mib_s,
                l.min,
                l.mean,
                l.p50,
                l.p99,
                l.p99_9,
                l.max,
                pollfs / s.iops.max(1e-9)
            );
        }
        if let Some(c) = r
            .get("pollfs")
            .and_then(|s| s.counters.as_ref().map(|c| (s, c)))
        {
            let (s, c) = c;
            let per_mib = |n: u64, b: u64| {
                if b == 0 {
                    0.0
                } else {
                    n as f64 / (b as f64 / f64::from(1 << 20))
                }
            };
            let _ = writeln!(
            o,
                "  pollfs counters: cache hit rate {:.4}; device reads {} ({}, {:.2} per MiB), writes {} ({}), flushes {}; lock waits {:.4}/op; readahead pages {}",
                c.hit_rate,
                c.dev_reads,
                bytes(c.dev_read_bytes),
                per_mib(c.dev_reads, c.dev_read_bytes),
                c.dev_writes,
                bytes(c.dev_write_bytes),
                c.dev_flushes,
                c.lock_waits as f64 / s.ops.max(1) as f64,
                c.readahead_pages
            );
            if s.syncs > 0 {
                let _ = writeln!(
                    o,
                    "  per sync: {:.2} device writes, {:.2} flushes, {:.2} log writes ({} syncs)",
                    c.dev_writes as f64 / s.syncs as f64,
                    c.dev_flushes as f64 / s.syncs as f64,
                    c.log_writes as f64 / s.syncs as f64,
                    s.syncs
                );
            }
        }
    }
    let checks = checks(results);
    if !checks.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "targets (ratios measured in this run):");
        for c in checks {
            let _ = writeln!(
                o,
                "  [{}] {:<58} {:>8.2}  (target {})",
                if c.met { "met" } else { "MISS" },
                c.what,
                c.measured,
                c.target
            );
        }
    }
    out
}

/// The project's targets, for whichever jobs ran.
pub fn checks(results: &[JobResult]) -> Vec<Check> {
    let mut out = Vec::new();
    let mut add = |what: String, target: &str, measured: f64, met: bool| {
        out.push(Check {
            what,
            target: target.into(),
            measured,
            met,
        })
    };
    for r in results {
        let j = &r.job;
        let size = bytes(j.file_size() * u64::from(j.nrfiles));
        let random_read = j.rw == super::job::Pattern::RandRead && !j.cold && j.iodepth == 1;
        if random_read && j.numjobs == 1 {
            if let Some(x) = r.ratio("pollfs", "memcpy") {
                add(
                    format!("{}: cached random read, pollfs / memcpy", size),
                    ">= 0.70",
                    x,
                    x >= 0.70,
                );
            }
            if let Some(x) = r.ratio("pollfs", "kernel") {
                add(
                    format!("{}: cached random read, pollfs / kernel", size),
                    "> 1",
                    x,
                    x > 1.0,
                );
            }
        }
        if random_read && j.numjobs == 2 {
            let one = results.iter().find(|o| {
                o.job.rw == j.rw
                    && o.job.numjobs == 1
                    && o.job.size == j.size
                    && o.job.bs == j.bs
                    && !o.job.cold
            });
            if let (Some(one), Some(two)) = (one.and_then(|o| o.get("pollfs")), r.get("pollfs")) {
                let x = two.iops / one.iops;
                add(
                    format!("{}: cached random read, 2 threads / 1 thread", size),
                    ">= 1.8",
                    x,
                    x >= 1.8,
                );
            }
        }
        if j.rw == super::job::Pattern::RandRw && j.numjobs == 2 && j.fsync == 0 && j.fdatasync == 0
        {
            if let Some(x) = r.ratio("pollfs", "kernel") {
                add(
                    format!("{}: randrw 2 threads, pollfs / kernel", size),
                    ">= 2",
                    x,
                    x >= 2.0,
                );
            }
            if let Some(x) = r.ratio("pollfs", "pollfs-locked") {
                add(
                    format!("{}: randrw 2 threads, pollfs / pollfs-locked", size),
                    ">= 1.6",
                    x,
                    x >= 1.6,
                );
            }
        }
        if j.rw == super::job::Pattern::Read && j.cold {
            if let Some(c) = r.get("pollfs").and_then(|s| s.counters.as_ref()) {
                let ideal = (c.dev_read_bytes as f64 / f64::from(c.max_transfer.max(1)))
                    .ceil()
                    .max(1.0);
                let x = c.dev_reads as f64 / ideal;
                add(
                    format!(
                        "{}: cold sequential read, commands / (bytes / max transfer)",
                        size
                    ),
                    "<= 1.01",
                    x,
                    x <= 1.01,
                );
            }
        }
        if let Some(s) = r.get("pollfs").filter(|s| s.syncs > 0) {
            if let Some(c) = &s.counters {
                let flushes = c.dev_flushes as f64 / s.syncs as f64;
                let log = c.log_writes as f64 / s.syncs as f64;
                // Checkpoints add a flush now and then: allow 1%.
                add(
                    format!("{}: flushes per sync", j.name),
                    "<= 1.01",
                    flushes,
                    flushes <= 1.01,
                );
                // Overwrites inside EOF need no log write; appends one.
                let (target, met) = if j.append {
                    ("<= 1.01", log <= 1.01)
                } else {
                    ("0", log == 0.0)
                };
                add(format!("{}: log writes per sync", j.name), target, log, met);
            }
        }
    }
    out
}
