//! The pollfs engines: pollfs itself, and pollfs with a file-wide lock
//! (what filesystems did before range locks).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use pollfs_core::dev::BlockDevice;
use pollfs_core::{File, Fs, Session};

use super::job::Job;
use super::sample::{Counters, Recorder, Sample};
use super::workload::{Picker, Sync};
use super::{run_threads, Progress};

const PAGE: u64 = 4096;

/// Cache pages a job gets: its `cache` setting, or room for all its
/// files. Wider than the engine's `u32` so that `bench::limits` can refuse
/// an absurd cache by its size before anything is converted or allocated.
pub fn cache_pages_wanted(job: &Job) -> u64 {
    match job.cache {
        Some(bytes) => bytes / PAGE,
        None => (job.file_size().div_ceil(PAGE))
            .saturating_mul(u64::from(job.nrfiles))
            .saturating_add(64),
    }
}

/// [`cache_pages_wanted`] as the engine takes it.
pub fn cache_pages(job: &Job) -> Result<u32, String> {
    u32::try_from(cache_pages_wanted(job)).map_err(|_| {
        format!(
            "{}: a page cache of {} pages is more than the engine can index",
            job.name,
            cache_pages_wanted(job)
        )
    })
}

/// DMA frames a job's device needs: the cache plus the metadata frames.
pub fn frames(job: &Job) -> Result<u32, String> {
    cache_pages(job)?
        .checked_add(pollfs_core::persist::META_FRAMES)
        .ok_or_else(|| format!("{}: the page cache is too large", job.name))
}

/// Device bytes a job needs.
pub fn device_bytes(job: &Job) -> u64 {
    // Files, plus the log and checkpoint areas (about 1/16 of the device),
    // plus slack.
    let files = job.file_size().saturating_mul(u64::from(job.nrfiles));
    files.saturating_add(files / 8).saturating_add(16 << 20)
}

fn err(e: pollfs_core::Error) -> String {
    e.to_string()
}

