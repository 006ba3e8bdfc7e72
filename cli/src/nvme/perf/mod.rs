//! `pollfs perf DEVICE`: a queue-depth-driven I/O generator in the manner
//! of spdk_nvme_perf, with its flags (`args`). Each worker thread keeps
//! `-q` commands in flight on each of its `-P` queue pairs, polling for
//! completions with no interrupts and no system calls (`worker`); the
//! report is a table per queue pair with a total row, latency percentiles,
//! and the same as JSON with `--json`.

mod args;
mod worker;

use std::fmt::Write;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use hdrhistogram::Histogram;
use pollfs_core::dev::BlockDevice;
use pollfs_driver::DriverConfig;

#[cfg(test)]
use args::Pattern;
pub use args::{Args, Settings};
use worker::{new_histogram, Layout, QueueStats, Worker};

use pollfs_device::{Access, DeviceJob, DeviceSpec, Leaf, OpenOptions};

/// The percentiles spdk_nvme_perf's latency summary gives.
const CUTOFFS: [f64; 15] = [
    1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.9, 99.99, 99.999, 99.9999,
    99.99999,
];

/// What one run measured.
#[derive(Debug)]
pub struct Report {
    pub settings: Settings,
    /// Wall time of the measurement (after the warm-up).
    pub elapsed: Duration,
    /// One entry per queue pair.
    pub queues: Vec<QueueStats>,
    /// Every queue pair's latencies together.
    pub latency: Histogram<u64>,
}

/// Per-row figures: IOPS, MiB/s, average, min and max latency (µs).
#[derive(Debug, serde::Serialize)]
struct Row {
    ios: u64,
    errors: u64,
    iops: f64,
    mib_s: f64,
    avg_us: f64,
    min_us: f64,
    max_us: f64,
}

impl Report {
    fn row(&self, ios: u64, errors: u64, h: &Histogram<u64>) -> Row {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let iops = ios as f64 / secs;
        let us = |ns: u64| ns as f64 / 1000.0;
        Row {
            ios,
            errors,
            iops,
            mib_s: iops * f64::from(self.settings.io_size) / f64::from(1u32 << 20),
            avg_us: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            min_us: if h.is_empty() { 0.0 } else { us(h.min()) },
            max_us: us(h.max()),
        }
    }

    /// Commands completed.
    pub fn ios(&self) -> u64 {
        self.queues.iter().map(|q| q.ios).sum()
    }

    /// Commands that completed with an error.
    pub fn errors(&self) -> u64 {
        self.queues.iter().map(|q| q.errors).sum()
    }

    fn total(&self) -> Row {
        self.row(self.ios(), self.errors(), &self.latency)
    }

    fn label(&self, q: &QueueStats) -> String {
        let device = match &self.settings.target {
            DeviceSpec::One(Leaf::Vfio(a)) => format!("PCIE ({a})"),
            DeviceSpec::One(Leaf::Tcp(a)) => format!("TCP ({a})"),
            other => other.to_string(),
        };
        match q.core {
            Some(c) => format!("{device} qpair {} from core {c}", q.queue),
            None => format!("{device} qpair {} from worker {}", q.queue, q.worker),
        }
    }

    /// The table, the latency summary and (with -LL) the histogram.
    pub fn render(&self, histogram: bool) -> String {
        let mut o = String::new();
        let labels: Vec<String> = self.queues.iter().map(|q| self.label(q)).collect();
        let width = labels.iter().map(String::len).max().unwrap_or(0).max(18);
        let line = "=".repeat(width + 57);
        let _ = writeln!(o, "{line}");
        let _ = writeln!(o, "{:>w$}", "Latency(us)", w = width + 57);
        let _ = writeln!(
            o,
            "{:<width$}: {:>10} {:>10} {:>10} {:>10} {:>10}",
            "Device Information", "IOPS", "MiB/s", "Average", "min", "max"
        );
        let print = |o: &mut String, label: &str, r: &Row| {
            let _ = writeln!(
                o,
                "{label:<width$}: {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                r.iops, r.mib_s, r.avg_us, r.min_us, r.max_us
            );
        };
        for (q, label) in self.queues.iter().zip(&labels) {
            print(&mut o, label, &self.row(q.ios, q.errors, &q.latency));
        }
        let _ = writeln!(o, "{line}");
        print(&mut o, "Total", &self.total());
        let _ = writeln!(o, "\nios: {} errors: {}\n", self.ios(), self.errors());
        if !self.latency.is_empty() {
            let _ = writeln!(o, "Summary latency data (all queue pairs):");
            let _ = writeln!(o, "{line}");
            for p in CUTOFFS {
                if self.latency.len() as f64 * (1.0 - p / 100.0) < 1.0 && p > 99.0 {
                    // Beyond what this many samples can say.
                    break;
                }
                let v = self.latency.value_at_quantile(p / 100.0) as f64 / 1000.0;
                let _ = writeln!(o, "{p:>9.5}% : {v:>9.3}us");
            }
            let _ = writeln!(o);
        }
        if histogram && !self.latency.is_empty() {
            let _ = writeln!(o, "Latency histogram (all queue pairs):");
            let _ = writeln!(o, "{line}");
            let _ = writeln!(o, "       Range in us     Cumulative    IO count");
            let total = self.latency.len() as f64;
            let mut so_far = 0u64;
            let mut low = 0u64;
            for v in self.latency.iter_log(1000, 2.0) {
                let n = v.count_since_last_iteration();
                let high = v.value_iterated_to();
                if n > 0 {
                    so_far += n;
                    let _ = writeln!(
                        o,
                        "{:>9.3} - {:>9.3}: {:>9.4}%  ({n:>9})",
                        low as f64 / 1000.0,
                        high as f64 / 1000.0,
                        so_far as f64 * 100.0 / total
                    );
                }
                low = high;
            }
            let _ = writeln!(o);
        }
        o
    }

