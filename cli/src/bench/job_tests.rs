//! Every key of [`KEYS`] sets what it says, and every way to get one wrong
//! is an error that names the key.

use super::*;

fn set(key: &str, value: &str) -> anyhow::Result<Job> {
    let mut job = Job::default();
    job.set(key, value)?;
    job.validate()?;
    Ok(job)
}

fn err(key: &str, value: &str) -> String {
    match set(key, value) {
        Ok(job) => panic!("{key}={value} was accepted: {job:?}"),
        Err(e) => e.to_string(),
    }
}

/// A key, a value for it, and what the job then holds.
type Check = (&'static str, &'static str, fn(&Job) -> bool);

#[test]
fn every_key_sets_its_field() {
    let checks: &[Check] = &[
        ("name", "x", |j| j.name == "x"),
        ("description", "a b", |j| j.description == "a b"),
        ("rw", "randread", |j| j.rw == Pattern::RandRead),
        ("readwrite", "rw", |j| j.rw == Pattern::ReadWrite),
        ("rwmixread", "70", |j| j.rwmixread == 70),
        ("rwmixwrite", "70", |j| j.rwmixread == 30),
        ("bs", "8k", |j| j.bs == 8192),
        ("blocksize", "1.5k", |j| j.bs == 1536),
        ("size", "8m", |j| j.size == 8 << 20),
        ("offset", "1m", |j| {
            j.offset == 1 << 20 && j.file_len() == 65 << 20
        }),
        ("numjobs", "3", |j| j.numjobs == 3),
        ("iodepth", "32", |j| j.iodepth == 32),
        ("runtime", "1m", |j| j.runtime == 60.0),
        ("ramp_time", "500ms", |j| j.ramp_time == 0.5),
        ("number_ios", "1k", |j| j.number_ios == 1024),
        ("fsync", "4", |j| j.fsync == 4),
        ("fdatasync", "2", |j| j.fdatasync == 2),
        ("filename", "data", |j| j.file_prefix() == "data"),
        ("nrfiles", "4", |j| j.nrfiles == 4),
        ("direct", "1", |j| j.direct),
        ("buffered", "0", |j| j.direct),
        ("buffered", "1", |j| !j.direct),
        ("ioengine", "pollfs", |j| {
            j == &Job {
                options: j.options.clone(),
                ..Job::default()
            }
        }),
        ("cold", "1", |j| j.cold),
        ("append", "1", |j| j.append),
        ("cache", "1m", |j| j.cache == Some(1 << 20)),
        ("stonewall", "1", |j| j.stonewall),
        ("wait_for_previous", "1", |j| j.stonewall),
        ("new_group", "1", |j| j.new_group),
        ("exec_prerun", "echo a b", |j| {
            j.exec_prerun.as_deref() == Some("echo a b")
        }),
        ("exec_postrun", "true", |j| {
            j.exec_postrun.as_deref() == Some("true")
        }),
        ("time_based", "1", |j| j.runtime == 2.0),
        ("thread", "1", |j| j.numjobs == 1),
    ];
    for (key, value, holds) in checks {
        let job = set(key, value).unwrap_or_else(|e| panic!("{key}={value}: {e}"));
        assert!(holds(&job), "{key}={value} gave {job:?}");
        // The JSON output's `job options` name the key as fio spells it.
        let spelled = lookup(key).unwrap().name;
        assert!(
            job.options
                .contains(&(spelled.to_string(), value.to_string())),
            "{key}: {:?}",
            job.options
        );
    }
    // Every key in the table is covered above.
    for k in KEYS {
        assert!(
            checks.iter().any(|(key, _, _)| *key == k.name),
            "no check for {}",
            k.name
        );
        for alias in k.aliases {
            assert!(checks.iter().any(|(key, _, _)| key == alias), "{alias}");
        }
    }
}

