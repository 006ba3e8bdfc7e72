//! `pollfs mount DEVICE MOUNTPOINT`: a pollfs filesystem served to the
//! kernel over FUSE (the `fuser` crate, no libfuse; as root it mounts with
//! mount(2) directly).
//!
//! - [`attr`]: FUSE inode numbers and what `stat` shows.
//! - [`handles`]: open files by FUSE handle.
//! - [`server`], [`names`] and [`xattrs`]: one method per request, on the
//!   engine, returning an errno on failure (tested without a kernel):
//!   inodes and open files; directories and their entries; extended
//!   attributes.
//! - [`fuse`]: the `fuser::Filesystem` glue.
//! - [`ring`]: FUSE over io_uring, a queue per CPU, each served by its own
//!   thread; `/dev/fuse` where the kernel does not offer it.
//! - [`options`]: `-o`, mount(8)'s options; [`helper`]: `pollfs` called
//!   as mount(8)'s `fuse.pollfs` helper.
//! - [`umount`]: `pollfs umount`, which returns once the server has
//!   written its checkpoint, and the registry of running servers it waits
//!   on.
//! - [`watch`]: the log's lines about what the engine did (checkpoints,
//!   errors), from its counters; the mount also serves them, for `pollfs
//!   stat`, on a control socket of its own, with the times of reads,
//!   writes and fsyncs [`latency`] records.
//! - this file: the device, its lock, running in the background, and the
//!   signals that end a mount (SIGINT, SIGTERM, SIGHUP: unmount, then the
//!   engine's sync and checkpoint, then exit 0).

mod attr;
pub mod error;
mod fuse;
mod handles;
pub mod helper;
pub(crate) mod latency;
mod names;
mod options;
mod ring;
mod server;
pub mod umount;
pub(crate) mod watch;
mod xattrs;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fuser::{MountOption, SessionACL};
use pollfs_core::dev::BlockDevice;
use pollfs_core::persist::META_FRAMES;
use pollfs_core::Fs;
use pollfs_device::control::server::{ControlServer, Reported};
use pollfs_device::control::stats::{FsStats, Names};
use pollfs_device::{Access, AnyDevice, DeviceSpec, OpenOptions};

use self::error::MountError;
use crate::sys::{self, EndSignals, Forked};
use crate::units::{parse_size, show_bytes};