    /// The report as JSON.
    pub fn json(&self) -> anyhow::Result<String> {
        let queues: Vec<serde_json::Value> = self
            .queues
            .iter()
            .map(|q| {
                serde_json::json!({
                    "queue": q.queue,
                    "worker": q.worker,
                    "core": q.core,
                    "figures": self.row(q.ios, q.errors, &q.latency),
                })
            })
            .collect();
        let percentiles: serde_json::Map<String, serde_json::Value> = CUTOFFS
            .iter()
            .filter(|_| !self.latency.is_empty())
            .map(|&p| {
                let us = self.latency.value_at_quantile(p / 100.0) as f64 / 1000.0;
                (format!("{p}"), serde_json::json!(us))
            })
            .collect();
        let v = serde_json::json!({
            "device": self.settings.target.to_string(),
            "settings": self.settings,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "queues": queues,
            "total": self.total(),
            "latency_percentiles_us": percentiles,
        });
        let mut t = serde_json::to_string_pretty(&v).map_err(|e| anyhow!("{e}"))?;
        t.push('\n');
        Ok(t)
    }
}

/// Runs the workload and prints the report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let report = measure(&args.settings()?)?;
    if args.json {
        print!("{}", report.json()?);
    } else {
        print!("{}", report.render(args.latency_level >= 2));
    }
    if report.errors() > 0 {
        return Err(anyhow!("{} commands failed", report.errors()));
    }
    Ok(())
}

/// Runs the workload and returns what it measured.
pub fn measure(settings: &Settings) -> anyhow::Result<Report> {
    let frames = worker::frames(settings).map_err(anyhow::Error::msg)?;
    let pairs = settings.cores.len() as u32 * settings.qpairs_per_worker;
    let config = DriverConfig {
        // Room for every request split at MDTS (the driver clamps this to
        // what the controller allows).
        io_entries: u16::try_from(settings.io_depth.saturating_add(1).max(1024))
            .unwrap_or(u16::MAX),
        max_io_queues: u16::try_from(pairs).unwrap_or(u16::MAX),
        max_transfer: Some(settings.io_size.max(4096)),
        ..DriverConfig::default()
    };
    let target = &settings.target;
    let legs = target.legs().len() as u64;
    let options = OpenOptions {
        // A stripe's emulated legs share one namespace's size, so the
        // volume holds what `emu` holds and random I/O covers as much
        // memory (the emulated medium's caches and TLB see the same
        // working set).
        size: match target {
            DeviceSpec::Stripe { chunk, .. } => super::EMU_BYTES / legs / chunk * chunk,
            _ => super::EMU_BYTES,
        },
        driver: config,
        // A mirror gets new headers: perf writes over the legs anyway.
        mirror_uuid: Some(0x9e7f),
        ..OpenOptions::new(
            match target {
                DeviceSpec::Mirror(_) => Access::Format { force: true },
                _ => Access::Write,
            },
            frames,
        )
    };
    pollfs_device::run(target, &options, Perf(settings.clone()))
}

struct Perf(Settings);

impl DeviceJob for Perf {
    type Output = Report;
    type Error = anyhow::Error;
    fn run<D: BlockDevice>(self, dev: D, _what: &str) -> anyhow::Result<Report> {
        measure_on(&self.0, &dev)
    }
}

/// The workload on any block device: `-P` queue pairs on each worker.
fn measure_on<D: BlockDevice>(s: &Settings, dev: &D) -> anyhow::Result<Report> {
    let geometry = dev.geometry();
    if s.io_size > geometry.max_transfer {
        return Err(anyhow!(
            "-o {}: larger than the device's largest request ({} bytes)",
            s.io_size,
            geometry.max_transfer
        ));
    }
    let layout = Layout::new(s, geometry.capacity_pages(), geometry.blocks_per_page());
    let per_worker = s.qpairs_per_worker;
    let total_pairs = s.cores.len() as u32 * per_worker;
    let mut workers = Vec::new();
    for (w, _) in s.cores.iter().enumerate() {
        let queues = (0..per_worker)
            .map(|_| dev.open_queue().map_err(|e| anyhow!("open queue: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let first = w as u32 * per_worker;
        let first_frame = first * s.io_depth * layout.pages;
        workers.push(Worker::new(
            s,
            layout,
            w as u32,
            queues,
            first,
            first_frame,
            total_pairs,
        )?);
    }
    let start = Instant::now();
    let (measure_from, end) = worker::window(s, start);
    let results: Vec<anyhow::Result<Vec<QueueStats>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .zip(&s.cores)
            .map(|(w, core)| {
                scope.spawn(move || {
                    if let Some(cpu) = core {
                        crate::sys::pin_to_cpu(*cpu)?;
                    }
                    w.run(measure_from, end)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("worker panicked"))))
            .collect()
    });
    let elapsed = Instant::now().saturating_duration_since(measure_from);
    let mut report = Report {
        settings: s.clone(),
        elapsed,
        queues: Vec::new(),
        latency: new_histogram()?,
    };
    for r in results {
        for q in r? {
            report
                .latency
                .add(&q.latency)
                .map_err(|e| anyhow!("histogram: {e}"))?;
            report.queues.push(q);
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
