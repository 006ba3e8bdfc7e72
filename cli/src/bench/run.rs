//! Running a phase's threads: every job's threads start together; each
//! thread issues I/O until its job's ramp and runtime are over or it has
//! done `number_ios`, and the threads' records are merged per job. The
//! jobs' `exec_prerun` commands run just before, their `exec_postrun` ones
//! just after, so whatever they mark (a trace, a counter) covers the I/O
//! and nothing of the setup around it.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::job::Job;
use super::plan::Phase;
use super::sample::Recorder;

/// Shows progress on a terminal; silent otherwise.
#[derive(Debug)]
pub struct Progress {
    pub bar: ProgressBar,
}

impl Progress {
    pub fn new() -> Progress {
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

/// When one thread of a job may issue I/O.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Counting starts here (the end of the ramp).
    pub measure_from: Instant,
    /// No I/O is issued from here on.
    pub deadline: Instant,
    /// Measured reads and writes to stop at (0: none).
    pub number_ios: u64,
}

impl Window {
    fn of(job: &Job, start: Instant) -> Window {
        let measure_from = start + Duration::from_secs_f64(job.ramp_time);
        Window {
            measure_from,
            deadline: measure_from + Duration::from_secs_f64(job.runtime),
            number_ios: job.number_ios,
        }
    }

    /// True if another I/O may be issued, with `in_flight` already issued
    /// and not yet recorded. Once measuring, every I/O in flight will be
    /// counted, so with `number_ios` the count ends exactly there.
    pub fn open(&self, rec: &Recorder, in_flight: u64) -> bool {
        let now = Instant::now();
        now < self.deadline
            && (self.number_ios == 0
                || now < self.measure_from
                || rec.ios() + in_flight < self.number_ios)
    }
}

/// Runs `body(job, thread, window)` for every thread of every job of
/// `phase` at once; returns each job's merged record.
pub fn run_threads<F>(
    phase: &Phase<'_>,
    engine: &str,
    progress: &Progress,
    body: F,
) -> anyhow::Result<Vec<Recorder>>
where
    F: Fn(usize, u32, Window) -> anyhow::Result<Recorder> + Sync,
{
    for job in &phase.jobs {
        exec(job, "exec_prerun", job.exec_prerun.as_deref())?;
    }
    let start = Instant::now();
    let windows: Vec<Window> = phase.jobs.iter().map(|j| Window::of(j, start)).collect();
    let total = Duration::from_secs_f64(phase.duration());
    progress.start(
        &format!("{} ({engine})", phase.label()),
        total.as_millis() as u64,
    );
    let results: Vec<(usize, anyhow::Result<Recorder>)> = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (j, job) in phase.jobs.iter().enumerate() {
            for t in 0..job.numjobs {
                let body = &body;
                let window = windows[j];
                handles.push((j, scope.spawn(move || body(j, t, window))));
            }
        }
        while handles.iter().any(|(_, h)| !h.is_finished()) {
            progress
                .bar
                .set_position(start.elapsed().as_millis() as u64);
            std::thread::park_timeout(Duration::from_millis(100));
        }
        handles
            .into_iter()
            .map(|(j, h)| {
                let r = h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("a bench thread panicked")));
                (j, r)
            })
            .collect()
    });
    // Every thread has ended, failed or not: the postrun commands run
    // either way, and a thread's error is the one reported.
    let post: anyhow::Result<()> = phase
        .jobs
        .iter()
        .try_for_each(|job| exec(job, "exec_postrun", job.exec_postrun.as_deref()));
    let mut merged = windows
        .iter()
        .map(|w| Recorder::new(w.measure_from))
        .collect::<Result<Vec<_>, _>>()?;
    for (j, r) in results {
        merged[j].merge(&r?);
    }
    post?;
    Ok(merged)
}

/// Runs a job's `exec_prerun` or `exec_postrun` (named `key`) with
/// `sh -c`, its output on stderr: stdout may carry the JSON report.
fn exec(job: &Job, key: &str, command: Option<&str>) -> anyhow::Result<()> {
    let Some(command) = command else {
        return Ok(());
    };
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| anyhow!("{}: {key} '{command}': {e}", job.name))?;
    if !status.success() {
        return Err(anyhow!("{}: {key} '{command}' failed ({status})", job.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::bench::job::test_job;
    use crate::bench::plan;

    /// A file of its own under the temporary directory, removed on drop.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let p =
                std::env::temp_dir().join(format!("pollfs-run-{tag}-{}.txt", std::process::id()));
            let _ = std::fs::remove_file(&p);
            Scratch(p)
        }
        fn read(&self) -> String {
            std::fs::read_to_string(&self.0).unwrap_or_default()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn prerun_and_postrun_bracket_every_thread_of_the_phase() {
        let log = Scratch::new("bracket");
        let path = log.0.display().to_string();
        let a = test_job(&[
            ("name", "a"),
            ("numjobs", "2"),
            ("exec_prerun", &format!("echo pre-a >> {path}")),
            ("exec_postrun", &format!("echo post-a >> {path}")),
        ]);
        let b = test_job(&[
            ("name", "b"),
            ("exec_postrun", &format!("echo post-b >> {path}")),
        ]);
        let jobs = [a, b];
        let phases = plan::phases(&jobs).unwrap();
        assert_eq!(phases.len(), 1);
        let ran = AtomicU32::new(0);
        let recs = run_threads(&phases[0], "test", &Progress::new(), |_, _, w| {
            // Every prerun has run before any thread, no postrun yet.
            assert_eq!(log.read(), "pre-a\n");
            ran.fetch_add(1, Ordering::Relaxed);
            Recorder::new(w.measure_from)
        })
        .unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(ran.load(Ordering::Relaxed), 3);
        assert_eq!(log.read(), "pre-a\npost-a\npost-b\n");
    }

    #[test]
    fn a_failing_prerun_runs_no_thread_and_a_failing_postrun_fails_the_phase() {
        let fail_pre = [test_job(&[("exec_prerun", "exit 3")])];
        let phases = plan::phases(&fail_pre).unwrap();
        let ran = AtomicU32::new(0);
        let e = run_threads(&phases[0], "test", &Progress::new(), |_, _, w| {
            ran.fetch_add(1, Ordering::Relaxed);
            Recorder::new(w.measure_from)
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("job: exec_prerun 'exit 3' failed"), "{e}");
        assert_eq!(ran.load(Ordering::Relaxed), 0);

        let fail_post = [test_job(&[("exec_postrun", "false")])];
        let phases = plan::phases(&fail_post).unwrap();
        let e = run_threads(&phases[0], "test", &Progress::new(), |_, _, w| {
            ran.fetch_add(1, Ordering::Relaxed);
            Recorder::new(w.measure_from)
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("job: exec_postrun 'false' failed"), "{e}");
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }
}
