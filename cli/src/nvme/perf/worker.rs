//! A perf worker: one thread that keeps `io_depth` commands in flight on
//! each of its queue pairs, polling them in turn (no interrupts, no
//! system calls), and times every command.

use std::time::Instant;

use anyhow::anyhow;
use hdrhistogram::Histogram;
use pollfs_core::dev::{Command, DeviceQueue, Tag};
use pollfs_core::rng::SplitMix64;
use pollfs_core::units::{FrameId, Lba, Nanos, PAGE_SIZE};

use super::args::Settings;

/// Per-command latency: 1 ns to one hour at 3 significant digits.
pub fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).map_err(|e| anyhow!("histogram: {e}"))
}

/// What one queue pair did while measuring.
#[derive(Debug)]
pub struct QueueStats {
    /// Queue pair number, from 0, over all workers.
    pub queue: u32,
    /// The CPU its worker was pinned to, if any.
    pub core: Option<usize>,
    /// The worker that polled it.
    pub worker: u32,
    pub ios: u64,
    pub errors: u64,
    /// Per-command latency in nanoseconds.
    pub latency: Histogram<u64>,
}

/// One queue pair's commands: its frames, its offsets, what is in flight.
struct Pair<Q> {
    q: Q,
    /// Frames of each slot.
    frames: Vec<Vec<FrameId>>,
    /// Slot s is in flight as `tags[s]` since `issued[s]`.
    tags: Vec<Option<Tag>>,
    issued: Vec<Instant>,
    cursor: u64,
    rng: SplitMix64,
    stats: QueueStats,
}

/// The geometry a worker needs.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Namespace size in units of one command.
    pub slots: u64,
    pub blocks_per_page: u64,
    /// Pages per command.
    pub pages: u32,
}

impl Layout {
    pub fn new(settings: &Settings, capacity_pages: u64, blocks_per_page: u64) -> Layout {
        let pages = settings.io_size / PAGE_SIZE as u32;
        Layout {
            slots: (capacity_pages / u64::from(pages)).max(1),
            blocks_per_page,
            pages,
        }
    }
}

/// One worker thread's queue pairs and settings.
pub struct Worker<'s, Q> {
    settings: &'s Settings,
    layout: Layout,
    pairs: Vec<Pair<Q>>,
    /// Commands issued once measuring started (for `number_ios`).
    issued: u64,
}

