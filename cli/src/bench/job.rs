//! Jobs: what to run, written like fio. One table, [`KEYS`], names every
//! key a job file or the command line can set; the parser, `--help` and
//! the tests all read it, so a key cannot be accepted without being listed
//! or listed without being accepted.

use std::fmt;

use anyhow::anyhow;

/// The access pattern (fio's `rw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Sequential reads and writes mixed (`rwmixread` percent reads).
    ReadWrite,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Random reads and writes mixed (`rwmixread` percent reads).
    RandRw,
}

impl Pattern {
    fn parse(s: &str) -> anyhow::Result<Pattern> {
        Ok(match s {
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            "rw" | "readwrite" => Pattern::ReadWrite,
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "randrw" => Pattern::RandRw,
            other => {
                return Err(anyhow!(
                    "rw={other}: use read, write, rw (readwrite), randread, randwrite or randrw"
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
        matches!(self, Pattern::Read | Pattern::Write | Pattern::ReadWrite)
    }
    /// True if reads and writes are mixed by `rwmixread`.
    pub fn mixed(self) -> bool {
        matches!(self, Pattern::ReadWrite | Pattern::RandRw)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::ReadWrite => "rw",
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
    /// The job's name (its section in a job file, or `--name`).
    pub name: String,
    /// Free text (fio's `description`), shown in the JSON output.
    pub description: String,
    /// Access pattern.
    pub rw: Pattern,
    /// Percent reads for `rw` and `randrw`.
    pub rwmixread: u32,
    /// Bytes per I/O.
    pub bs: u64,
    /// Bytes per job, split over `nrfiles` files.
    pub size: u64,
    /// Where in each file the job's I/O starts; the files are made long
    /// enough for `offset` plus the job's share of `size`.
    pub offset: u64,
    /// Threads, each running the job on its files.
    pub numjobs: u32,
    /// I/Os in flight per thread (pollfs runs them as concurrent futures;
    /// the kernel baseline through an io_uring, as fio's io_uring engine).
    pub iodepth: u32,
    /// Seconds to measure.
    pub runtime: f64,
    /// Seconds to run before measuring (fio's `ramp_time`).
    pub ramp_time: f64,
    /// Stop each thread after this many measured reads and writes (0:
    /// no limit, only `runtime`).
    pub number_ios: u64,
    /// `sync_all` after every N writes (0: never).
    pub fsync: u32,
    /// `sync_data` after every N writes (0: never).
    pub fdatasync: u32,
    /// File name prefix (default: the job's name); jobs that run at the
    /// same time with the same prefix share their files.
    pub filename: Option<String>,
    /// Files per job.
    pub nrfiles: u32,
    /// Bypass the page cache: every read and write goes to the device.
    pub direct: bool,
    /// Start with the file's pages out of the cache (a cold read).
    pub cold: bool,
    /// Page-cache size in bytes (`None`: big enough for every file).
    pub cache: Option<u64>,
    /// Files start empty, so sequential writes append (until they wrap).
    pub append: bool,
    /// Wait for every job before this one to finish, and start a new
    /// reporting group.
    pub stonewall: bool,
    /// Start a new reporting group (without waiting).
    pub new_group: bool,
    /// Shell command run just before the job's I/O starts, after its
    /// files are made and filled (fio's `exec_prerun`).
    pub exec_prerun: Option<String>,
    /// Shell command run just after the job's I/O ends, before the engine
    /// does anything else (fio's `exec_postrun`).
    pub exec_postrun: Option<String>,
    /// Settings as written (`key`, `value`), for the JSON output's
    /// `job options`.
    pub options: Vec<(String, String)>,
}

impl Default for Job {
    fn default() -> Job {
        Job {
            name: "job".into(),
            description: String::new(),
            rw: Pattern::RandRw,
            rwmixread: 50,
            bs: 4096,
            size: 64 << 20,
            offset: 0,
            numjobs: 1,
            iodepth: 1,
            runtime: 2.0,
            ramp_time: 0.0,
            number_ios: 0,
            fsync: 0,
            fdatasync: 0,
            filename: None,
            nrfiles: 1,
            direct: false,
            cold: false,
            cache: None,
            append: false,
            stonewall: false,
            new_group: false,
            exec_prerun: None,
            exec_postrun: None,
            options: Vec::new(),
        }
    }
}

/// One key a job can set.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// The key as fio spells it (and the long option, with `--`).
    pub name: &'static str,
    /// Other spellings fio accepts.
    pub aliases: &'static [&'static str],
    /// True if the key may be given without a value (meaning `1`).
    pub flag: bool,
    /// What it does, for `--help`.
    pub help: &'static str,
}

const fn key(name: &'static str, help: &'static str) -> Key {
    Key {
        name,
        aliases: &[],
        flag: false,
        help,
    }
}

const fn flag(name: &'static str, help: &'static str) -> Key {
    Key {
        name,
        aliases: &[],
        flag: true,
        help,
    }
}

/// Every key, in the order `--help` lists them.
pub const KEYS: &[Key] = &[
    key("name", "Start a new job with this name; options after it set that job (a job file's section name)"),
    key("description", "Free text describing the job (shown in the JSON output)"),
    Key {
        aliases: &["readwrite"],
        ..key("rw", "Access pattern: read, write, rw (alias readwrite: sequential mix), randread, randwrite, randrw")
    },
    key("rwmixread", "Percent reads for rw and randrw, 0 to 100"),
    key("rwmixwrite", "Percent writes for rw and randrw, 0 to 100 (100 - rwmixread)"),
    Key {
        aliases: &["blocksize"],
        ..key("bs", "Bytes per I/O, 1 byte to 16 MiB (a multiple of 4 KiB with direct=1)")
    },
    key("size", "Bytes per job, split over nrfiles files; with the device and the cache it must fit in memory (and, for file:, on disk), checked before anything is allocated"),
    key("offset", "Where in each file the job's I/O starts (files are made long enough)"),
    key("numjobs", "Threads running the job, 1 to the device's I/O queues (64 on emu; 1024 on ram and file:), counted over every job that runs at the same time"),
    key("iodepth", "I/Os in flight per thread, 1 to 65536"),
    key("runtime", "How long to measure: seconds, or with a unit (500ms, 2m); at most 1d with ramp_time"),
    key("ramp_time", "Run this long before measuring (seconds, or with a unit)"),
    key("number_ios", "Stop each thread after this many measured reads and writes (at least iodepth; 0: no limit)"),
    key("fsync", "sync_all after every N writes (0: never)"),
    key("fdatasync", "sync_data after every N writes (0: never)"),
    key("filename", "File name prefix (files are PREFIX.0, PREFIX.1, ...; default: the job's name); jobs running at the same time with the same prefix share the files"),
    key("nrfiles", "Files per job"),
    key("direct", "1: bypass the page cache; reads and writes go to the device through the driver (bs and offset multiples of 4 KiB)"),
    key("buffered", "The opposite of direct (buffered=0 is direct=1)"),
    key("ioengine", "Only pollfs (the engine's own futures at iodepth); any other engine is refused"),
    flag("cold", "Start with the files out of the cache (1) or cached (0)"),
    flag("append", "Files start empty, so sequential writes append"),
    key("cache", "Page-cache size, whole 4 KiB pages, at least 16 KiB, e.g. 256m (default: room for every file); jobs that run at the same time share one cache of their sizes added up"),
    Key {
        aliases: &["wait_for_previous"],
        ..flag("stonewall", "Wait for the jobs before this one to finish, and start a new reporting group")
    },
    flag("new_group", "Start a new reporting group; the job still runs with the jobs before it"),
    key("exec_prerun", "Shell command (sh -c) run by each engine just before the job's I/O starts, after its files are made and filled; its output goes to stderr, and its failure fails the bench (in a job file, ';' and '#' start a comment)"),
    key("exec_postrun", "Shell command run by each engine just after the job's I/O ends (every thread done), before the engine touches the device again; as exec_prerun"),
    flag("time_based", "Accepted as 1 only: every job runs for runtime (or number_ios)"),
    flag("thread", "Accepted as 1 only: every job runs on threads"),
];

/// The key `name` is spelled as, if any.
pub fn lookup(name: &str) -> Option<&'static Key> {
    KEYS.iter()
        .find(|k| k.name == name || k.aliases.contains(&name))
}

/// Largest `bs`: one I/O of 16 MiB already takes milliseconds; more says
/// nothing the bench is for.
pub const MAX_BS: u64 = 16 << 20;
/// Largest `iodepth`: the most commands one NVMe queue can hold (64 Ki
/// entries); no device can have more of one thread's I/Os in flight.
pub const MAX_IODEPTH: u32 = 65_536;
/// Longest `ramp_time` plus `runtime`.
pub const MAX_RUNTIME_SECS: f64 = 86_400.0;
/// Smallest page cache the engine accepts (`Fs::build` refuses fewer than
/// 4 pages).
pub const MIN_CACHE: u64 = 4 * PAGE;
/// Alignment of offsets, lengths and buffers of direct I/O.
pub const DIRECT_ALIGN: u64 = 4096;
const PAGE: u64 = 4096;

/// A fio boolean: `0` or `1`.
fn bool_value(key: &str, value: &str) -> anyhow::Result<bool> {
    match value.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(anyhow!("{key}={other}: use 0 or 1")),
    }
}

impl Job {
    /// Applies one `key=value` setting (job-file line or option). Values
    /// out of range are errors here or in [`Job::validate`], never clamped;
    /// every error names the key and the value.
    pub fn set(&mut self, key: &str, value: &str) -> anyhow::Result<()> {
        let key = key.trim();
        let value = value.trim();
        let Some(known) = lookup(key) else {
            return Err(anyhow!(
                "unknown job key '{key}' (`pollfs bench --help` lists every key)"
            ));
        };
        let num = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| anyhow!("{key}={v}: not a whole number"))
        };
        let size =
            |v: &str| crate::units::parse_size(v).map_err(|e| anyhow!("{key}={}: {e}", e.input()));
        let time = |v: &str| {
            crate::units::parse_time(v)
                .map(|t| t.as_secs_f64())
                .map_err(|e| anyhow!("{key}={}: {e}", e.input()))
        };
        let percent = |v: &str| {
            let n = num(v)?;
            if n > 100 {
                return Err(anyhow!("{key}={v}: a percentage, 0 to 100"));
            }
            Ok(n)
        };
        match known.name {
            "name" => {
                if value.is_empty() {
                    return Err(anyhow!("name=: a job needs a name"));
                }
                self.name = value.to_string();
            }
            "description" => self.description = value.to_string(),
            "rw" => self.rw = Pattern::parse(value)?,
            "rwmixread" => self.rwmixread = percent(value)?,
            "rwmixwrite" => self.rwmixread = 100 - percent(value)?,
            "bs" => self.bs = size(value)?,
            "size" => self.size = size(value)?,
            "offset" => self.offset = size(value)?,
            "numjobs" => self.numjobs = num(value)?,
            "iodepth" => self.iodepth = num(value)?,
            "runtime" => self.runtime = time(value)?,
            "ramp_time" => self.ramp_time = time(value)?,
            "number_ios" => self.number_ios = size(value)?,
            "fsync" => self.fsync = num(value)?,
            "fdatasync" => self.fdatasync = num(value)?,
            "filename" => self.filename = Some(value.to_string()),
            "nrfiles" => self.nrfiles = num(value)?,
            "direct" => self.direct = bool_value(key, value)?,
            "buffered" => self.direct = !bool_value(key, value)?,
            "ioengine" if value == "pollfs" => {}
            "ioengine" => {
                return Err(anyhow!(
                    "ioengine={value}: the bench has one engine, pollfs (its own futures at \
                     iodepth, with --compare also the kernel's pread/pwrite); write \
                     ioengine=pollfs or leave the key out"
                ))
            }
            "cold" => self.cold = bool_value(key, value)?,
            "append" => self.append = bool_value(key, value)?,
            "cache" => self.cache = Some(size(value)?),
            "stonewall" => self.stonewall = bool_value(key, value)?,
            "new_group" => self.new_group = bool_value(key, value)?,
            "exec_prerun" | "exec_postrun" => {
                if value.is_empty() {
                    return Err(anyhow!("{key}=: needs a command"));
                }
                let command = Some(value.to_string());
                if known.name == "exec_prerun" {
                    self.exec_prerun = command;
                } else {
                    self.exec_postrun = command;
                }
            }
            "time_based" | "thread" => {
                if !bool_value(key, value)? {
                    let what = if known.name == "thread" {
                        "every job runs on threads"
                    } else {
                        "every job runs for runtime (or until number_ios)"
                    };
                    return Err(anyhow!("{key}=0: not supported; {what}"));
                }
            }
            other => return Err(anyhow!("job key '{other}' has no setter")),
        }
        self.options.retain(|(k, _)| k != known.name);
        self.options
            .push((known.name.to_string(), value.to_string()));
        Ok(())
    }

