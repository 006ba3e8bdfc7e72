//! fio's machine-readable outputs: `--output-format=json` with fio's
//! field names, and `terse` (fio's version 3 line). One entry (or line)
//! per job and engine.
//!
//! What the bench measures and how it maps: each read or write is timed
//! from issue to completion, fio's `lat_ns`; with no separate submission
//! step, `clat_ns` holds the same figures and `slat_ns` has `N` = 0. Syncs
//! are timed on their own, as fio's `sync`. What the bench does not
//! measure (CPU use, queue-depth distributions, per-interval bandwidth
//! samples) is left out of the JSON and left empty in terse lines, never
//! filled with zeros that look measured. pollfs's own figures (engine,
//! device counters, throughput over time) are under `pollfs`.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::anyhow;
use serde_json::{json, Map, Value};

use super::presets::Seed;
use super::report::{self, JobResult};
use super::sample::{DirStats, Latency, Sample};

/// An output format, as fio names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Normal,
    Json,
    Terse,
}

/// The formats `--output-format` names (comma-separated, as fio takes
/// them), with `--json` adding json.
pub fn formats(spec: &str, json: bool) -> anyhow::Result<Vec<Format>> {
    let mut out = Vec::new();
    for name in spec.split(',').map(str::trim) {
        let f = match name {
            "normal" => Format::Normal,
            "json" => Format::Json,
            "terse" => Format::Terse,
            other => {
                return Err(anyhow!(
                    "--output-format={other}: use normal, json or terse (several joined by \
                     commas)"
                ))
            }
        };
        if !out.contains(&f) {
            out.push(f);
        }
    }
    if json {
        // `--json` alone means json only.
        if spec == "normal" {
            out.clear();
        }
        if !out.contains(&Format::Json) {
            out.push(Format::Json);
        }
    }
    Ok(out)
}

/// fio's `percentile` object: keys printed as C's `%f`.
fn percentiles(l: &Latency) -> Value {
    let mut m = Map::new();
    for &(p, ns) in &l.percentiles {
        m.insert(format!("{p:.6}"), json!(ns));
    }
    Value::Object(m)
}

fn lat(l: &Latency, with_percentiles: bool) -> Value {
    let mut v = json!({
        "min": l.min,
        "max": l.max,
        "mean": l.mean,
        "stddev": l.stddev,
        "N": l.n,
    });
    if with_percentiles && l.n > 0 {
        v["percentile"] = percentiles(l);
    }
    v
}

fn dir(d: Option<&DirStats>, secs: f64) -> Value {
    let none = Latency::default();
    let (bytes, per_sec, iops, ios, l) = match d {
        Some(d) => (d.bytes, d.bytes_per_sec, d.iops, d.ios, &d.lat),
        None => (0, 0.0, 0.0, 0, &none),
    };
    json!({
        "io_bytes": bytes,
        "io_kbytes": bytes >> 10,
        "bw_bytes": per_sec as u64,
        "bw": (per_sec / 1024.0) as u64,
        "iops": iops,
        "runtime": (secs * 1000.0) as u64,
        "total_ios": ios,
        "short_ios": 0,
        "drop_ios": 0,
        "slat_ns": lat(&none, false),
        "clat_ns": lat(l, true),
        "lat_ns": lat(l, false),
    })
}

fn job_json(r: &JobResult, s: &Sample) -> Value {
    let options: Map<String, Value> = r
        .job
        .options
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    json!({
        "jobname": r.job.name,
        "groupid": r.group,
        "error": 0,
        "elapsed": r.job.duration().ceil() as u64,
        "job options": options,
        "read": dir(Some(&s.read), s.secs),
        "write": dir(Some(&s.write), s.secs),
        "trim": dir(None, s.secs),
        "sync": {
            "total_ios": s.sync.ios,
            "lat_ns": lat(&s.sync.lat, true),
        },
        "job_runtime": (s.secs * 1000.0) as u64,
        "pollfs": {
            "engine": s.engine,
            "max_in_flight": s.max_in_flight,
            "iops_over_time": s.iops_over_time,
            "counters": s.counters,
        },
    })
}