impl<'s, Q: DeviceQueue> Worker<'s, Q> {
    /// Worker `index`, with `queues` (numbered from `first_queue`) and
    /// the frames from `first_frame` on.
    pub fn new(
        settings: &'s Settings,
        layout: Layout,
        index: u32,
        queues: Vec<Q>,
        first_queue: u32,
        first_frame: u32,
        total_queues: u32,
    ) -> anyhow::Result<Worker<'s, Q>> {
        let depth = settings.io_depth;
        let mut pairs = Vec::new();
        for (k, q) in queues.into_iter().enumerate() {
            let n = first_queue + k as u32;
            let base = first_frame + k as u32 * depth * layout.pages;
            let frames = (0..depth)
                .map(|s| {
                    let f = base + s * layout.pages;
                    (f..f + layout.pages).map(FrameId).collect()
                })
                .collect();
            pairs.push(Pair {
                q,
                frames,
                tags: vec![None; depth as usize],
                issued: vec![Instant::now(); depth as usize],
                // Sequential streams start spread over the namespace.
                cursor: layout.slots / u64::from(total_queues) * u64::from(n),
                rng: SplitMix64::new(u64::from(n)),
                stats: QueueStats {
                    queue: n,
                    core: settings.cores[index as usize],
                    worker: index,
                    ios: 0,
                    errors: 0,
                    latency: new_histogram()?,
                },
            });
        }
        Ok(Worker {
            settings,
            layout,
            pairs,
            issued: 0,
        })
    }

    /// Issues and reaps until the time (or `number_ios`) is up; returns
    /// each queue pair's stats. Completions before `measure_from` are not
    /// counted.
    pub fn run(mut self, measure_from: Instant, end: Instant) -> anyhow::Result<Vec<QueueStats>> {
        let start = Instant::now();
        let mut done: Vec<(Tag, bool)> = Vec::new();
        loop {
            let now = Instant::now();
            let open = now < end
                && (self.settings.number_ios == 0 || self.issued < self.settings.number_ios);
            let mut in_flight = 0;
            for p in 0..self.pairs.len() {
                if open {
                    self.fill(p, measure_from)?;
                }
                let pair = &mut self.pairs[p];
                let nanos =
                    Nanos(u64::try_from(now.duration_since(start).as_nanos()).unwrap_or(u64::MAX));
                done.clear();
                pair.q.poll(nanos, pair.frames.len(), &mut |c| {
                    done.push((c.tag, c.result.is_ok()))
                });
                let reaped = Instant::now();
                for &(tag, ok) in &done {
                    let Some(slot) = pair.tags.iter().position(|t| *t == Some(tag)) else {
                        return Err(anyhow!("completion for unknown tag {tag:?}"));
                    };
                    pair.tags[slot] = None;
                    if reaped < measure_from {
                        continue;
                    }
                    let ns = reaped.duration_since(pair.issued[slot]).as_nanos();
                    pair.stats
                        .latency
                        .saturating_record(u64::try_from(ns).unwrap_or(u64::MAX).max(1));
                    pair.stats.ios += 1;
                    pair.stats.errors += u64::from(!ok);
                }
                in_flight += pair.q.in_flight();
            }
            if !open && in_flight == 0 {
                return Ok(self.pairs.into_iter().map(|p| p.stats).collect());
            }
        }
    }

    /// Submits into every free slot of pair `p`, within `number_ios`.
    fn fill(&mut self, p: usize, measure_from: Instant) -> anyhow::Result<()> {
        for slot in 0..self.settings.io_depth as usize {
            if self.pairs[p].tags[slot].is_some() {
                continue;
            }
            let limited = self.settings.number_ios > 0;
            if limited && self.issued >= self.settings.number_ios {
                return Ok(());
            }
            let (offset, read) = self.next_io(p);
            let pair = &mut self.pairs[p];
            let lba = Lba(offset * u64::from(self.layout.pages) * self.layout.blocks_per_page);
            let frames = &pair.frames[slot];
            let cmd = if read {
                Command::Read { lba, frames }
            } else {
                Command::Write {
                    lba,
                    frames,
                    fua: false,
                }
            };
            pair.tags[slot] = Some(pair.q.submit(&cmd).map_err(|e| anyhow!("submit: {e}"))?);
            let now = Instant::now();
            pair.issued[slot] = now;
            if now >= measure_from {
                self.issued += 1;
            }
        }
        Ok(())
    }

    /// The next command of pair `p`: (offset in commands, is a read).
    fn next_io(&mut self, p: usize) -> (u64, bool) {
        let slots = self.layout.slots;
        let pair = &mut self.pairs[p];
        let mut rand = || pair.rng.next_u64();
        let read = rand() % 100 < u64::from(self.settings.rwmixread);
        let offset = if self.settings.io_pattern.random() {
            rand() % slots
        } else {
            let at = pair.cursor;
            pair.cursor = (pair.cursor + 1) % slots;
            at
        };
        (offset, read)
    }
}

/// Frames the run needs: every slot of every queue pair.
pub fn frames(settings: &Settings) -> anyhow::Result<u32> {
    let pages = settings.io_size / PAGE_SIZE as u32;
    let pairs = u32::try_from(settings.cores.len())
        .ok()
        .and_then(|w| w.checked_mul(settings.qpairs_per_worker));
    settings
        .io_depth
        .checked_mul(pages)
        .zip(pairs)
        .and_then(|(per, pairs)| per.checked_mul(pairs))
        .ok_or_else(|| anyhow!("-q x -o x queue pairs is too large"))
}

/// How long a run lasts: the warm-up, then the measurement.
pub fn window(settings: &Settings, start: Instant) -> (Instant, Instant) {
    let measure_from = start + settings.warmup;
    (measure_from, measure_from + settings.time)
}