/// Options of `pollfs mount`.
///
/// A plain `umount MOUNTPOINT` (umount(2)) returns before the server has
/// synced and written its checkpoint: the kernel does not wait for a FUSE
/// server. `pollfs umount MOUNTPOINT` returns only once everything is
/// durable.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The device: `file:PATH`, `vfio:PCI_ADDR`,
    /// `nvme-tcp://HOST:PORT/NQN`, `mirror:(DEV,..)` or
    /// `stripe:CHUNK:(DEV,..)` holding a filesystem made by `pollfs mkfs`,
    /// or `emu` or `ram` (in memory, formatted at mount and gone when the
    /// mount ends).
    device: DeviceSpec,
    /// The directory to mount on.
    mountpoint: PathBuf,
    /// pollfs's page cache, e.g. `256m` (k/m/g suffixes, powers of 1024).
    #[arg(long, default_value = "256m")]
    cache: String,
    /// Threads reading the kernel's requests from /dev/fuse (each has its
    /// own device queue). With io_uring, one thread per CPU serves the
    /// ring's queues instead, and one reads /dev/fuse (forgets and
    /// interrupts come only that way).
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Where file data is cached: `kernel` (the kernel's page cache
    /// answers cached reads and gathers buffered writes; fsync sends them,
    /// then syncs) or `direct` (every read and write is a request to
    /// pollfs, and the data is cached once, in pollfs). docs/design/mount.md,
    /// "Cache modes", says what each costs.
    #[arg(long, value_enum, default_value = "kernel")]
    cache_mode: options::CacheMode,
    /// Requests over io_uring (FUSE_OVER_IO_URING, Linux 6.14 and later,
    /// switched on by root with `echo Y >
    /// /sys/module/fuse/parameters/enable_uring`): `auto` uses the ring
    /// where the kernel offers it and /dev/fuse elsewhere, `on` fails the
    /// mount without it, `off` reads /dev/fuse only. The mount says on
    /// stderr which one serves it.
    #[arg(long, value_enum, default_value = "auto")]
    uring: options::Uring,
    /// Stay in the foreground and report there. Without it, `pollfs mount`
    /// returns once the filesystem is mounted, and serves it from a
    /// background process that exits when the filesystem is unmounted.
    #[arg(long, short)]
    foreground: bool,
    /// Size of an `emu` or `ram` device.
    #[arg(long, default_value = "1g")]
    emu_size: String,
    /// Mount options, comma-separated, as mount(8) takes them: `ro`, `rw`,
    /// `remount` (change the flags of the pollfs mount on MOUNTPOINT:
    /// `ro`, `rw`, `suid`, `dev`, `noexec`, `sync`, `dirsync`),
    /// `allow_other` (every user may use the mount; the kernel checks
    /// modes, owners and groups, `default_permissions` being always on),
    /// `noatime` (the default: access times are not recorded on reads),
    /// `nosuid` (the default) or `suid`, `nodev` (the default) or `dev`
    /// (device nodes open their devices), `noexec`, `sync`, `dirsync`,
    /// `cache=SIZE`, `threads=N`, `cache_mode=kernel|direct`,
    /// `uring=auto|on|off`, `log=LEVEL` (what the log on stderr shows:
    /// `error`, `warn`, `info`, the default, `debug` or `trace`; over
    /// `POLLFS_LOG`, which takes `RUST_LOG`'s filters); fstab's `defaults`, `noauto`, `nofail`,
    /// `_netdev` and `x-*` are ignored.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// How long to wait for a `file:` device another pollfs process holds
    /// (a mount just unmounted holds it until it has written its
    /// checkpoint), in seconds.
    #[arg(long, default_value_t = 30)]
    wait_device: u64,
}

const PAGE: u64 = pollfs_core::units::PAGE_SIZE as u64;
const MAX_THREADS: usize = 64;

/// Everything checked before anything is opened.
#[derive(Debug)]
struct Plan {
    device: DeviceSpec,
    /// Size of an in-memory device.
    memory_bytes: u64,
    device_text: String,
    mountpoint: PathBuf,
    cache_pages: u32,
    threads: usize,
    cache_mode: options::CacheMode,
    /// What `--uring` asked for, and the ring's plan if it is to be tried.
    uring: options::Uring,
    ring: Option<ring::Plan>,
    options: options::Options,
    wait_device: Duration,
}

impl Plan {
    fn new(args: &Args) -> Result<Plan, MountError> {
        let options = options::Options::parse(&args.options)?;
        let cache_text = options.cache.as_deref().unwrap_or(&args.cache);
        let threads = options.threads.unwrap_or(args.threads);
        let size = |flag: &'static str, s: &str| {
            parse_size(s).map_err(|source| MountError::Size { flag, source })
        };
        let memory_bytes = size("emu-size", &args.emu_size)?;
        let cache = size("cache", cache_text)?;
        let cache_pages = u32::try_from(cache / PAGE)
            .ok()
            .filter(|&p| (16..=u32::MAX - META_FRAMES).contains(&p))
            .ok_or_else(|| MountError::CacheRange(cache_text.to_string()))?;
        if let Some(mem) = crate::host::memory() {
            if cache > mem.available + mem.hugepages_free {
                return Err(MountError::CacheOverMemory {
                    cache,
                    available: mem.available,
                });
            }
        }
        if !(1..=MAX_THREADS).contains(&threads) {
            return Err(MountError::Threads(threads));
        }
        let mountpoint = args
            .mountpoint
            .canonicalize()
            .map_err(|source| MountError::Path {
                path: args.mountpoint.clone(),
                source,
            })?;
        if !mountpoint.is_dir() {
            return Err(MountError::NotADirectory(args.mountpoint.clone()));
        }
        let uring = options.uring.unwrap_or(args.uring);
        Ok(Plan {
            device: args.device.clone(),
            memory_bytes,
            device_text: args.device.to_string(),
            mountpoint,
            cache_pages,
            threads,
            cache_mode: options.cache_mode.unwrap_or(args.cache_mode),
            uring,
            ring: ring::Plan::new(uring)?,
            options,
            wait_device: Duration::from_secs(args.wait_device),
        })
    }

    fn config(&self) -> pollfs_core::Config {
        pollfs_core::Config {
            cache_pages: self.cache_pages,
            ..pollfs_hosted::config()
        }
    }

    fn frames(&self) -> u32 {
        self.cache_pages + META_FRAMES
    }

    /// Threads reading /dev/fuse: one beside the ring's queues (for
    /// forgets and interrupts), else `--threads`.
    fn dev_fuse_threads(&self) -> usize {
        if self.ring.is_some() {
            1
        } else {
            self.threads
        }
    }

    /// Threads that call the engine, each with its own device queue.
    fn serving_threads(&self) -> usize {
        self.dev_fuse_threads() + self.ring.map_or(0, |r| usize::from(r.queues))
    }
}

