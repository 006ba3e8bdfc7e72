//! The log's lines about what the engine did on its own: checkpoints
//! (with their bytes and time), device errors and failed background
//! steps. The engine keeps no log (it is `no_std`, and its data path
//! must not write one); it counts, and this thread reads the counters
//! once a second and says what changed, one line per kind per second
//! however busy the filesystem is.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use pollfs_core::dev::BlockDevice;
use pollfs_core::{Fs, Stats};
use tracing::Level;

/// How often the counters are read.
const PERIOD: Duration = Duration::from_secs(1);

/// The watching thread; it takes a last look and stops when dropped.
#[derive(Debug)]
pub struct Watcher {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `fs`.
    pub fn start<D: BlockDevice + Send + Sync + 'static>(fs: Fs<D>) -> std::io::Result<Watcher>
    where
        Fs<D>: Send + 'static,
    {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("pollfs-watch".into())
            .spawn(move || {
                let mut before = fs.stats();
                loop {
                    // A message or a hang-up both mean stop; either way
                    // the last interval is said first.
                    let last =
                        !matches!(stopped.recv_timeout(PERIOD), Err(RecvTimeoutError::Timeout));
                    let now = fs.stats();
                    for (level, line) in changes(&before, &now) {
                        say(level, &line);
                    }
                    before = now;
                    if last {
                        return;
                    }
                }
            })?;
        Ok(Watcher {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            // A panic there was reported by the panic hook already.
            let _ = t.join();
        }
    }
}

fn say(level: Level, line: &str) {
    match level {
        Level::ERROR => tracing::error!("{line}"),
        Level::WARN => tracing::warn!("{line}"),
        Level::INFO => tracing::info!("{line}"),
        Level::DEBUG => tracing::debug!("{line}"),
        Level::TRACE => tracing::trace!("{line}"),
    }
}

/// What is worth a log line between the counters `before` and `now`.
fn changes(before: &Stats, now: &Stats) -> Vec<(Level, String)> {
    let d = now.since(before);
    let mut out = Vec::new();
    if d.checkpoints > 0 {
        out.push((
            Level::INFO,
            format!(
                "{} checkpoint{} written ({} in the background): {} in {:.1} ms",
                d.checkpoints,
                if d.checkpoints == 1 { "" } else { "s" },
                d.background_checkpoints,
                crate::units::show_bytes(d.checkpoint_bytes),
                d.checkpoint_nanos as f64 / 1e6
            ),
        ));
    }
    if d.dev_errors > 0 {
        out.push((
            Level::WARN,
            format!(
                "{} device command{} failed ({} so far)",
                d.dev_errors,
                if d.dev_errors == 1 { "" } else { "s" },
                now.dev_errors
            ),
        ));
    }
    if d.background_errors > 0 {
        out.push((
            Level::WARN,
            format!(
                "{} background step{} (write-home or checkpoint) failed and will be tried again",
                d.background_errors,
                if d.background_errors == 1 { "" } else { "s" }
            ),
        ));
    }
    if d.home_on_sync > 0 {
        out.push((
            Level::DEBUG,
            format!(
                "{} sync{} wrote pages home themselves: the background write-home fell behind",
                d.home_on_sync,
                if d.home_on_sync == 1 { "" } else { "s" }
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_changed_is_said_at_its_level() {
        let before = Stats {
            checkpoints: 3,
            dev_errors: 1,
            ..Stats::default()
        };
        assert!(changes(&before, &before).is_empty(), "nothing moved");
        let now = Stats {
            checkpoints: 5,
            background_checkpoints: 1,
            checkpoint_bytes: 3 << 20,
            checkpoint_nanos: 2_500_000,
            dev_errors: 2,
            writes: 100,
            ..before
        };
        let said = changes(&before, &now);
        assert_eq!(said.len(), 2, "{said:?}");
        assert_eq!(said[0].0, Level::INFO);
        assert!(said[0]
            .1
            .starts_with("2 checkpoints written (1 in the background)"));
        assert!(said[0].1.ends_with("in 2.5 ms"), "{}", said[0].1);
        assert_eq!(said[1].0, Level::WARN);
        assert_eq!(said[1].1, "1 device command failed (2 so far)");
    }
}
