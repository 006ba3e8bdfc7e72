//! The engines a job runs on, and the pollfs ones: pollfs itself, pollfs
//! with a file-wide lock (what filesystems did before range locks), and
//! pollfs with readahead off (one device command per page a read misses).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use anyhow::anyhow;
use pollfs_core::dev::BlockDevice;
use pollfs_core::{File, Fs, Session};

use super::direct::{self, Buf};
use super::job::Job;
use super::plan::Phase;
use super::run::{run_threads, Progress, Window};
use super::sample::{Counters, Recorder, Sample};
use super::workload::{Op, Picker, Sync};

/// Who runs a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// pollfs as it is.
    Pollfs,
    /// pollfs with a file-wide lock: reads shared, writes exclusive.
    PollfsLocked,
    /// pollfs with readahead off.
    PollfsNoReadahead,
    /// pollfs writing every synced page to its block before the commit
    /// (no data in the log): how syncs were made before.
    PollfsInPlaceSync,
    /// pollfs with no write-home thread: a small sync that finds the log's
    /// share for data full writes the logged pages home itself, as syncs
    /// did before logged pages were written home off the sync path.
    PollfsSyncHome,
    /// The kernel: pread/pwrite/fsync on files in a directory.
    Kernel,
    /// Copies out of memory: what any cached read must at least do.
    Memcpy,
}

impl Engine {
    /// The name the tables and the JSON use (the kernel's adds its
    /// directory).
    pub fn name(self) -> &'static str {
        match self {
            Engine::Pollfs => "pollfs",
            Engine::PollfsLocked => "pollfs-locked",
            Engine::PollfsNoReadahead => "pollfs-no-readahead",
            Engine::PollfsInPlaceSync => "pollfs-in-place-sync",
            Engine::PollfsSyncHome => "pollfs-sync-home",
            Engine::Kernel => "kernel",
            Engine::Memcpy => "memcpy",
        }
    }
}

/// [`Phase::cache_pages_wanted`] as the engine takes it.
pub fn cache_pages(phase: &Phase<'_>) -> anyhow::Result<u32> {
    u32::try_from(phase.cache_pages_wanted()).map_err(|_| {
        anyhow!(
            "{}: a page cache of {} pages is more than the engine can index",
            phase.label(),
            phase.cache_pages_wanted()
        )
    })
}

/// DMA frames a phase's device needs: the cache plus the metadata frames.
pub fn frames(phase: &Phase<'_>) -> anyhow::Result<u32> {
    cache_pages(phase)?
        .checked_add(pollfs_core::persist::META_FRAMES)
        .ok_or_else(|| anyhow!("{}: the page cache is too large", phase.label()))
}

fn err(e: pollfs_core::Error) -> anyhow::Error {
    anyhow::Error::new(e)
}

/// Creates and fills the phase's files: the cold ones (and those a
/// direct job uses) first, then the cache is dropped, then the warm ones
/// (which stay cached).
fn fill<D: BlockDevice>(fs: &Fs<D>, phase: &Phase<'_>) -> anyhow::Result<()> {
    let s = fs.session().map_err(err)?;
    let write = |cold: bool| -> anyhow::Result<bool> {
        let mut any = false;
        for spec in phase.files.iter().filter(|f| (f.cold || f.direct) == cold) {
            let f = fs.create(&spec.name).map_err(err)?;
            spec.fill(|bytes, off| s.write_all_at(&f, bytes, off).map_err(err))?;
            s.sync_data(&f).map_err(err)?;
            any = true;
        }
        Ok(any)
    };
    if write(true)? {
        s.drop_caches().map_err(err)?;
    }
    write(false)?;
    Ok(())
}

/// Runs `phase` on pollfs over `dev`: one sample per job.
pub fn pollfs<D: BlockDevice>(
    phase: &Phase<'_>,
    dev: D,
    engine: Engine,
    progress: &Progress,
) -> anyhow::Result<Vec<Sample>> {
    let cache = cache_pages(phase)?;
    let hosted = pollfs_hosted::config();
    // The whole working set may be dirty, as in the kernel baseline, whose
    // dirty limits are far above these file sizes.
    let config = pollfs_core::Config {
        cache_pages: cache,
        dirty_limit_pages: cache.saturating_sub(64).max(1),
        file_lock: engine == Engine::PollfsLocked,
        readahead_pages: if engine == Engine::PollfsNoReadahead {
            0
        } else {
            hosted.readahead_pages
        },
        log_data_pages: if engine == Engine::PollfsInPlaceSync {
            0
        } else {
            hosted.log_data_pages
        },
        background: if engine == Engine::PollfsSyncHome {
            None
        } else {
            hosted.background
        },
        ..hosted
    };
    let max_transfer = dev.geometry().max_transfer;
    // A real filesystem, with its log: syncs cost what they cost on disk.
    // A new uuid each time: the device may hold an earlier phase's log.
    let fs = Fs::format(dev, config, pollfs_device::new_uuid()).map_err(err)?;
    fill(&fs, phase)?;
    let before = fs.stats();
    let recs = run_threads(phase, engine.name(), progress, |j, thread, window| {
        let job = phase.jobs[j];
        // One session per thread, passed explicitly: the engine's own
        // path, with no per-operation lookup of a lent session.
        let s = fs.session().map_err(err)?;
        let files = phase.job_files[j]
            .iter()
            .map(|&f| fs.open(&phase.files[f].name))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        let mut rec = Recorder::new(window.measure_from)?;
        let mut pick = Picker::new(job, j, thread);
        let mut t = Thread {
            job,
            s: &s,
            files: &files,
            pick: &mut pick,
            rec: &mut rec,
            window,
        };
        if job.iodepth <= 1 {
            t.one_at_a_time()?;
        } else {
            t.in_flight()?;
        }
        Ok(rec)
    })?;
    let d = fs.stats().since(&before);
    let counters = Counters {
        jobs: phase.names(),
        syncs: recs.iter().map(|r| r.sync.ios).sum(),
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
        homed_pages: d.homed_pages,
        home_on_sync: d.home_on_sync,
        home_wakes: d.home_wakes,
        checkpoints: d.checkpoints,
        background_checkpoints: d.background_checkpoints,
    };
    recs.iter()
        .map(|r| Sample::new(engine.name(), r, Some(counters.clone())))
        .collect()
}

