//! `pollfs bench`: fio-style jobs run by pollfs and, with `--compare`, by
//! pollfs with a file-wide lock, by the kernel's page cache and by plain
//! memory copies, one after another in one process, so every ratio is
//! measured under the same conditions.

mod baseline;
mod engine;
mod job;
mod plot;
mod report;
mod sample;
mod workload;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use pollfs_core::dev::file::FileDevice;
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::BlockDevice;
#[cfg(target_os = "linux")]
use pollfs_driver::emu::StdClock;
use pollfs_driver::NvmeDevice;

use job::Job;
use sample::{Recorder, Sample};

/// Options of `pollfs bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// fio-style job file (a subset: rw, rwmixread, bs, size, numjobs,
    /// iodepth, runtime, fsync, fdatasync, filename, nrfiles, direct=0).
    job_file: Option<PathBuf>,
    /// A named preset instead of a job file: default, reads, writes, quick.
    #[arg(long)]
    preset: Option<String>,
    /// Device: `emu` (NVMe controller emulated in memory, driven by the real
    /// driver), `ram` (memory, no driver), `file:PATH`, `vfio:PCI_ADDR`.
    #[arg(long, default_value = "emu")]
    device: String,
    /// Run pollfs-locked, the kernel and (for read jobs) memcpy too, and
    /// print ratios. On by default when no job is given.
    #[arg(long)]
    compare: bool,
    /// Directory for the kernel baseline's files (tmpfs by default).
    #[arg(long, default_value = "/dev/shm")]
    kernel_dir: PathBuf,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Draw latency percentiles and throughput over time into an SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Use a bound device even if it looks in use by the kernel.
    #[arg(long)]
    force: bool,
    /// Job settings as on a job-file line, e.g. `--rw randread --bs 4k`.
    #[arg(long)]
    rw: Option<String>,
    #[arg(long)]
    rwmixread: Option<String>,
    #[arg(long)]
    bs: Option<String>,
    #[arg(long)]
    size: Option<String>,
    #[arg(long)]
    numjobs: Option<String>,
    #[arg(long)]
    iodepth: Option<String>,
    #[arg(long)]
    runtime: Option<String>,
    #[arg(long)]
    fsync: Option<String>,
    #[arg(long)]
    fdatasync: Option<String>,
    #[arg(long)]
    filename: Option<String>,
    #[arg(long)]
    nrfiles: Option<String>,
    #[arg(long)]
    direct: Option<String>,
    /// Start with the files out of the cache (1) or cached (0).
    #[arg(long)]
    cold: Option<String>,
    /// Page-cache size, e.g. `256m` (default: room for every file).
    #[arg(long)]
    cache: Option<String>,
}

impl Args {
    fn settings(&self) -> BTreeMap<String, String> {
        let pairs = [
            ("rw", &self.rw),
            ("rwmixread", &self.rwmixread),
            ("bs", &self.bs),
            ("size", &self.size),
            ("numjobs", &self.numjobs),
            ("iodepth", &self.iodepth),
            ("runtime", &self.runtime),
            ("fsync", &self.fsync),
            ("fdatasync", &self.fdatasync),
            ("filename", &self.filename),
            ("nrfiles", &self.nrfiles),
            ("direct", &self.direct),
            ("cold", &self.cold),
            ("cache", &self.cache),
        ];
        pairs
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k.to_string(), v.clone())))
            .collect()
    }
}

/// Shows progress on a terminal; silent otherwise.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new() -> Progress {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        if let Ok(style) = ProgressStyle::with_template("{prefix:>28} [{bar:30}] {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        Progress { bar }
    }
    fn start(&self, what: &str, millis: u64) {
        self.bar.set_prefix(what.to_string());
        self.bar.set_length(millis);
        self.bar.set_position(0);
    }
}

/// Runs `body(thread, deadline, start)` on the job's threads and merges
/// their records; returns the record and the seconds measured.
pub fn run_threads<F>(job: &Job, progress: &Progress, body: F) -> Result<(Recorder, f64), String>
where
    F: Fn(u32, Instant, Instant) -> Result<Recorder, String> + Sync,
{
    let runtime = Duration::from_secs_f64(job.runtime);
    let start = Instant::now();
    let deadline = start + runtime;
    progress.start(&job.name, runtime.as_millis() as u64);
    let results: Vec<Result<Recorder, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..job.numjobs)
            .map(|t| {
                let body = &body;
                scope.spawn(move || body(t, deadline, start))
            })
            .collect();
        while handles.iter().any(|h| !h.is_finished()) {
            progress
                .bar
                .set_position(start.elapsed().as_millis() as u64);
            std::thread::park_timeout(Duration::from_millis(100));
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a bench thread panicked".to_string()))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut merged = Recorder::new(start)?;
    for r in results {
        merged.merge(r?);
    }
    Ok((merged, secs))
}

