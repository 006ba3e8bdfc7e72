//! The mount's errors, one enum per job joined into [`MountError`], so a
//! caller (and a test) branches on a kind instead of matching text. Each
//! message is what `pollfs mount` and `pollfs umount` print.

use std::fmt;
use std::io;
use std::path::PathBuf;

use pollfs_core::dev::DevError;
use pollfs_core::volume::VolumeError;
use pollfs_device::units::UnitError;

use super::ring::HOW;

/// Why an `-o` option is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionError {
    /// Not an option the mount knows.
    Unknown,
    /// `atime`, `relatime`, `strictatime`, `lazytime`.
    AccessTimes,
    /// `allow_root`.
    AllowRoot,
    /// `user`, `users`, `owner`, `group`.
    UserMount,
    /// `threads=` with no number.
    Threads,
    /// `cache_mode=` with neither `kernel` nor `direct`.
    CacheMode,
    /// `uring=` with none of `auto`, `on`, `off`.
    Uring,
    /// `log=` with a filter that does not parse.
    Log,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OptionError::Unknown => {
                "unknown option (known: ro, rw, remount, allow_other, noatime, \
                 nosuid, suid, noexec, exec, nodev, dev, sync, async, dirsync, \
                 default_permissions, \
                 cache=SIZE, threads=N, cache_mode=kernel|direct, \
                 uring=auto|on|off, log=LEVEL)"
            }
            OptionError::AccessTimes => {
                "pollfs does not record access times on reads; use noatime (the default)"
            }
            OptionError::AllowRoot => {
                "not supported; use allow_other (permissions are checked either way)"
            }
            OptionError::UserMount => {
                "pollfs mounts as root only; use allow_other to let other users in"
            }
            OptionError::Threads => "not a number of threads",
            OptionError::CacheMode => "kernel or direct",
            OptionError::Uring => "auto, on or off",
            OptionError::Log => "not a log filter: try error, warn, info, debug or trace",
        })
    }
}

/// Why FUSE over io_uring is not planned or not in use.
#[derive(Debug)]
#[non_exhaustive]
pub enum RingError {
    /// `--uring on` on a kernel that does not offer it.
    NotOffered,
    /// The possible CPUs (one queue each) could not be read.
    Cpus(io::Error),
    /// The possible CPUs' list did not parse.
    CpuList(String),
    /// The mount did not ask for it.
    NotAsked,
    /// The kernel did not offer it at `FUSE_INIT`.
    NotAtInit,
    /// A queue's thread could not start.
    Thread {
        /// The queue.
        qid: u16,
        /// Why.
        source: io::Error,
    },
    /// The kernel refused a queue's registration.
    Refused {
        /// The queue.
        qid: u16,
        /// What it said.
        source: io::Error,
    },
    /// A queue's thread ended before registering.
    ThreadEnded,
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::NotOffered => write!(
                f,
                "--uring on: this kernel does not offer FUSE over io_uring; {HOW}, \
                 or mount with --uring auto or off"
            ),
            RingError::Cpus(e) => write!(f, "--uring: cannot read the possible CPUs: {e}"),
            RingError::CpuList(list) => {
                write!(f, "--uring: cannot read the possible CPUs from {list:?}")
            }
            RingError::NotAsked => write!(f, "not asked for"),
            RingError::NotAtInit => {
                write!(f, "the kernel did not offer it at FUSE_INIT; {HOW}")
            }
            RingError::Thread { qid, source } => {
                write!(f, "cannot start the thread of queue {qid}: {source}")
            }
            RingError::Refused { qid, source } => {
                write!(f, "the kernel refused queue {qid}: {source}")
            }
            RingError::ThreadEnded => write!(f, "a queue's thread ended before registering"),
        }
    }
}

