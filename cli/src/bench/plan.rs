//! How jobs run, as fio runs them: the jobs of a job file run at the same
//! time, on one filesystem, until a job with `stonewall` waits for every
//! job before it. Each stretch of jobs that run together is a [`Phase`].
//! Reporting groups (fio's `groupid`) start at every `stonewall` and
//! `new_group`.
//!
//! Jobs in a phase whose files have the same name share them, as two fio
//! jobs with the same `filename` do: a file is as long as its longest user
//! needs, and its users must agree on whether it starts empty (`append`)
//! and out of the cache (`cold`).

use anyhow::anyhow;

use super::job::Job;

const PAGE: u64 = 4096;

/// The least size of an emulated controller the bench makes (`emu`): the
/// size of the VM bench's disk. A format gives the log 1/32 of the
/// device, so a device sized to a small job alone (34 MiB for the syncs
/// preset) had a 1 MiB log, half full every 70 small syncs: checkpoints
/// 30 times as often as on any real drive. The emulated namespace takes
/// memory only where it is written.
pub const EMU_DEVICE_MIN: u64 = 1 << 30;

/// One file of a phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    /// Its name (`PREFIX.K`).
    pub name: String,
    /// Bytes it is filled with before the run (0 if it starts empty).
    pub len: u64,
    /// Start out of the cache.
    pub cold: bool,
    /// Start empty.
    pub append: bool,
    /// A direct job uses it: it starts out of the cache, or direct reads
    /// would be served from the pages filling it left behind.
    pub direct: bool,
}

impl FileSpec {
    /// Calls `write(bytes, offset)` over the file's length in 1 MiB
    /// pieces of the fill pattern: how every engine fills its files.
    pub fn fill(
        &self,
        mut write: impl FnMut(&[u8], u64) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let chunk = vec![0x5au8; 1 << 20];
        let mut off = 0;
        while off < self.len {
            let n = chunk.len().min((self.len - off) as usize);
            write(&chunk[..n], off)?;
            off += n as u64;
        }
        Ok(())
    }
}

/// Jobs that run at the same time, and their files.
#[derive(Clone, Debug)]
pub struct Phase<'a> {
    pub jobs: Vec<&'a Job>,
    /// Every file any of the jobs uses, each once.
    pub files: Vec<FileSpec>,
    /// For each job, the index in `files` of each of its files.
    pub job_files: Vec<Vec<usize>>,
}

/// The reporting group of each job (fio's `groupid`).
pub fn groups(jobs: &[Job]) -> Vec<u32> {
    let mut group = 0;
    jobs.iter()
        .enumerate()
        .map(|(i, j)| {
            if i > 0 && (j.stonewall || j.new_group) {
                group += 1;
            }
            group
        })
        .collect()
}

/// Splits `jobs` into phases at each `stonewall`.
pub fn phases(jobs: &[Job]) -> anyhow::Result<Vec<Phase<'_>>> {
    let mut out: Vec<Vec<&Job>> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        match out.last_mut() {
            Some(phase) if !(i > 0 && job.stonewall) => phase.push(job),
            _ => out.push(vec![job]),
        }
    }
    out.into_iter().map(Phase::new).collect()
}

