//! Commands and errors per leg: what `pollfs stat` shows for each leg of
//! a mirror or a stripe.
//!
//! Every volume queue (and a mirror's control section) owns a [`Fanout`]
//! with a block of counters of its own, one row per leg: its one writer
//! adds with a relaxed load and store, so the submission path shares no
//! cache line with other queues. The volume's [`Tally`] lists the live
//! blocks and keeps the sum of the closed ones; [`Tally::sum`] adds them up
//! when someone asks, which costs a lock and a sum, not the queues
//! anything.
//!
//! [`Fanout`]: super::fanout::Fanout

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::dev::CommandKind;
use crate::stats::DeviceCounts;
use crate::sync::Mutex;

/// One leg's counters in one queue's block.
#[derive(Debug, Default)]
struct Row {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    flushes: AtomicU64,
    deallocates: AtomicU64,
    write_zeroes: AtomicU64,
    errors: AtomicU64,
}

/// Adds `n` to `cell`; only the block's owner writes it.
#[inline]
fn bump(cell: &AtomicU64, n: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

impl Row {
    fn add_to(&self, c: &mut DeviceCounts) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        c.reads += get(&self.reads);
        c.read_bytes += get(&self.read_bytes);
        c.writes += get(&self.writes);
        c.write_bytes += get(&self.write_bytes);
        c.flushes += get(&self.flushes);
        c.deallocates += get(&self.deallocates);
        c.write_zeroes += get(&self.write_zeroes);
        c.errors += get(&self.errors);
    }
}

/// One queue's counters, a row per leg. Written by the queue that owns it
/// only; read by [`Tally::sum`].
#[derive(Debug)]
pub(crate) struct Block {
    rows: Vec<Row>,
}

impl Block {
    /// Counts one command of `kind` moving `bytes` sent to `leg`.
    #[inline]
    pub(crate) fn command(&self, leg: usize, kind: CommandKind, bytes: u64) {
        let Some(r) = self.rows.get(leg) else {
            return;
        };
        match kind {
            CommandKind::Read => {
                bump(&r.reads, 1);
                bump(&r.read_bytes, bytes);
            }
            CommandKind::Write => {
                bump(&r.writes, 1);
                bump(&r.write_bytes, bytes);
            }
            CommandKind::Flush => bump(&r.flushes, 1),
            CommandKind::Deallocate => bump(&r.deallocates, 1),
            CommandKind::WriteZeroes => bump(&r.write_zeroes, 1),
        }
    }
    /// Counts one command `leg` refused or failed.
    pub(crate) fn error(&self, leg: usize) {
        if let Some(r) = self.rows.get(leg) {
            bump(&r.errors, 1);
        }
    }
}

#[derive(Debug, Default)]
struct Blocks {
    live: Vec<Arc<Block>>,
    /// What closed queues counted, per leg.
    closed: Vec<DeviceCounts>,
}

/// A volume's counters: every queue's block, live and closed.
#[derive(Debug)]
pub(crate) struct Tally {
    legs: usize,
    blocks: Mutex<Blocks>,
}

impl Tally {
    /// A tally for a volume of `legs` legs.
    pub(crate) fn new(legs: usize) -> Arc<Tally> {
        Arc::new(Tally {
            legs,
            blocks: Mutex::new(Blocks {
                live: Vec::new(),
                closed: alloc::vec![DeviceCounts::default(); legs],
            }),
        })
    }
    /// A block for a new queue, counted from now on.
    pub(crate) fn open(&self) -> Arc<Block> {
        let block = Arc::new(Block {
            rows: (0..self.legs).map(|_| Row::default()).collect(),
        });
        self.blocks.lock().live.push(block.clone());
        block
    }
    /// Folds a closing queue's block into the closed sum.
    pub(crate) fn close(&self, block: &Arc<Block>) {
        let mut b = self.blocks.lock();
        let Blocks { live, closed } = &mut *b;
        if let Some(i) = live.iter().position(|l| Arc::ptr_eq(l, block)) {
            let gone = live.swap_remove(i);
            for (row, sum) in gone.rows.iter().zip(closed.iter_mut()) {
                row.add_to(sum);
            }
        }
    }
    /// Each leg's counts, by position: every block summed.
    pub(crate) fn sum(&self) -> Vec<DeviceCounts> {
        let b = self.blocks.lock();
        let mut out = b.closed.clone();
        for block in &b.live {
            for (row, sum) in block.rows.iter().zip(out.iter_mut()) {
                row.add_to(sum);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_and_closed_blocks_are_summed_per_leg() {
        let t = Tally::new(2);
        let a = t.open();
        let b = t.open();
        a.command(0, CommandKind::Write, 8192);
        b.command(0, CommandKind::Write, 4096);
        b.command(1, CommandKind::Read, 4096);
        b.error(1);
        // A leg past the end is not counted anywhere (and no panic).
        a.command(5, CommandKind::Flush, 0);
        t.close(&b);
        drop(b);
        a.command(1, CommandKind::Flush, 0);
        let s = t.sum();
        assert_eq!((s[0].writes, s[0].write_bytes), (2, 12288));
        assert_eq!((s[1].reads, s[1].flushes, s[1].errors), (1, 1, 1));
        assert_eq!(s[0].errors, 0);
    }
}
