//! The forms `pollfs stat` prints: a snapshot as named groups of
//! counters (every counter the server sends, those this table does not
//! know under "other", so a newer server's counters still show), and an
//! interval as one line of rates under a header, like `iostat -x`.

use std::path::Path;

use pollfs_device::control::stats::{DeviceStats, FsStats};
use pollfs_device::control::{LegWire, Status};
use pollfs_device::units::show_bytes;
use serde::Serialize;

use super::MirrorAnswer;
use crate::mount::latency::from_buckets;

/// The request kinds a mount times, in the order shown.
pub const TIMED: [&str; 3] = ["read", "write", "sync"];

/// Percentiles of one kind of request's times.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Requests timed.
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

impl Percentiles {
    /// Of the requests of `kind` in `s` (none if it timed none).
    pub fn of(s: &FsStats, kind: &str) -> Percentiles {
        let Some(h) = s.latency.get(kind).and_then(|b| from_buckets(b)) else {
            return Percentiles::default();
        };
        if h.is_empty() {
            return Percentiles::default();
        }
        let q = |q: f64| h.value_at_quantile(q);
        Percentiles {
            count: h.len(),
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: h.max(),
        }
    }
}

/// Nanoseconds for people.
fn time(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..1_000_000 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// How a counter is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Count,
    Bytes,
    Nanos,
}

use Unit::{Bytes, Count, Nanos};

/// A counter in a group: its name, its label, its unit.
type Shown = (&'static str, &'static str, Unit);

/// The snapshot's groups.
const GROUPS: &[(&str, &[Shown])] = &[
    (
        "operations",
        &[
            ("reads", "reads", Count),
            ("read_bytes", "read", Bytes),
            ("writes", "writes", Count),
            ("write_bytes", "written", Bytes),
            ("syncs", "syncs", Count),
        ],
    ),
    (
        "cache",
        &[
            ("cache_hits", "hits", Count),
            ("cache_misses", "misses", Count),
            ("evictions", "evictions", Count),
            ("readahead_pages", "pages read ahead", Count),
            ("direct_pages", "direct pages", Count),
        ],
    ),
    (
        "log",
        &[
            ("log_writes", "writes", Count),
            ("log_bytes", "written", Bytes),
        ],
    ),
    (
        "checkpoints",
        &[
            ("checkpoints", "written", Count),
            ("background_checkpoints", "in the background", Count),
            ("checkpoint_bytes", "bytes", Bytes),
            ("checkpoint_nanos", "time", Nanos),
        ],
    ),
    (
        "write-home",
        &[
            ("homed_pages", "pages homed", Count),
            ("home_on_sync", "syncs that homed", Count),
            ("home_wakes", "wakes", Count),
        ],
    ),
    (
        "device",
        &[
            ("dev_reads", "reads", Count),
            ("dev_read_bytes", "read", Bytes),
            ("dev_writes", "writes", Count),
            ("dev_write_bytes", "written", Bytes),
            ("dev_flushes", "flushes", Count),
            ("dev_deallocates", "trims", Count),
            ("dev_write_zeroes", "write-zeroes", Count),
            ("dev_errors", "errors", Count),
        ],
    ),
    (
        "waits",
        &[
            ("lock_waits", "lock waits", Count),
            ("dirty_throttles", "dirty throttles", Count),
            ("background_errors", "background errors", Count),
        ],
    ),
    (
        "recovery",
        &[
            ("replayed_log_writes", "log writes replayed", Count),
            ("replayed_records", "records replayed", Count),
        ],
    ),
];

fn value(v: u64, unit: Unit) -> String {
    match unit {
        Count => v.to_string(),
        Bytes => show_bytes(v),
        Nanos => format!("{:.3} ms", v as f64 / 1e6),
    }
}

/// `part` of `whole` in percent, or "-" when `whole` is 0.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// A leg's state in a word or two.
pub fn leg_state(state: LegWire) -> &'static str {
    match state {
        LegWire::InSync => "in sync",
        LegWire::Stale => "stale",
        LegWire::Resyncing { .. } => "resyncing",
        LegWire::Failed => "failed",
    }
}

