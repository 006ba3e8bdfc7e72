//! FUSE over io_uring (Linux 6.14 and later, with the `fuse` module's
//! `enable_uring` parameter on): the kernel hands requests to the server
//! in ring entries and takes the replies back in them, one
//! `IORING_OP_URING_CMD` (COMMIT_AND_FETCH) answering a request and
//! waiting for the next, instead of a read and a write of `/dev/fuse`.
//!
//! The kernel keeps one queue per possible CPU and puts a request on the
//! queue of the CPU its caller runs on; every queue must have an entry
//! before it sends anything that way. Here each queue has its own thread
//! (pinned to that CPU), its own io_uring and entries, and, through the
//! engine's lent sessions, its own pollfs session and device queue: a
//! request goes from the kernel's ring to the engine with no lock shared
//! with another queue and no hand-off to another thread.
//!
//! `FUSE_INIT` still comes by `/dev/fuse`, answered with
//! `FUSE_OVER_IO_URING`; so do forgets and interrupts (the kernel sends
//! them no other way), which one `/dev/fuse` thread serves beside the
//! queues. Requests are decoded by fuser, as those from `/dev/fuse` are
//! (its vendored extension, `vendor/fuser/PATCHES.md`).
//!
//! - [`layout`]: the bytes of a ring entry and the checks on them.
//! - [`entry`]: an entry's memory and the commands that hand it to the
//!   kernel (the only unsafe code here).
//! - [`queue`]: the thread serving one queue.
//! - this file: whether to use the ring (`-o uring=auto|on|off`), and
//!   starting the queues.

mod entry;
mod layout;
mod queue;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use fuser::{Dispatcher, Filesystem, RequestCount};

use super::error::RingError;
use super::options::Uring;

/// The `fuse` module's switch for FUSE over io_uring.
const ENABLE: &str = "/sys/module/fuse/parameters/enable_uring";

/// How to turn the ring on, for messages.
pub(super) const HOW: &str = "FUSE over io_uring needs Linux 6.14 or later with \
                   `echo Y > /sys/module/fuse/parameters/enable_uring` (as root)";

/// The ring's plan for a mount, made before anything is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Queues: one per possible CPU.
    pub queues: u16,
}

/// Whether the kernel offers the ring: the `enable_uring` parameter (no
/// such file: the kernel lacks it).
fn kernel_offers() -> bool {
    std::fs::read_to_string(ENABLE).is_ok_and(|s| s.trim() == "Y")
}

/// Possible CPUs, from a sysfs CPU list like `0-3,8-11`: the kernel
/// makes a queue for each.
fn count_cpus(list: &str) -> Option<u16> {
    let mut n: u32 = 0;
    for part in list.trim().split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo.parse::<u32>().ok()?, hi.parse::<u32>().ok()?),
            None => {
                let cpu = part.parse::<u32>().ok()?;
                (cpu, cpu)
            }
        };
        n += hi.checked_sub(lo)? + 1;
    }
    u16::try_from(n).ok().filter(|&n| n > 0)
}

impl Plan {
    /// What `-o uring=` (or `--uring`) asks for, given what this kernel
    /// offers: `None` for `/dev/fuse` alone.
    pub fn new(wish: Uring) -> Result<Option<Plan>, RingError> {
        if wish == Uring::Off || (wish == Uring::Auto && !kernel_offers()) {
            return Ok(None);
        }
        if !kernel_offers() {
            return Err(RingError::NotOffered);
        }
        let cpus =
            std::fs::read_to_string("/sys/devices/system/cpu/possible").map_err(RingError::Cpus)?;
        let queues = count_cpus(&cpus).ok_or(RingError::CpuList(cpus))?;
        Ok(Some(Plan { queues }))
    }
}

/// What `FUSE_INIT` settled: whether to ask for the ring, and whether the
/// kernel agreed. Shared with the filesystem's `init`.
#[derive(Debug, Default)]
pub struct Init {
    wanted: bool,
    granted: AtomicBool,
}