/// Why `pollfs mount` or `pollfs umount` failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum MountError {
    /// An `-o` option.
    Option {
        /// The option as given.
        opt: String,
        /// Why it is refused.
        why: OptionError,
    },
    /// A size that does not parse.
    Size {
        /// The flag it was given with.
        flag: &'static str,
        /// What is wrong.
        source: UnitError,
    },
    /// A cache outside 64 KiB..16 TiB.
    CacheRange(String),
    /// A cache larger than the memory available.
    CacheOverMemory {
        /// The cache asked for, in bytes.
        cache: u64,
        /// The memory available, in bytes.
        available: u64,
    },
    /// A thread count outside 1..=64.
    Threads(usize),
    /// A path that cannot be used.
    Path {
        /// The path, as given.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The mount point is not a directory.
    NotADirectory(PathBuf),
    /// FUSE over io_uring cannot be planned.
    Ring(RingError),
    /// `--uring on`, and the ring is not in use.
    UringRefused(RingError),
    /// No pollfs filesystem is mounted there (`remount`).
    NotMounted(PathBuf),
    /// A remount's system call failed.
    Remount {
        /// The mount point.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A system call the server needs (a pipe, fork, the signal mask, a
    /// thread).
    Sys {
        /// What it was for.
        what: &'static str,
        /// Why it failed.
        source: io::Error,
    },
    /// The background server ended before it mounted.
    EndedBeforeMount,
    /// The background server's report of its failure (it crossed a pipe
    /// from another process, as text).
    Server(String),
    /// The device could not be opened or mounted (`pollfs-device`'s
    /// error and its causes).
    Device(anyhow::Error),
    /// The controller has fewer I/O queues than the serving threads need.
    TooFewQueues {
        /// The device.
        device: String,
        /// Which threads need them.
        threads: String,
        /// How many.
        needed: usize,
        /// How many the controller has.
        has: u16,
    },
    /// A leg could not give a queue each serving thread needs.
    NoQueue {
        /// The device.
        device: String,
        /// Which threads need them.
        threads: String,
        /// How many.
        needed: usize,
        /// Why.
        source: DevError,
    },
    /// mount(2) of the FUSE session failed.
    Mount {
        /// The mount point.
        at: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Serving the mount failed.
    Serve {
        /// The mount point.
        at: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The engine's sync and checkpoint at unmount failed.
    Unmount {
        /// The device.
        device: String,
        /// Why.
        source: pollfs_core::Error,
    },
    /// Closing the device (a mirror) failed.
    Close {
        /// The device.
        device: String,
        /// Why.
        source: VolumeError,
    },
    /// `pollfs umount` of a directory that is no pollfs mount.
    NotPollfs(PathBuf),
    /// The new mount is not in mountinfo (registration).
    NotInMountinfo(PathBuf),
    /// `pollfs umount` of a mount in use.
    Busy(PathBuf),
    /// umount(2) failed.
    CannotUnmount {
        /// The mount point.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Unmounted, but its server never registered.
    NotRegistered(PathBuf),
    /// Waiting for the server's checkpoint failed.
    Wait {
        /// The mount point.
        dir: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Unmounted, and the server reported a failure.
    ServerFailed {
        /// The mount point.
        dir: PathBuf,
        /// What it reported.
        said: String,
    },
    /// Unmounted, and the server ended without writing its checkpoint.
    NoCheckpoint(PathBuf),
}

impl fmt::Display for MountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MountError::Option { opt, why } => write!(f, "-o {opt}: {why}"),
            MountError::Size { flag, source } => {
                write!(f, "--{flag} {}: {source}", source.input())
            }
            MountError::CacheRange(text) => write!(f, "--cache {text}: between 64 KiB and 16 TiB"),
            MountError::CacheOverMemory { cache, available } => write!(
                f,
                "--cache {}: the machine has {} of memory available",
                crate::units::show_bytes(*cache),
                crate::units::show_bytes(*available)
            ),
            MountError::Threads(n) => write!(f, "--threads {n}: between 1 and 64"),
            MountError::Path { path, source } => write!(f, "{}: {source}", path.display()),
            MountError::NotADirectory(p) => write!(f, "{}: not a directory", p.display()),
            MountError::Ring(e) => e.fmt(f),
            MountError::UringRefused(why) => {
                write!(f, "--uring on: FUSE over io_uring is not in use: {why}")
            }
            MountError::NotMounted(dir) => write!(
                f,
                "remount {}: no pollfs filesystem is mounted there",
                dir.display()
            ),
            MountError::Remount { dir, source } => {
                write!(f, "remount {}: {source}", dir.display())
            }
            MountError::Sys { what, source } => write!(f, "cannot {what}: {source}"),
            MountError::EndedBeforeMount => write!(
                f,
                "the mount process ended before the filesystem was mounted"
            ),
            MountError::Server(said) => f.write_str(said),
            MountError::Device(e) => write!(f, "{e:#}"),
            MountError::TooFewQueues {
                device,
                threads,
                needed,
                has,
            } => write!(
                f,
                "{device}: {threads} need {needed} I/O queues and the controller has {has}"
            ),
            MountError::NoQueue {
                device,
                threads,
                needed,
                source,
            } => write!(
                f,
                "{device}: {threads} need {needed} I/O queues on every leg: {source}"
            ),
            MountError::Mount { at, source } => {
                write!(f, "cannot mount on {}: {source}", at.display())
            }
            MountError::Serve { at, source } => write!(f, "serving {}: {source}", at.display()),
            MountError::Unmount { device, source } => write!(f, "{device}: unmount: {source}"),
            MountError::Close { device, source } => write!(f, "{device}: closing: {source}"),
            MountError::NotPollfs(dir) => write!(f, "{}: not a pollfs mount", dir.display()),
            MountError::NotInMountinfo(dir) => {
                write!(f, "{}: the new mount is not in mountinfo", dir.display())
            }
            MountError::Busy(dir) => {
                let shown = dir.display();
                write!(
                    f,
                    "{shown}: in use (a process has a file or its working directory there; \
                     `fuser -vm {shown}` lists them); nothing was unmounted"
                )
            }
            MountError::CannotUnmount { dir, source } => {
                write!(f, "{}: cannot unmount: {source}", dir.display())
            }
            MountError::NotRegistered(dir) => write!(
                f,
                "{}: unmounted, but its server did not register in {}: \
                 cannot tell when it has written its checkpoint",
                dir.display(),
                super::umount::REGISTRY
            ),
            MountError::Wait { dir, source } => {
                write!(f, "{}: waiting for the server: {source}", dir.display())
            }
            MountError::ServerFailed { dir, said } => {
                write!(f, "{}: unmounted; the server failed: {said}", dir.display())
            }
            MountError::NoCheckpoint(dir) => write!(
                f,
                "{}: unmounted; the server ended without writing its checkpoint (killed?): \
                 what was synced is safe, and the next mount replays its log",
                dir.display()
            ),
        }
    }
}

/// Each message carries its cause's text (what `pollfs` prints is the
/// message alone, as `anyhow`'s chain would repeat it), so no `source`.
impl std::error::Error for MountError {}

impl From<RingError> for MountError {
    fn from(e: RingError) -> MountError {
        MountError::Ring(e)
    }
}
