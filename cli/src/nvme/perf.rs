//! `pollfs perf DEVICE`: a queue-depth-driven I/O generator in the manner
//! of spdk_nvme_perf. Each queue pair runs on its own thread and keeps
//! `--qd` commands in flight, polling for completions with no interrupts
//! and no system calls, and records every command's latency.

use std::time::{Duration, Instant};

use clap::{Args as ClapArgs, ValueEnum};
use hdrhistogram::Histogram;
use pollfs_core::dev::{BlockDevice, Command, DeviceQueue, Tag};
use pollfs_core::units::{FrameId, Lba, Nanos, PAGE_SIZE};
use pollfs_driver::{DriverConfig, NvmeDevice, Transport};

use super::{with_device, DeviceJob, Target};

/// The access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniformly random reads.
    Randread,
    /// Uniformly random writes.
    Randwrite,
    /// Random reads and writes, `--read-pct` percent reads.
    Mix,
}

/// Arguments of `pollfs perf`.
#[derive(ClapArgs, Debug, Clone)]
pub struct Args {
    /// `emu`, `vfio:<pci-address>` or `nvme-tcp://HOST:PORT/NQN`
    /// (`?hdgst=1&ddgst=1` for digests).
    pub device: Target,
    /// Commands kept in flight per queue.
    #[arg(long, default_value_t = 32)]
    pub qd: u32,
    /// Bytes per command, a multiple of 4096.
    #[arg(long, default_value_t = 4096)]
    pub io_size: u32,
    /// Access pattern.
    #[arg(long, value_enum, default_value_t = Workload::Randread)]
    pub workload: Workload,
    /// Percentage of reads for `--workload mix`.
    #[arg(long, default_value_t = 50)]
    pub read_pct: u8,
    /// Length of the measurement.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Queue pairs, one thread each.
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
}

/// What one run measured.
#[derive(Debug)]
pub struct Report {
    /// Commands completed.
    pub ios: u64,
    /// Commands that completed with an error.
    pub errors: u64,
    /// Wall time of the measurement.
    pub elapsed: Duration,
    /// Bytes per command.
    pub io_size: u32,
    /// Per-command latency in nanoseconds.
    pub latency: Histogram<u64>,
}

impl Report {
    /// Completions per second.
    pub fn iops(&self) -> f64 {
        self.ios as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
    /// The human-readable summary.
    pub fn render(&self) -> String {
        let us = |q: f64| self.latency.value_at_quantile(q) as f64 / 1000.0;
        format!(
            "IOPS: {:.0}\nMiB/s: {:.1}\nlatency us: avg {:.1} p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}\nios: {} errors: {}\n",
            self.iops(),
            self.iops() * f64::from(self.io_size) / f64::from(1u32 << 20),
            self.latency.mean() / 1000.0,
            us(0.5),
            us(0.9),
            us(0.99),
            us(0.999),
            self.latency.max() as f64 / 1000.0,
            self.ios,
            self.errors
        )
    }
}

/// Runs the workload and prints the report.
pub fn run(args: &Args) -> Result<(), String> {
    let report = measure(args)?;
    print!("{}", report.render());
    if report.errors > 0 {
        return Err(format!("{} commands failed", report.errors));
    }
    Ok(())
}

/// Runs the workload and returns what it measured.
pub fn measure(args: &Args) -> Result<Report, String> {
    if args.io_size == 0 || args.io_size as usize % PAGE_SIZE != 0 {
        return Err("--io-size must be a non-zero multiple of 4096".to_string());
    }
    if args.qd == 0
        || args.queues == 0
        || args.read_pct > 100
        || !args.seconds.is_finite()
        || args.seconds <= 0.0
    {
        return Err("--qd and --queues must be > 0, --read-pct <= 100, --seconds > 0".to_string());
    }
    let pages = args.io_size / PAGE_SIZE as u32;
    let frames = args
        .qd
        .checked_mul(pages)
        .and_then(|f| f.checked_mul(args.queues))
        .ok_or("--qd x --io-size x --queues is too large")?;
    let config = DriverConfig {
        // Room for every request split at MDTS (the driver clamps this to
        // what the controller allows).
        io_entries: u16::try_from(args.qd.saturating_add(1).max(1024)).unwrap_or(u16::MAX),
        max_io_queues: u16::try_from(args.queues).unwrap_or(u16::MAX),
        max_transfer: Some(args.io_size.max(4096)),
        ..DriverConfig::default()
    };
    with_device(&args.device, config, frames, Perf(args.clone()))
}

struct Perf(Args);

impl DeviceJob for Perf {
    type Output = Report;
    fn run<T: Transport>(self, dev: &NvmeDevice<T>) -> Result<Report, String> {
        let args = &self.0;
        let queues: Vec<_> = (0..args.queues)
            .map(|_| dev.open_queue().map_err(|e| format!("open queue: {e}")))
            .collect::<Result<_, _>>()?;
        let geometry = dev.geometry();
        if args.io_size > geometry.max_transfer {
            return Err(format!(
                "--io-size {} is larger than the device's largest request ({} bytes)",
                args.io_size, geometry.max_transfer
            ));
        }
        let deadline = Duration::from_secs_f64(args.seconds);
        let start = Instant::now();
        let results: Vec<Result<Worker, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = queues
                .into_iter()
                .enumerate()
                .map(|(i, q)| {
                    let w = Worker::new(
                        args,
                        i as u32,
                        geometry.capacity_pages(),
                        geometry.blocks_per_page(),
                    );
                    s.spawn(move || w?.run(q, start, deadline))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("worker panicked".to_string()))
                })
                .collect()
        });
        let elapsed = start.elapsed();
        let mut report = Report {
            ios: 0,
            errors: 0,
            elapsed,
            io_size: args.io_size,
            latency: new_histogram()?,
        };
        for w in results {
            let w = w?;
            report.ios += w.ios;
            report.errors += w.errors;
            report
                .latency
                .add(&w.latency)
                .map_err(|e| format!("histogram: {e}"))?;
        }
        Ok(report)
    }
}

