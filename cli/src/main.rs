//! `pollfs`: the command-line front door.
//!
//! `bench` and `tools` (mkfs, fsck) are the commands that write devices;
//! `mount` serves a filesystem to the kernel over FUSE; `stat` reads a
//! mount's figures from its control socket; `nvme` holds the controller
//! tools and `mirror` the mirror's. `log` sets up the log on stderr;
//! `progress` draws fsck's spinner on a terminal. Every command names and
//! opens its device through `pollfs_device` (one spec, one set of rules:
//! the lock on a device file, what a device holds before a format, the
//! legs of a volume), by way of `device`, which reports on stderr. `host`
//! says what the machine can give; `units` (from `pollfs_device`) parses
//! every size and time; `generate` (a parser of its own, hidden) writes
//! the manual pages and shell completions from these definitions. `sys`
//! holds the system calls the standard library lacks; it, `bench::uring` (buffers handed to an io_uring) and
//! `mount::ring::entry` (FUSE ring entries shared with the kernel) are the
//! only unsafe code here. Errors are `anyhow` errors with the device or
//! option they concern; the device crate's typed errors travel inside
//! them, for tests to match.
#![deny(unsafe_code)]

mod bench;
mod device;
mod generate;
mod host;
mod log;
mod mirror;
mod mount;
mod nvme;
mod progress;
mod stat;
mod sys;
mod tools;

use pollfs_device::units;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "pollfs",
    version,
    about = "A user-space file engine for NVMe, polled, with no kernel on the data path"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// fio-style jobs on pollfs; with --compare (the default suite) also on
    /// pollfs with a file-wide lock, the kernel's page cache and memcpy.
    Bench(Box<bench::Args>),
    /// Write an empty pollfs filesystem on a device.
    Mkfs(tools::MkfsArgs),
    /// Serve a pollfs filesystem to the kernel over FUSE: returns once it
    /// is mounted. `pollfs umount MOUNTPOINT` unmounts it and returns once
    /// the server has synced and written its checkpoint; a plain umount(2)
    /// (or SIGTERM/SIGINT to the server) unmounts too, but returns before
    /// that.
    Mount(Box<mount::Args>),
    /// Unmount a `pollfs mount` and wait until everything is durable (the
    /// server has synced and written its checkpoint, and exited).
    Umount(mount::umount::Args),
    /// The figures of a mounted pollfs filesystem: operations and bytes,
    /// latency percentiles of reads, writes and fsyncs, cache hits and
    /// misses, dirty pages, log fill, checkpoints, write-home, and for the
    /// device and each mirror or stripe leg its commands, errors, resets,
    /// timeouts and reconnects; a snapshot, or with `-i SECS` per interval
    /// like iostat.
    Stat(stat::Args),
    /// Check a pollfs filesystem: superblocks, checkpoint, log, and every
    /// metadata invariant; exits non-zero if anything is wrong.
    Fsck(tools::FsckArgs),
    /// Controller and namespace facts (model, version, MDTS, LBA format,
    /// capacity, queues) of `emu`, `vfio:<pci-address>` or
    /// `nvme-tcp://HOST:PORT/NQN`.
    Identify(nvme::identify::Args),
    /// spdk_nvme_perf-style load: IOPS, MiB/s and latency percentiles.
    Perf(nvme::perf::Args),
    /// A mirror's state (`status`), and taking a leg out (`fail`) and back
    /// in (`rejoin`, which copies it from the legs in sync).
    Mirror(mirror::Args),
    /// Bind a controller to vfio-pci and reserve hugepages (`--reset`
    /// gives it back to the kernel's nvme driver).
    Setup(nvme::setup::Args),
}

fn main() -> std::process::ExitCode {
    let argv = mount::helper::args(std::env::args_os().collect());
    if generate::wanted(&argv) {
        return report(generate::run(&argv, Cli::command()));
    }
    let cli = Cli::parse_from(argv);
    // A mount sets its log up itself, once its options (`-o log=`) are read.
    if !matches!(cli.command, Command::Mount(_)) {
        log::init(None);
    }
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Mkfs(args) => tools::mkfs(&args),
        Command::Fsck(args) => tools::fsck(&args),
        Command::Mount(args) => mount::run(&args).map_err(anyhow::Error::from),
        Command::Stat(args) => stat::run(&args),
        Command::Umount(args) => mount::umount::run(&args).map_err(anyhow::Error::from),
        Command::Identify(args) => nvme::identify::run(&args),
        Command::Perf(args) => nvme::perf::run(&args),
        Command::Setup(args) => nvme::setup::run(&args),
        Command::Mirror(args) => mirror::run(&args),
    };
    report(result)
}

fn report(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pollfs: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