/// One read or write: direct ones through [`direct::io`], the others
/// through the page cache.
async fn one_io<D: BlockDevice>(
    s: &Session<D>,
    f: &File<D>,
    buf: &mut Buf,
    op: Op,
    direct: bool,
) -> anyhow::Result<()> {
    if direct {
        return direct::io(s, f, buf, op).await;
    }
    if op.read {
        s.read_at_async(f, buf.as_mut_slice(), op.offset)
            .await
            .map(|_| ())
            .map_err(err)
    } else {
        s.write_all_at_async(f, buf.as_slice(), op.offset)
            .await
            .map_err(err)
    }
}

type Io<'a> = Pin<Box<dyn Future<Output = (Buf, Instant, Op, anyhow::Result<()>)> + 'a>>;

/// One bench thread on pollfs.
struct Thread<'t, 'f, D: BlockDevice> {
    job: &'t Job,
    s: &'f Session<D>,
    files: &'f [File<D>],
    pick: &'t mut Picker,
    rec: &'t mut Recorder,
    window: Window,
}

impl<'f, D: BlockDevice> Thread<'_, 'f, D> {
    fn sync_after_write(&mut self, f: &File<D>) -> anyhow::Result<()> {
        let began = Instant::now();
        match self.pick.after_write() {
            Sync::None => return Ok(()),
            Sync::Data => self.s.sync_data(f).map_err(err)?,
            Sync::All => self.s.sync_all(f).map_err(err)?,
        }
        self.rec.sync(began);
        Ok(())
    }

    fn one_at_a_time(&mut self) -> anyhow::Result<()> {
        let mut buf = Buf::new(self.job.bs as usize);
        while self.window.open(self.rec, 0) {
            let op = self.pick.next_op();
            let f = &self.files[op.file];
            self.rec.submitted(1);
            let began = Instant::now();
            self.s
                .block_on(one_io(self.s, f, &mut buf, op, self.job.direct))?;
            self.rec.io(began, op.read, self.job.bs);
            if !op.read {
                self.sync_after_write(f)?;
            }
        }
        Ok(())
    }

    /// `iodepth` I/Os in flight on one thread: the engine's futures, polled
    /// round-robin like an SPDK reactor.
    fn in_flight(&mut self) -> anyhow::Result<()> {
        let (s, files, direct) = (self.s, self.files, self.job.direct);
        let depth = self.job.iodepth as usize;
        let bs = self.job.bs as usize;
        let mut slots: Vec<Option<Io<'f>>> = (0..depth).map(|_| None).collect();
        let mut spare: Vec<Buf> = (0..depth).map(|_| Buf::new(bs)).collect();
        let mut cx = Context::from_waker(Waker::noop());
        let mut busy = 0u64;
        loop {
            let mut polled = false;
            for slot in slots.iter_mut() {
                if slot.is_none() && self.window.open(self.rec, busy) {
                    let op = self.pick.next_op();
                    let mut buf = spare.pop().unwrap_or_else(|| Buf::new(bs));
                    let f = &files[op.file];
                    *slot = Some(Box::pin(async move {
                        let began = Instant::now();
                        let r = one_io(s, f, &mut buf, op, direct).await;
                        (buf, began, op, r)
                    }));
                    busy += 1;
                    self.rec.submitted(busy);
                }
                let Some(fut) = slot.as_mut() else {
                    continue;
                };
                polled = true;
                if let Poll::Ready((buf, began, op, r)) = fut.as_mut().poll(&mut cx) {
                    r?;
                    self.rec.io(began, op.read, self.job.bs);
                    spare.push(buf);
                    *slot = None;
                    busy -= 1;
                    if !op.read {
                        self.sync_after_write(&files[op.file])?;
                    }
                }
            }
            if !polled {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use pollfs_core::dev::ram::RamDevice;

    use super::*;
    use crate::bench::job::test_job;
    use crate::bench::plan;

    #[test]
    fn a_run_formats_over_the_log_an_earlier_run_left_on_the_device() {
        // A file: or vfio: device keeps the previous phase's (or bench's)
        // log; the next format must not take it for its own.
        let jobs = [test_job(&[
            ("rw", "write"),
            ("size", "64k"),
            ("number_ios", "32"),
            ("fdatasync", "1"),
            ("runtime", "1m"),
        ])];
        let phases = plan::phases(&jobs).unwrap();
        let dev =
            RamDevice::new(phases[0].device_bytes(), 4096, frames(&phases[0]).unwrap()).unwrap();
        for run in 0..3 {
            let s = pollfs(&phases[0], dev.clone(), Engine::Pollfs, &Progress::new())
                .unwrap_or_else(|e| panic!("run {run}: {e}"));
            assert_eq!(s[0].syncs(), 32, "run {run}");
        }
    }
}