/// A snapshot for people; `mirror`, the legs of the mirror under the
/// filesystem (or why they could not be asked).
pub fn snapshot(mountpoint: &Path, s: &FsStats, mirror: Option<&MirrorAnswer>) -> String {
    let mut out = format!("pollfs on {}\n", mountpoint.display());
    let mut known = Vec::new();
    for (group, counters) in GROUPS {
        let shown: Vec<String> = counters
            .iter()
            .map(|&(name, label, unit)| {
                known.push(name);
                format!("{label} {}", value(s.counter(name), unit))
            })
            .collect();
        out += &format!("  {group:<12} {}\n", shown.join(", "));
    }
    let other: Vec<String> = s
        .counters
        .iter()
        .filter(|(name, _)| !known.contains(&name.as_str()))
        .map(|(name, v)| format!("{name} {v}"))
        .collect();
    if !other.is_empty() {
        out += &format!("  {:<12} {}\n", "other", other.join(", "));
    }
    for kind in TIMED {
        let p = Percentiles::of(s, kind);
        let shown = if p.count == 0 {
            "none timed".to_string()
        } else {
            format!(
                "{} timed, p50 {}, p90 {}, p99 {}, p99.9 {}, max {}",
                p.count,
                time(p.p50_ns),
                time(p.p90_ns),
                time(p.p99_ns),
                time(p.p999_ns),
                time(p.max_ns)
            )
        };
        let group = if kind == TIMED[0] { "latency" } else { "" };
        out += &format!("  {group:<12} {kind:<5} {shown}\n");
    }
    let g = &s.gauges;
    let hits = s.counter("cache_hits");
    out += &format!(
        "  {:<12} {} of {} pages dirty, hit rate {}\n",
        "now",
        g.dirty_pages,
        g.cache_pages,
        percent(hits, hits + s.counter("cache_misses"))
    );
    out += &format!(
        "  {:<12} log {} of {} blocks in use ({}), {} of {} data blocks free, {} inodes",
        "",
        g.log_used_blocks,
        g.log_blocks,
        percent(g.log_used_blocks, g.log_blocks),
        g.free_blocks,
        g.data_blocks,
        g.inodes
    );
    for (i, d) in s.devices.iter().enumerate() {
        let group = if i == 0 { "devices" } else { "" };
        out += &format!("\n  {group:<12} {}", device_line(d));
    }
    match mirror {
        None => {}
        Some(Err(why)) => out += &format!("\n  {:<12} not answered: {why}", "mirror"),
        Some(Ok(m)) => {
            for (i, leg) in m.legs.iter().enumerate() {
                let group = if i == 0 { "mirror" } else { "" };
                out += &format!(
                    "\n  {group:<12} leg {i} {}: {}, {} read errors, {} write errors",
                    leg.name,
                    leg_state(leg.state),
                    leg.read_errors,
                    leg.write_errors
                );
            }
        }
    }
    out
}

/// One device's or leg's figures in a line: who it is, its commands and
/// errors, then what its driver met, where it met anything.
fn device_line(d: &DeviceStats) -> String {
    let who = match d.leg {
        Some(i) => format!("{} {i} {}", d.role.label(), d.name),
        None => format!("{} {}", d.role.label(), d.name),
    };
    let c = |name: &str| d.counter(name);
    let mut line = format!(
        "{who}: reads {} ({}), writes {} ({}), flushes {}, trims {}, write-zeroes {}, errors {}",
        c("reads"),
        show_bytes(c("read_bytes")),
        c("writes"),
        show_bytes(c("write_bytes")),
        c("flushes"),
        c("deallocates"),
        c("write_zeroes"),
        c("errors"),
    );
    let met: Vec<String> = HEALTH
        .iter()
        .filter(|(name, _)| c(name) > 0)
        .map(|(name, label)| format!("{label} {}", c(name)))
        .collect();
    if !met.is_empty() {
        line += &format!("; {}", met.join(", "));
    }
    line
}

/// What a device's driver counts of its own trouble, and its label.
const HEALTH: [(&str, &str); 6] = [
    ("resets", "resets"),
    ("queue_recoveries", "queue recoveries"),
    ("timeouts", "timeouts"),
    ("retries", "retries"),
    ("protocol_errors", "protocol errors"),
    ("reconnects", "reconnects"),
];

