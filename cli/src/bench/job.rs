//! Jobs: what to run, written like fio (a job-file subset, the same keys as
//! command-line options, and named presets).

use std::collections::BTreeMap;
use std::fmt;

/// The access pattern (fio's `rw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Random mix (`rwmixread` percent reads).
    RandRw,
}

impl Pattern {
    fn parse(s: &str) -> Result<Pattern, String> {
        Ok(match s {
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "randrw" | "rw" => Pattern::RandRw,
            other => {
                return Err(format!(
                    "rw={other}: use read, write, randread, randwrite or randrw"
                ))
            }
        })
    }
    /// True if the pattern reads only.
    pub fn reads_only(self) -> bool {
        matches!(self, Pattern::Read | Pattern::RandRead)
    }
    /// True if offsets are sequential.
    pub fn sequential(self) -> bool {
        matches!(self, Pattern::Read | Pattern::Write)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::RandRw => "randrw",
        };
        f.write_str(s)
    }
}

/// One job.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Job {
    /// The job's name (its section in a job file).
    pub name: String,
    /// Access pattern.
    pub rw: Pattern,
    /// Percent reads for `randrw`.
    pub rwmixread: u32,
    /// Bytes per I/O.
    pub bs: u64,
    /// Bytes per job, split over `nrfiles` files.
    pub size: u64,
    /// Threads, each running the job on its own files.
    pub numjobs: u32,
    /// I/Os in flight per thread (pollfs runs them as concurrent futures;
    /// the kernel baseline, like fio's psync engine, runs one at a time).
    pub iodepth: u32,
    /// Seconds to run.
    pub runtime: f64,
    /// `sync_all` after every N writes (0: never).
    pub fsync: u32,
    /// `sync_data` after every N writes (0: never).
    pub fdatasync: u32,
    /// File name prefix.
    pub filename: String,
    /// Files per thread.
    pub nrfiles: u32,
    /// Start with the file's pages out of the cache (a cold read).
    pub cold: bool,
    /// Page-cache size in bytes (`None`: big enough for every file).
    pub cache: Option<u64>,
    /// Files start empty, so sequential writes append (until they wrap).
    pub append: bool,
}

impl Default for Job {
    fn default() -> Job {
        Job {
            name: "job".into(),
            rw: Pattern::RandRw,
            rwmixread: 50,
            bs: 4096,
            size: 64 << 20,
            numjobs: 1,
            iodepth: 1,
            runtime: 2.0,
            fsync: 0,
            fdatasync: 0,
            filename: "bench".into(),
            nrfiles: 1,
            cold: false,
            cache: None,
            append: false,
        }
    }
}

/// Largest `bs`: one I/O of 16 MiB already takes milliseconds; more says
/// nothing the bench is for.
pub const MAX_BS: u64 = 16 << 20;
/// Largest `iodepth`: the most commands one NVMe queue can hold (64 Ki
/// entries); no device can have more of one thread's I/Os in flight.
pub const MAX_IODEPTH: u32 = 65_536;
/// Longest `runtime`.
pub const MAX_RUNTIME_SECS: f64 = 86_400.0;
/// Smallest page cache the engine accepts (`Fs::build` refuses fewer than
/// 4 pages).
pub const MIN_CACHE: u64 = 4 * PAGE;
const PAGE: u64 = 4096;

/// A fio boolean: `0` or `1`.
fn flag(key: &str, value: &str) -> Result<bool, String> {
    match value.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(format!("{key}={other}: use 0 or 1")),
    }
}

