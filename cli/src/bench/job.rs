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
    /// Page-cache size in MiB (0: big enough for every file).
    pub cache_mib: u64,
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
            cache_mib: 0,
            append: false,
        }
    }
}

/// Parses a size like `4k`, `64m`, `1g`, `2MiB` or `512` (bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("bad size '{s}'"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("size '{s}' overflows"))
}

impl Job {
    /// Applies one `key=value` setting (job-file line or option).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let num = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("{key}={v}: not a number"))
        };
        match key.trim() {
            "rw" | "readwrite" => self.rw = Pattern::parse(value.trim())?,
            "rwmixread" => self.rwmixread = num(value)?.min(100),
            "bs" | "blocksize" => self.bs = parse_size(value)?,
            "size" => self.size = parse_size(value)?,
            "numjobs" => self.numjobs = num(value)?,
            "iodepth" => self.iodepth = num(value)?,
            "runtime" => {
                self.runtime = value
                    .trim()
                    .trim_end_matches('s')
                    .parse()
                    .map_err(|_| format!("runtime={value}: not seconds"))?
            }
            "fsync" => self.fsync = num(value)?,
            "fdatasync" => self.fdatasync = num(value)?,
            "filename" => self.filename = value.trim().to_string(),
            "nrfiles" => self.nrfiles = num(value)?,
            "direct" if value.trim() == "0" => {}
            "direct" => {
                return Err(
                    "direct=1 is not supported: pollfs I/O goes through its page cache".into(),
                )
            }
            "cold" => self.cold = value.trim() == "1",
            "append" => self.append = value.trim() == "1",
            "cache" => self.cache_mib = parse_size(value)? >> 20,
            "ioengine" | "time_based" | "group_reporting" | "thread" => {}
            other => return Err(format!("unknown job key '{other}'")),
        }
        Ok(())
    }

    /// Rejects settings that cannot run.
    pub fn validate(&self) -> Result<(), String> {
        if self.bs == 0 || self.bs > 16 << 20 {
            return Err(format!("{}: bs must be 1..=16 MiB", self.name));
        }
        if self.nrfiles == 0 || self.numjobs == 0 || self.iodepth == 0 {
            return Err(format!(
                "{}: nrfiles, numjobs and iodepth must be at least 1",
                self.name
            ));
        }
        if self.size / u64::from(self.nrfiles) < self.bs {
            return Err(format!(
                "{}: each file must hold at least one block (size / nrfiles >= bs)",
                self.name
            ));
        }
        if !(self.runtime > 0.0 && self.runtime < 86_400.0) {
            return Err(format!("{}: runtime must be positive", self.name));
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

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999g").is_err());
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
