//! `pollfs bench`: fio-style jobs run by pollfs and, with `--compare`, by
//! pollfs with a file-wide lock, by the kernel's page cache and by plain
//! memory copies, one after another in one process, so every ratio is
//! measured under the same conditions.
//!
//! Everything that can be known before a run is checked before the first
//! one: settings (`job`), what the device already holds (`device`), and
//! what the job needs from the machine (`limits`).

mod baseline;
mod device;
mod engine;
mod job;
mod limits;
mod plot;
mod report;
mod sample;
mod workload;

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::{devfile, signature};
use device::{Device, Target};
use job::Job;
use sample::Recorder;

/// Options of `pollfs bench`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "The job options are job-file keys (`--rw randread` is `rw=randread`). \
Sizes take fio's suffixes: k, m, g, t, p, optionally followed by i, b or ib, in any case, \
all powers of 1024 (`4k`, `1.5g`, `2MiB`). Times are seconds, or a number with us, ms, s, \
m, h or d (`500ms`, `2m`). A value out of range is an error, never clamped. Sizes, caches \
and thread counts beyond the machine (memory, disk, device queues) are refused before \
anything is allocated or created."
)]
pub struct Args {
    /// fio-style job file (a subset: rw, rwmixread, bs, size, numjobs,
    /// iodepth, runtime, fsync, fdatasync, filename, nrfiles, direct=0,
    /// cold, append, cache).
    job_file: Option<PathBuf>,
    /// A named preset instead of a job file: default, reads, writes, quick.
    #[arg(long)]
    preset: Option<String>,
    /// Device: `emu` (NVMe controller emulated in memory, driven by the real
    /// driver; at most 64 threads, one I/O queue each), `ram` (memory, no
    /// driver), `file:PATH` (created if missing and kept after a successful
    /// run, grown if smaller than a job needs), `vfio:PCI_ADDR`,
    /// `nvme-tcp://HOST:PORT/NQN` (`?hdgst=1&ddgst=1` for digests). The bench
    /// formats the device: a file or controller that holds anything (a
    /// filesystem, a partition table, swap, any non-zero byte in its first
    /// 68 KiB) is refused unless --force is given.
    #[arg(long, default_value = "emu")]
    device: String,
    /// Run pollfs-locked, the kernel and (for read jobs) memcpy too, and
    /// print ratios. On by default when no job is given.
    #[arg(long)]
    compare: bool,
    /// Directory for the kernel baseline's files; it must exist [default:
    /// /dev/shm (tmpfs), or the temporary directory where there is none].
    #[arg(long)]
    kernel_dir: Option<PathBuf>,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Draw latency percentiles and throughput over time into an SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write over a file or vfio device that holds data or a filesystem.
    #[arg(long)]
    force: bool,
    /// Access pattern: read, write, randread, randwrite, randrw.
    #[arg(long)]
    rw: Option<String>,
    /// Percent reads for randrw, 0 to 100.
    #[arg(long)]
    rwmixread: Option<String>,
    /// Bytes per I/O, 1 byte to 16 MiB (pollfs I/O is buffered, so any
    /// length works).
    #[arg(long)]
    bs: Option<String>,
    /// Bytes per job, split over nrfiles files. With the device and the
    /// cache it must fit in memory (and, for file:, on disk): checked
    /// before anything is allocated.
    #[arg(long)]
    size: Option<String>,
    /// Threads, 1 to the device's I/O queues (64 on emu; 1024 on ram and
    /// file:).
    #[arg(long)]
    numjobs: Option<String>,
    /// I/Os in flight per thread, 1 to 65536.
    #[arg(long)]
    iodepth: Option<String>,
    /// Length of each run: seconds, or with a unit (500ms, 2m); at most 1d.
    #[arg(long)]
    runtime: Option<String>,
    /// sync_all after every N writes (0: never).
    #[arg(long)]
    fsync: Option<String>,
    /// sync_data after every N writes (0: never).
    #[arg(long)]
    fdatasync: Option<String>,
    /// File name prefix (a plain name).
    #[arg(long)]
    filename: Option<String>,
    /// Files per job.
    #[arg(long)]
    nrfiles: Option<String>,
    /// Only 0: pollfs I/O goes through its page cache.
    #[arg(long)]
    direct: Option<String>,
    /// Start with the files out of the cache (1) or cached (0).
    #[arg(long)]
    cold: Option<String>,
    /// Page-cache size, whole 4 KiB pages, at least 16 KiB, e.g. `256m`
    /// (default: room for every file).
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

/// Where the kernel baseline writes: `--kernel-dir`, which must be a
/// directory, or tmpfs if the machine has it.
fn kernel_dir(args: &Args) -> Result<PathBuf, String> {
    match &args.kernel_dir {
        Some(dir) if dir.is_dir() => Ok(dir.clone()),
        Some(dir) => Err(format!("--kernel-dir {}: not a directory", dir.display())),
        None if Path::new("/dev/shm").is_dir() => Ok(PathBuf::from("/dev/shm")),
        None => Ok(std::env::temp_dir()),
    }
}

/// Looks at a file device before any run: refuses one that holds anything
/// (unless `force`) or that cannot grow to what the jobs need, and creates
/// a missing one, to be removed again if the bench fails.
fn prepare_file(
    path: &Path,
    jobs: &[Job],
    force: bool,
) -> Result<Option<devfile::Created>, String> {
    let what = format!("file:{}", path.display());
    let needed = jobs.iter().map(engine::device_bytes).max().unwrap_or(0);
    match devfile::inspect(path)? {
        Some(existing) => {
            signature::refuse_unless_forced(&what, &existing.head, force)?;
            if existing.block_device {
                if existing.len < needed {
                    return Err(format!(
                        "{what}: the bench needs {}, and the device holds {}",
                        crate::units::show_bytes(needed),
                        crate::units::show_bytes(existing.len)
                    ));
                }
            } else {
                limits::check_file_space(path, needed, existing.allocated)?;
            }
            Ok(None)
        }
        None => {
            limits::check_file_space(path, needed, 0)?;
            devfile::Created::new(path, 0).map(Some)
        }
    }
}

/// Runs the bench.
pub fn run(args: &Args) -> Result<(), String> {
    let (jobs, suite) = jobs(args)?;
    let compare = args.compare || suite;
    let device = Device::parse(&args.device)?;
    let kernel_dir = kernel_dir(args)?;
    let baselines_dir = compare.then_some(kernel_dir.as_path());
    let memory = crate::host::memory();
    for job in &jobs {
        limits::check(job, &device, memory, baselines_dir)?;
    }
    // Dropped on any early return below: a file created here goes again.
    let created = match &device {
        Device::File(path) => prepare_file(path, &jobs, args.force)?,
        _ => None,
    };
    // emu and ram are new and empty; a file was just checked; a vfio
    // controller is checked once brought up.
    let checked = !matches!(device, Device::Vfio(_) | Device::Tcp(_));
    let target = Target::new(device, args.force, checked);
    let progress = Progress::new();
    let mut results = Vec::new();
    for job in &jobs {
        let mut samples = vec![target.run(job, false, &progress)?];
        if compare {
            samples.push(target.run(job, true, &progress)?);
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
    if let Some(file) = created {
        file.keep();
    }
    Ok(())
}