/// A snapshot as one JSON line: the figures, and under `mirror` the
/// mirror's state (as `pollfs mirror status` has it) or under
/// `mirror_error` why it could not be asked.
pub fn snapshot_json(
    mountpoint: &Path,
    s: &FsStats,
    mirror: Option<&MirrorAnswer>,
) -> anyhow::Result<String> {
    #[derive(Serialize)]
    struct Snapshot<'a> {
        mountpoint: &'a Path,
        #[serde(flatten)]
        stats: &'a FsStats,
        #[serde(skip_serializing_if = "Option::is_none")]
        mirror: Option<&'a Status>,
        #[serde(skip_serializing_if = "Option::is_none")]
        mirror_error: Option<String>,
    }
    Ok(serde_json::to_string(&Snapshot {
        mountpoint,
        stats: s,
        mirror: mirror.and_then(|m| m.as_ref().ok()),
        mirror_error: mirror
            .and_then(|m| m.as_ref().err())
            .map(ToString::to_string),
    })?)
}

/// What happened between two snapshots of one server.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Interval {
    /// Its length.
    pub seconds: f64,
    /// Each counter's growth in it, and the gauges at its end.
    #[serde(flatten)]
    pub delta: FsStats,
    /// Percentiles of the times of the requests in it, by kind.
    pub percentiles: std::collections::BTreeMap<&'static str, Percentiles>,
}

