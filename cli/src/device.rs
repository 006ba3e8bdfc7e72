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

/// Mirror events in the log as they happen: a leg lost or a read that
/// had to go to another leg is a warning, the rest of the membership's
/// story is information, and the routine header writes are for debugging.
fn report_event(e: &MirrorEvent) {
    match e {
        MirrorEvent::HeadersWritten { .. } => tracing::debug!("mirror: {e}"),
        MirrorEvent::LegFailed { .. }
        | MirrorEvent::ReadRetried { .. }
        | MirrorEvent::ResyncStopped { .. } => tracing::warn!("mirror: {e}"),
        _ => tracing::info!("mirror: {e}"),
    }
}

fn report_overwrite(what: &str, found: Found) {
    eprintln!("pollfs: {what}: overwriting {found} (--force)");
}
