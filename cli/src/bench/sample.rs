//! What one engine did on one job: reads, writes and syncs counted and
//! timed apart (as fio reports them), throughput over time, and (for
//! pollfs) the engine's own counters.
//!
//! A thread's [`Recorder`] counts only I/Os that complete once the job's
//! `ramp_time` is over, as fio resets its counters then.

use std::time::{Duration, Instant};

use anyhow::anyhow;
use hdrhistogram::Histogram;

/// Width of a throughput-over-time bucket.
pub const TICK: Duration = Duration::from_millis(100);

/// The percentiles fio reports by default (`percentile_list`).
pub const FIO_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// An empty latency histogram: 1 ns .. 100 s at 3 significant digits.
pub fn histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).map_err(|e| anyhow!("{e}"))
}

/// Bytes one thread's [`Recorder`] holds after a run of `secs` seconds: its
/// three histograms' counters and one counter per tick.
pub fn recorder_bytes(secs: f64) -> u64 {
    let counters = histogram().map_or(1 << 15, |h| h.distinct_values() as u64);
    let ticks = (secs / TICK.as_secs_f64()).ceil() as u64 + 1;
    (3 * counters + ticks) * 8
}

/// One direction's count, bytes and latencies (nanoseconds).
#[derive(Clone, Debug)]
pub struct Dir {
    pub ios: u64,
    pub bytes: u64,
    pub hist: Histogram<u64>,
}

impl Dir {
    fn new() -> anyhow::Result<Dir> {
        Ok(Dir {
            ios: 0,
            bytes: 0,
            hist: histogram()?,
        })
    }
    fn record(&mut self, ns: u64, bytes: u64) {
        self.hist.saturating_record(ns.max(1));
        self.ios += 1;
        self.bytes += bytes;
    }
    fn merge(&mut self, other: &Dir) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.hist.add(&other.hist);
        self.ios += other.ios;
        self.bytes += other.bytes;
    }
}

/// One thread's record of a run.
#[derive(Debug)]
pub struct Recorder {
    /// When measuring starts (the end of the ramp).
    start: Instant,
    pub read: Dir,
    pub write: Dir,
    pub sync: Dir,
    /// Reads and writes finished per `TICK` after `start`.
    pub series: Vec<u64>,
    /// When this thread's last I/O finished.
    pub end: Instant,
    /// The most reads and writes this thread had in flight at once,
    /// counted by the engine at each submission (not derived from
    /// timings, so a busy machine does not change it).
    pub max_in_flight: u64,
}

impl Recorder {
    /// A recorder that counts what completes from `start` on.
    pub fn new(start: Instant) -> anyhow::Result<Recorder> {
        Ok(Recorder {
            start,
            read: Dir::new()?,
            write: Dir::new()?,
            sync: Dir::new()?,
            series: Vec::new(),
            end: start,
            max_in_flight: 0,
        })
    }

    /// Notes a submission that leaves `in_flight` reads and writes in
    /// flight on this thread, that one included.
    pub fn submitted(&mut self, in_flight: u64) {
        self.max_in_flight = self.max_in_flight.max(in_flight);
    }

    /// True once the ramp is over.
    pub fn measuring(&self, now: Instant) -> bool {
        now >= self.start
    }

    /// Reads and writes counted so far.
    pub fn ios(&self) -> u64 {
        self.read.ios + self.write.ios
    }

    /// Records one read or write that began at `began` and moved `bytes`,
    /// if it completed after the ramp.
    pub fn io(&mut self, began: Instant, read: bool, bytes: u64) {
        let now = Instant::now();
        if !self.measuring(now) {
            return;
        }
        let ns = u64::try_from(now.duration_since(began).as_nanos()).unwrap_or(u64::MAX);
        let dir = if read {
            &mut self.read
        } else {
            &mut self.write
        };
        dir.record(ns, bytes);
        let tick = (now.duration_since(self.start).as_nanos() / TICK.as_nanos()) as usize;
        if self.series.len() <= tick {
            self.series.resize(tick + 1, 0);
        }
        self.series[tick] += 1;
        self.end = now;
    }

