//! The synced-chunk check the VM tests run on a filesystem: a writer
//! appends 64 KiB chunks to one file, `sync_data` after each, and prints
//! `SYNCED n` once chunk n is durable; after a kill (or a clean end)
//! another process checks that every chunk up to the last one printed is
//! there, byte for byte. `tcp_check` (over NVMe/TCP), `mirror_check` (a
//! mirror of two NVMe/TCP legs) and `volume_check` (any device spec) each
//! open their device their own way, run these, and print their own
//! verdict line.
//!
//! One file, included by `#[path]` from the driver's and the device
//! crate's examples: they are test procedures, not API, so they stay out
//! of the libraries users link, and the crate graph gains no crate or
//! feature for them (the device crate depends on the driver, so the
//! driver's examples could not use a module of the device crate).

use std::io::{Stdout, Write as _};

use pollfs_core::dev::BlockDevice;
use pollfs_core::Fs;

/// The bytes one write appends and one sync makes durable.
const CHUNK: usize = 64 << 10;

/// The file the writer grows.
const FILE: &str = "synced";

/// Byte `i` of chunk `n`: a hash of the two, so a chunk found at another
/// chunk's place, or a stale page, never passes.
fn byte(n: u64, i: usize) -> u8 {
    let x = pollfs_core::rng::mix((n + 1_000_003) << 32 ^ (i as u64 / 8));
    (x >> ((i % 8) * 8)) as u8
}

/// Writes chunks `0..chunks` at the start of the file (made if missing),
/// each followed by `sync_data`, and prints `SYNCED n` to stdout once
/// chunk n is durable; then `after_sync` may print more (a mirror's legs
/// that failed), before stdout is flushed. Stops at the first error.
pub fn write<D: BlockDevice>(
    fs: &Fs<D>,
    chunks: u64,
    mut after_sync: impl FnMut(&mut Stdout),
) -> Result<(), String> {
    let file = fs
        .open_or_create(FILE)
        .map_err(|e| format!("create: {e}"))?;
    let mut out = std::io::stdout();
    for n in 0..chunks {
        let chunk: Vec<u8> = (0..CHUNK).map(|i| byte(n, i)).collect();
        file.write_all_at(&chunk, n * CHUNK as u64)
            .map_err(|e| format!("write chunk {n}: {e}"))?;
        file.sync_data()
            .map_err(|e| format!("sync chunk {n}: {e}"))?;
        let _ = writeln!(out, "SYNCED {n}");
        after_sync(&mut out);
        let _ = out.flush();
    }
    Ok(())
}

/// What a writer that filled its file does next: waits to be killed.
pub fn wait_for_kill() -> ! {
    loop {
        std::thread::park();
    }
}

/// Checks that chunks `0..=last` are all in the file, byte for byte, and
/// the engine's invariants; the file's length.
pub fn verify<D: BlockDevice>(fs: &Fs<D>, last: u64) -> Result<u64, String> {
    let file = fs.open(FILE).map_err(|e| format!("open: {e}"))?;
    let len = file.len();
    let synced = (last + 1) * CHUNK as u64;
    if len < synced {
        return Err(format!(
            "the file holds {len} bytes; chunks 0..={last} ({synced} bytes) were synced"
        ));
    }
    let mut buf = vec![0u8; CHUNK];
    for n in 0..=last {
        file.read_exact_at(&mut buf, n * CHUNK as u64)
            .map_err(|e| format!("read chunk {n}: {e}"))?;
        if let Some(i) = (0..CHUNK).find(|&i| buf[i] != byte(n, i)) {
            return Err(format!("chunk {n} differs at byte {i}"));
        }
    }
    fs.check_invariants()
        .map_err(|e| format!("invariants: {e:?}"))?;
    Ok(len)
}