impl Job {
    /// Applies one `key=value` setting (job-file line or option). Values
    /// out of range are errors here or in [`Job::validate`], never clamped.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let num = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("{key}={v}: not a whole number"))
        };
        let size =
            |v: &str| crate::units::parse_size(v).map_err(|e| format!("{key}={}: {e}", e.input()));
        match key.trim() {
            "rw" | "readwrite" => self.rw = Pattern::parse(value.trim())?,
            "rwmixread" => {
                self.rwmixread = num(value)?;
                if self.rwmixread > 100 {
                    return Err(format!("rwmixread={value}: a percentage, 0 to 100"));
                }
            }
            "bs" | "blocksize" => self.bs = size(value)?,
            "size" => self.size = size(value)?,
            "numjobs" => self.numjobs = num(value)?,
            "iodepth" => self.iodepth = num(value)?,
            "runtime" => {
                let t = crate::units::parse_time(value)
                    .map_err(|e| format!("runtime={}: {e}", e.input()))?;
                self.runtime = t.as_secs_f64();
            }
            "fsync" => self.fsync = num(value)?,
            "fdatasync" => self.fdatasync = num(value)?,
            "filename" => self.filename = value.trim().to_string(),
            "nrfiles" => self.nrfiles = num(value)?,
            "direct" if value.trim() == "0" => {}
            "direct" => {
                return Err(format!(
                    "direct={}: only direct=0; pollfs I/O goes through its page cache",
                    value.trim()
                ))
            }
            "cold" => self.cold = flag("cold", value)?,
            "append" => self.append = flag("append", value)?,
            "cache" => self.cache = Some(size(value)?),
            "ioengine" | "time_based" | "group_reporting" | "thread" => {}
            other => return Err(format!("unknown job key '{other}'")),
        }
        Ok(())
    }

    /// Rejects settings that cannot run. Limits that depend on the device
    /// and the machine are checked by `bench::limits`.
    pub fn validate(&self) -> Result<(), String> {
        let name = &self.name;
        if self.bs == 0 || self.bs > MAX_BS {
            // Any length works: pollfs I/O is buffered, so a block that is
            // not a whole number of pages is read-modify-write in the cache.
            return Err(format!("{name}: bs must be 1 byte to 16 MiB"));
        }
        if self.nrfiles == 0 || self.numjobs == 0 || self.iodepth == 0 {
            return Err(format!(
                "{name}: nrfiles, numjobs and iodepth must be at least 1"
            ));
        }
        if self.iodepth > MAX_IODEPTH {
            return Err(format!(
                "{name}: iodepth={} is more than {MAX_IODEPTH}, the most one NVMe queue holds",
                self.iodepth
            ));
        }
        if self.size / u64::from(self.nrfiles) < self.bs {
            return Err(format!(
                "{name}: each file must hold at least one block (size / nrfiles >= bs)"
            ));
        }
        if self.file_size() > pollfs_core::MAX_FILE_SIZE {
            return Err(format!(
                "{name}: {} per file is more than pollfs's largest file ({})",
                crate::units::show_bytes(self.file_size()),
                crate::units::show_bytes(pollfs_core::MAX_FILE_SIZE)
            ));
        }
        if !(self.runtime > 0.0 && self.runtime <= MAX_RUNTIME_SECS) {
            return Err(format!(
                "{name}: runtime must be more than 0 and at most 1d (24h)"
            ));
        }
        if let Some(cache) = self.cache {
            if cache < MIN_CACHE || cache % PAGE != 0 {
                return Err(format!(
                    "{name}: cache={} must be a whole number of 4 KiB pages, at least 16 KiB \
                     (the engine needs 4 pages)",
                    crate::units::show_bytes(cache)
                ));
            }
        }
        // The name ends up in pollfs and in the kernel baseline's directory,
        // with `.N` after it.
        let longest = format!(
            "pollfs-bench-{}-{}.{}",
            u32::MAX,
            self.filename,
            self.nrfiles
        );
        if self.filename.is_empty()
            || self.filename.contains(['/', '\0'])
            || longest.len() > pollfs_core::MAX_NAME_LEN
        {
            return Err(format!(
                "{name}: filename='{}' must be a plain name (no '/'), short enough for \
                 {} bytes with its prefix and suffix",
                self.filename,
                pollfs_core::MAX_NAME_LEN
            ));
        }
        Ok(())
    }

    /// Bytes per file.
    pub fn file_size(&self) -> u64 {
        let per = self.size / u64::from(self.nrfiles.max(1));
        per - per % self.bs
    }
}

/// Parses a fio-style job file: `[global]` settings apply to every job
/// after them; each other `[section]` is a job. `;` and `#` start comments.
pub fn parse_job_file(text: &str, base: &Job) -> Result<Vec<Job>, String> {
    let mut global = base.clone();
    let mut jobs = Vec::new();
    let mut current: Option<Job> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split(['#', ';']).next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", n + 1);
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            if let Some(job) = current.take() {
                jobs.push(job);
            }
            if section != "global" {
                current = Some(Job {
                    name: section.to_string(),
                    ..global.clone()
                });
            }
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or((line, "1"));
        match current.as_mut() {
            Some(job) => job.set(key, value).map_err(at)?,
            None => global.set(key, value).map_err(at)?,
        }
    }
    jobs.extend(current);
    if jobs.is_empty() {
        return Err("the job file defines no job".into());
    }
    Ok(jobs)
}

