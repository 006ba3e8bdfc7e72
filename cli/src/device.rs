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

/// Mirror events on stderr as they happen (not the routine header
/// writes).
fn report_event(e: &MirrorEvent) {
    if !matches!(e, MirrorEvent::HeadersWritten { .. }) {
        eprintln!("pollfs: mirror: {e}");
    }
}

fn report_overwrite(what: &str, found: Found) {
    eprintln!("pollfs: {what}: overwriting {found} (--force)");
}