/// Which way requests reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// The io_uring queues.
    Ring(u16),
    /// Threads reading /dev/fuse.
    DevFuse(usize),
}

/// Mounts, serves until unmounted, and returns once the engine has
/// synced and written its checkpoint.
pub fn run(args: &Args) -> Result<(), MountError> {
    let plan = Plan::new(args)?;
    crate::log::init(plan.options.log.as_deref());
    if plan.options.remount {
        return remount(&plan);
    }
    let mut ready = if args.foreground {
        Ready::Foreground
    } else {
        match background()? {
            Side::Parent(outcome) => return outcome,
            Side::Child(ready) => ready,
        }
    };
    let result = serve(&plan, &mut ready);
    match result {
        Err(e) if matches!(ready, Ready::Background(_)) => {
            // Not mounted: the waiting parent reports the error and fails.
            ready.fail(&e);
            std::process::exit(1);
        }
        other => other,
    }
}

/// `-o remount,...`: gives the pollfs mount on the mountpoint the kernel
/// flags the options name (mount(8) hands `mount -o remount,ro DIR` to
/// the helper). Before a change to read-only, the kernel's dirty pages
/// are sent to the server (syncfs), so nothing written before the
/// remount waits for a later writable one.
fn remount(plan: &Plan) -> Result<(), MountError> {
    let dir = &plan.mountpoint;
    let what = |source: std::io::Error| MountError::Remount {
        dir: dir.clone(),
        source,
    };
    let canonical = dir.canonicalize().map_err(what)?;
    if umount::mount_id(&canonical).is_none() {
        return Err(MountError::NotMounted(dir.clone()));
    }
    if plan.options.read_only {
        sys::syncfs(dir).map_err(what)?;
    }
    sys::remount(dir, plan.options.remount_flags()).map_err(what)
}

/// Tells whoever started the mount that it is ready (or why it failed).
#[derive(Debug)]
enum Ready {
    /// In the foreground: say so on stderr.
    Foreground,
    /// In the background: the parent waits at the other end.
    Background(UnixStream),
    /// Already told.
    Told,
}

const READY: &[u8] = b"ready";

impl Ready {
    fn done(&mut self, plan: &Plan, via: Via) {
        match std::mem::replace(self, Ready::Told) {
            Ready::Foreground => eprintln!(
                "pollfs: {} mounted on {} ({}, {} cache, cache mode {})",
                plan.device_text,
                plan.mountpoint.display(),
                match via {
                    Via::Ring(queues) => format!(
                        "requests over io_uring: {queues} queues, a thread each; \
                         /dev/fuse for forgets"
                    ),
                    Via::DevFuse(threads) => format!("{threads} threads reading /dev/fuse"),
                },
                show_bytes(u64::from(plan.cache_pages) * PAGE),
                match plan.cache_mode {
                    options::CacheMode::Kernel => "kernel",
                    options::CacheMode::Direct => "direct",
                }
            ),
            Ready::Background(mut parent) => {
                let _ = parent.write_all(READY);
                // From here on nobody reads what this process prints, and
                // a caller's pipe must not stay open because of it.
                let _ = sys::detach_stdio();
            }
            Ready::Told => {}
        }
    }

