//! Writes and reads back a file on any device a spec names, through the
//! one open ([`pollfs_device::open_fs`]): run by `vm/vfio-volume-test.sh`
//! inside the test VM on `stripe:(vfio:A,vfio:B)` and
//! `mirror:(vfio:A,vfio:B)` (or by hand on any device it may write). The
//! filesystem is made with `pollfs mkfs` and checked with `pollfs fsck`.
//!
//! - `volume_check write SPEC N`: mounts the filesystem, appends 64 KiB
//!   chunks to one file, `sync_data` after each, and prints `SYNCED n`
//!   once chunk n is durable; stops after N chunks and unmounts (closing
//!   a mirror clean), or with N = 0 writes up to 256 chunks and waits to
//!   be killed. A mirror's events go to stderr as they happen, and a leg
//!   that fails prints `LEG i FAILED` to stdout. Any error in a write or
//!   a sync ends it with status 1.
//! - `volume_check verify SPEC N`: mounts the filesystem, checks that
//!   chunks 0..=N are all there, byte for byte, and the engine's
//!   invariants; unmounts; prints `VOLUME-VERIFY-OK`.

#[path = "../../driver/examples/check/synced.rs"]
mod synced;

use std::io::Write as _;
use std::process::ExitCode;

use pollfs_core::volume::MirrorEvent;
use pollfs_device::{open_fs_with, Access, DeviceSpec, OpenError, OpenOptions};

/// A writer told to run until killed stops growing its file here (16 MiB).
const MAX_CHUNKS: u64 = 256;
/// Frames for the filesystem (a mirror adds its own).
const FRAMES: u32 = 1024;

fn report(e: &MirrorEvent, device: &str) {
    if !matches!(e, MirrorEvent::HeadersWritten { .. }) {
        eprintln!("volume_check: mirror: {e} ({device})");
    }
    if let MirrorEvent::LegFailed { leg, .. } = e {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "LEG {leg} FAILED");
        let _ = out.flush();
    }
}

fn mount(spec: &str) -> Result<pollfs_core::Fs<pollfs_device::AnyDevice>, String> {
    let spec: DeviceSpec = spec.parse().map_err(|e| format!("{e}"))?;
    let options = OpenOptions {
        on_mirror_event: Some(report),
        ..OpenOptions::new(Access::Write, FRAMES)
    };
    open_fs_with(&spec, &options, pollfs_core::hosted::config(), |_| {
        Ok::<(), OpenError>(())
    })
    .map_err(|e| format!("mount: {e}"))
}

fn write(spec: &str, chunks: u64) -> Result<(), String> {
    let fs = mount(spec)?;
    synced::write(&fs, if chunks == 0 { MAX_CHUNKS } else { chunks }, |_| {})?;
    if chunks == 0 {
        synced::wait_for_kill();
    }
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    println!("VOLUME-WRITE-OK {chunks} chunks synced");
    Ok(())
}

fn verify(spec: &str, last: u64) -> Result<(), String> {
    let fs = mount(spec)?;
    let len = synced::verify(&fs, last)?;
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    println!(
        "VOLUME-VERIFY-OK {} synced chunks intact, file {len} bytes",
        last + 1
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let n = arg(2).parse::<u64>();
    let result = match (arg(0), n) {
        ("write", Ok(n)) => write(arg(1), n),
        ("verify", Ok(n)) => verify(arg(1), n),
        _ => Err("usage: volume_check write|verify SPEC N".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("volume_check: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
