//! `pollfs bench`: fio-style jobs run by pollfs and, with `--compare`, by
//! pollfs with a file-wide lock, by the kernel and by plain memory copies,
//! one engine after another in one process, so every ratio is measured
//! under the same conditions.
//!
//! Jobs come from a job file, a preset or the command line (`jobfile`,
//! `presets`, the keys in `job`); `plan` groups the jobs that run at the
//! same time into phases; each engine runs each phase (`engine`,
//! `baseline`, through `run`); `report`, `fio` and `plot` say what
//! happened. Everything that can be known before a run is checked before
//! the first one: settings (`job`), what the device already holds
//! (`device`), and what the jobs need from the machine (`limits`).

mod baseline;
mod device;
mod direct;
mod engine;
mod fio;
mod job;
mod jobfile;
mod limits;
mod plan;
mod plot;
mod presets;
mod report;
mod run;
mod sample;
#[cfg(target_os = "linux")]
mod uring;
mod workload;

use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::{Arg, ArgAction, ArgMatches, FromArgMatches};

use device::Target;
use engine::Engine;
use job::Job;
use jobfile::Setting;
use plan::Phase;
use pollfs_device::{file, signature, DeviceSpec, Leaf, OpenError, OpenErrorKind};
use presets::{Preset, Seed};
use run::Progress;

/// Options of `pollfs bench` other than the job keys.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct Fixed {
    /// fio-style job file: `[global]` and one `[section]` per job; the
    /// keys are the job options below. Sections run at the same time
    /// unless `stonewall`.
    job_file: Option<PathBuf>,
    /// A named preset instead of a job file: default, reads, writes,
    /// quick, syncs (small syncs with their data in the log against
    /// pollfs-sync-home and pollfs-in-place-sync), seed-xfs-reads,
    /// seed-btrfs-readahead, seed-btrfs-fsync, or seeds (the three seed
    /// presets).
    #[arg(long)]
    preset: Option<String>,
    /// Device: `emu` (NVMe controller emulated in memory, driven by the real
    /// driver; at most 64 threads, one I/O queue each), `ram` (memory, no
    /// driver), `file:PATH` (created if missing and kept after a successful
    /// run, grown if smaller than a job needs), `vfio:PCI_ADDR`,
    /// `nvme-tcp://HOST:PORT/NQN` (`?hdgst=1&ddgst=1` for digests), or a
    /// volume of them: `stripe:CHUNK:(DEV,DEV,...)` (RAID-0) or
    /// `mirror:(DEV,DEV,...)` (RAID-1, made anew for each run). The bench
    /// formats the device: a file or controller that holds anything (a
    /// filesystem, a partition table, swap, any non-zero byte in its first
    /// 68 KiB) is refused unless --force is given.
    #[arg(long, default_value = "emu")]
    device: String,
    /// Run pollfs-locked, the kernel and (for cached reads) memcpy too, and
    /// print ratios. On for the default suite and the seed presets.
    #[arg(long)]
    compare: bool,
    /// Directory for the kernel baseline's files; it must exist [default:
    /// /dev/shm (tmpfs), or the temporary directory where there is none].
    /// Direct jobs open them with O_DIRECT.
    #[arg(long)]
    kernel_dir: Option<PathBuf>,
    /// normal, json or terse, as fio writes them; several joined by commas
    /// (`normal,json`) print one after another.
    #[arg(long, default_value = "normal")]
    output_format: String,
    /// The same as --output-format=json.
    #[arg(long)]
    json: bool,
    /// Draw each job's latency percentiles (log axes) and throughput over
    /// time into an SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Write over a file or vfio device that holds data or a filesystem.
    #[arg(long)]
    force: bool,
    /// Serve a mirror's control socket while the bench runs on it, so
    /// `pollfs mirror status|fail|rejoin` administer it from another
    /// process.
    #[arg(long)]
    control: bool,
}

const AFTER_HELP: &str = "Every job option is also a job-file key (`--rw randread` is \
`rw=randread`). Options before the first --name apply to every job, including those of a job \
file or preset; each --name starts a job of its own. Sizes take fio's suffixes: k, m, g, t, p, \
optionally followed by i, b or ib, in any case, all powers of 1024 (`4k`, `1.5g`, `2MiB`). \
Times are seconds, or a number with us, ms, s, m, h or d (`500ms`, `2m`). Flags are given bare \
or with `=0`/`=1` (`--stonewall`, `--cold=1`). An unknown key or a \
value out of range is an error, never ignored or clamped. Sizes, caches and thread counts beyond \
the machine (memory, disk, device queues) are refused before anything is allocated or created.";

/// Options of `pollfs bench`: the fixed ones and the job options in the
/// order given (which matters: `--name` starts a job).
#[derive(Debug)]
pub struct Args {
    fixed: Fixed,
    settings: Vec<Setting>,
}