#[test]
fn out_of_range_settings_are_errors_not_clamps() {
    for (key, value, want) in [
        ("rwmixread", "200", "rwmixread=200: a percentage, 0 to 100"),
        ("rwmixwrite", "101", "rwmixwrite=101: a percentage"),
        ("rwmixread", "-1", "rwmixread=-1: not a whole number"),
        ("cold", "7", "cold=7: use 0 or 1"),
        ("append", "yes", "append=yes: use 0 or 1"),
        ("stonewall", "2", "stonewall=2: use 0 or 1"),
        ("new_group", "x", "new_group=x: use 0 or 1"),
        ("direct", "2", "direct=2: use 0 or 1"),
        ("buffered", "on", "buffered=on: use 0 or 1"),
        ("cache", "1k", "at least 16 KiB"),
        ("cache", "10k", "whole number of 4 KiB pages"),
        ("cache", "lots", "cache=lots: not a size"),
        ("bs", "0", "bs must be 1 byte to 16 MiB"),
        ("bs", "17m", "bs must be 1 byte to 16 MiB"),
        ("bs", "1.3k", "bs=1.3k: not a whole number of bytes"),
        ("size", "1", "at least one block"),
        ("size", "17t", "largest file"),
        ("offset", "17t", "largest file"),
        ("offset", "x", "offset=x: not a size"),
        ("iodepth", "65537", "iodepth=65537 is more than 65536"),
        ("iodepth", "0", "at least 1"),
        ("numjobs", "0", "at least 1"),
        ("numjobs", "1.5", "numjobs=1.5: not a whole number"),
        ("nrfiles", "0", "at least 1"),
        ("runtime", "0", "runtime must be more than 0"),
        ("runtime", "2d", "at most 1d"),
        ("runtime", "3y", "runtime=3y: not a time"),
        ("ramp_time", "1d", "at most 1d"),
        ("ramp_time", "soon", "ramp_time=soon: not a time"),
        ("number_ios", "many", "number_ios=many: not a size"),
        ("fsync", "-1", "fsync=-1: not a whole number"),
        ("fdatasync", "x", "fdatasync=x: not a whole number"),
        ("filename", "../x", "filename='../x' must be a plain name"),
        ("filename", "..", "must be a plain name"),
        ("name", "", "name=: a job needs a name"),
        ("name", "a/b", "the job name 'a/b'"),
        ("rw", "trim", "rw=trim: use read"),
        (
            "ioengine",
            "io_uring",
            "ioengine=io_uring: the bench has one engine",
        ),
        ("time_based", "0", "time_based=0: not supported"),
        ("thread", "0", "thread=0: not supported"),
        ("exec_prerun", "", "exec_prerun=: needs a command"),
        ("exec_postrun", "", "exec_postrun=: needs a command"),
        ("bogus", "1", "unknown job key 'bogus'"),
    ] {
        let e = err(key, value);
        assert!(e.contains(want), "{key}={value}: wanted '{want}' in: {e}");
    }
}

#[test]
fn settings_that_only_conflict_together_are_refused() {
    let mut j = Job::default();
    j.set("iodepth", "8").unwrap();
    j.set("number_ios", "4").unwrap();
    assert!(j
        .validate()
        .unwrap_err()
        .to_string()
        .contains("number_ios=4 is less than iodepth=8"));
    let mut j = Job::default();
    j.set("direct", "1").unwrap();
    j.set("bs", "6k").unwrap();
    assert!(j
        .validate()
        .unwrap_err()
        .to_string()
        .contains("multiple of 4 KiB (bs=6144)"));
    let mut j = Job::default();
    j.set("direct", "1").unwrap();
    j.set("offset", "512").unwrap();
    assert!(j.validate().unwrap_err().to_string().contains("offset=512"));
    let mut j = Job::default();
    j.set("direct", "1").unwrap();
    j.set("cold", "1").unwrap();
    assert!(j
        .validate()
        .unwrap_err()
        .to_string()
        .contains("cold=1 with direct=1"));
    let mut j = Job::default();
    j.set("runtime", "20h").unwrap();
    j.set("ramp_time", "5h").unwrap();
    assert!(j.validate().unwrap_err().to_string().contains("at most 1d"));
}

#[test]
fn a_later_setting_replaces_an_earlier_one_in_the_options() {
    let mut j = Job::default();
    j.set("bs", "4k").unwrap();
    j.set("blocksize", "8k").unwrap();
    assert_eq!(j.options, [("bs".to_string(), "8k".to_string())]);
}
