//! The `races` fuzz input: a scenario and a schedule, decoded with
//! `arbitrary` so that libFuzzer's mutations stay meaningful (changing one
//! operation does not reshuffle the whole run).

use arbitrary::Arbitrary;
use pollfs_host_tests::sched::choice::Choices;
use pollfs_host_tests::sched::scenario::{Op, Scenario, SPAN, WORD};

/// At most this many tasks and operations per task are used.
const MAX_TASKS: usize = 4;
const MAX_OPS: usize = 4;
const PAGE: u64 = 4096;

/// One fuzzed operation; offsets and lengths are in words, folded into the
/// file span.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum RaceOp {
    /// `write_at`.
    Write(bool, u16, u16),
    /// `read_at`.
    Read(bool, u16, u16),
    /// `set_len`.
    SetLen(bool, u16),
    /// `punch_hole`.
    Punch(bool, u16, u16),
    /// `sync_data`.
    Sync(bool),
    /// Sequential reads (readahead): start page, half-pages per read, count.
    Scan(bool, u8, u8, u8),
}

/// A whole fuzzed run.
#[derive(Arbitrary, Clone, Debug)]
pub struct RaceInput {
    /// Use a second file.
    pub two_files: bool,
    /// Initial sizes, in words.
    pub initial: [u16; 2],
    /// Cache pages beyond the minimum of 4 (`cache % 5`); the top bit runs
    /// on a formatted filesystem, so syncs go through the journal.
    pub cache: u8,
    /// Readahead choice.
    pub readahead: u8,
    /// 512-byte device blocks.
    pub small_blocks: bool,
    /// Preemption chance in percent (folded to 0..100).
    pub preempt: u8,
    /// Leave the initial data dirty.
    pub dirty_start: bool,
    /// The tasks.
    pub tasks: Vec<Vec<RaceOp>>,
    /// The schedule's bytes.
    pub schedule: Vec<u8>,
}

fn off(w: u16) -> u64 {
    (u64::from(w) * WORD) % SPAN
}

fn len(off: u64, w: u16) -> u64 {
    let l = (u64::from(w) % (3 * PAGE / WORD) + 1) * WORD;
    l.min(SPAN - off).max(WORD)
}

impl RaceInput {
    /// The scenario and the schedule this input stands for.
    pub fn decode(&self) -> (Scenario, Choices) {
        let files = if self.two_files { 2 } else { 1 };
        let f = |b: bool| usize::from(b && files == 2);
        let mut tasks: Vec<Vec<Op>> = Vec::new();
        for ops in self.tasks.iter().take(MAX_TASKS) {
            let mut v = Vec::new();
            for op in ops.iter().take(MAX_OPS) {
                match *op {
                    RaceOp::Write(b, o, l) => v.push(Op::Write {
                        file: f(b),
                        off: off(o),
                        len: len(off(o), l),
                    }),
                    RaceOp::Read(b, o, l) => v.push(Op::Read {
                        file: f(b),
                        off: off(o),
                        len: len(off(o), l),
                    }),
                    RaceOp::SetLen(b, s) => v.push(Op::SetLen {
                        file: f(b),
                        size: (u64::from(s) * WORD) % (SPAN + WORD),
                    }),
                    RaceOp::Punch(b, o, l) => v.push(Op::Punch {
                        file: f(b),
                        off: off(o),
                        len: len(off(o), l),
                    }),
                    RaceOp::Sync(b) => v.push(Op::Sync { file: f(b) }),
                    RaceOp::Scan(b, start, half, n) => {
                        let l = PAGE / 2 * (1 + u64::from(half % 4));
                        let s = u64::from(start) % (SPAN / PAGE) * PAGE;
                        for i in 0..u64::from(n % 6) + 1 {
                            v.push(Op::Read {
                                file: f(b),
                                off: s + i * l,
                                len: l,
                            });
                        }
                    }
                }
            }
            tasks.push(v);
        }
        let scenario = Scenario {
            initial: self.initial[..files]
                .iter()
                .map(|&w| (u64::from(w) * WORD) % (SPAN + WORD))
                .collect(),
            cache_pages: 4 + u32::from(self.cache % 5),
            readahead_pages: [0, 4, 8][usize::from(self.readahead % 3)],
            block_size: if self.small_blocks { 512 } else { 4096 },
            preempt_percent: self.preempt % 100,
            dirty_start: self.dirty_start,
            journal: self.cache & 0x80 != 0,
            tasks,
        };
        (scenario, Choices::from_bytes(&self.schedule))
    }
}
