//! How the commands open devices: through `pollfs_device` (one spec, one
//! set of rules), with what it has to tell (a mirror's events, a forced
//! format overwriting something) reported on stderr.

use pollfs_core::volume::MirrorEvent;
use pollfs_device::signature::Found;
use pollfs_device::{Access, OpenOptions};

/// Options for `access` with `frames` frames, reporting on stderr.
pub fn options(access: Access, frames: u32) -> OpenOptions {
    OpenOptions {
        on_mirror_event: Some(report_event),
        on_overwrite: Some(report_overwrite),
        ..OpenOptions::new(access, frames)
    }
}

/// Mirror events in the log as they happen, with the device they are
/// about (`device`, as the spec names the leg): a leg lost, or writes
/// that fail from now on, is an error (the data has one copy fewer, or
/// none can be written); a read that had to go to another leg or a resync
/// that stopped is a warning; the rest of the membership's story is
/// information, and the routine header writes are for debugging.
pub fn report_event(e: &MirrorEvent, device: &str) {
    match e {
        MirrorEvent::HeadersWritten { .. } => tracing::debug!(device, "mirror: {e}"),
        MirrorEvent::LegFailed { .. } | MirrorEvent::Broken => {
            tracing::error!(device, "mirror: {e}")
        }
        MirrorEvent::ReadRetried { .. } | MirrorEvent::ResyncStopped { .. } => {
            tracing::warn!(device, "mirror: {e}")
        }
        _ => tracing::info!(device, "mirror: {e}"),
    }
}

fn report_overwrite(what: &str, found: Found) {
    eprintln!("pollfs: {what}: overwriting {found} (--force)");
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pollfs_core::dev::fault::{FaultPlan, FaultyDevice};
    use pollfs_core::dev::ram::{RamDevice, RamFrames};
    use pollfs_core::dev::{CommandKind, DevError};
    use pollfs_core::volume::{Mirror, OpenOptions};
    use pollfs_core::Fs;
    use pollfs_device::open::event_hook;
    use pollfs_device::DeviceSpec;

    use super::report_event;
    use crate::mount::watch::tests::logged;

    #[test]
    fn a_leg_that_fails_is_logged_as_an_error_naming_its_device() {
        let spec: DeviceSpec = "mirror:(file:/srv/a.img,file:/srv/b.img)".parse().unwrap();
        let arena = Arc::new(RamFrames::new(256));
        let plans = [FaultPlan::new(), FaultPlan::new()];
        let legs: Vec<_> = plans
            .iter()
            .map(|p| {
                let ram = RamDevice::with_arena(16 << 20, 4096, arena.clone()).unwrap();
                FaultyDevice::new(ram, p.clone())
            })
            .collect();
        let log = logged(|| {
            let options = OpenOptions {
                on_event: Some(event_hook(report_event, &spec)),
                ..OpenOptions::default()
            };
            let clock = pollfs_core::hosted::monotonic_clock;
            let m = Mirror::create(legs, 9, options, clock, std::thread::yield_now).unwrap();
            let config = pollfs_core::Config {
                cache_pages: 64,
                dirty_limit_pages: 32,
                ..pollfs_core::Config::default()
            };
            let fs = Fs::format(m, config, 1).unwrap();
            let f = fs.create("a").unwrap();
            plans[1].fail(CommandKind::Write, 1, DevError::Media);
            f.write_all_at(&[3; 8192], 0).unwrap();
            f.sync_data().unwrap();
        });
        let line = log
            .lines()
            .find(|l| l.contains("leg 1 failed"))
            .unwrap_or_else(|| panic!("no line about leg 1 in {log}"));
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains("device=\"file:/srv/b.img\""), "{line}");
        assert!(!log.contains("file:/srv/a.img"), "{log}");
    }
}