    fn fail(&mut self, e: &MountError) {
        if let Ready::Background(mut parent) = std::mem::replace(self, Ready::Told) {
            let _ = parent.write_all(e.to_string().as_bytes());
        }
    }
}

enum Side {
    Parent(Result<(), MountError>),
    Child(Ready),
}

/// Forks a server process and, in the parent, waits until it has mounted
/// (or failed). Runs before any thread is started.
fn background() -> Result<Side, MountError> {
    let (mut parent_end, child_end) = UnixStream::pair().map_err(|source| MountError::Sys {
        what: "make a pipe",
        source,
    })?;
    let forked = sys::fork().map_err(|source| MountError::Sys {
        what: "fork",
        source,
    })?;
    match forked {
        Forked::Parent => {
            drop(child_end);
            let mut said = Vec::new();
            let _ = parent_end.read_to_end(&mut said);
            Ok(Side::Parent(if said == READY {
                Ok(())
            } else if said.is_empty() {
                Err(MountError::EndedBeforeMount)
            } else {
                Err(MountError::Server(
                    String::from_utf8_lossy(&said).into_owned(),
                ))
            }))
        }
        Forked::Child => {
            drop(parent_end);
            // Out of the caller's session (its terminal's Ctrl-C and
            // hang-up), and off its working directory.
            let _ = sys::setsid();
            let _ = std::env::set_current_dir("/");
            Ok(Side::Child(Ready::Background(child_end)))
        }
    }
}

fn serve(plan: &Plan, ready: &mut Ready) -> Result<(), MountError> {
    // Before any thread starts, so that every thread inherits the mask and
    // only the watcher receives them.
    let signals = EndSignals::block().map_err(|source| MountError::Sys {
        what: "block signals",
        source,
    })?;
    let options = OpenOptions {
        size: plan.memory_bytes,
        lock_wait: plan.wait_device,
        on_lock_wait: Some(say_waiting),
        // `pollfs mirror` administers a mounted mirror through it.
        control: true,
        ..crate::device::options(Access::Write, plan.frames())
    };
    let mut closer = None;
    let fs = pollfs_device::open_fs_with(&plan.device, &options, plan.config(), |dev| {
        enough_queues(plan, dev)?;
        closer = Some(dev.take_closer());
        Ok::<(), anyhow::Error>(())
    })
    .map_err(MountError::Device)?;
    let s = fs.stats();
    tracing::info!(
        device = %plan.device_text,
        replayed_log_writes = s.replayed_log_writes,
        replayed_records = s.replayed_records,
        "opened: recovery replayed {} log writes ({} records)",
        s.replayed_log_writes,
        s.replayed_records
    );
    let served = serve_fs(fs, plan, ready, signals);
    // After the unmount: a mirror is closed cleanly, so the next mount
    // needs no resync.
    let closed = closer.map_or(Ok(()), |c| c.close());
    served?;
    closed.map_err(|source| MountError::Close {
        device: plan.device_text.clone(),
        source,
    })
}

/// Said once when the device is held by another pollfs process.
fn say_waiting(what: &str, patience: Duration) {
    eprintln!(
        "pollfs: {what} is in use by another pollfs process; waiting up to {} s for it to let \
         go (a mount that was just unmounted holds it until it has written its checkpoint)",
        patience.as_secs()
    );
}

