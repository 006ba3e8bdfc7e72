//! Named presets, written as fio job files and read by the same parser.
//!
//! The `seed-*` presets are the headline workloads of the Linux changes
//! pollfs takes its ideas from (docs/design/bench.md §11); each runs pollfs,
//! pollfs-locked and the kernel (and, for readahead, pollfs with readahead
//! off) and prints the change's published figure beside pollfs's ratio.

use anyhow::anyhow;

use super::engine::Engine;
use super::job::Job;
use super::jobfile;

/// What a seed preset compares, and the figure the change published.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Seed {
    /// The change, as its authors named it.
    pub change: &'static str,
    /// The figure it published.
    pub figure: &'static str,
    /// That figure as a ratio, after / before.
    pub ratio: f64,
    /// What pollfs is measured by.
    pub measure: Measure,
}

/// A measurement of one job, compared between two engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Read MiB/s of `job`: pollfs / `against`.
    ReadMiBs { job: &'static str, against: Engine },
    /// Maximum sync latency of `job`: pollfs / `against`, with p99 beside.
    MaxSyncLatency { job: &'static str, against: Engine },
}

/// A named preset.
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    pub name: &'static str,
    /// The jobs, as a fio job file.
    pub text: &'static str,
    /// Run the comparison engines even without `--compare`.
    pub compare: bool,
    /// Engines besides those `--compare` runs.
    pub extra: &'static [Engine],
    pub seed: Option<Seed>,
}

const DEFAULT: &str = "\
; Cached reads and writes, then jobs that reach the device.
[global]
stonewall
[randread-4m-1t]
rw=randread
size=4m
[randread-4m-2t]
rw=randread
size=4m
numjobs=2
[randread-256m-1t]
rw=randread
size=256m
[randrw-256m-2t]
rw=randrw
size=256m
numjobs=2
[randwrite-64m-2t]
rw=randwrite
size=64m
numjobs=2
[seqread-cold-256m]
rw=read
size=256m
bs=1m
cold=1
; A 32 MiB cache over 256 MiB of file: most reads miss.
[randread-cold-256m]
rw=randread
size=256m
cache=32m
cold=1
[randread-direct-qd1]
rw=randread
size=256m
cache=16m
direct=1
[randread-direct-qd32]
rw=randread
size=256m
cache=16m
direct=1
iodepth=32
[overwrite-fdatasync]
rw=randwrite
size=16m
fdatasync=1
[append-fdatasync]
rw=write
size=1g
cache=64m
fdatasync=1
append=1
";

const READS: &str = "\
[global]
stonewall
rw=randread
[randread-4m-1t]
size=4m
[randread-256m-1t]
size=256m
[randread-256m-2t]
size=256m
numjobs=2
";

const WRITES: &str = "\
[global]
stonewall
[randwrite-64m-1t]
rw=randwrite
size=64m
[randwrite-64m-2t]
rw=randwrite
size=64m
numjobs=2
[append-fsync]
rw=write
size=1g
cache=64m
fsync=1
append=1
";

const QUICK: &str = "\
[randrw-16m]
rw=randrw
size=16m
runtime=0.5
";

/// xfs, \"remove i_rwsem from buffered read\": readers of one file no
/// longer wait for its writer.
const SEED_XFS: &str = "\
; Buffered random reads of one file while one thread writes to it.
[global]
filename=seed-xfs
size=64m
bs=4k
[readers]
rw=randread
numjobs=2
[writer]
rw=randwrite
";

/// btrfs, batched readahead: a sequential buffered read from the device.
const SEED_READAHEAD: &str = "\
; Sequential buffered 4 KiB reads of a file that starts out of the cache.
[seqread-cold]
rw=read
bs=4k
size=256m
cold=1
";

/// btrfs, fast fsync: fsyncs of one part of a file while another thread
/// writes to another part.
const SEED_FSYNC: &str = "\
[global]
filename=seed-fsync
bs=4k
size=16m
rw=randwrite
[fsync]
fsync=1
[writer]
offset=16m
";

/// The fsync workloads of the peer table (`just vm-peers`): 4 KiB, an
/// overwrite inside EOF with fdatasync, an append with fdatasync, an
/// append with fsync; pollfs against itself with logged pages written
/// home on the sync path (no write-home thread), and with every synced
/// page written to its block first.
const SYNCS: &str = "\
; Small syncs: the data in the log write, against the data in place first.
[global]
stonewall
bs=4k
size=16m
[overwrite-fdatasync]
rw=randwrite
fdatasync=1
[append-fdatasync]
rw=write
append=1
fdatasync=1
[append-fsync]
rw=write
append=1
fsync=1
";