/// Named presets, each a short job list.
pub fn preset(name: &str) -> Option<Vec<Job>> {
    let j = |name: &str, settings: &[(&str, &str)]| {
        let mut job = Job {
            name: name.into(),
            ..Job::default()
        };
        for (k, v) in settings {
            // Presets are fixed strings, checked by a test.
            let _ = job.set(k, v);
        }
        job
    };
    Some(match name {
        "default" => vec![
            j("randread-4m-1t", &[("rw", "randread"), ("size", "4m")]),
            j(
                "randread-4m-2t",
                &[("rw", "randread"), ("size", "4m"), ("numjobs", "2")],
            ),
            j("randread-256m-1t", &[("rw", "randread"), ("size", "256m")]),
            j(
                "randrw-256m-2t",
                &[("rw", "randrw"), ("size", "256m"), ("numjobs", "2")],
            ),
            j(
                "randwrite-64m-2t",
                &[("rw", "randwrite"), ("size", "64m"), ("numjobs", "2")],
            ),
            j(
                "seqread-cold-256m",
                &[
                    ("rw", "read"),
                    ("size", "256m"),
                    ("bs", "1m"),
                    ("cold", "1"),
                ],
            ),
            j(
                "overwrite-fdatasync",
                &[("rw", "randwrite"), ("size", "16m"), ("fdatasync", "1")],
            ),
            j(
                "append-fdatasync",
                &[
                    ("rw", "write"),
                    ("size", "1g"),
                    ("cache", "64m"),
                    ("fdatasync", "1"),
                    ("append", "1"),
                ],
            ),
        ],
        "reads" => vec![
            j("randread-4m-1t", &[("rw", "randread"), ("size", "4m")]),
            j("randread-256m-1t", &[("rw", "randread"), ("size", "256m")]),
            j(
                "randread-256m-2t",
                &[("rw", "randread"), ("size", "256m"), ("numjobs", "2")],
            ),
        ],
        "writes" => vec![
            j("randwrite-64m-1t", &[("rw", "randwrite"), ("size", "64m")]),
            j(
                "randwrite-64m-2t",
                &[("rw", "randwrite"), ("size", "64m"), ("numjobs", "2")],
            ),
            j(
                "append-fsync",
                &[
                    ("rw", "write"),
                    ("size", "1g"),
                    ("cache", "64m"),
                    ("fsync", "1"),
                    ("append", "1"),
                ],
            ),
        ],
        "quick" => vec![j(
            "randrw-16m",
            &[("rw", "randrw"), ("size", "16m"), ("runtime", "0.5")],
        )],
        _ => return None,
    })
}

/// Preset names, for help and errors.
pub const PRESETS: &[&str] = &["default", "reads", "writes", "quick"];

/// Parses `key=value` settings given as options.
pub fn apply_settings(job: &mut Job, settings: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in settings {
        job.set(k, v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> Result<Job, String> {
        let mut job = Job::default();
        job.set(key, value)?;
        job.validate()?;
        Ok(job)
    }

    #[test]
    fn out_of_range_settings_are_errors_not_clamps() {
        assert!(set("rwmixread", "200").unwrap_err().contains("0 to 100"));
        assert_eq!(set("rwmixread", "100").unwrap().rwmixread, 100);
        assert!(set("cold", "7").unwrap_err().contains("use 0 or 1"));
        assert!(set("append", "yes").is_err());
        assert!(set("cache", "1k").unwrap_err().contains("16 KiB"));
        assert!(set("cache", "10k").unwrap_err().contains("4 KiB pages"));
        assert_eq!(set("cache", "16k").unwrap().cache, Some(16 << 10));
        assert!(set("bs", "0").is_err());
        assert!(set("bs", "17m").is_err());
        assert_eq!(set("bs", "3").unwrap().bs, 3);
        assert!(set("iodepth", "65537").is_err());
        assert!(set("numjobs", "0").is_err());
        assert!(set("runtime", "0").is_err());
        assert!(set("runtime", "2d").is_err());
        assert_eq!(set("runtime", "1500ms").unwrap().runtime, 1.5);
        assert!(set("direct", "1").is_err());
        assert!(set("filename", "../x").is_err());
        assert!(set("size", "17t").unwrap_err().contains("largest file"));
    }

    #[test]
    fn job_file_sections_inherit_global() {
        let text = "[global]\nbs=8k\nruntime=1\n; comment\n[a]\nrw=randread\nsize=8m\n[b]\nrw=write\nfsync=4 # every 4\n";
        let jobs = parse_job_file(text, &Job::default()).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            (jobs[0].name.as_str(), jobs[0].rw, jobs[0].bs, jobs[0].size),
            ("a", Pattern::RandRead, 8192, 8 << 20)
        );
        assert_eq!(
            (jobs[1].rw, jobs[1].fsync, jobs[1].runtime),
            (Pattern::Write, 4, 1.0)
        );
        assert!(parse_job_file("[a]\nbogus=1\n", &Job::default())
            .unwrap_err()
            .contains("line 2"));
        assert!(parse_job_file("[a]\ndirect=1\n", &Job::default()).is_err());
    }

    #[test]
    fn presets_are_valid() {
        for name in PRESETS {
            for job in preset(name).unwrap() {
                job.validate().unwrap();
            }
        }
    }
}