fn new_histogram() -> Result<Histogram<u64>, String> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| format!("histogram: {e}"))
}

/// One queue pair's generator: its own frames, its own random stream.
struct Worker {
    workload: Workload,
    read_pct: u64,
    qd: u32,
    pages: u32,
    first_frame: u32,
    /// Namespace size in units of one command.
    slots: u64,
    blocks_per_page: u64,
    cursor: u64,
    rng: u64,
    ios: u64,
    errors: u64,
    latency: Histogram<u64>,
}

impl Worker {
    fn new(
        args: &Args,
        index: u32,
        capacity_pages: u64,
        blocks_per_page: u64,
    ) -> Result<Worker, String> {
        let pages = args.io_size / PAGE_SIZE as u32;
        let slots = (capacity_pages / u64::from(pages)).max(1);
        Ok(Worker {
            workload: args.workload,
            read_pct: u64::from(args.read_pct),
            qd: args.qd,
            pages,
            first_frame: index * args.qd * pages,
            slots,
            blocks_per_page,
            // Sequential streams start spread over the namespace.
            cursor: slots / u64::from(args.queues) * u64::from(index),
            rng: 0x9E37_79B9_7F4A_7C15 ^ (u64::from(index) + 1).wrapping_mul(0xD1B5_4A32_D192_ED03),
            ios: 0,
            errors: 0,
            latency: new_histogram()?,
        })
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: cheap and good enough to spread offsets.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The next command's (slot, is_read).
    fn next_io(&mut self) -> (u64, bool) {
        match self.workload {
            Workload::Read | Workload::Write => {
                let slot = self.cursor;
                self.cursor = (self.cursor + 1) % self.slots;
                (slot, self.workload == Workload::Read)
            }
            Workload::Randread => (self.next_random() % self.slots, true),
            Workload::Randwrite => (self.next_random() % self.slots, false),
            Workload::Mix => {
                let slot = self.next_random() % self.slots;
                (slot, self.next_random() % 100 < self.read_pct)
            }
        }
    }

    fn submit<Q: DeviceQueue>(&mut self, q: &mut Q, frames: &[FrameId]) -> Result<Tag, String> {
        let (slot, read) = self.next_io();
        let lba = Lba(slot * u64::from(self.pages) * self.blocks_per_page);
        let cmd = if read {
            Command::Read { lba, frames }
        } else {
            Command::Write {
                lba,
                frames,
                fua: false,
            }
        };
        q.submit(&cmd).map_err(|e| format!("submit: {e}"))
    }

    fn run<Q: DeviceQueue>(
        mut self,
        mut q: Q,
        start: Instant,
        deadline: Duration,
    ) -> Result<Worker, String> {
        let frames: Vec<Vec<FrameId>> = (0..self.qd)
            .map(|s| {
                let f = self.first_frame + s * self.pages;
                (f..f + self.pages).map(FrameId).collect()
            })
            .collect();
        // Slot s is in flight as tags[s] since issued[s].
        let mut tags: Vec<Option<Tag>> = Vec::with_capacity(frames.len());
        let mut issued: Vec<Instant> = Vec::with_capacity(frames.len());
        for f in &frames {
            tags.push(Some(self.submit(&mut q, f)?));
            issued.push(Instant::now());
        }
        let mut done: Vec<(Tag, bool)> = Vec::with_capacity(frames.len());
        let mut in_flight = frames.len();
        while in_flight > 0 {
            let now = Instant::now();
            let stopping = now.duration_since(start) >= deadline;
            let nanos =
                Nanos(u64::try_from(now.duration_since(start).as_nanos()).unwrap_or(u64::MAX));
            done.clear();
            q.poll(nanos, frames.len(), &mut |c| {
                done.push((c.tag, c.result.is_ok()))
            });
            if done.is_empty() {
                continue;
            }
            let now = Instant::now();
            for &(tag, ok) in &done {
                let Some(slot) = tags.iter().position(|t| *t == Some(tag)) else {
                    return Err(format!("completion for unknown tag {tag:?}"));
                };
                let ns = now.duration_since(issued[slot]).as_nanos();
                let _ = self
                    .latency
                    .record(u64::try_from(ns).unwrap_or(u64::MAX).max(1));
                self.ios += 1;
                if !ok {
                    self.errors += 1;
                }
                if stopping {
                    in_flight -= 1;
                    tags[slot] = None;
                } else {
                    tags[slot] = Some(self.submit(&mut q, &frames[slot])?);
                    issued[slot] = Instant::now();
                }
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(workload: Workload, qd: u32, queues: u32) -> Args {
        Args {
            device: Target::Emu,
            qd,
            io_size: 4096,
            workload,
            read_pct: 70,
            seconds: 0.2,
            queues,
        }
    }

    #[test]
    fn perf_on_emu_completes_commands_without_errors() {
        for w in [
            Workload::Read,
            Workload::Write,
            Workload::Randread,
            Workload::Randwrite,
            Workload::Mix,
        ] {
            let r = measure(&args(w, 8, 2)).unwrap();
            assert!(r.ios > 0, "{w:?}: no I/O");
            assert_eq!(r.errors, 0, "{w:?}");
            assert_eq!(r.latency.len(), r.ios);
            assert!(r.render().contains("IOPS: "));
        }
    }

    #[test]
    fn large_commands_beyond_mdts_work() {
        let mut a = args(Workload::Randwrite, 4, 1);
        a.io_size = 1 << 20;
        let r = measure(&a).unwrap();
        assert!(r.ios > 0);
        assert_eq!(r.errors, 0);
    }

    #[test]
    fn perf_over_nvme_tcp_completes_commands_without_errors() {
        use pollfs_driver::tcp::target::{TargetConfig, TestTarget};
        let t = TestTarget::start(TargetConfig::default()).unwrap();
        let mut a = args(Workload::Mix, 8, 2);
        a.device = t.url(false, false).parse().unwrap();
        a.io_size = 16384;
        let r = measure(&a).unwrap();
        assert!(r.ios > 0);
        assert_eq!(r.errors, 0);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let mut a = args(Workload::Read, 1, 1);
        a.io_size = 1000;
        assert!(measure(&a).is_err());
        let mut a = args(Workload::Mix, 1, 1);
        a.read_pct = 101;
        assert!(measure(&a).is_err());
        assert!(measure(&args(Workload::Read, 0, 1)).is_err());
    }

    #[test]
    fn random_offsets_stay_inside_the_namespace() {
        let mut w = Worker::new(&args(Workload::Mix, 1, 1), 0, 1000, 1).unwrap();
        let mut reads = 0;
        for _ in 0..10_000 {
            let (slot, read) = w.next_io();
            assert!(slot < 1000);
            reads += u32::from(read);
        }
        assert!((6000..8000).contains(&reads), "{reads}");
    }
}