fn on_device(
    args: &Args,
    job: &Job,
    file_lock: bool,
    progress: &Progress,
) -> Result<Sample, String> {
    let bytes = engine::device_bytes(job);
    let frames = engine::frames(job)?;
    let spec = args.device.as_str();
    if spec == "emu" {
        let dev =
            NvmeDevice::emulated(bytes, 4096, frames).map_err(|e| format!("emulated NVMe: {e}"))?;
        return engine::pollfs(job, dev, file_lock, progress);
    }
    if spec == "ram" {
        let dev = RamDevice::new(bytes, 4096, frames).map_err(|e| e.to_string())?;
        return engine::pollfs(job, dev, file_lock, progress);
    }
    if let Some(path) = spec.strip_prefix("file:") {
        let dev =
            FileDevice::open(Path::new(path), bytes, frames).map_err(|e| format!("{path}: {e}"))?;
        return engine::pollfs(job, dev, file_lock, progress);
    }
    #[cfg(target_os = "linux")]
    if let Some(addr) = spec.strip_prefix("vfio:") {
        let config = pollfs_driver::DriverConfig::default();
        let dev = NvmeDevice::vfio(addr, config, frames, StdClock::new()).map_err(|e| {
            format!("{addr}: {e} (is it bound to vfio-pci? see `pollfs setup {addr}`)")
        })?;
        if !args.force {
            if let Some(what) = signature(&dev)? {
                return Err(format!(
                    "{addr} holds {what}; the bench would overwrite it (pass --force to do so anyway)"
                ));
            }
        }
        return engine::pollfs(job, dev, file_lock, progress);
    }
    Err(format!(
        "unknown device '{spec}': use emu, ram, file:PATH or vfio:PCI_ADDR"
    ))
}

/// Looks for a filesystem signature in the device's first blocks: the bench
/// writes over the whole device, so a device that carries data is refused
/// unless the user insists.
#[cfg(target_os = "linux")]
fn signature<D: BlockDevice>(dev: &D) -> Result<Option<&'static str>, String> {
    use pollfs_core::dev::{Command, DeviceQueue, FrameArena};
    use pollfs_core::units::{FrameId, Lba};
    let mut q = dev.open_queue().map_err(|e| e.to_string())?;
    let tag = q
        .submit(&Command::Read {
            lba: Lba(0),
            frames: &[FrameId(0)],
        })
        .map_err(|e| e.to_string())?;
    let mut result = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while result.is_none() && Instant::now() < deadline {
        q.poll(pollfs_core::hosted::monotonic_clock(), 8, &mut |c| {
            if c.tag == tag {
                result = Some(c.result);
            }
        });
    }
    result
        .ok_or("reading the first block timed out")?
        .map_err(|e| e.to_string())?;
    let mut head = vec![0u8; 4096];
    dev.frames().read(FrameId(0), 0, &mut head);
    Ok(if head.starts_with(b"POLLFSv1") {
        Some("a pollfs filesystem")
    } else if head.starts_with(b"XFSB") {
        Some("an XFS filesystem")
    } else if head.get(1080..1082) == Some(&[0x53, 0xef]) {
        Some("an ext2/3/4 filesystem")
    } else if head.get(510..512) == Some(&[0x55, 0xaa]) {
        Some("a partition table")
    } else {
        None
    })
}

/// The jobs the arguments ask for.
fn jobs(args: &Args) -> Result<(Vec<Job>, bool), String> {
    let settings = args.settings();
    let (mut jobs, suite) = match (&args.job_file, &args.preset) {
        (Some(_), Some(_)) => return Err("give a job file or --preset, not both".into()),
        (Some(path), None) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            (job::parse_job_file(&text, &Job::default())?, false)
        }
        (None, Some(name)) => {
            let jobs = job::preset(name)
                .ok_or_else(|| format!("no preset '{name}' (have: {})", job::PRESETS.join(", ")))?;
            (jobs, false)
        }
        (None, None) if settings.is_empty() => (job::preset("default").unwrap_or_default(), true),
        (None, None) => (vec![Job::default()], false),
    };
    for j in &mut jobs {
        job::apply_settings(j, &settings)?;
        j.validate()?;
    }
    Ok((jobs, suite))
}

/// Runs the bench.
pub fn run(args: &Args) -> Result<(), String> {
    let (jobs, suite) = jobs(args)?;
    let compare = args.compare || suite;
    let kernel_dir = if args.kernel_dir.is_dir() {
        args.kernel_dir.clone()
    } else {
        std::env::temp_dir()
    };
    let progress = Progress::new();
    let mut results = Vec::new();
    for job in &jobs {
        let mut samples = vec![on_device(args, job, false, &progress)?];
        if compare {
            samples.push(on_device(args, job, true, &progress)?);
            samples.push(baseline::kernel(job, &kernel_dir, &progress)?);
            if job.rw.reads_only() && !job.cold {
                samples.push(baseline::memcpy(job, &progress)?);
            }
        }
        results.push(report::JobResult {
            job: job.clone(),
            samples,
        });
    }
    progress.bar.finish_and_clear();
    if let Some(path) = &args.plot {
        std::fs::write(path, plot::svg(&results))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let text = if args.json {
        let mut t = serde_json::to_string_pretty(&report::Report::new(&args.device, &results))
            .map_err(|e| e.to_string())?;
        t.push('\n');
        t
    } else {
        report::render(&args.device, &results)
    };
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    Ok(())
}
