//! The log's lines about what the engine and the devices did on their
//! own: checkpoints (with their bytes and time), failed background steps,
//! and for each device and each leg of a mirror or stripe, by name,
//! failed commands, controller resets, queue recoveries, timeouts,
//! retries, protocol errors and NVMe/TCP reconnects. The engine and the
//! driver keep no log (they are `no_std`, and their data paths must not
//! write one); they count, and this thread reads the counters once a
//! second and says what changed, one line per kind per device per second
//! however busy the filesystem is.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use pollfs_core::dev::BlockDevice;
use pollfs_core::{Fs, Stats};
use pollfs_device::control::stats::{devices, DeviceStats, Names};
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
    /// Starts watching `fs`, on the device and legs called `names`.
    pub fn start<D: BlockDevice + Send + Sync + 'static>(
        fs: Fs<D>,
        names: Names,
    ) -> std::io::Result<Watcher>
    where
        Fs<D>: Send + 'static,
    {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("pollfs-watch".into())
            .spawn(move || {
                let mut before = fs.stats();
                let mut devices_before = devices(&fs, &before, &names);
                loop {
                    // A message or a hang-up both mean stop; either way
                    // the last interval is said first.
                    let last =
                        !matches!(stopped.recv_timeout(PERIOD), Err(RecvTimeoutError::Timeout));
                    let now = fs.stats();
                    let devices_now = devices(&fs, &now, &names);
                    for (level, line) in changes(&before, &now)
                        .into_iter()
                        .chain(device_changes(&devices_before, &devices_now))
                    {
                        say(level, &line);
                    }
                    before = now;
                    devices_before = devices_now;
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

/// Says `line` at `level` (to whatever subscriber is in place).
pub fn say(level: Level, line: &str) {
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

/// What each device and leg met between `before` and `now`, one line
/// per kind, naming the device: failed commands and timeouts are
/// warnings, as are resets, queue recoveries and reconnects (the driver
/// recovered; the commands in flight were sent again); a device that
/// broke the protocol is an error.
pub fn device_changes(before: &[DeviceStats], now: &[DeviceStats]) -> Vec<(Level, String)> {
    /// Counter, level, what happened (one, many).
    const KINDS: [(&str, Level, &str, &str); 7] = [
        ("errors", Level::WARN, "command failed", "commands failed"),
        (
            "resets",
            Level::WARN,
            "controller reset",
            "controller resets",
        ),
        (
            "queue_recoveries",
            Level::WARN,
            "queue recovered after a reset, its commands sent again",
            "queues recovered after a reset, their commands sent again",
        ),
        (
            "timeouts",
            Level::WARN,
            "command timed out",
            "commands timed out",
        ),
        (
            "retries",
            Level::WARN,
            "command sent again",
            "commands sent again",
        ),
        (
            "protocol_errors",
            Level::ERROR,
            "reply broke the NVMe protocol",
            "replies broke the NVMe protocol",
        ),
        (
            "reconnects",
            Level::WARN,
            "reconnect to the controller",
            "reconnects to the controller",
        ),
    ];
    let mut out = Vec::new();
    for dev in now {
        let earlier = before
            .iter()
            .find(|b| b.role == dev.role && b.leg == dev.leg);
        let grew = |name: &str| {
            dev.counter(name)
                .wrapping_sub(earlier.map_or(0, |e| e.counter(name)))
        };
        let who = match dev.leg {
            Some(i) => format!("{} {i} ({})", dev.role.label(), dev.name),
            None => format!("{} {}", dev.role.label(), dev.name),
        };
        for (name, level, one, many) in KINDS {
            let n = grew(name);
            if n > 0 {
                let what = if n == 1 { one } else { many };
                out.push((
                    level,
                    format!("{who}: {n} {what} ({} so far)", dev.counter(name)),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
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
        // Device errors are said per device (`device_changes`).
        assert_eq!(said.len(), 1, "{said:?}");
        assert_eq!(said[0].0, Level::INFO);
        assert!(said[0]
            .1
            .starts_with("2 checkpoints written (1 in the background)"));
        assert!(said[0].1.ends_with("in 2.5 ms"), "{}", said[0].1);
    }

    /// What `f` logs, as the mount's log would show it (no colours).
    pub(crate) fn logged(f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf(Arc::new(Mutex::new(Vec::new())));
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .with_target(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
        text
    }

    #[test]
    fn a_controller_reset_is_logged_as_a_warning_naming_the_device() {
        use pollfs_driver::EmulatedDevice;
        let dev = EmulatedDevice::emulated(16 << 20, 4096, 256).unwrap();
        let ctrl = dev.controller().clone();
        let config = pollfs_core::Config {
            cache_pages: 64,
            dirty_limit_pages: 32,
            ..pollfs_core::Config::default()
        };
        let fs = Fs::format(dev, config, 1).unwrap();
        let names = Names {
            device: "emu".into(),
            legs: None,
        };
        let f = fs.create("a").unwrap();
        let session = fs.session().unwrap();
        let before = devices(&fs, &fs.stats(), &names);
        assert!(device_changes(&before, &before).is_empty());
        ctrl.reset(ctrl.generation()).unwrap();
        // The session's queue, opened before the reset, finds the new
        // generation on its next command, and recovers.
        session.write_all_at(&f, &[5; 8192], 0).unwrap();
        session.sync_data(&f).unwrap();
        let now = devices(&fs, &fs.stats(), &names);
        let said = device_changes(&before, &now);
        let log = logged(|| {
            for (level, line) in &said {
                say(*level, line);
            }
        });
        assert!(
            log.contains("WARN device emu: 1 controller reset (1 so far)"),
            "{log}"
        );
        assert!(
            log.contains("queue recovered after a reset, its commands sent again"),
            "{log}"
        );
        assert!(!log.contains("ERROR"), "{log}");
    }

    #[test]
    fn a_legs_failed_commands_and_protocol_errors_name_the_leg() {
        let leg = |errors: u64, protocol_errors: u64| DeviceStats {
            name: "nvme-tcp://127.0.0.1:4420/n".into(),
            role: pollfs_device::control::stats::Role::MirrorLeg,
            leg: Some(1),
            counters: [
                ("errors".to_string(), errors),
                ("protocol_errors".to_string(), protocol_errors),
            ]
            .into_iter()
            .collect(),
        };
        let said = device_changes(&[leg(1, 0)], &[leg(4, 1)]);
        assert_eq!(
            said,
            [
                (
                    Level::WARN,
                    "mirror leg 1 (nvme-tcp://127.0.0.1:4420/n): 3 commands failed (4 so far)"
                        .to_string()
                ),
                (
                    Level::ERROR,
                    "mirror leg 1 (nvme-tcp://127.0.0.1:4420/n): 1 reply broke the NVMe protocol \
                     (1 so far)"
                        .to_string()
                ),
            ]
        );
    }
}