    /// Rejects settings that cannot run. Limits that depend on the device
    /// and the machine are checked by `bench::limits`.
    pub fn validate(&self) -> anyhow::Result<()> {
        let name = &self.name;
        if self.bs == 0 || self.bs > MAX_BS {
            // Any length works buffered: a block that is not a whole number
            // of pages is read-modify-write in the cache.
            return Err(anyhow!("{name}: bs must be 1 byte to 16 MiB"));
        }
        if self.nrfiles == 0 || self.numjobs == 0 || self.iodepth == 0 {
            return Err(anyhow!(
                "{name}: nrfiles, numjobs and iodepth must be at least 1"
            ));
        }
        if self.iodepth > MAX_IODEPTH {
            return Err(anyhow!(
                "{name}: iodepth={} is more than {MAX_IODEPTH}, the most one NVMe queue holds",
                self.iodepth
            ));
        }
        if self.size / u64::from(self.nrfiles) < self.bs {
            return Err(anyhow!(
                "{name}: each file must hold at least one block (size / nrfiles >= bs)"
            ));
        }
        if self.file_len() > pollfs_core::MAX_FILE_SIZE {
            return Err(anyhow!(
                "{name}: {} per file (offset + size / nrfiles) is more than pollfs's largest \
                 file ({})",
                crate::units::show_bytes(self.file_len()),
                crate::units::show_bytes(pollfs_core::MAX_FILE_SIZE)
            ));
        }
        if !(self.runtime > 0.0 && self.runtime + self.ramp_time <= MAX_RUNTIME_SECS) {
            return Err(anyhow!(
                "{name}: runtime must be more than 0 and, with ramp_time, at most 1d (24h)"
            ));
        }
        if self.number_ios > 0 && self.number_ios < u64::from(self.iodepth) {
            // With fewer, the I/Os in flight when the ramp ends could
            // already be more than number_ios.
            return Err(anyhow!(
                "{name}: number_ios={} is less than iodepth={}",
                self.number_ios,
                self.iodepth
            ));
        }
        if self.direct {
            self.validate_direct()?;
        }
        if self.direct && self.cold {
            return Err(anyhow!(
                "{name}: cold=1 with direct=1: direct I/O never reads the cache, so there is \
                 nothing to make cold"
            ));
        }
        if let Some(cache) = self.cache {
            if cache < MIN_CACHE || cache % PAGE != 0 {
                return Err(anyhow!(
                    "{name}: cache={} must be a whole number of 4 KiB pages, at least 16 KiB \
                     (the engine needs 4 pages)",
                    crate::units::show_bytes(cache)
                ));
            }
        }
        // The prefix ends up in pollfs and in the kernel baseline's
        // directory, with `.N` after it.
        let prefix = self.file_prefix();
        let longest = format!("pollfs-bench-{}-{}.{}", u32::MAX, prefix, self.nrfiles);
        if prefix.is_empty()
            || prefix.contains(['/', '\0'])
            || prefix == "."
            || prefix == ".."
            || longest.len() > pollfs_core::MAX_NAME_LEN
        {
            let what = if self.filename.is_some() {
                format!("filename='{prefix}'")
            } else {
                format!("the job name '{prefix}' (the file name when filename is not given)")
            };
            return Err(anyhow!(
                "{name}: {what} must be a plain name (no '/'), short enough for {} bytes \
                 with its prefix and suffix",
                pollfs_core::MAX_NAME_LEN
            ));
        }
        Ok(())
    }