    /// Records one sync that began at `began`, if it completed after the
    /// ramp.
    pub fn sync(&mut self, began: Instant) {
        let now = Instant::now();
        if self.measuring(now) {
            let ns = u64::try_from(now.duration_since(began).as_nanos()).unwrap_or(u64::MAX);
            self.sync.record(ns, 0);
            self.end = self.end.max(now);
        }
    }

    /// Adds another thread's record into this one.
    pub fn merge(&mut self, other: &Recorder) {
        self.read.merge(&other.read);
        self.write.merge(&other.write);
        self.sync.merge(&other.sync);
        if self.series.len() < other.series.len() {
            self.series.resize(other.series.len(), 0);
        }
        for (a, b) in self.series.iter_mut().zip(&other.series) {
            *a += b;
        }
        self.end = self.end.max(other.end);
        self.max_in_flight = self.max_in_flight.max(other.max_in_flight);
    }

    /// Seconds from the end of the ramp to the last completion.
    pub fn secs(&self) -> f64 {
        self.end.duration_since(self.start).as_secs_f64()
    }
}

/// Latency figures in nanoseconds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Latency {
    pub n: u64,
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    pub stddev: f64,
    /// `(percentile, nanoseconds)` at [`FIO_PERCENTILES`].
    pub percentiles: Vec<(f64, u64)>,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        Latency {
            n: h.len(),
            min: h.min(),
            max: h.max(),
            mean: h.mean(),
            stddev: h.stdev(),
            percentiles: FIO_PERCENTILES
                .iter()
                .map(|&p| (p, h.value_at_quantile(p / 100.0)))
                .collect(),
        }
    }
    /// The `p`th percentile in microseconds (0 if nothing was recorded).
    pub fn us(&self, p: f64) -> f64 {
        self.percentiles
            .iter()
            .find(|(q, _)| *q == p)
            .map_or(0.0, |&(_, ns)| ns as f64 / 1000.0)
    }
}

/// One direction of a [`Sample`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct DirStats {
    pub ios: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub lat: Latency,
    #[serde(skip)]
    pub hist: Histogram<u64>,
}

impl DirStats {
    fn of(d: &Dir, secs: f64) -> DirStats {
        DirStats {
            ios: d.ios,
            bytes: d.bytes,
            iops: d.ios as f64 / secs,
            bytes_per_sec: d.bytes as f64 / secs,
            lat: Latency::of(&d.hist),
            hist: d.hist.clone(),
        }
    }
}

/// The result of one engine on one job.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Sample {
    pub engine: String,
    /// Reads and writes.
    pub ops: u64,
    pub bytes: u64,
    /// Seconds measured: from the end of the ramp to the last completion.
    pub secs: f64,
    pub iops: f64,
    pub mib_s: f64,
    /// Reads and writes together.
    pub latency: Latency,
    pub read: DirStats,
    pub write: DirStats,
    /// `sync_all`/`sync_data` calls, timed on their own (as fio's `sync`).
    pub sync: DirStats,
    /// Reads and writes per second in each `TICK`.
    pub iops_over_time: Vec<f64>,
    /// The most I/Os one thread had in flight at once (see
    /// [`Recorder::max_in_flight`]).
    pub max_in_flight: u64,
    /// pollfs counters for the measured phase.
    pub counters: Option<Counters>,
    #[serde(skip)]
    pub hist: Histogram<u64>,
}

/// The pollfs counters a reader of the table wants. They belong to the
/// filesystem, so jobs that ran at the same time share them (`jobs`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Counters {
    /// The jobs that ran on the filesystem while these were counted.
    pub jobs: Vec<String>,
    /// Syncs of all those jobs.
    pub syncs: u64,
    pub hit_rate: f64,
    pub dev_reads: u64,
    pub dev_read_bytes: u64,
    pub dev_writes: u64,
    pub dev_write_bytes: u64,
    pub dev_flushes: u64,
    pub lock_waits: u64,
    pub readahead_pages: u64,
    pub max_transfer: u32,
    /// Metadata log writes.
    pub log_writes: u64,
    /// Logged pages written home off the sync path.
    pub homed_pages: u64,
    /// Small syncs that wrote logged pages home themselves (the log's
    /// share for data was full).
    pub home_on_sync: u64,
    /// Syncs that woke the sleeping write-home thread.
    pub home_wakes: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Of those, written off the sync path.
    pub background_checkpoints: u64,
}