impl Init {
    /// Asks for the ring at init if `wanted`.
    pub fn new(wanted: bool) -> Init {
        Init {
            wanted,
            granted: AtomicBool::new(false),
        }
    }

    /// The filesystem's `init`: should it answer with `FUSE_OVER_IO_URING`?
    pub fn wanted(&self) -> bool {
        self.wanted
    }

    /// The filesystem's `init`: it answered with `FUSE_OVER_IO_URING`.
    pub fn grant(&self) {
        self.granted.store(true, Ordering::Release);
    }

    fn granted(&self) -> bool {
        self.granted.load(Ordering::Acquire)
    }
}

/// The queues' work, and `/dev/fuse`'s, for the report at unmount.
#[derive(Debug)]
pub struct Counts {
    queues: Vec<Arc<queue::Tally>>,
    dev_fuse: RequestCount,
}

impl Counts {
    /// Requests served through the ring, through `/dev/fuse` (after
    /// `FUSE_INIT`), and ring entries answered EIO.
    pub fn get(&self) -> (u64, u64, u64) {
        let sum = |f: fn(&queue::Tally) -> u64| self.queues.iter().map(|t| f(t)).sum();
        (
            sum(|t| t.served.load(Ordering::Relaxed)),
            self.dev_fuse.get(),
            sum(|t| t.malformed.load(Ordering::Relaxed)),
        )
    }
}

/// The queues' threads, once started, and whether the kernel took them.
#[derive(Debug)]
pub struct Started {
    pub threads: Vec<JoinHandle<io::Result<()>>>,
    /// `Err` if the ring is not in use, and why.
    pub in_use: Result<(), RingError>,
    pub counts: Counts,
}

/// Starts a thread per queue of `plan` (if the kernel granted the ring at
/// init), each with an entry buffer of `capacity` bytes, and waits until
/// each has registered its entries or been refused.
pub fn start<FS: Filesystem>(
    dispatcher: &Dispatcher<FS>,
    plan: Option<Plan>,
    init: &Init,
    capacity: usize,
) -> Started {
    let mut counts = Counts {
        queues: Vec::new(),
        dev_fuse: dispatcher.dev_fuse_requests(),
    };
    let Some(plan) = plan else {
        return Started {
            threads: Vec::new(),
            in_use: Err(RingError::NotAsked),
            counts,
        };
    };
    if !init.granted() {
        return Started {
            threads: Vec::new(),
            in_use: Err(RingError::NotAtInit),
            counts,
        };
    }
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    let mut in_use = Ok(());
    for qid in 0..plan.queues {
        let tally = Arc::new(queue::Tally::default());
        counts.queues.push(tally.clone());
        let q = queue::Queue {
            qid,
            dispatcher: dispatcher.clone(),
            capacity,
            tally,
        };
        let tx = tx.clone();
        match std::thread::Builder::new()
            .name(format!("pollfs-ring-{qid}"))
            .spawn(move || q.serve(tx))
        {
            Ok(t) => threads.push(t),
            Err(e) => {
                in_use = Err(RingError::Thread { qid, source: e });
                break;
            }
        }
    }
    drop(tx);
    for _ in 0..threads.len() {
        match rx.recv() {
            Ok((_, Ok(()))) => {}
            Ok((qid, Err(e))) => {
                if in_use.is_ok() {
                    in_use = Err(RingError::Refused { qid, source: e });
                }
            }
            Err(_) => {
                if in_use.is_ok() {
                    in_use = Err(RingError::ThreadEnded);
                }
                break;
            }
        }
    }
    Started {
        threads,
        in_use,
        counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn possible_cpus_are_counted_from_a_sysfs_list() {
        assert_eq!(count_cpus("0-1\n"), Some(2));
        assert_eq!(count_cpus("0"), Some(1));
        assert_eq!(count_cpus("0-3,8-11"), Some(8));
        assert_eq!(count_cpus(""), None);
        assert_eq!(count_cpus("3-1"), None);
        assert_eq!(count_cpus("x"), None);
    }

    #[test]
    fn off_never_plans_a_ring() {
        assert!(matches!(Plan::new(Uring::Off), Ok(None)));
    }
}