    fn validate_direct(&self) -> anyhow::Result<()> {
        let name = &self.name;
        for (key, v) in [("bs", self.bs), ("offset", self.offset)] {
            if v % DIRECT_ALIGN != 0 {
                return Err(anyhow!(
                    "{name}: direct=1 needs {key} to be a multiple of 4 KiB ({key}={v})"
                ));
            }
        }
        Ok(())
    }

    /// Bytes of each file the job reads and writes: its share of `size`,
    /// in whole blocks.
    pub fn file_size(&self) -> u64 {
        let per = self.size / u64::from(self.nrfiles.max(1));
        per - per % self.bs
    }

    /// Length each of the job's files must have.
    pub fn file_len(&self) -> u64 {
        self.offset.saturating_add(self.file_size())
    }

    /// The files' name prefix: `filename`, or the job's name.
    pub fn file_prefix(&self) -> &str {
        self.filename.as_deref().unwrap_or(&self.name)
    }

    /// Seconds from the start to the end of the job's run.
    pub fn duration(&self) -> f64 {
        self.ramp_time + self.runtime
    }
}

/// A validated job from `(key, value)` settings, for tests.
#[cfg(test)]
pub fn test_job(settings: &[(&str, &str)]) -> Job {
    let mut j = Job::default();
    for (k, v) in settings {
        if let Err(e) = j.set(k, v) {
            panic!("{k}={v}: {e}");
        }
    }
    if let Err(e) = j.validate() {
        panic!("{e}");
    }
    j
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