impl<'a> Phase<'a> {
    /// The phase of `jobs`, which run at the same time.
    pub fn new(jobs: Vec<&'a Job>) -> anyhow::Result<Phase<'a>> {
        let mut names = std::collections::HashSet::new();
        for j in &jobs {
            if !names.insert(j.name.as_str()) {
                return Err(anyhow!(
                    "two jobs named '{}' run at the same time; give each its own name",
                    j.name
                ));
            }
        }
        let mut files: Vec<FileSpec> = Vec::new();
        let mut owners: Vec<&str> = Vec::new();
        let mut job_files = Vec::new();
        for j in &jobs {
            let mut mine = Vec::new();
            for k in 0..j.nrfiles {
                let name = format!("{}.{k}", j.file_prefix());
                let spec = FileSpec {
                    name: name.clone(),
                    len: if j.append { 0 } else { j.file_len() },
                    cold: j.cold,
                    append: j.append,
                    direct: j.direct,
                };
                let at = match files.iter().position(|f| f.name == name) {
                    Some(at) => {
                        let f = &mut files[at];
                        if f.cold != spec.cold || f.append != spec.append {
                            return Err(anyhow!(
                                "jobs '{}' and '{}' share file {name} but not their cold and \
                                 append settings",
                                owners[at],
                                j.name
                            ));
                        }
                        f.len = f.len.max(spec.len);
                        f.direct |= spec.direct;
                        at
                    }
                    None => {
                        files.push(spec);
                        owners.push(&j.name);
                        files.len() - 1
                    }
                };
                mine.push(at);
            }
            job_files.push(mine);
        }
        Ok(Phase {
            jobs,
            files,
            job_files,
        })
    }

    /// Every job's threads.
    pub fn threads(&self) -> u32 {
        self.jobs.iter().map(|j| j.numjobs).sum()
    }

    /// Bytes of file data (the longest a file can grow: appends wrap at
    /// the job's region, so no file grows past `offset + size / nrfiles`).
    pub fn file_bytes(&self) -> u64 {
        let mut longest: Vec<u64> = self.files.iter().map(|f| f.len).collect();
        for (j, mine) in self.jobs.iter().zip(&self.job_files) {
            for &f in mine {
                longest[f] = longest[f].max(j.file_len());
            }
        }
        longest.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// Bytes of an emulated controller the bench makes for the phase:
    /// what it needs, and at least [`EMU_DEVICE_MIN`].
    pub fn emu_device_bytes(&self) -> u64 {
        self.device_bytes().max(EMU_DEVICE_MIN)
    }

    /// Device bytes the phase needs: the files, the log and checkpoint
    /// areas (about 1/16 of the device), and slack.
    pub fn device_bytes(&self) -> u64 {
        let files = self.file_bytes();
        files.saturating_add(files / 8).saturating_add(16 << 20)
    }

    /// Cache pages the phase gets: if no job sets `cache`, room for every
    /// file; otherwise each job's `cache`, or room for its own region if
    /// it sets none, added up.
    pub fn cache_pages_wanted(&self) -> u64 {
        let pages = |bytes: u64| bytes.div_ceil(PAGE);
        let sum = if self.jobs.iter().all(|j| j.cache.is_none()) {
            pages(self.file_bytes())
        } else {
            self.jobs
                .iter()
                .map(|j| match j.cache {
                    Some(bytes) => bytes / PAGE,
                    None => pages(j.file_size()).saturating_mul(u64::from(j.nrfiles)),
                })
                .fold(0u64, u64::saturating_add)
        };
        sum.saturating_add(64)
    }

    /// The longest job, from start to end.
    pub fn duration(&self) -> f64 {
        self.jobs.iter().map(|j| j.duration()).fold(0.0, f64::max)
    }

    /// Names of the jobs.
    pub fn names(&self) -> Vec<String> {
        self.jobs.iter().map(|j| j.name.clone()).collect()
    }

    /// A label for messages: the job's name, or the names joined.
    pub fn label(&self) -> String {
        self.names().join("+")
    }

    /// True if every job only reads cached, buffered files (the memcpy
    /// baseline then does the same work).
    pub fn cached_reads_only(&self) -> bool {
        self.jobs
            .iter()
            .all(|j| j.rw.reads_only() && !j.cold && !j.direct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::jobfile::parse;

    fn jobs(text: &str) -> Vec<Job> {
        parse(text, &Job::default()).unwrap()
    }

    #[test]
    fn sections_run_together_until_a_stonewall() {
        let js = jobs("[a]\n[b]\n[c]\nstonewall\n[d]\nnew_group\n[e]\nwait_for_previous\n");
        let ps = phases(&js).unwrap();
        let names: Vec<Vec<String>> = ps.iter().map(|p| p.names()).collect();
        assert_eq!(names, [vec!["a", "b"], vec!["c", "d"], vec!["e"]]);
        assert_eq!(groups(&js), [0, 0, 1, 2, 3]);
    }

    #[test]
    fn jobs_with_one_prefix_share_files_sized_for_the_longest() {
        let js = jobs(
            "[global]\nfilename=f\nsize=1m\n[r]\nrw=randread\nnrfiles=2\n\
             [w]\nrw=randwrite\noffset=1m\n[own]\nfilename=own\n",
        );
        let p = &phases(&js).unwrap()[0];
        let files: Vec<(&str, u64)> = p.files.iter().map(|f| (f.name.as_str(), f.len)).collect();
        assert_eq!(
            files,
            [("f.0", 2 << 20), ("f.1", 512 << 10), ("own.0", 1 << 20)]
        );
        assert_eq!(p.job_files, [vec![0, 1], vec![0], vec![2]]);
        assert_eq!(p.threads(), 3);
        assert_eq!(p.file_bytes(), (2 << 20) + (512 << 10) + (1 << 20));
    }

    #[test]
    fn shared_files_must_agree_and_names_must_differ() {
        let js = jobs("[global]\nfilename=f\n[a]\ncold=1\n[b]\n");
        assert!(phases(&js)
            .unwrap_err()
            .to_string()
            .contains("share file f.0"));
        let js = jobs("[a]\n[a]\n");
        assert!(phases(&js)
            .unwrap_err()
            .to_string()
            .contains("two jobs named 'a'"));
        // One after the other, the same name is fine.
        let js = jobs("[a]\n[a]\nstonewall\n");
        assert_eq!(phases(&js).unwrap().len(), 2);
    }

    #[test]
    fn the_cache_is_every_file_or_the_jobs_settings_added_up() {
        let js = jobs("[global]\nfilename=f\nsize=1m\n[a]\n[b]\n");
        assert_eq!(phases(&js).unwrap()[0].cache_pages_wanted(), 256 + 64);
        let js = jobs("[a]\nsize=1m\ncache=64k\n[b]\nsize=2m\n");
        assert_eq!(phases(&js).unwrap()[0].cache_pages_wanted(), 16 + 512 + 64);
    }
}
