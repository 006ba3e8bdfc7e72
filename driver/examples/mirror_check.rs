//! Checks of a mirror over two NVMe/TCP legs, run by `vm/mirror-test.sh`
//! inside the test VM against two of the Linux kernel's nvmet-tcp
//! subsystems (or by hand against any two it may write). The mirror is
//! made and administered with `pollfs mkfs` and `pollfs mirror`; these
//! are the parts that need a filesystem held open in one process.
//!
//! - `mirror_check writer URL0 URL1`: mounts the filesystem on the mirror
//!   of the two legs, appends 64 KiB chunks to one file (up to 16 MiB),
//!   `sync_data` after each, and prints `SYNCED n` once chunk n is
//!   durable. Mirror events go to stderr as they happen, and the first
//!   time a leg is seen failed it prints `LEG i FAILED` (after the sync
//!   that saw it). Any error in a write or a sync ends it with status 1.
//!   Runs until killed.
//! - `mirror_check verify URL0 URL1 N`: opens the mirror, mounts the
//!   filesystem and checks that chunks 0..=N are all there, byte for
//!   byte, and the engine's invariants; unmounts and closes the mirror
//!   cleanly; prints `MIRROR-VERIFY-OK` and the legs' states.
//! - `mirror_check headers URL0 URL1`: each leg's newest header, which
//!   must agree on everything but the leg's own position; prints
//!   `MIRROR-HEADERS-OK`.

#[path = "check/synced.rs"]
mod synced;

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use pollfs_core::hosted::monotonic_clock;
use pollfs_core::volume::mirror::WINDOW_FRAMES;
use pollfs_core::volume::{LegState, Mirror, MirrorEvent, OpenOptions};
use pollfs_driver::tcp::net::TcpDevice;
use pollfs_driver::tcp::{TcpAddress, TcpFrames};
use pollfs_driver::{DriverConfig, NvmeDevice};

/// The writer stops growing its file here (16 MiB).
const MAX_CHUNKS: u64 = 256;
/// Frames for the filesystem; the mirror keeps one per leg and its resync
/// window on top.
const FRAMES: u32 = 1024;

fn idle() {
    std::thread::yield_now()
}

fn report(e: &MirrorEvent) {
    if !matches!(e, MirrorEvent::HeadersWritten { .. }) {
        eprintln!("mirror_check: mirror: {e}");
    }
}

/// The two legs, on one arena of plain frames.
fn legs(urls: [&str; 2]) -> Result<Vec<TcpDevice>, String> {
    let arena = Arc::new(TcpFrames::new(FRAMES + 2 + WINDOW_FRAMES));
    urls.iter()
        .map(|url| {
            let address = TcpAddress::parse(url).map_err(|e| format!("{url}: {e}"))?;
            let options = address.load_options().map_err(|e| format!("{url}: {e}"))?;
            NvmeDevice::tcp_on(&address, options, DriverConfig::default(), arena.clone())
                .map_err(|e| format!("{url}: {e}"))
        })
        .collect()
}

fn open(urls: [&str; 2]) -> Result<Mirror<TcpDevice>, String> {
    let options = OpenOptions {
        writable: true,
        prefer: None,
        on_event: Some(std::sync::Arc::new(report)),
    };
    Mirror::open(legs(urls)?, options, monotonic_clock, idle).map_err(|e| format!("open: {e}"))
}

fn writer(urls: [&str; 2]) -> Result<(), String> {
    let m = open(urls)?;
    let fs = pollfs_core::Fs::mount(m.clone(), pollfs_core::hosted::config())
        .map_err(|e| format!("mount: {e}"))?;
    let mut seen_failed = vec![false; m.status().legs.len()];
    synced::write(&fs, MAX_CHUNKS, |out| {
        for ((leg, (state, _)), seen) in m.status().legs.iter().enumerate().zip(&mut seen_failed) {
            if *state == LegState::Failed && !*seen {
                *seen = true;
                let _ = writeln!(out, "LEG {leg} FAILED");
            }
        }
    })?;
    synced::wait_for_kill()
}

fn verify(urls: [&str; 2], last: u64) -> Result<(), String> {
    let m = open(urls)?;
    let fs = pollfs_core::Fs::mount(m.clone(), pollfs_core::hosted::config())
        .map_err(|e| format!("mount: {e}"))?;
    let len = synced::verify(&fs, last)?;
    fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    m.close(monotonic_clock, idle)
        .map_err(|e| format!("close: {e}"))?;
    let states: Vec<String> = m
        .status()
        .legs
        .iter()
        .enumerate()
        .map(|(i, (s, _))| format!("leg {i} {s}"))
        .collect();
    println!(
        "MIRROR-VERIFY-OK {} synced chunks intact, file {len} bytes; {}",
        last + 1,
        states.join(", ")
    );
    Ok(())
}

fn headers(urls: [&str; 2]) -> Result<(), String> {
    let legs = legs(urls)?;
    let found =
        Mirror::inspect(&legs, monotonic_clock, idle).map_err(|e| format!("inspect: {e}"))?;
    let mut newest = Vec::new();
    for (i, h) in found.iter().enumerate() {
        let h = h.ok_or_else(|| format!("leg {i}: no intact header"))?;
        if usize::from(h.index) != i {
            return Err(format!("leg {i}: its header says position {}", h.index));
        }
        println!(
            "leg {i}: mirror {:016x}, generation {}, {} data blocks, {}, table {:?}",
            h.uuid,
            h.generation,
            h.data_blocks,
            if h.dirty { "dirty" } else { "clean" },
            &h.table[..usize::from(h.legs)]
        );
        newest.push(h);
    }
    let [a, b] = newest.as_slice() else {
        return Err("two legs expected".into());
    };
    let same = |mut h: pollfs_core::volume::header::Header| {
        h.index = 0;
        h
    };
    if same(*a) != same(*b) {
        return Err("the legs' headers differ in more than their positions".into());
    }
    println!("MIRROR-HEADERS-OK");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let urls = [arg(1), arg(2)];
    let result = match arg(0) {
        "writer" => writer(urls),
        "verify" => match arg(3).parse() {
            Ok(n) => verify(urls, n),
            Err(_) => Err("verify URL0 URL1 N: N is the last synced chunk".into()),
        },
        "headers" => headers(urls),
        _ => Err("usage: mirror_check writer|verify|headers URL0 URL1 [N]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mirror_check: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