/// Runs `job` on pollfs over `dev`.
pub fn pollfs<D: BlockDevice>(
    job: &Job,
    dev: D,
    file_lock: bool,
    progress: &Progress,
) -> Result<Sample, String> {
    let cache = cache_pages(job)?;
    // The whole working set may be dirty, as in the kernel baseline, whose
    // dirty limits are far above these file sizes.
    let config = pollfs_core::Config {
        cache_pages: cache,
        dirty_limit_pages: cache.saturating_sub(64).max(1),
        file_lock,
        ..pollfs_core::hosted::config()
    };
    let max_transfer = dev.geometry().max_transfer;
    // A real filesystem, with its log: syncs cost what they cost on disk.
    let fs = Fs::format(dev, config, 0x5eed_f00d).map_err(err)?;
    let names: Vec<String> = (0..job.nrfiles)
        .map(|k| format!("{}.{k}", job.filename))
        .collect();
    {
        let s = fs.session().map_err(err)?;
        let chunk = vec![0x5au8; 1 << 20];
        for name in &names {
            let f = fs.create(name).map_err(err)?;
            let mut off = 0;
            while off < job.file_size() && !job.append {
                let n = chunk.len().min((job.file_size() - off) as usize);
                s.write_all_at(&f, &chunk[..n], off).map_err(err)?;
                off += n as u64;
            }
            s.sync_data(&f).map_err(err)?;
        }
        if job.cold {
            s.drop_caches().map_err(err)?;
        }
    }
    let before = fs.stats();
    let (rec, secs) = run_threads(job, progress, |thread, deadline, start| {
        // One session per thread, passed explicitly: the engine's own
        // path, with no per-operation lookup of a lent session.
        let s = fs.session().map_err(err)?;
        let files = names
            .iter()
            .map(|n| fs.open(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let mut rec = Recorder::new(start)?;
        let mut pick = Picker::new(job, thread);
        if job.iodepth <= 1 {
            one_at_a_time(job, &s, &files, &mut pick, &mut rec, deadline)?;
        } else {
            in_flight(job, &s, &files, &mut pick, &mut rec, deadline)?;
        }
        Ok(rec)
    })?;
    let d = fs.stats().since(&before);
    let counters = Counters {
        hit_rate: d.hit_rate(),
        dev_reads: d.dev_reads,
        dev_read_bytes: d.dev_read_bytes,
        dev_writes: d.dev_writes,
        dev_write_bytes: d.dev_write_bytes,
        dev_flushes: d.dev_flushes,
        lock_waits: d.lock_waits,
        readahead_pages: d.readahead_pages,
        max_transfer,
        log_writes: d.log_writes,
    };
    let engine = if file_lock { "pollfs-locked" } else { "pollfs" };
    Ok(Sample::new(engine, rec, secs, Some(counters)))
}

fn sync<D: BlockDevice>(
    s: &Session<D>,
    f: &File<D>,
    what: Sync,
    rec: &mut Recorder,
) -> Result<(), String> {
    match what {
        Sync::None => return Ok(()),
        Sync::Data => s.sync_data(f).map_err(err)?,
        Sync::All => s.sync_all(f).map_err(err)?,
    }
    rec.syncs += 1;
    Ok(())
}

fn one_at_a_time<D: BlockDevice>(
    job: &Job,
    s: &Session<D>,
    files: &[File<D>],
    pick: &mut Picker,
    rec: &mut Recorder,
    deadline: Instant,
) -> Result<(), String> {
    let mut buf = vec![0u8; job.bs as usize];
    while Instant::now() < deadline {
        let op = pick.next_op();
        let f = &files[op.file];
        let began = Instant::now();
        if op.read {
            s.read_at(f, &mut buf, op.offset).map_err(err)?;
        } else {
            s.write_all_at(f, &buf, op.offset).map_err(err)?;
            sync(s, f, pick.after_write(), rec)?;
        }
        rec.io(began, job.bs);
    }
    Ok(())
}

type Io<'a> =
    Pin<Box<dyn Future<Output = (Vec<u8>, Instant, usize, bool, pollfs_core::Result<usize>)> + 'a>>;

/// `iodepth` I/Os in flight on one thread: the engine's futures, polled
/// round-robin like an SPDK reactor.
fn in_flight<'f, D: BlockDevice>(
    job: &Job,
    s: &'f Session<D>,
    files: &'f [File<D>],
    pick: &mut Picker,
    rec: &mut Recorder,
    deadline: Instant,
) -> Result<(), String> {
    let depth = job.iodepth as usize;
    let mut slots: Vec<Option<Io<'f>>> = (0..depth).map(|_| None).collect();
    let mut spare: Vec<Vec<u8>> = (0..depth).map(|_| vec![0u8; job.bs as usize]).collect();
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        let open = Instant::now() < deadline;
        let mut busy = false;
        for slot in slots.iter_mut() {
            if slot.is_none() && open {
                let op = pick.next_op();
                let mut buf = spare.pop().unwrap_or_else(|| vec![0u8; job.bs as usize]);
                let f = &files[op.file];
                *slot = Some(Box::pin(async move {
                    let began = Instant::now();
                    let r = if op.read {
                        s.read_at_async(f, &mut buf, op.offset).await
                    } else {
                        s.write_at_async(f, &buf, op.offset).await
                    };
                    (buf, began, op.file, op.read, r)
                }));
            }
            let Some(fut) = slot.as_mut() else { continue };
            busy = true;
            if let Poll::Ready((buf, began, file, read, r)) = fut.as_mut().poll(&mut cx) {
                r.map_err(err)?;
                rec.io(began, job.bs);
                spare.push(buf);
                *slot = None;
                if !read {
                    sync(s, &files[file], pick.after_write(), rec)?;
                }
            }
        }
        if !busy && !open {
            return Ok(());
        }
    }
}