fn job_args(mut cmd: clap::Command) -> clap::Command {
    for key in job::KEYS {
        let mut arg = Arg::new(key.name)
            .long(key.name)
            .help(key.help)
            .help_heading("Job options (fio keys)")
            .action(ArgAction::Append)
            .value_name("VALUE")
            .aliases(key.aliases.iter().copied());
        if key.flag {
            arg = arg
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("1");
        }
        cmd = cmd.arg(arg);
    }
    cmd
}

/// The job options in the order they were given.
fn ordered_settings(m: &ArgMatches) -> Vec<Setting> {
    let mut all: Vec<(usize, Setting)> = Vec::new();
    for key in job::KEYS {
        let (Some(values), Some(at)) = (m.get_many::<String>(key.name), m.indices_of(key.name))
        else {
            continue;
        };
        for (value, index) in values.zip(at) {
            all.push((
                index,
                Setting {
                    key: key.name.to_string(),
                    value: value.clone(),
                },
            ));
        }
    }
    all.sort_by_key(|(index, _)| *index);
    all.into_iter().map(|(_, s)| s).collect()
}

impl FromArgMatches for Args {
    fn from_arg_matches(m: &ArgMatches) -> Result<Args, clap::Error> {
        Ok(Args {
            fixed: Fixed::from_arg_matches(m)?,
            settings: ordered_settings(m),
        })
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Args::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for Args {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        job_args(<Fixed as clap::Args>::augment_args(cmd))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        job_args(<Fixed as clap::Args>::augment_args_for_update(cmd))
    }
}

/// What to run and how to compare it.
struct Plan {
    jobs: Vec<Job>,
    compare: bool,
    /// For each job, the engines its preset adds.
    extra: Vec<&'static [Engine]>,
    seeds: Vec<Seed>,
}

/// The jobs of `presets`, each with the engines its preset adds.
fn preset_jobs(presets: &[&'static Preset]) -> anyhow::Result<Vec<(Job, &'static [Engine])>> {
    let mut out = Vec::new();
    for p in presets {
        out.extend(presets::jobs(&[p])?.into_iter().map(|j| (j, p.extra)));
    }
    Ok(out)
}

/// The jobs the arguments ask for.
fn plan(args: &Args) -> anyhow::Result<Plan> {
    let f = &args.fixed;
    let mut chosen: Vec<&'static Preset> = Vec::new();
    let mut tagged = None;
    match (&f.job_file, &f.preset) {
        (Some(_), Some(_)) => return Err(anyhow!("give a job file or --preset, not both")),
        (Some(path), None) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            let jobs = jobfile::parse(&text, &Job::default())
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            tagged = Some(jobs.into_iter().map(|j| (j, &[][..])).collect());
        }
        (None, Some(name)) => {
            chosen = presets::find(name).ok_or_else(|| {
                anyhow!("no preset '{name}' (have: {})", presets::names().join(", "))
            })?;
            tagged = Some(preset_jobs(&chosen)?);
        }
        (None, None) => {}
    }
    let (listed, mut extra): (Option<Vec<Job>>, Vec<&'static [Engine]>) = match tagged {
        Some(t) => {
            let (jobs, extra): (Vec<Job>, Vec<_>) = t.into_iter().unzip();
            (Some(jobs), extra)
        }
        None => (None, Vec::new()),
    };
    let jobs = match jobfile::assemble(listed, &args.settings)? {
        Some(jobs) => jobs,
        None => {
            chosen = presets::find("default").unwrap_or_default();
            let (jobs, e): (Vec<Job>, Vec<_>) = preset_jobs(&chosen)?.into_iter().unzip();
            extra = e;
            // The suite's settings are its own: nothing to apply.
            for job in &jobs {
                job.validate()?;
            }
            jobs
        }
    };
    // Jobs named on the command line add no engine.
    extra.resize(jobs.len(), &[]);
    Ok(Plan {
        jobs,
        compare: f.compare || chosen.iter().any(|p| p.compare),
        extra,
        seeds: chosen.iter().filter_map(|p| p.seed).collect(),
    })
}

/// Where the kernel baseline writes: `--kernel-dir`, which must be a
/// directory, or tmpfs if the machine has it.
fn kernel_dir(args: &Fixed) -> anyhow::Result<PathBuf> {
    match &args.kernel_dir {
        Some(dir) if dir.is_dir() => Ok(dir.clone()),
        Some(dir) => Err(anyhow!("--kernel-dir {}: not a directory", dir.display())),
        None if Path::new("/dev/shm").is_dir() => Ok(PathBuf::from("/dev/shm")),
        None => Ok(std::env::temp_dir()),
    }
}

/// Looks at a file device before any run: refuses one that holds anything
/// (unless `force`) or that cannot grow to what the phases need, and
/// creates a missing one, to be removed again if the bench fails.
fn prepare_file(
    path: &Path,
    phases: &[Phase<'_>],
    force: bool,
) -> anyhow::Result<Option<file::Created>> {
    let what = format!("file:{}", path.display());
    let needed = phases.iter().map(Phase::device_bytes).max().unwrap_or(0);
    let io = |e| OpenError::new(&what, OpenErrorKind::File(e));
    match file::inspect(path).map_err(io)? {
        Some(existing) => {
            if let Some(found) = signature::identify(&existing.head) {
                if !force {
                    return Err(OpenError::new(&what, OpenErrorKind::HoldsData(found)).into());
                }
                eprintln!("pollfs: {what}: overwriting {found} (--force)");
            }
            if existing.block_device {
                if existing.len < needed {
                    return Err(anyhow!(
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
            Ok(Some(file::Created::new(path, 0).map_err(io)?))
        }
    }
}

/// The engines that run `phase`, whose first job is the `first`th.
fn engines(phase: &Phase<'_>, plan: &Plan, first: usize) -> Vec<Engine> {
    let mut v = vec![Engine::Pollfs];
    if plan.compare {
        v.push(Engine::PollfsLocked);
    }
    for e in plan.extra[first..first + phase.jobs.len()]
        .iter()
        .copied()
        .flatten()
    {
        if !v.contains(e) {
            v.push(*e);
        }
    }
    if plan.compare {
        v.push(Engine::Kernel);
        if phase.cached_reads_only() {
            v.push(Engine::Memcpy);
        }
    }
    v
}

/// Runs the bench.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let formats = fio::formats(&args.fixed.output_format, args.fixed.json)?;
    let device = DeviceSpec::parse(&args.fixed.device)?;
    let plan = plan(args)?;
    let phases = plan::phases(&plan.jobs)?;
    let groups = plan::groups(&plan.jobs);
    let kernel_dir = kernel_dir(&args.fixed)?;
    let baselines_dir = plan.compare.then_some(kernel_dir.as_path());
    let memory = crate::host::memory();
    for phase in &phases {
        limits::check(phase, &device, memory, baselines_dir)?;
    }
    // Dropped on any early return below: a file created here goes again.
    let created = match &device {
        DeviceSpec::One(Leaf::File(path)) => prepare_file(path, &phases, args.fixed.force)?,
        _ => None,
    };
    // emu and ram are new and empty; a file was just checked; a
    // controller, and the legs of a volume, are checked once opened.
    let checked = match &device {
        DeviceSpec::One(Leaf::File(_)) => true,
        other => other.in_memory(),
    };
    let mut target = Target::new(device, args.fixed.force, checked);
    target.control = args.fixed.control;
    let progress = Progress::new();
    let mut samples: Vec<Vec<sample::Sample>> = plan.jobs.iter().map(|_| Vec::new()).collect();
    let mut first = 0;
    for phase in &phases {
        for engine in engines(phase, &plan, first) {
            let got = match engine {
                Engine::Kernel => baseline::kernel(phase, &kernel_dir, &progress)?,
                Engine::Memcpy => baseline::memcpy(phase, &progress)?,
                _ => target.run(phase, engine, &progress)?,
            };
            for (i, s) in got.into_iter().enumerate() {
                samples[first + i].push(s);
            }
        }
        first += phase.jobs.len();
    }
    progress.bar.finish_and_clear();
    let results: Vec<report::JobResult> = plan
        .jobs
        .iter()
        .zip(groups)
        .zip(samples)
        .map(|((job, group), samples)| report::JobResult {
            job: job.clone(),
            group,
            samples,
        })
        .collect();
    if let Some(path) = &args.fixed.plot {
        std::fs::write(path, plot::svg(&results)?)
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    }
    let mut text = String::new();
    for format in formats {
        text.push_str(&match format {
            fio::Format::Normal => report::render(&args.fixed.device, &results, &plan.seeds),
            fio::Format::Json => fio::json(&args.fixed.device, &results, &plan.seeds)?,
            fio::Format::Terse => fio::terse(&results),
        });
    }
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    if let Some(file) = created {
        file.keep();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Args as _;

    use super::*;

    fn command() -> clap::Command {
        Args::augment_args(clap::Command::new("bench"))
    }

    #[test]
    fn every_key_is_an_option_and_every_preset_is_named_in_the_help() {
        let cmd = command();
        for key in job::KEYS {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == key.name)
                .unwrap_or_else(|| panic!("no --{}", key.name));
            assert!(arg.get_help().is_some());
        }
        let preset = cmd
            .get_arguments()
            .find(|a| a.get_id() == "preset")
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        for name in presets::names() {
            assert!(preset.contains(name), "--preset help lacks {name}");
        }
    }

    #[test]
    fn options_keep_their_order_and_flags_take_no_value() {
        let m = command()
            .try_get_matches_from([
                "bench",
                "--runtime=1",
                "--name",
                "a",
                "--stonewall",
                "--bs",
                "8k",
                "--name=b",
                "--cold=0",
                "job.fio",
            ])
            .unwrap();
        let args = Args::from_arg_matches(&m).unwrap();
        let got: Vec<(&str, &str)> = args
            .settings
            .iter()
            .map(|s| (s.key.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("runtime", "1"),
                ("name", "a"),
                ("stonewall", "1"),
                ("bs", "8k"),
                ("name", "b"),
                ("cold", "0")
            ]
        );
        assert_eq!(args.fixed.job_file, Some(PathBuf::from("job.fio")));
    }
}
