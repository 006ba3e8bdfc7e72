//! The normal output (fio's `normal`, in tables that put the engines side
//! by side), the project's targets and the seed presets' figures.

use std::fmt::Write;

use super::engine::Engine;
use super::job::{Job, Pattern};
use super::presets::{Measure, Seed};
use super::sample::Sample;

/// One job and what each engine did on it.
#[derive(Clone, Debug)]
pub struct JobResult {
    pub job: Job,
    /// Its reporting group (fio's `groupid`).
    pub group: u32,
    pub samples: Vec<Sample>,
}

impl JobResult {
    pub fn get(&self, engine: &str) -> Option<&Sample> {
        self.samples
            .iter()
            .find(|s| s.engine == engine || (engine == "kernel" && s.engine.starts_with("kernel")))
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

/// A seed preset's published figure beside what pollfs did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SeedResult {
    pub change: String,
    pub figure: String,
    /// The published figure as after / before.
    pub seed_ratio: f64,
    /// pollfs / the engine that stands for "before", if both ran.
    pub measured: Option<f64>,
    /// What was divided by what, with the figures.
    pub detail: String,
}

/// What each seed preset measured.
pub fn seeds(results: &[JobResult], seeds: &[Seed]) -> Vec<SeedResult> {
    seeds
        .iter()
        .map(|seed| {
            let (job, against) = match seed.measure {
                Measure::ReadMiBs { job, against } | Measure::MaxSyncLatency { job, against } => {
                    (job, against)
                }
            };
            let r = results.iter().find(|r| r.job.name == job);
            let pair = r.and_then(|r| Some((r.get("pollfs")?, r.get(against.name())?)));
            let (measured, detail) = match (seed.measure, pair) {
                (_, None) => (
                    None,
                    format!("{job}: pollfs or {} did not run", against.name()),
                ),
                (Measure::ReadMiBs { .. }, Some((a, b))) => {
                    let mib = |s: &Sample| s.read.bytes_per_sec / f64::from(1 << 20);
                    let mut detail = format!(
                        "{job}: read {:.1} MiB/s on pollfs, {:.1} on {}",
                        mib(a),
                        mib(b),
                        b.engine
                    );
                    if let (Some(ca), Some(cb)) = (&a.counters, &b.counters) {
                        let _ = write!(
                            detail,
                            "; device reads per MiB {:.2} and {:.2}",
                            per_mib(ca.dev_reads, ca.dev_read_bytes),
                            per_mib(cb.dev_reads, cb.dev_read_bytes)
                        );
                    }
                    (Some(mib(a) / mib(b).max(1e-9)), detail)
                }
                (Measure::MaxSyncLatency { .. }, Some((a, b))) => {
                    let us = |ns: u64| ns as f64 / 1000.0;
                    let detail = format!(
                        "{job}: sync p99 {:.1} us and max {:.1} us on pollfs; p99 {:.1} us and \
                         max {:.1} us on {}",
                        a.sync.lat.us(99.0),
                        us(a.sync.lat.max),
                        b.sync.lat.us(99.0),
                        us(b.sync.lat.max),
                        b.engine
                    );
                    let m = (a.sync.lat.max as f64) / (b.sync.lat.max as f64).max(1.0);
                    (Some(m), detail)
                }
            };
            SeedResult {
                change: seed.change.to_string(),
                figure: seed.figure.to_string(),
                seed_ratio: seed.ratio,
                measured,
                detail,
            }
        })
        .collect()
}

/// Commands per MiB moved.
fn per_mib(n: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        n as f64 / (b as f64 / f64::from(1 << 20))
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

/// One table per job, then the target checks and the seeds.
pub fn render(device: &str, results: &[JobResult], seed_list: &[Seed]) -> String {
    let mut out = String::new();
    let o = &mut out;
    let _ = writeln!(o, "pollfs bench on device '{device}'");
    for r in results {
        let j = &r.job;
        let _ = writeln!(o);
        let _ = writeln!(o, "{} (groupid={}): {}", j.name, r.group, describe(j));
        // Wide enough for every engine's name, with " syncs" after it.
        let w = r
            .samples
            .iter()
            .map(|s| s.engine.len() + if s.syncs() > 0 { 6 } else { 0 })
            .fold(20, usize::max);
        let _ = writeln!(
            o,
            "  {:<w$} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8}",
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
        let us = |ns: u64| ns as f64 / 1000.0;
        // One row per engine, then one per engine's syncs: the same
        // latency columns, with the syncs' rate under IOPS.
        let rows = r
            .samples
            .iter()
            .map(|s| (s.engine.clone(), s, &s.latency, s.iops, true))
            .chain(r.samples.iter().filter(|s| s.syncs() > 0).map(|s| {
                (
                    format!("{} syncs", s.engine),
                    s,
                    &s.sync.lat,
                    s.sync.iops,
                    false,
                )
            }));
        for (label, s, l, rate, io) in rows {
            let (mib, ratio) = if io {
                (
                    format!("{:.1}", s.mib_s),
                    format!("{:.2}x", pollfs / s.iops.max(1e-9)),
                )
            } else {
                (String::new(), String::new())
            };
            let _ = writeln!(
                o,
                "  {label:<w$} {:>9} {mib:>9} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.1} {ratio:>8}",
                si(rate),
                us(l.min),
                l.mean / 1000.0,
                l.us(50.0),
                l.us(99.0),
                l.us(99.9),
                us(l.max),
            );
        }
        if let Some(c) = r
            .get("pollfs")
            .and_then(|s| s.counters.as_ref().map(|c| (s, c)))
        {
            let (s, c) = c;
            if c.jobs.len() > 1 {
                let _ = writeln!(
                    o,
                    "  (pollfs counters of the jobs that ran together: {})",
                    c.jobs.join(", ")
                );
            }
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
            if c.syncs > 0 {
                let _ = writeln!(
                    o,
                    "  per sync: {:.2} device writes, {:.2} flushes, {:.2} log writes ({} syncs; {} wrote logged pages home, {} woke the write-home thread, {} pages written home off the sync path; {} checkpoints, {} of them off the sync path)",
                    c.dev_writes as f64 / c.syncs as f64,
                    c.dev_flushes as f64 / c.syncs as f64,
                    c.log_writes as f64 / c.syncs as f64,
                    c.syncs,
                    c.home_on_sync,
                    c.home_wakes,
                    c.homed_pages,
                    c.checkpoints,
                    c.background_checkpoints
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
    let seeds = seeds(results, seed_list);
    if !seeds.is_empty() {
        let _ = writeln!(o);
        let _ = writeln!(o, "seeds (the published change, and pollfs in this run):");
        for s in seeds {
            let _ = writeln!(o, "  {}: {} ({:.2}x)", s.change, s.figure, s.seed_ratio);
            match s.measured {
                Some(m) => {
                    let _ = writeln!(o, "    pollfs: {m:.2}x; {}", s.detail);
                }
                None => {
                    let _ = writeln!(o, "    pollfs: not measured; {}", s.detail);
                }
            }
        }
    }
    out
}

/// The job's settings in one line, as fio's header line gives them.
fn describe(j: &Job) -> String {
    let mut d = format!(
        "rw={} bs={} size={} numjobs={} iodepth={} runtime={}s",
        j.rw,
        bytes(j.bs),
        bytes(j.file_size() * u64::from(j.nrfiles)),
        j.numjobs,
        j.iodepth,
        j.runtime
    );
    let mut add = |cond: bool, s: String| {
        if cond {
            d.push(' ');
            d.push_str(&s);
        }
    };
    add(j.rw.mixed(), format!("rwmixread={}", j.rwmixread));
    add(j.offset > 0, format!("offset={}", bytes(j.offset)));
    add(j.ramp_time > 0.0, format!("ramp_time={}s", j.ramp_time));
    add(j.number_ios > 0, format!("number_ios={}", j.number_ios));
    add(j.fsync > 0, format!("fsync={}", j.fsync));
    add(j.fdatasync > 0, format!("fdatasync={}", j.fdatasync));
    add(j.direct, "direct=1".to_string());
    add(
        j.filename.is_some(),
        format!("filename={}", j.file_prefix()),
    );
    add(j.cold, "(cold cache)".to_string());
    d
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
        let random_read = j.rw == Pattern::RandRead && !j.cold && !j.direct && j.iodepth == 1;
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
                    && !o.job.direct
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
        if j.rw == Pattern::RandRw && j.numjobs == 2 && j.fsync == 0 && j.fdatasync == 0 {
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
        if j.rw == Pattern::Read && j.cold {
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
        if let Some(s) = r.get(Engine::Pollfs.name()).filter(|s| s.syncs() > 0) {
            if let Some(c) = s.counters.as_ref().filter(|c| c.jobs.len() == 1) {
                let flushes = c.dev_flushes as f64 / c.syncs as f64;
                let log = c.log_writes as f64 / c.syncs as f64;
                // A small sync is its log write, with the data in it; a
                // flush only when logged pages are written to their
                // blocks in bulk (and at checkpoints).
                add(
                    format!("{}: flushes per sync", j.name),
                    "<= 0.1",
                    flushes,
                    flushes <= 0.1,
                );
                add(
                    format!("{}: log writes per sync", j.name),
                    "<= 1.01",
                    log,
                    log <= 1.01,
                );
            }
        }
    }
    out
}
