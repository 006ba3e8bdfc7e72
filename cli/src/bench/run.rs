//! Running a phase's threads: every job's threads start together; each
//! thread issues I/O until its job's ramp and runtime are over or it has
//! done `number_ios`, and the threads' records are merged per job.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

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
) -> Result<Vec<Recorder>, String>
where
    F: Fn(usize, u32, Window) -> Result<Recorder, String> + Sync,
{
    let start = Instant::now();
    let windows: Vec<Window> = phase.jobs.iter().map(|j| Window::of(j, start)).collect();
    let total = Duration::from_secs_f64(phase.duration());
    progress.start(
        &format!("{} ({engine})", phase.label()),
        total.as_millis() as u64,
    );
    let results: Vec<(usize, Result<Recorder, String>)> = std::thread::scope(|scope| {
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
                    .unwrap_or_else(|_| Err("a bench thread panicked".to_string()));
                (j, r)
            })
            .collect()
    });
    let mut merged = windows
        .iter()
        .map(|w| Recorder::new(w.measure_from))
        .collect::<Result<Vec<_>, _>>()?;
    for (j, r) in results {
        merged[j].merge(&r?);
    }
    Ok(merged)
}
