//! Where jobs come from: a fio job file, a preset, and the command line,
//! read the way fio reads them.
//!
//! A job file: `[global]` settings apply to every job after them; each
//! other `[section]` is a job named after it. `;` and `#` start comments.
//! A key without `=` is a flag (`stonewall`), and only flags may be
//! written that way. Every error names the line and the key.
//!
//! The command line: job options before the first `--name` apply to every
//! job (they override a job file's or preset's own settings, so a file can
//! be shortened with `--runtime 1s`); each `--name` starts a new job, set
//! by the options after it, added after the file's jobs.

use anyhow::anyhow;

use super::job::{lookup, Job};

/// One `key=value` from the command line, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The key, as fio spells it.
    pub key: String,
    /// Its value (`1` for a bare flag).
    pub value: String,
}

/// Parses a fio-style job file on top of `base`.
pub fn parse(text: &str, base: &Job) -> anyhow::Result<Vec<Job>> {
    let mut global = base.clone();
    let mut jobs = Vec::new();
    let mut current: Option<Job> = None;
    for (n, raw) in text.lines().enumerate() {
        let at = |e: anyhow::Error| anyhow!("line {}: {e}", n + 1);
        let line = raw.split(['#', ';']).next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some(section) = rest.strip_suffix(']').map(str::trim) else {
                return Err(at(anyhow!("'{line}': a section header ends with ']'")));
            };
            if section.is_empty() {
                return Err(at(anyhow!("'[]': a section needs a name")));
            }
            jobs.extend(current.take());
            if section != "global" {
                let mut job = global.clone();
                job.name = section.to_string();
                current = Some(job);
            }
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (line, ""),
        };
        let value = bare_flag(key, value).map_err(at)?;
        match current.as_mut() {
            Some(job) => job.set(key, value).map_err(at)?,
            None => global.set(key, value).map_err(at)?,
        }
    }
    jobs.extend(current);
    if jobs.is_empty() {
        return Err(anyhow!(
            "the job file defines no job (no [section] other than [global])"
        ));
    }
    Ok(jobs)
}

/// The value of `key` written without one: `1` for a flag, an error for
/// any other key.
fn bare_flag<'v>(key: &str, value: &'v str) -> anyhow::Result<&'v str> {
    if !value.is_empty() {
        return Ok(value);
    }
    match lookup(key) {
        Some(k) if k.flag => Ok("1"),
        Some(_) => Err(anyhow!("{key}: needs a value ({key}=...)")),
        None => Err(anyhow!(
            "unknown job key '{key}' (`pollfs bench --help` lists every key)"
        )),
    }
}

/// The command line's settings split at each `name`: the settings before
/// the first, and one list per named job (starting with its `name`).
fn split_at_names(settings: &[Setting]) -> (&[Setting], Vec<&[Setting]>) {
    let first = settings
        .iter()
        .position(|s| s.key == "name")
        .unwrap_or(settings.len());
    let (global, mut rest) = settings.split_at(first);
    let mut named = Vec::new();
    while !rest.is_empty() {
        let next = rest[1..]
            .iter()
            .position(|s| s.key == "name")
            .map_or(rest.len(), |p| p + 1);
        let (job, tail) = rest.split_at(next);
        named.push(job);
        rest = tail;
    }
    (global, named)
}

fn apply(job: &mut Job, settings: &[Setting]) -> anyhow::Result<()> {
    for s in settings {
        let value = bare_flag(&s.key, &s.value)?;
        job.set(&s.key, value)?;
    }
    Ok(())
}

