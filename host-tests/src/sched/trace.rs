//! Failure reports: the scenario, the interleaving, and what went wrong.

use std::fmt;

use super::exec::Action;
use super::oracle::Record;
use super::scenario::Scenario;

/// A failed run, printable as a short trace.
#[derive(Clone, Debug)]
pub struct Failure {
    /// What the check found.
    pub message: String,
    /// The scenario, one line per task.
    pub scenario: String,
    /// The interleaving, one line per step or operation boundary.
    pub trace: String,
}

impl Failure {
    pub(crate) fn new(s: &Scenario, message: String, trace: String) -> Failure {
        let mut text = format!(
            "files {:?} bytes, cache {} pages, readahead {}, block {}, preempt {}%, {}, {}\n",
            s.initial,
            s.cache_pages,
            s.readahead_pages,
            s.block_size,
            s.preempt_percent,
            if s.dirty_start {
                "dirty start"
            } else {
                "synced start"
            },
            if s.journal {
                "formatted (journal)"
            } else {
                "in memory"
            }
        );
        for (id, t, op) in s.numbered() {
            text.push_str(&format!("  t{t} #{id}: {op}\n"));
        }
        Failure {
            message,
            scenario: text,
            trace,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}\nscenario:\n{}interleaving:\n{}",
            self.message, self.scenario, self.trace
        )
    }
}

/// Merges executor steps and operation boundaries by time; runs of polls of
/// one task with nothing else between them are shown once with a count.
pub(crate) fn render(steps: &[(u64, Action, String)], records: &[Record]) -> String {
    let mut lines: Vec<(u64, String)> = Vec::new();
    for r in records {
        lines.push((r.start, format!("start t{} #{} {}", r.task, r.id, r.op)));
        lines.push((
            r.end,
            format!("end   t{} #{} -> {:?}", r.task, r.id, r.result),
        ));
    }
    for (t, a, what) in steps {
        let s = match a {
            Action::Poll(n) => format!("poll t{n}"),
            Action::Preempt(p, n) => format!("poll t{n} (t{p} preempted in a frame copy)"),
            Action::Complete => format!("complete {what}"),
        };
        lines.push((*t, s));
    }
    lines.sort_by_key(|l| l.0);
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let mut j = i + 1;
        while j < lines.len() && lines[j].1 == lines[i].1 && lines[i].1.starts_with("poll") {
            j += 1;
        }
        let count = if j - i > 1 {
            format!(" x{}", j - i)
        } else {
            String::new()
        };
        out.push_str(&format!("{:>6} {}{}\n", lines[i].0, lines[i].1, count));
        i = j;
    }
    out
}
