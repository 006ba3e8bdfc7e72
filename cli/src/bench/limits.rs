//! What a job needs from the machine and the device, checked before
//! anything is allocated or created: a run that cannot fit is refused with
//! a message, instead of aborting on a failed allocation, being killed by
//! the OOM killer, or filling a disk half-way through.
//!
//! The memory figures are estimates of the large allocations (device,
//! cache, per-thread buffers and recorders) plus a per-thread allowance;
//! they are meant to refuse what surely cannot fit, not to budget to the
//! last page.

use std::path::Path;

use anyhow::anyhow;
use pollfs_core::cache::PageCache;
use pollfs_core::persist::META_FRAMES;

use super::engine;
use super::plan::Phase;
use super::sample::recorder_bytes;
use crate::host::Memory;
use crate::units::show_bytes;
use pollfs_device::{DeviceSpec as Device, Leaf};

/// Most threads on a device that sets no queue limit of its own (`ram`,
/// `file:`): each job is an OS thread, and a few hundred already measure
/// the scheduler more than pollfs.
pub const MAX_THREADS: u32 = 1024;

/// Memory a thread needs beyond its buffers and its recorder: the part of
/// its stack it touches, its session and, on NVMe, its queue's rings. An
/// allowance, not a measurement.
const THREAD_ALLOWANCE: u64 = 256 << 10;

/// The buffer each engine first writes the files with.
const FILL_CHUNK: u64 = 1 << 20;

const PAGE: u64 = 4096;

/// Memory one engine's run needs, by part.
struct Estimate {
    parts: Vec<(String, u64)>,
}