/// Each serving thread, and the thread that unmounts, takes a device
/// queue: take them all once, so a shortage fails the mount, not a
/// request.
fn enough_queues(plan: &Plan, dev: &AnyDevice) -> Result<(), MountError> {
    let what = &plan.device_text;
    let needed = plan.serving_threads() + 1;
    let threads = match plan.ring {
        Some(r) => format!(
            "io_uring's {} queues and a /dev/fuse thread (--uring off for fewer)",
            r.queues
        ),
        None => format!("--threads {}", plan.threads),
    };
    if let Some(queues) = dev.io_queues() {
        if needed > usize::from(queues) {
            return Err(MountError::TooFewQueues {
                device: what.clone(),
                threads,
                needed,
                has: queues,
            });
        }
        return Ok(());
    }
    let queues = (0..needed)
        .map(|_| dev.open_queue())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| MountError::NoQueue {
            device: what.clone(),
            threads,
            needed,
            source,
        })?;
    drop(queues);
    Ok(())
}

fn serve_fs(
    fs: Fs<AnyDevice>,
    plan: &Plan,
    ready: &mut Ready,
    signals: EndSignals,
) -> Result<(), MountError> {
    let notifier = Arc::new(OnceLock::new());
    let ring_init = Arc::new(ring::Init::new(plan.ring.is_some()));
    let latency = Arc::new(latency::Latencies::new());
    let filesystem = fuse::PollFs::new(
        server::Server::new(fs.clone()),
        plan.cache_mode,
        notifier.clone(),
    )
    .with_ring(ring_init.clone())
    .with_latency(latency.clone());
    let mut cfg = fuser::Config::default();
    // The source shown in /proc/mounts; mount(2) options are
    // comma-separated, so a device name with a comma or a space is not
    // shown.
    let source = if plan.device_text.contains([',', ' ', '\t', '\n']) {
        "pollfs".to_string()
    } else {
        plan.device_text.clone()
    };
    cfg.mount_options = vec![MountOption::FSName(source)];
    cfg.mount_options.extend(plan.options.mount_options());
    if plan.options.allow_other {
        cfg.acl = SessionACL::All;
    }
    cfg.n_threads = Some(plan.dev_fuse_threads());
    cfg.clone_fd = true;
    let session = fuser::Session::new(filesystem, &plan.mountpoint, &cfg).map_err(|source| {
        MountError::Mount {
            at: plan.mountpoint.clone(),
            source,
        }
    })?;
    let _ = notifier.set(session.notifier());
    // Before the caller hears that the mount is there, so a `pollfs
    // umount` right after can wait for this server.
    let registration = umount::Registration::new(&plan.mountpoint)
        .map_err(|e| eprintln!("pollfs: `pollfs umount` will not wait for this mount: {e}"))
        .ok();
    let control = serve_stats(
        Report {
            fs: fs.clone(),
            latency,
        },
        &plan.mountpoint,
    );
    let watcher = watch::Watcher::start(fs.clone(), Names::of(fs.device()))
        .map_err(|e| tracing::warn!("no log of checkpoints and errors: {e}"))
        .ok();
    let mountpoint = plan.mountpoint.clone();
    std::thread::Builder::new()
        .name("pollfs-signals".into())
        .spawn(move || unmount_on_signal(&signals, &mountpoint))
        .map_err(|source| MountError::Sys {
            what: "start the signal thread",
            source,
        })?;
    let mut counts = None;
    let mut refused = None;
    let served = session.run_with(|dispatcher| {
        // The ring's queues register before the caller hears that the
        // mount is there, so that its requests take the ring.
        let capacity = ring_capacity();
        let started = ring::start(&dispatcher, plan.ring, &ring_init, capacity);
        counts = Some(started.counts);
        let via = match (started.in_use, plan.ring) {
            (Ok(()), Some(r)) => Via::Ring(r.queues),
            (Err(why), _) if plan.uring == options::Uring::On => {
                refused = Some(MountError::UringRefused(why));
                // Nothing has used the mount yet: take it away, and the
                // threads end.
                if let Err(e) = sys::unmount(&plan.mountpoint, false) {
                    eprintln!("pollfs: cannot unmount {}: {e}", plan.mountpoint.display());
                }
                Via::DevFuse(plan.dev_fuse_threads())
            }
            (Err(why), Some(_)) => {
                eprintln!(
                    "pollfs: FUSE over io_uring is not in use ({why}); one thread reads /dev/fuse"
                );
                Via::DevFuse(plan.dev_fuse_threads())
            }
            (_, None) => Via::DevFuse(plan.dev_fuse_threads()),
        };
        if refused.is_none() {
            ready.done(plan, via);
        }
        Ok(started.threads)
    });
    let served = match served {
        // A serving thread whose read of /dev/fuse raced the unmount's
        // abort of the connection gets ECONNABORTED instead of ENODEV:
        // the session ended either way.
        Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
        other => other,
    };
    if let Some(counts) = counts {
        let (ring, dev_fuse, eio) = counts.get();
        eprintln!(
            "pollfs: served {ring} requests over io_uring ({eio} answered EIO as malformed) \
             and {dev_fuse} over /dev/fuse"
        );
    }
    drop(control);
    // Every handle is closed now; sync everything and checkpoint, so the
    // next mount replays nothing.
    let started = std::time::Instant::now();
    let unmounted = fs.clone().unmount().map_err(|source| MountError::Unmount {
        device: plan.device_text.clone(),
        source,
    });
    // Its last look includes the unmount's checkpoint.
    drop(watcher);
    match &unmounted {
        Ok(()) => tracing::info!(
            mountpoint = %plan.mountpoint.display(),
            "unmounted: synced and checkpointed in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        ),
        Err(e) => tracing::error!(mountpoint = %plan.mountpoint.display(), "{e}"),
    }
    let outcome = served
        .map_err(|source| MountError::Serve {
            at: plan.mountpoint.clone(),
            source,
        })
        .and(unmounted)
        .and(refused.map_or(Ok(()), Err));
    if let Some(r) = registration {
        r.finish(&outcome);
    }
    outcome
}

/// What the mount's control socket reports: the engine's figures and the
/// requests' times.
struct Report {
    fs: Fs<AnyDevice>,
    latency: Arc<latency::Latencies>,
}

impl Reported for Report {
    fn report(&self) -> FsStats {
        FsStats {
            latency: self.latency.snapshot(),
            mirror_socket: self.fs.device().control_socket().map(Path::to_path_buf),
            ..FsStats::of_named(&self.fs, &Names::of(self.fs.device()))
        }
    }
}

/// Serves `report` of the filesystem mounted on `mountpoint` on the
/// mount's control socket (`pollfs stat`); `None`, said in the log, where
/// no socket can be made: the mount goes on without it.
fn serve_stats(report: Report, mountpoint: &Path) -> Option<ControlServer> {
    let Some(id) = umount::mount_id(mountpoint) else {
        tracing::warn!("`pollfs stat` will not find this mount: it is not in mountinfo");
        return None;
    };
    let path = pollfs_device::control::mount_socket_path(&id);
    match ControlServer::start_fs(Arc::new(report), &[path]) {
        Ok(server) => {
            tracing::info!(socket = %server.path().display(), "serving statistics");
            Some(server)
        }
        Err(e) => {
            tracing::warn!("`pollfs stat` will not find this mount: {e}");
            None
        }
    }
}

/// The payload buffer of a ring entry: the kernel's `max_payload_sz`,
/// the largest of FUSE_MIN_READ_BUFFER (8 KiB), max_write and max_pages
/// pages, which init sets from [`fuse::MAX_IO`].
fn ring_capacity() -> usize {
    (fuse::MAX_IO as usize).max(8192)
}

/// Waits for SIGINT, SIGTERM or SIGHUP and unmounts: at once if nothing
/// on the mount is in use, else detached (new opens fail, open files keep
/// working, and the session ends when the last is closed).
fn unmount_on_signal(signals: &EndSignals, mountpoint: &Path) {
    while signals.wait().is_ok() {
        match sys::unmount(mountpoint, false) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                eprintln!(
                    "pollfs: {} is in use: detached; pollfs ends when its last open file closes",
                    mountpoint.display()
                );
                if let Err(e) = sys::unmount(mountpoint, true) {
                    eprintln!("pollfs: cannot detach {}: {e}", mountpoint.display());
                }
            }
            // Already unmounted: the session is ending.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => eprintln!("pollfs: cannot unmount {}: {e}", mountpoint.display()),
        }
    }
}