/// The interval line's columns: header and how each is computed.
type Column = (&'static str, fn(&Interval) -> String);

const COLUMNS: &[Column] = &[
    ("r/s", |i| i.rate("reads")),
    ("rKiB/s", |i| i.kib_rate("read_bytes")),
    ("w/s", |i| i.rate("writes")),
    ("wKiB/s", |i| i.kib_rate("write_bytes")),
    ("sync/s", |i| i.rate("syncs")),
    ("hit%", |i| {
        let hits = i.delta.counter("cache_hits");
        percent(hits, hits + i.delta.counter("cache_misses"))
    }),
    ("dirty", |i| i.delta.gauges.dirty_pages.to_string()),
    ("log%", |i| {
        let g = &i.delta.gauges;
        percent(g.log_used_blocks, g.log_blocks)
    }),
    ("ckpt", |i| i.delta.counter("checkpoints").to_string()),
    ("ckptKiB", |i| {
        format!("{:.0}", i.delta.counter("checkpoint_bytes") as f64 / 1024.0)
    }),
    ("ckpt_ms", |i| {
        format!("{:.1}", i.delta.counter("checkpoint_nanos") as f64 / 1e6)
    }),
    ("homed/s", |i| i.rate("homed_pages")),
    ("dr/s", |i| i.rate("dev_reads")),
    ("drKiB/s", |i| i.kib_rate("dev_read_bytes")),
    ("dw/s", |i| i.rate("dev_writes")),
    ("dwKiB/s", |i| i.kib_rate("dev_write_bytes")),
    ("flush/s", |i| i.rate("dev_flushes")),
    ("r99us", |i| i.p99_us("read")),
    ("w99us", |i| i.p99_us("write")),
    ("s99us", |i| i.p99_us("sync")),
    ("err", |i| {
        (i.delta.counter("dev_errors") + i.delta.counter("background_errors")).to_string()
    }),
    ("legerr", |i| i.devices_grew(|d| d.leg.is_some(), "errors")),
    ("resets", |i| i.devices_grew(|_| true, "resets")),
];

/// Width of each column.
const WIDTH: usize = 8;

/// The header over interval lines.
pub fn interval_header(mountpoint: &Path) -> String {
    let names: String = COLUMNS
        .iter()
        .map(|(h, _)| format!("{h:>WIDTH$}"))
        .collect();
    format!(
        "pollfs on {} (per second unless named)\n{names}",
        mountpoint.display()
    )
}

impl Interval {
    /// The interval from `earlier` to `later` (snapshots of one server).
    pub fn between(earlier: &FsStats, later: &FsStats) -> Interval {
        let delta = later.since(earlier);
        Interval {
            seconds: later.taken_ns.saturating_sub(earlier.taken_ns) as f64 / 1e9,
            percentiles: TIMED
                .iter()
                .map(|&k| (k, Percentiles::of(&delta, k)))
                .collect(),
            delta,
        }
    }

    /// The 99th percentile of `kind`'s times in microseconds, or "-" if
    /// none was timed.
    fn p99_us(&self, kind: &str) -> String {
        match self.percentiles.get(kind) {
            Some(p) if p.count > 0 => format!("{:.0}", p.p99_ns as f64 / 1e3),
            _ => "-".into(),
        }
    }

    /// The growth of device counter `name` in the interval, summed over
    /// the devices `which` picks ("-" if the server reports none).
    fn devices_grew(&self, which: fn(&DeviceStats) -> bool, name: &str) -> String {
        let picked: Vec<&DeviceStats> = self.delta.devices.iter().filter(|d| which(d)).collect();
        if picked.is_empty() {
            return "-".into();
        }
        picked
            .iter()
            .map(|d| d.counter(name))
            .sum::<u64>()
            .to_string()
    }

    /// Counter `name`'s growth per second.
    fn per_second(&self, name: &str) -> f64 {
        if self.seconds > 0.0 {
            self.delta.counter(name) as f64 / self.seconds
        } else {
            0.0
        }
    }

    fn rate(&self, name: &str) -> String {
        format!("{:.0}", self.per_second(name))
    }

    fn kib_rate(&self, name: &str) -> String {
        format!("{:.0}", self.per_second(name) / 1024.0)
    }

    /// One line under [`interval_header`].
    pub fn line(&self) -> String {
        COLUMNS
            .iter()
            .map(|(_, f)| format!("{:>WIDTH$}", f(self)))
            .collect()
    }

    /// One JSON line: the length, the counters' growth, the gauges.
    pub fn json(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string(self)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn stats(taken_ns: u64, counters: &[(&str, u64)]) -> FsStats {
        FsStats {
            taken_ns,
            counters: counters.iter().map(|&(n, v)| (n.to_string(), v)).collect(),
            ..FsStats::default()
        }
    }

    #[test]
    fn an_interval_is_each_counters_growth_over_its_length() {
        let a = stats(
            1_000_000_000,
            &[("reads", 10), ("read_bytes", 4096), ("writes", 7)],
        );
        let mut b = stats(
            3_000_000_000,
            &[
                ("reads", 30),
                ("read_bytes", 4096 * 21),
                ("writes", 7),
                ("syncs", 4),
            ],
        );
        b.gauges.dirty_pages = 5;
        let i = Interval::between(&a, &b);
        assert_eq!(i.seconds, 2.0);
        assert_eq!(i.delta.counter("reads"), 20);
        assert_eq!(i.delta.counter("writes"), 0);
        // A counter the earlier snapshot lacked grew from 0.
        assert_eq!(i.delta.counter("syncs"), 4);
        assert_eq!(i.per_second("reads"), 10.0);
        assert_eq!(i.kib_rate("read_bytes"), "40");
        assert_eq!(i.delta.gauges.dirty_pages, 5, "the gauges at its end");
        let cells: Vec<String> = i.line().split_whitespace().map(String::from).collect();
        assert_eq!(cells.len(), COLUMNS.len());
        let header = interval_header(Path::new("/m"));
        let names: Vec<&str> = header.lines().nth(1).unwrap().split_whitespace().collect();
        let at = |h: &str| cells[names.iter().position(|n| *n == h).unwrap()].clone();
        assert_eq!(at("r/s"), "10");
        assert_eq!(at("sync/s"), "2");
        assert_eq!(at("hit%"), "-", "no lookups");
        assert_eq!(at("dirty"), "5");
        assert_eq!(at("r99us"), "-", "no reads timed");
    }

    #[test]
    fn percentiles_of_an_interval_are_of_its_own_requests() {
        use crate::mount::latency::{buckets, histogram};
        let mut h = histogram().unwrap();
        for _ in 0..100 {
            h.record(1_000_000).unwrap();
        }
        let mut a = stats(0, &[]);
        a.latency.insert("read".into(), buckets(&h));
        for _ in 0..100 {
            h.record(5_000).unwrap();
        }
        let mut b = stats(1_000_000_000, &[]);
        b.latency.insert("read".into(), buckets(&h));
        // Since the start: half the reads took 1 ms.
        let all = Percentiles::of(&b, "read");
        assert_eq!(all.count, 200);
        assert!(all.max_ns >= 1_000_000);
        // In the interval: only the 5 µs ones.
        let i = Interval::between(&a, &b);
        let p = i.percentiles["read"];
        assert_eq!(p.count, 100);
        assert!((5_000..5_010).contains(&p.max_ns), "{p:?}");
        assert_eq!(i.p99_us("read"), "5");
        assert_eq!(i.percentiles["sync"].count, 0);
        let v: serde_json::Value = serde_json::from_str(&i.json().unwrap()).unwrap();
        assert_eq!(v["percentiles"]["read"]["count"], 100);
        assert!(snapshot(Path::new("/m"), &b, None).contains("read  200 timed, p50"));
    }

    #[test]
    fn json_shapes_carry_the_counters_by_name_and_the_gauges() {
        let a = stats(0, &[("writes", 1)]);
        let b = stats(500_000_000, &[("writes", 3), ("log_writes", 2)]);
        let line = Interval::between(&a, &b).json().unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["seconds"], 0.5);
        assert_eq!(v["counters"]["writes"], 2);
        assert_eq!(v["counters"]["log_writes"], 2);
        assert!(v["gauges"]["dirty_pages"].is_u64());
        assert!(v["gauges"]["log_blocks"].is_u64());
        let snap = snapshot_json(Path::new("/m"), &b, None).unwrap();
        let v: serde_json::Value = serde_json::from_str(&snap).unwrap();
        assert_eq!(v["mountpoint"], "/m");
        assert_eq!(v["counters"]["writes"], 3);
        assert_eq!(v["taken_ns"], 500_000_000);
        assert!(!snap.contains('\n'), "one line");
    }

    #[test]
    fn every_engine_counter_has_a_place_in_a_group() {
        let known: Vec<&str> = GROUPS
            .iter()
            .flat_map(|(_, c)| c.iter().map(|&(name, _, _)| name))
            .collect();
        for (name, _) in pollfs_core::Stats::default().fields() {
            assert!(known.contains(&name), "{name} is shown only under other");
        }
    }

    #[test]
    fn a_snapshot_shows_every_counter_the_table_does_not_know_under_other() {
        let s = stats(0, &[("reads", 3), ("a_new_counter", 9)]);
        let text = snapshot(Path::new("/m"), &s, None);
        assert!(text.contains("reads 3"), "{text}");
        assert!(text.contains("other        a_new_counter 9"), "{text}");
    }

    #[test]
    fn each_device_and_leg_has_a_line_and_the_interval_sums_leg_errors() {
        use pollfs_device::control::stats::Role;
        let dev = |name: &str, role, leg, errors, resets| DeviceStats {
            name: name.into(),
            role,
            leg,
            counters: [
                ("writes".to_string(), 9),
                ("errors".to_string(), errors),
                ("resets".to_string(), resets),
            ]
            .into_iter()
            .collect(),
        };
        let at = |t, leg_errors, resets| FsStats {
            taken_ns: t,
            devices: vec![
                dev("stripe:64k:(emu,emu)", Role::Device, None, 0, 0),
                dev("emu", Role::StripeLeg, Some(0), 0, resets),
                dev("emu", Role::StripeLeg, Some(1), leg_errors, 0),
            ],
            ..FsStats::default()
        };
        let text = snapshot(Path::new("/m"), &at(0, 2, 1), None);
        assert!(
            text.contains("devices      device stripe:64k:(emu,emu): reads 0 (0 B), writes 9"),
            "{text}"
        );
        assert!(
            text.contains(
                "stripe leg 1 emu: reads 0 (0 B), writes 9 (0 B), flushes 0, trims 0, \
                           write-zeroes 0, errors 2"
            ),
            "{text}"
        );
        assert!(text.contains("stripe leg 0 emu:"), "{text}");
        assert!(text.contains("errors 0; resets 1"), "{text}");
        let i = Interval::between(&at(0, 2, 1), &at(1_000_000_000, 5, 3));
        let header = interval_header(Path::new("/m"));
        let names: Vec<&str> = header.lines().nth(1).unwrap().split_whitespace().collect();
        let cells: Vec<String> = i.line().split_whitespace().map(String::from).collect();
        let col = |h: &str| cells[names.iter().position(|n| *n == h).unwrap()].clone();
        assert_eq!(col("legerr"), "3");
        assert_eq!(col("resets"), "2");
        let v: serde_json::Value = serde_json::from_str(&i.json().unwrap()).unwrap();
        assert_eq!(v["devices"][2]["counters"]["errors"], 3, "{v}");
        assert_eq!(v["devices"][2]["role"], "stripe_leg", "{v}");
        assert_eq!(v["devices"][2]["leg"], 1, "{v}");
    }
}