impl Estimate {
    fn total(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |sum, (_, b)| sum.saturating_add(*b))
    }
    fn describe(&self) -> String {
        self.parts
            .iter()
            .map(|(what, b)| format!("{what} {}", show_bytes(*b)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Memory of the phase's threads: I/O buffers (each with room to align
/// it), recorders and allowance.
fn threads(phase: &Phase<'_>) -> (String, u64) {
    let sum = phase.jobs.iter().fold(0u64, |sum, job| {
        let each = u64::from(job.iodepth)
            .saturating_mul(job.bs.saturating_add(PAGE))
            .saturating_add(recorder_bytes(job.runtime))
            .saturating_add(THREAD_ALLOWANCE);
        sum.saturating_add(each.saturating_mul(u64::from(job.numjobs)))
    });
    let what = match phase.threads() {
        1 => "1 thread".to_string(),
        n => format!("{n} threads"),
    };
    (what, sum.saturating_add(FILL_CHUNK))
}

/// pollfs on `device`: the device itself if it lives in memory, the page
/// cache (frames and bookkeeping) and the threads.
fn pollfs_run(phase: &Phase<'_>, device: &Device) -> Estimate {
    let mut parts = Vec::new();
    if device.in_memory() {
        // A mirror holds the data once per leg.
        let copies = match device {
            Device::Mirror(legs) => legs.len() as u64,
            _ => 1,
        };
        parts.push((
            "the in-memory device".to_string(),
            phase.device_bytes().saturating_mul(copies),
        ));
    }
    let per_page = PAGE + PageCache::metadata_bytes_per_page() as u64;
    let cache = phase
        .cache_pages_wanted()
        .saturating_mul(per_page)
        .saturating_add(u64::from(META_FRAMES) * PAGE);
    parts.push(("the page cache".to_string(), cache));
    parts.push(threads(phase));
    Estimate { parts }
}

/// The memcpy baseline: a copy of the files in memory, and the threads.
fn memcpy_run(phase: &Phase<'_>) -> Estimate {
    Estimate {
        parts: vec![
            (
                "the files, copied to memory".to_string(),
                phase.file_bytes(),
            ),
            threads(phase),
        ],
    }
}

/// Refuses `phase` on `device` if the device cannot give it a queue per
/// thread, or the machine cannot give it the memory or disk it needs.
/// `kernel_dir` is where the kernel baseline writes, if it runs.
pub fn check(
    phase: &Phase<'_>,
    device: &Device,
    memory: Option<Memory>,
    kernel_dir: Option<&Path>,
) -> anyhow::Result<()> {
    let name = phase.label();
    let threads_wanted = phase.threads();
    match super::device::queue_limit(device) {
        Some(limit) if threads_wanted > limit => {
            return Err(anyhow!(too_many_threads(phase, limit, &device.to_string())))
        }
        None if !matches!(device, Device::One(Leaf::Vfio(_) | Leaf::Tcp(_)))
            && threads_wanted > MAX_THREADS =>
        {
            return Err(anyhow!(
                "{name}: numjobs={threads_wanted} is more than {MAX_THREADS}, the most threads \
                 the bench runs on {device}"
            ))
        }
        _ => {}
    }
    if let Some(mem) = memory {
        let mut runs = vec![pollfs_run(phase, device)];
        if kernel_dir.is_some() && phase.cached_reads_only() {
            runs.push(memcpy_run(phase));
        }
        // VFIO DMA memory comes from hugepages when there are free ones.
        let available = if device.legs().iter().any(|l| matches!(l, Leaf::Vfio(_))) {
            mem.available.saturating_add(mem.hugepages_free)
        } else {
            mem.available
        };
        if let Some(run) = runs.iter().find(|r| r.total() > available) {
            return Err(anyhow!(
                "{name}: needs about {} of memory ({}), more than the {} this machine has \
                 available (MemAvailable; MemTotal is {}); lower --size, --cache or --numjobs",
                show_bytes(run.total()),
                run.describe(),
                show_bytes(available),
                show_bytes(mem.total)
            ));
        }
    }
    // Past the memory check, so an absurd cache is reported by its size.
    engine::frames(phase)?;
    if let Some(dir) = kernel_dir {
        let files = phase.file_bytes();
        if let Some(free) = crate::host::free_space(dir) {
            if files > free {
                return Err(anyhow!(
                    "{name}: the kernel baseline writes {} of files to {}, which has {} free \
                     (choose another --kernel-dir, or drop --compare)",
                    show_bytes(files),
                    dir.display(),
                    show_bytes(free)
                ));
            }
        }
    }
    Ok(())
}

/// The message for more threads than the device has queues.
pub fn too_many_threads(phase: &Phase<'_>, queues: u32, device: &str) -> String {
    let together = if phase.jobs.len() > 1 {
        " over the jobs that run together"
    } else {
        ""
    };
    format!(
        "{}: numjobs={}{together} but {device} offers {queues} I/O queues, and each thread \
         needs its own (numjobs must be 1..={queues})",
        phase.label(),
        phase.threads()
    )
}

/// Refuses a run whose file device needs more disk than is free. `held`
/// is what the file already occupies.
pub fn check_file_space(path: &Path, needed: u64, held: u64) -> anyhow::Result<()> {
    let Some(free) = crate::host::free_space(pollfs_device::file::folder_of(path)) else {
        return Ok(());
    };
    let more = needed.saturating_sub(held);
    if more > free {
        return Err(anyhow!(
            "file:{}: the bench needs {} on this filesystem, which has {} free",
            path.display(),
            show_bytes(more),
            show_bytes(free)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::job::Job;

    use crate::bench::job::test_job as job;

    fn check(
        j: &Job,
        device: &Device,
        memory: Option<Memory>,
        kernel_dir: Option<&Path>,
    ) -> anyhow::Result<()> {
        super::check(&Phase::new(vec![j]).unwrap(), device, memory, kernel_dir)
    }

    const SMALL: Memory = Memory {
        available: 1 << 30,
        total: 2 << 30,
        hugepages_free: 0,
    };

    #[test]
    fn the_emulated_device_and_its_cache_count_against_memory() {
        let j = job(&[("size", "512m")]);
        // 512 MiB of files: ~592 MiB of device and ~512 MiB of cache.
        let e = check(&j, &Device::One(Leaf::Emu), Some(SMALL), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("memory") && e.contains("in-memory device"),
            "{e}"
        );
        // On a file device only the cache is in memory.
        let file = Device::One(Leaf::File("/nonexistent/x".into()));
        assert!(check(&j, &file, Some(SMALL), None).is_ok());
        let j = job(&[("size", "2g"), ("cache", "64m")]);
        assert!(check(&j, &file, Some(SMALL), None).is_ok());
        let j = job(&[("size", "2g")]);
        assert!(check(&j, &file, Some(SMALL), None).is_err());
    }

    #[test]
    fn threads_count_against_queues_and_memory() {
        let j = job(&[("numjobs", "65")]);
        let e = check(&j, &Device::One(Leaf::Emu), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("64 I/O queues"), "{e}");
        let j = job(&[("numjobs", "64")]);
        assert!(check(&j, &Device::One(Leaf::Emu), None, None).is_ok());
        let j = job(&[("numjobs", "1025")]);
        assert!(check(&j, &Device::One(Leaf::Ram), None, None).is_err());
        let j = job(&[("numjobs", "1000"), ("iodepth", "64"), ("bs", "1m")]);
        assert!(check(&j, &Device::One(Leaf::Ram), Some(SMALL), None).is_err());
    }
}
