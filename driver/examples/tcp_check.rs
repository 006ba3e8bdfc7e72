//! Checks of the NVMe/TCP initiator against a real target, run by
//! `vm/tcp-test.sh` inside the test VM against the Linux kernel's
//! nvmet-tcp (or by hand against any NVMe/TCP subsystem it may write).
//!
//! - `tcp_check data URL`: data written and read back at 1 to 256 pages
//!   and odd LBAs (in the capsule, by R2T, beyond MDTS), flush,
//!   deallocate, write zeroes; prints `TCP-DATA-OK`.
//! - `tcp_check reconnect URL SECONDS`: writes and reads back patterned
//!   ranges for SECONDS while the target is taken away and brought back
//!   (the script removes the port's subsystem link and adds it again);
//!   every command must succeed, after at least one reconnect; prints
//!   `TCP-RECONNECT-OK`.
//! - `tcp_check writer URL`: on a pollfs filesystem (made by `pollfs
//!   mkfs`), appends 64 KiB chunks to one file (up to 32 MiB), `sync_data`
//!   after each, and prints `SYNCED n` once chunk n is durable; runs until
//!   killed.
//! - `tcp_check verify URL N`: mounts the filesystem and checks that
//!   chunks 0..=N are all there, byte for byte; prints `TCP-CRASH-OK`.

#[path = "check/pages.rs"]
mod pages;
#[path = "check/synced.rs"]
mod synced;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use pollfs_core::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::units::{FrameId, Lba, PAGE_SIZE};
use pollfs_driver::tcp::net::TcpDevice;
use pollfs_driver::{DriverConfig, NvmeDevice};

use pages::Pages;

/// The writer stops growing its file here (32 MiB).
const MAX_CHUNKS: u64 = 512;

/// Submits `c` and polls until it completes.
fn run<Q: DeviceQueue>(q: &mut Q, c: Command<'_>) -> Result<(), DevError> {
    pollfs_core::persist::run_polled(q, &c, monotonic_clock, std::thread::yield_now)
}

/// Writes `p`'s pages, reads them back into other frames and compares.
fn check<Q: DeviceQueue>(dev: &TcpDevice, q: &mut Q, p: Pages) -> Result<(), String> {
    pages::write_read(dev.frames(), q, p, run).map(drop)
}

fn device(url: &str, config: DriverConfig, frames: u32) -> Result<TcpDevice, String> {
    NvmeDevice::tcp(url, config, frames).map_err(|e| format!("{url}: {e}"))
}

fn data(url: &str) -> Result<(), String> {
    let config = DriverConfig {
        max_transfer: Some(1 << 20),
        ..DriverConfig::default()
    };
    let dev = device(url, config, 512)?;
    let info = *dev.controller().info();
    println!(
        "model {:?}, MDTS {} KiB, IOCCSZ {}, {} I/O queues, {} blocks of {}",
        String::from_utf8_lossy(&info.identify.model).trim_end(),
        info.mdts_bytes >> 10,
        info.identify.ioccsz,
        info.io_queues,
        info.namespace.nsze,
        info.namespace.block_size
    );
    let mut q = dev.open_nvme_queue().map_err(|e| e.to_string())?;
    let bpp = dev.geometry().blocks_per_page();
    let cap = dev.geometry().capacity;
    let mut seed = 1;
    for n in [1u32, 2, 3, 4, 5, 8, 16, 17, 32, 33, 64, 128, 255, 256] {
        for lba in [0, 1, 7 * bpp + 1, cap - u64::from(n) * bpp] {
            let lba = lba.min(cap - u64::from(n) * bpp);
            check(&dev, &mut q, Pages::new(lba, n, seed))?;
            seed += 1;
        }
    }
    run(&mut q, Command::Flush).map_err(|e| format!("flush: {e}"))?;
    let ident = dev.controller().info().identify;
    if ident.supports_dsm() {
        let d = Command::Deallocate {
            lba: Lba(0),
            blocks: 64,
        };
        run(&mut q, d).map_err(|e| format!("deallocate: {e}"))?;
    }
    if ident.supports_write_zeroes() {
        let z = Command::WriteZeroes {
            lba: Lba(64),
            blocks: 64,
        };
        run(&mut q, z).map_err(|e| format!("write zeroes: {e}"))?;
        let r = Command::Read {
            lba: Lba(64),
            frames: &[FrameId(0)],
        };
        run(&mut q, r).map_err(|e| format!("read zeroes: {e}"))?;
        let mut page = vec![1u8; PAGE_SIZE];
        dev.frames()
            .read(FrameId(0), 0, &mut page)
            .map_err(|e| e.to_string())?;
        if page.iter().any(|&b| b != 0) {
            return Err("write zeroes left data".into());
        }
    }
    println!("TCP-DATA-OK {} commands", q.stats().commands);
    Ok(())
}

fn reconnect(url: &str, seconds: u64) -> Result<(), String> {
    let start = Instant::now();
    let config = DriverConfig {
        max_transfer: Some(256 << 10),
        command_timeout: 2_000_000_000,
        abort_timeout: 1_000_000_000,
        admin_timeout: 2_000_000_000,
        ..DriverConfig::default()
    };
    let dev = device(url, config, 256)?;
    let mut q = dev.open_nvme_queue().map_err(|e| e.to_string())?;
    let bpp = dev.geometry().blocks_per_page();
    let slots = dev.geometry().capacity_pages() / 64;
    let mut seed = 1u64;
    let mut rounds = 0;
    let until = Duration::from_secs(seconds);
    while start.elapsed() < until {
        let slot = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % slots;
        let n = [1u32, 3, 16, 64][seed as usize % 4];
        check(&dev, &mut q, Pages::new(slot * 64 * bpp, n, seed))?;
        seed += 1;
        rounds += 1;
    }
    let resets = dev.controller().resets();
    println!(
        "{rounds} write/read rounds, {resets} resets, {} resyncs, {} retries, {} protocol errors",
        q.stats().resyncs,
        q.stats().retries,
        q.stats().protocol_errors
    );
    if resets == 0 {
        return Err("the target never went away".into());
    }
    println!("TCP-RECONNECT-OK");
    Ok(())
}

fn writer(url: &str) -> Result<(), String> {
    let dev = device(url, DriverConfig::default(), 1024)?;
    let fs = pollfs_core::Fs::mount(dev, pollfs_core::hosted::config())
        .map_err(|e| format!("mount: {e}"))?;
    synced::write(&fs, MAX_CHUNKS, |_| {})?;
    synced::wait_for_kill()
}

fn verify(url: &str, last: u64) -> Result<(), String> {
    let dev = device(url, DriverConfig::default(), 1024)?;
    let fs = pollfs_core::Fs::mount(dev, pollfs_core::hosted::config())
        .map_err(|e| format!("mount after the kill: {e}"))?;
    let len = synced::verify(&fs, last)?;
    println!(
        "TCP-CRASH-OK {} synced chunks intact, file {len} bytes",
        last + 1
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let result = match arg(0) {
        "data" => data(arg(1)),
        "reconnect" => reconnect(arg(1), arg(2).parse().unwrap_or(10)),
        "writer" => writer(arg(1)),
        "verify" => match arg(2).parse() {
            Ok(n) => verify(arg(1), n),
            Err(_) => Err("verify URL N: N is the last synced chunk".into()),
        },
        _ => Err("usage: tcp_check data|reconnect|writer|verify URL [SECONDS|N]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcp_check: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