/// A preset with no seed and no extra engine.
const fn plain(name: &'static str, text: &'static str, compare: bool) -> Preset {
    Preset {
        name,
        text,
        compare,
        extra: &[],
        seed: None,
    }
}

/// Every preset.
pub const PRESETS: &[Preset] = &[
    plain("default", DEFAULT, true),
    plain("reads", READS, false),
    plain("writes", WRITES, false),
    plain("quick", QUICK, false),
    Preset {
        name: "syncs",
        text: SYNCS,
        compare: false,
        extra: &[Engine::PollfsSyncHome, Engine::PollfsInPlaceSync],
        seed: None,
    },
    Preset {
        name: "seed-xfs-reads",
        text: SEED_XFS,
        compare: true,
        extra: &[],
        seed: Some(Seed {
            change: "xfs: remove i_rwsem from buffered reads (fio randrw 4k, 16 jobs)",
            figure: "351 -> 1961 MiB/s",
            ratio: 1961.0 / 351.0,
            measure: Measure::ReadMiBs {
                job: "readers",
                against: Engine::PollfsLocked,
            },
        }),
    },
    Preset {
        name: "seed-btrfs-readahead",
        text: SEED_READAHEAD,
        compare: true,
        extra: &[Engine::PollfsNoReadahead],
        seed: Some(Seed {
            change: "btrfs: batched readahead (sequential buffered read)",
            figure: "+25% throughput",
            ratio: 1.25,
            measure: Measure::ReadMiBs {
                job: "seqread-cold",
                against: Engine::PollfsNoReadahead,
            },
        }),
    },
    Preset {
        name: "seed-btrfs-fsync",
        text: SEED_FSYNC,
        compare: true,
        extra: &[],
        seed: Some(Seed {
            change: "btrfs: fast fsync logs the in-memory inode (fsync with a concurrent writer)",
            figure: "-12% max latency",
            ratio: 0.88,
            measure: Measure::MaxSyncLatency {
                job: "fsync",
                against: Engine::PollfsLocked,
            },
        }),
    },
];

/// The preset that runs every seed preset, one after another.
pub const SEEDS: &str = "seeds";

/// Preset names, for help and errors.
pub fn names() -> Vec<&'static str> {
    let mut v: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
    v.push(SEEDS);
    v
}

/// The presets `name` stands for (`seeds` stands for every seed preset).
pub fn find(name: &str) -> Option<Vec<&'static Preset>> {
    if name == SEEDS {
        return Some(PRESETS.iter().filter(|p| p.seed.is_some()).collect());
    }
    PRESETS.iter().find(|p| p.name == name).map(|p| vec![p])
}

/// The jobs of `presets`, each preset after the one before it.
pub fn jobs(presets: &[&Preset]) -> anyhow::Result<Vec<Job>> {
    let mut all = Vec::new();
    for p in presets {
        let mut jobs = jobfile::parse(p.text, &Job::default())
            .map_err(|e| anyhow!("preset {}: {e}", p.name))?;
        if let Some(first) = jobs.first_mut() {
            first.stonewall = true;
        }
        all.extend(jobs);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::plan;

    #[test]
    fn presets_parse_validate_and_plan() {
        for name in names() {
            let jobs = jobs(&find(name).unwrap()).unwrap();
            for job in &jobs {
                job.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            plan::phases(&jobs).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert!(find("nope").is_none());
    }

    #[test]
    fn suites_run_one_job_at_a_time_and_seeds_run_together() {
        let suite = jobs(&find("default").unwrap()).unwrap();
        assert_eq!(plan::phases(&suite).unwrap().len(), suite.len());
        // The default suite reaches the device: direct reads at QD1 and
        // QD32 and a cold random read.
        assert!(suite.iter().any(|j| j.direct && j.iodepth == 1));
        assert!(suite.iter().any(|j| j.direct && j.iodepth == 32));
        assert!(suite.iter().any(|j| j.cold && !j.rw.sequential()));
        let seeds = jobs(&find(SEEDS).unwrap()).unwrap();
        let phases = plan::phases(&seeds).unwrap();
        assert_eq!(phases.len(), 3);
        // The readers and the writer share one file; the fsync job and its
        // writer share one file in different parts.
        assert_eq!(phases[0].files.len(), 1);
        assert_eq!(phases[2].files.len(), 1);
        assert_eq!(phases[2].files[0].len, 32 << 20);
    }

    #[test]
    fn each_seed_measures_a_job_its_preset_has() {
        for p in PRESETS.iter().filter(|p| p.seed.is_some()) {
            let jobs = jobs(&[p]).unwrap();
            let (Measure::ReadMiBs { job, .. } | Measure::MaxSyncLatency { job, .. }) =
                p.seed.unwrap().measure;
            assert!(jobs.iter().any(|j| j.name == job), "{}: {job}", p.name);
        }
    }
}
