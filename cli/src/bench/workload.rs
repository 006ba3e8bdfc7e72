//! Choosing each I/O: the same generator drives every engine, so they do
//! the same work.

use pollfs_core::rng::SplitMix64;

use super::job::{Job, Pattern};

/// One I/O.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    /// Index of the file.
    pub file: usize,
    /// Byte offset: the job's `offset` plus a multiple of `bs`.
    pub offset: u64,
    /// Read (true) or write.
    pub read: bool,
}

/// One thread's I/O generator (SplitMix64: seeded per thread, so runs are
/// repeatable).
pub struct Picker {
    rng: SplitMix64,
    rw: Pattern,
    mix: u64,
    bs: u64,
    base: u64,
    blocks: u64,
    files: usize,
    /// Next sequential offset per file.
    next: Vec<u64>,
    writes: u64,
    fsync: u64,
    fdatasync: u64,
}

/// What to do after a write, per the job's `fsync`/`fdatasync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    None,
    Data,
    All,
}

impl Picker {
    /// The generator of thread `thread` of `job`, the `index`th job of its
    /// phase (jobs running together draw different streams).
    pub fn new(job: &Job, index: usize, thread: u32) -> Picker {
        let blocks = (job.file_size() / job.bs).max(1);
        // Sequential threads start spread over the file.
        let start = blocks * u64::from(thread) / u64::from(job.numjobs.max(1)) * job.bs;
        Picker {
            rng: SplitMix64::new(0x5eed ^ (u64::from(thread) << 32) ^ ((index as u64) << 48)),
            rw: job.rw,
            mix: u64::from(job.rwmixread),
            bs: job.bs,
            base: job.offset,
            blocks,
            files: job.nrfiles.max(1) as usize,
            next: vec![start; job.nrfiles.max(1) as usize],
            writes: 0,
            fsync: u64::from(job.fsync),
            fdatasync: u64::from(job.fdatasync),
        }
    }

    fn rand(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// The next I/O.
    pub fn next_op(&mut self) -> Op {
        let r = self.rand();
        let file = (r % self.files as u64) as usize;
        let read = match self.rw {
            Pattern::Read | Pattern::RandRead => true,
            Pattern::Write | Pattern::RandWrite => false,
            Pattern::ReadWrite | Pattern::RandRw => (r >> 40) % 100 < self.mix,
        };
        let offset = if self.rw.sequential() {
            let at = self.next[file];
            let end = self.blocks * self.bs;
            self.next[file] = if at + self.bs >= end { 0 } else { at + self.bs };
            at
        } else {
            (r >> 8) % self.blocks * self.bs
        };
        Op {
            file,
            offset: self.base + offset,
            read,
        }
    }

    /// Call after each write: whether to sync now.
    pub fn after_write(&mut self) -> Sync {
        self.writes += 1;
        if self.fsync > 0 && self.writes % self.fsync == 0 {
            Sync::All
        } else if self.fdatasync > 0 && self.writes % self.fdatasync == 0 {
            Sync::Data
        } else {
            Sync::None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::bench::job::test_job as job;

    #[test]
    fn offsets_stay_in_the_jobs_region_and_mixes_follow_rwmixread() {
        let j = job(&[
            ("rw", "randrw"),
            ("rwmixread", "70"),
            ("offset", "1m"),
            ("size", "64k"),
        ]);
        let mut p = Picker::new(&j, 0, 0);
        let mut reads = 0;
        for _ in 0..10_000 {
            let op = p.next_op();
            assert!((1 << 20..(1 << 20) + (64 << 10)).contains(&op.offset));
            assert_eq!(op.offset % 4096, 0);
            reads += u32::from(op.read);
        }
        assert!((6500..7500).contains(&reads), "{reads}");
    }

    #[test]
    fn sequential_mixes_walk_the_file_and_jobs_draw_apart() {
        let j = job(&[("rw", "rw"), ("size", "16k")]);
        let mut p = Picker::new(&j, 0, 0);
        let offsets: Vec<u64> = (0..5).map(|_| p.next_op().offset).collect();
        assert_eq!(offsets, [0, 4096, 8192, 12288, 0]);
        let j = job(&[("rw", "randread")]);
        let (mut a, mut b) = (Picker::new(&j, 0, 0), Picker::new(&j, 1, 0));
        let same = (0..100)
            .filter(|_| a.next_op().offset == b.next_op().offset)
            .count();
        assert!(same < 10, "{same}");
    }
}