impl Sample {
    pub fn new(engine: &str, rec: &Recorder, counters: Option<Counters>) -> anyhow::Result<Sample> {
        let secs = rec.secs().max(1e-9);
        let mut all = rec.read.hist.clone();
        all.add(&rec.write.hist).map_err(|e| anyhow!("{e}"))?;
        let ops = rec.ios();
        let bytes = rec.read.bytes + rec.write.bytes;
        Ok(Sample {
            engine: engine.to_string(),
            ops,
            bytes,
            secs,
            iops: ops as f64 / secs,
            mib_s: bytes as f64 / secs / f64::from(1 << 20),
            latency: Latency::of(&all),
            read: DirStats::of(&rec.read, secs),
            write: DirStats::of(&rec.write, secs),
            sync: DirStats::of(&rec.sync, secs),
            iops_over_time: rates(&rec.series, secs),
            max_in_flight: rec.max_in_flight,
            counters,
            hist: all,
        })
    }

    /// Syncs counted.
    pub fn syncs(&self) -> u64 {
        self.sync.ios
    }
}

/// Per-second rates from per-`TICK` counts over `secs`: the last bucket
/// is divided by the part of a tick the run really lasted, and left out if
/// that part is too short to say anything (so a run does not seem to end
/// in a drop to zero).
fn rates(series: &[u64], secs: f64) -> Vec<f64> {
    let tick = TICK.as_secs_f64();
    let mut out: Vec<f64> = series.iter().map(|&n| n as f64 / tick).collect();
    if let Some(last) = out.last_mut() {
        let covered = secs - tick * (series.len() - 1) as f64;
        if covered < tick / 10.0 {
            out.pop();
        } else if covered < tick {
            *last = series[series.len() - 1] as f64 / covered;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_partial_tick_is_scaled_or_dropped() {
        // 2.5 ticks: the half tick at the end is a rate over half a tick.
        let r = rates(&[10, 10, 5], 0.25);
        assert_eq!(r.len(), 3);
        assert!((r[2] - 100.0).abs() < 1e-6, "{r:?}");
        // A sliver of a tick says nothing: dropped.
        assert_eq!(rates(&[10, 10, 1], 0.205).len(), 2);
        assert_eq!(rates(&[10, 10], 0.2), [100.0, 100.0]);
    }

    #[test]
    fn the_ramp_is_not_counted_and_directions_are_apart() {
        let start = Instant::now() + Duration::from_secs(3600);
        let mut rec = Recorder::new(start).unwrap();
        rec.io(Instant::now(), true, 4096);
        rec.sync(Instant::now());
        assert_eq!((rec.ios(), rec.sync.ios), (0, 0));
        let mut rec = Recorder::new(Instant::now()).unwrap();
        rec.io(Instant::now(), true, 4096);
        rec.io(Instant::now(), false, 512);
        rec.io(Instant::now(), false, 512);
        rec.sync(Instant::now());
        let mut two = Recorder::new(rec.start).unwrap();
        two.merge(&rec);
        two.merge(&rec);
        assert_eq!((two.read.ios, two.write.ios, two.sync.ios), (2, 4, 2));
        assert_eq!((two.read.bytes, two.write.bytes), (8192, 2048));
        let mut deep = Recorder::new(rec.start).unwrap();
        deep.submitted(3);
        deep.submitted(1);
        two.merge(&deep);
        assert_eq!(two.max_in_flight, 3, "the most of any thread");
        let s = Sample::new("x", &two, None).unwrap();
        assert_eq!((s.ops, s.bytes, s.syncs()), (6, 10240, 2));
        assert_eq!(s.latency.n, 6);
        assert_eq!(s.latency.percentiles.len(), FIO_PERCENTILES.len());
    }
}
