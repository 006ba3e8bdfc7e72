//! What one engine did on one job: counts, latency histogram, throughput
//! over time, and (for pollfs) the engine's own counters.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Width of a throughput-over-time bucket.
pub const TICK: Duration = Duration::from_millis(100);

/// One thread's record of a run.
pub struct Recorder {
    start: Instant,
    /// Latency in nanoseconds.
    pub hist: Histogram<u64>,
    /// Operations finished per `TICK`.
    pub series: Vec<u64>,
    pub ops: u64,
    pub bytes: u64,
    pub syncs: u64,
}

/// An empty latency histogram: 1 ns .. 100 s at 3 significant digits.
fn histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).map_err(|e| e.to_string())
}

/// Bytes one thread's [`Recorder`] holds after a run of `secs` seconds: its
/// histogram's counters and one counter per tick.
pub fn recorder_bytes(secs: f64) -> u64 {
    let counters = histogram().map_or(1 << 15, |h| h.distinct_values() as u64);
    let ticks = (secs / TICK.as_secs_f64()).ceil() as u64 + 1;
    (counters + ticks) * 8
}

impl Recorder {
    /// A recorder whose clock starts at `start`.
    pub fn new(start: Instant) -> Result<Recorder, String> {
        Ok(Recorder {
            start,
            hist: histogram()?,
            series: Vec::new(),
            ops: 0,
            bytes: 0,
            syncs: 0,
        })
    }

    /// Records one I/O that began at `began` and moved `bytes`.
    pub fn io(&mut self, began: Instant, bytes: u64) {
        let now = Instant::now();
        let ns = now.duration_since(began).as_nanos().max(1);
        self.hist
            .saturating_record(u64::try_from(ns).unwrap_or(u64::MAX));
        self.ops += 1;
        self.bytes += bytes;
        let tick = (now.duration_since(self.start).as_nanos() / TICK.as_nanos()) as usize;
        if self.series.len() <= tick {
            self.series.resize(tick + 1, 0);
        }
        self.series[tick] += 1;
    }

    /// Adds another thread's record into this one.
    pub fn merge(&mut self, other: Recorder) {
        let _ = self.hist.add(&other.hist);
        if self.series.len() < other.series.len() {
            self.series.resize(other.series.len(), 0);
        }
        for (a, b) in self.series.iter_mut().zip(other.series) {
            *a += b;
        }
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.syncs += other.syncs;
    }
}

/// Latency figures in microseconds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Latency {
    pub min: f64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
    /// `(percentile, microseconds)` from p1 to p99.99, for plots.
    pub curve: Vec<(f64, f64)>,
}

impl Latency {
    pub fn of(h: &Histogram<u64>) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        let curve = [
            1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99,
        ]
        .iter()
        .map(|&p| (p, us(h.value_at_quantile(p / 100.0))))
        .collect();
        Latency {
            min: us(h.min()),
            mean: h.mean() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p99_9: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
            curve,
        }
    }
}

/// The result of one engine on one job.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Sample {
    pub engine: String,
    pub ops: u64,
    pub bytes: u64,
    pub secs: f64,
    pub iops: f64,
    pub mib_s: f64,
    pub latency: Latency,
    /// IOPS per `TICK`.
    pub iops_over_time: Vec<f64>,
    pub syncs: u64,
    /// pollfs counters for the measured phase.
    pub counters: Option<Counters>,
}

/// The pollfs counters a reader of the table wants.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Counters {
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
}

impl Sample {
    pub fn new(engine: &str, rec: Recorder, secs: f64, counters: Option<Counters>) -> Sample {
        let secs = secs.max(1e-9);
        let tick = TICK.as_secs_f64();
        Sample {
            engine: engine.to_string(),
            ops: rec.ops,
            bytes: rec.bytes,
            secs,
            iops: rec.ops as f64 / secs,
            mib_s: rec.bytes as f64 / secs / f64::from(1 << 20),
            latency: Latency::of(&rec.hist),
            iops_over_time: rec.series.iter().map(|&n| n as f64 / tick).collect(),
            syncs: rec.syncs,
            counters,
        }
    }
}