/// The JSON report.
pub fn json(device: &str, results: &[JobResult], seeds: &[Seed]) -> anyhow::Result<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let jobs: Vec<Value> = results
        .iter()
        .flat_map(|r| r.samples.iter().map(move |s| job_json(r, s)))
        .collect();
    let v = json!({
        "fio version": format!("pollfs-{}", env!("CARGO_PKG_VERSION")),
        "timestamp": now.as_secs(),
        "timestamp_ms": now.as_millis() as u64,
        "jobs": jobs,
        "pollfs": {
            "device": device,
            "checks": report::checks(results),
            "seeds": report::seeds(results, seeds),
        },
    });
    let mut t = serde_json::to_string_pretty(&v).map_err(|e| anyhow!("{e}"))?;
    t.push('\n');
    Ok(t)
}

/// The microsecond and millisecond latency buckets of fio's terse lines
/// (`FIO_IO_U_LAT_U` and `_M`): the percent of I/Os at or under each bound
/// and over the one before it; the last millisecond bucket is ">= 2000".
const LAT_US: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
const LAT_MS: [u64; 11] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000, 2000];

fn lat_distribution(s: &Sample) -> String {
    let h = &s.hist;
    let total = h.len().max(1) as f64;
    let below = |ns: u64| h.count_between(0, ns) as f64;
    let mut out = String::new();
    let mut prev = 0.0;
    for &us in &LAT_US {
        let n = below(us * 1000 - 1);
        let _ = write!(out, ";{:.2}%", (n - prev) / total * 100.0);
        prev = n;
    }
    // fio's millisecond buckets start above 1 ms, like its microsecond
    // ones end there.
    for &ms in &LAT_MS {
        let n = below(ms * 1_000_000 - 1);
        let _ = write!(out, ";{:.2}%", (n - prev) / total * 100.0);
        prev = n;
    }
    let _ = write!(out, ";{:.2}%", (h.len() as f64 - prev) / total * 100.0);
    out
}

fn terse_dir(out: &mut String, d: &DirStats, secs: f64) {
    let us = |ns: u64| ns / 1000;
    let l = &d.lat;
    let _ = write!(
        out,
        ";{};{};{};{}",
        d.bytes >> 10,
        (d.bytes_per_sec / 1024.0) as u64,
        d.iops as u64,
        (secs * 1000.0) as u64
    );
    // slat: not measured.
    out.push_str(";;;;");
    let lat4 = |out: &mut String| {
        let _ = write!(
            out,
            ";{};{};{:.6};{:.6}",
            us(l.min),
            us(l.max),
            l.mean / 1000.0,
            l.stddev / 1000.0
        );
    };
    lat4(out);
    // 20 percentile fields, as fio prints them.
    for i in 0..20 {
        match l.percentiles.get(i) {
            Some(&(p, ns)) if l.n > 0 => {
                let _ = write!(out, ";{p:.6}%={}", us(ns));
            }
            _ => out.push_str(";0%=0"),
        }
    }
    lat4(out);
    // bandwidth min, max, aggregate share, mean, deviation: not sampled.
    out.push_str(";;;;;");
}

/// fio's terse output, version 3: one line per job and engine. The
/// engine is written where fio writes a job's description.
pub fn terse(results: &[JobResult]) -> String {
    let mut out = String::new();
    for r in results {
        for s in &r.samples {
            let _ = write!(
                out,
                "3;pollfs-{};{};{};0",
                env!("CARGO_PKG_VERSION"),
                r.job.name,
                r.group
            );
            terse_dir(&mut out, &s.read, s.secs);
            terse_dir(&mut out, &s.write, s.secs);
            // CPU and I/O depth distribution: not measured.
            out.push_str(&";".repeat(5 + 7));
            out.push_str(&lat_distribution(s));
            let _ = writeln!(out, ";{}", s.engine);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_fios_names_and_json_can_be_added() {
        assert_eq!(formats("normal", false).unwrap(), [Format::Normal]);
        assert_eq!(formats("normal", true).unwrap(), [Format::Json]);
        assert_eq!(
            formats("normal,terse", true).unwrap(),
            [Format::Normal, Format::Terse, Format::Json]
        );
        assert_eq!(formats("json,json", false).unwrap(), [Format::Json]);
        assert!(formats("xml", false)
            .unwrap_err()
            .to_string()
            .contains("--output-format=xml"));
    }

    #[test]
    fn percentile_keys_are_printed_as_c_does() {
        let l = Latency {
            n: 1,
            percentiles: vec![(99.9, 5), (1.0, 2)],
            ..Latency::default()
        };
        let v = percentiles(&l);
        assert_eq!(v["99.900000"], 5);
        assert_eq!(v["1.000000"], 2);
    }
}