/// The jobs to run: `listed` (from a job file or a preset, if given) with
/// the command line's settings applied, then the command line's own
/// `--name` jobs. With neither, one job from the settings, or `None` when
/// there are no settings at all (the caller runs the default suite).
/// Every job is validated.
pub fn assemble(
    listed: Option<Vec<Job>>,
    settings: &[Setting],
) -> anyhow::Result<Option<Vec<Job>>> {
    let (global, named) = split_at_names(settings);
    let mut jobs = match listed {
        Some(jobs) => jobs,
        None if named.is_empty() && global.is_empty() => return Ok(None),
        None if named.is_empty() => vec![Job::default()],
        None => Vec::new(),
    };
    for job in &mut jobs {
        apply(job, global)?;
    }
    for own in named {
        let mut job = Job::default();
        apply(&mut job, global)?;
        apply(&mut job, own)?;
        jobs.push(job);
    }
    for job in &jobs {
        job.validate()?;
    }
    Ok(Some(jobs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::job::Pattern;

    fn s(key: &str, value: &str) -> Setting {
        Setting {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn sections_inherit_global_and_a_later_global_applies_after_it() {
        let text = "[global]\nbs=8k\nruntime=1\n; comment\n[a]\nrw=randread\nsize=8m\n\
                    [b]\nrw=write\nfsync=4 # every 4\n[global]\nbs=16k\n[c]\n";
        let jobs = parse(text, &Job::default()).unwrap();
        assert_eq!(jobs.len(), 3);
        assert_eq!(
            (jobs[0].name.as_str(), jobs[0].rw, jobs[0].bs, jobs[0].size),
            ("a", Pattern::RandRead, 8192, 8 << 20)
        );
        assert_eq!(
            (jobs[1].rw, jobs[1].fsync, jobs[1].runtime),
            (Pattern::Write, 4, 1.0)
        );
        assert_eq!((jobs[2].bs, jobs[2].runtime), (16384, 1.0));
    }

    #[test]
    fn flags_may_be_bare_and_other_keys_may_not() {
        let jobs = parse("[a]\n[b]\nstonewall\nnew_group\n", &Job::default()).unwrap();
        assert!(jobs[1].stonewall && jobs[1].new_group && !jobs[0].stonewall);
        let e = parse("[a]\nbs\n", &Job::default()).unwrap_err().to_string();
        assert_eq!(e, "line 2: bs: needs a value (bs=...)");
        let e = parse("[a]\nsize=\n", &Job::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("line 2: size: needs a value"), "{e}");
    }

    #[test]
    fn every_error_names_its_line_and_key() {
        for (text, want) in [
            ("[a]\nbogus=1\n", "line 2: unknown job key 'bogus'"),
            ("[a]\n\nbogus\n", "line 3: unknown job key 'bogus'"),
            (
                "[a\nbs=4k\n",
                "line 1: '[a': a section header ends with ']'",
            ),
            ("[]\n", "line 1: '[]': a section needs a name"),
            ("bs=0x\n[a]\n", "line 1: bs=0x: not a size"),
            ("[a]\nrw=sideways\n", "line 2: rw=sideways: use read"),
            (
                "[a]\nioengine=libaio\n",
                "line 2: ioengine=libaio: the bench has one engine",
            ),
            ("[a]\ntime_based=0\n", "line 2: time_based=0: not supported"),
            ("[a]\ndirect=2\n", "line 2: direct=2: use 0 or 1"),
        ] {
            let e = parse(text, &Job::default()).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
        assert!(parse("[global]\nbs=8k\n", &Job::default())
            .unwrap_err()
            .to_string()
            .contains("no job"));
        assert!(parse("", &Job::default()).is_err());
    }

    #[test]
    fn command_line_names_start_jobs_and_options_before_them_apply_to_all() {
        let cli = [
            s("runtime", "1"),
            s("name", "a"),
            s("rw", "randread"),
            s("name", "b"),
            s("rw", "write"),
            s("stonewall", "1"),
        ];
        let jobs = assemble(None, &cli).unwrap().unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            (jobs[0].name.as_str(), jobs[0].rw),
            ("a", Pattern::RandRead)
        );
        assert_eq!((jobs[1].name.as_str(), jobs[1].rw), ("b", Pattern::Write));
        assert!(jobs.iter().all(|j| j.runtime == 1.0));
        assert!(!jobs[0].stonewall && jobs[1].stonewall);
    }

    #[test]
    fn command_line_settings_override_listed_jobs_and_named_ones_follow() {
        let listed = parse("[f]\nruntime=5\nbs=8k\n", &Job::default()).unwrap();
        let cli = [s("runtime", "0.5"), s("name", "extra"), s("bs", "16k")];
        let jobs = assemble(Some(listed), &cli).unwrap().unwrap();
        assert_eq!(
            jobs.iter()
                .map(|j| (j.name.as_str(), j.runtime, j.bs))
                .collect::<Vec<_>>(),
            [("f", 0.5, 8192), ("extra", 0.5, 16384)]
        );
    }

    #[test]
    fn no_settings_means_the_suite_and_settings_alone_one_job() {
        assert_eq!(assemble(None, &[]).unwrap(), None);
        let jobs = assemble(None, &[s("bs", "8k")]).unwrap().unwrap();
        assert_eq!(
            (jobs.len(), jobs[0].name.as_str(), jobs[0].bs),
            (1, "job", 8192)
        );
        let e = assemble(None, &[s("bs", "0")]).unwrap_err().to_string();
        assert!(e.contains("bs must be"), "{e}");
        let e = assemble(None, &[s("bs", "")]).unwrap_err().to_string();
        assert!(e.contains("bs: needs a value"), "{e}");
    }
}
