//! What a run does: a few files, each task a list of operations on them.
//!
//! Offsets, lengths and sizes are multiples of [`WORD`], and every word a
//! write stores names the operation and the word ([`stamp`]), so every word
//! read is traced to exactly one write (or is zero). Byte patterns that
//! repeat across operations could not tell two writers apart.

use std::fmt;

use super::choice::Choices;

/// The unit of attribution, in bytes.
pub const WORD: u64 = 8;
const PAGE: u64 = 4096;

/// One file operation. Offsets and lengths are in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `write_at` of a stamped buffer.
    Write {
        /// File index.
        file: usize,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// `write_direct` (page-aligned) of a stamped buffer.
    DirectWrite {
        /// File index.
        file: usize,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// `read_direct` (page-aligned).
    DirectRead {
        /// File index.
        file: usize,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// `read_at`.
    Read {
        /// File index.
        file: usize,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// `set_len`.
    SetLen {
        /// File index.
        file: usize,
        /// New size.
        size: u64,
    },
    /// `punch_hole`.
    Punch {
        /// File index.
        file: usize,
        /// Offset.
        off: u64,
        /// Length.
        len: u64,
    },
    /// `sync_data`.
    Sync {
        /// File index.
        file: usize,
    },
    /// `rename` of `NAMES[from]` to `NAMES[to]` (replacing it).
    Rename {
        /// Index into [`NAMES`].
        from: usize,
        /// Index into [`NAMES`].
        to: usize,
    },
    /// `remove` (unlink) of `NAMES[name]`.
    Unlink {
        /// Index into [`NAMES`].
        name: usize,
    },
    /// `create` of `NAMES[name]`.
    Create {
        /// Index into [`NAMES`].
        name: usize,
    },
    /// `lookup` of `NAMES[name]`.
    Lookup {
        /// Index into [`NAMES`].
        name: usize,
    },
    /// `mknod` of `NAMES[name]` as special file `SPECIAL[kind]` (a FIFO, a
    /// socket, a character or a block device node, with device number
    /// [`special_rdev`]).
    Mknod {
        /// Index into [`NAMES`].
        name: usize,
        /// Index into [`SPECIAL`].
        kind: usize,
    },
    /// One step of the log's background work
    /// (`Session::background_step`: logged pages written home, then a
    /// checkpoint if one is due), as the hosted layer's thread takes it,
    /// here at a point the schedule chooses among the other operations.
    /// It changes no file's bytes or size; its answer is the pages and
    /// checkpoints it wrote.
    Background,
}

/// The special files [`Op::Mknod`] makes.
pub const SPECIAL: [pollfs_core::Kind; 4] = [
    pollfs_core::Kind::Fifo,
    pollfs_core::Kind::Socket,
    pollfs_core::Kind::CharDev,
    pollfs_core::Kind::BlockDev,
];

/// The device number [`Op::Mknod`] gives special file `kind` (a device
/// node keeps it; the others have none).
pub fn special_rdev(kind: usize) -> u64 {
    if SPECIAL[kind].is_device() {
        (kind as u64 + 1) << 8 | 7
    } else {
        0
    }
}

/// Names the namespace operations use; the initial files are `f0`, `f1`.
pub const NAMES: [&str; 4] = ["f0", "f1", "g0", "g1"];

/// No data file: what [`Op::file`] says for a namespace operation.
pub const NO_FILE: usize = usize::MAX;

impl Op {
    /// The file the operation works on.
    pub fn file(&self) -> usize {
        match *self {
            Op::Write { file, .. }
            | Op::Read { file, .. }
            | Op::DirectWrite { file, .. }
            | Op::DirectRead { file, .. }
            | Op::SetLen { file, .. }
            | Op::Punch { file, .. }
            | Op::Sync { file } => file,
            Op::Rename { .. }
            | Op::Unlink { .. }
            | Op::Create { .. }
            | Op::Lookup { .. }
            | Op::Mknod { .. }
            | Op::Background => NO_FILE,
        }
    }

    /// The operation as the oracles judge it: a direct write or read has
    /// the effect and answer of a buffered one.
    pub fn plain(&self) -> Op {
        match *self {
            Op::DirectWrite { file, off, len } => Op::Write { file, off, len },
            Op::DirectRead { file, off, len } => Op::Read { file, off, len },
            op => op,
        }
    }

    /// True for a namespace operation.
    pub fn is_namespace(&self) -> bool {
        self.file() == NO_FILE && *self != Op::Background
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Op::Write { file, off, len } => write!(f, "write f{file} [{off}, +{len})"),
            Op::Read { file, off, len } => write!(f, "read f{file} [{off}, +{len})"),
            Op::DirectWrite { file, off, len } => {
                write!(f, "direct write f{file} [{off}, +{len})")
            }
            Op::DirectRead { file, off, len } => write!(f, "direct read f{file} [{off}, +{len})"),
            Op::SetLen { file, size } => write!(f, "set_len f{file} {size}"),
            Op::Punch { file, off, len } => write!(f, "punch f{file} [{off}, +{len})"),
            Op::Sync { file } => write!(f, "sync f{file}"),
            Op::Rename { from, to } => write!(f, "rename {} -> {}", NAMES[from], NAMES[to]),
            Op::Unlink { name } => write!(f, "unlink {}", NAMES[name]),
            Op::Create { name } => write!(f, "create {}", NAMES[name]),
            Op::Lookup { name } => write!(f, "lookup {}", NAMES[name]),
            Op::Mknod { name, kind } => write!(f, "mknod {} {:?}", NAMES[name], SPECIAL[kind]),
            Op::Background => write!(f, "background step"),
        }
    }
}

/// A whole run's setup and operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Initial size of each file, written with stamps by setup writes.
    pub initial: Vec<u64>,
    /// Page-cache size (tiny, to force eviction).
    pub cache_pages: u32,
    /// Readahead window in pages (0: off).
    pub readahead_pages: u32,
    /// Device block size: 512 or 4096.
    pub block_size: u32,
    /// Chance, in percent, that a frame copy is a preemption point.
    pub preempt_percent: u8,
    /// Setup leaves the initial data dirty instead of syncing it.
    pub dirty_start: bool,
    /// Run on a formatted filesystem (syncs go through the journal's group
    /// commit) instead of an in-memory one.
    pub journal: bool,
    /// Each task's operations, run in order on its own session.
    pub tasks: Vec<Vec<Op>>,
}

/// The word stamp of operation `op` at word `w` of the file: never zero.
pub fn stamp(op: usize, w: u64) -> u64 {
    ((op as u64 + 1) << 32) | (w + 1)
}

/// The bytes `op` writes at `off`.
pub fn stamped(op: usize, off: u64, len: u64) -> Vec<u8> {
    (off / WORD..(off + len) / WORD)
        .flat_map(|w| stamp(op, w).to_le_bytes())
        .collect()
}

/// The largest size any operation reaches (keeps files a few pages long).
pub const SPAN: u64 = 12 * PAGE;

impl Scenario {
    /// Draws a scenario from `c`.
    ///
    /// The mix of operations varies between runs, so that some runs pit
    /// shrinking operations against readers and others against writers.
    pub fn generate(c: &mut Choices) -> Scenario {
        let mix = MIXES[c.below(MIXES.len() as u64) as usize];
        let files = if mix == MIXES[0] {
            1 + c.below(2) as usize
        } else {
            1
        };
        let initial = (0..files).map(|_| offset(c, None)).collect();
        // Half the runs aim every operation at a few neighbouring pages, so
        // that they collide more often.
        let hot = c.chance(50).then(|| c.below(SPAN / PAGE));
        let ntasks = 2 + c.below(3) as usize;
        let tasks = (0..ntasks)
            .map(|_| {
                let n = 1 + c.below(3) as usize;
                if c.chance(15) {
                    return scan(c, files, n + 1);
                }
                (0..n).map(|_| op(c, files, &mix, hot)).collect()
            })
            .collect();
        Scenario {
            initial,
            cache_pages: 4 + c.below(5) as u32,
            readahead_pages: [0, 4, 8][c.below(3) as usize],
            block_size: if c.chance(25) { 512 } else { 4096 },
            preempt_percent: [0, 20, 50, 90][c.below(4) as usize],
            dirty_start: c.chance(30),
            journal: false,
            tasks,
        }
    }

    /// Draws a sync-heavy scenario from `c`: several tasks syncing one file
    /// while others write to it (inside EOF, mostly), on a cache a few pages
    /// large, on a formatted filesystem most of the time. This is the shape
    /// of the deadlock where two syncs each kept pages the other waited for.
    pub fn generate_syncs(c: &mut Choices) -> Scenario {
        let initial = SPAN - c.below(4) * PAGE;
        // Most writes land in a few hot pages, so that syncs meet pages
        // written again while they write them back.
        let hot = c.below(initial / PAGE - 3) * PAGE;
        let syncers = 2 + c.below(2) as usize;
        let writers = 1 + c.below(2) as usize;
        let mut tasks = Vec::new();
        for _ in 0..syncers {
            let n = 2 + c.below(3) as usize;
            tasks.push(
                (0..n)
                    .map(|_| {
                        if c.chance(20) {
                            write_op(c, initial, hot)
                        } else {
                            Op::Sync { file: 0 }
                        }
                    })
                    .collect(),
            );
        }
        for _ in 0..writers {
            let n = 2 + c.below(3) as usize;
            tasks.push(
                (0..n)
                    .map(|_| match c.below(10) {
                        0 => Op::Punch {
                            file: 0,
                            off: offset(c, None),
                            len: length(c),
                        },
                        1 => Op::Sync { file: 0 },
                        _ => write_op(c, initial, hot),
                    })
                    .collect(),
            );
        }
        Scenario {
            initial: vec![initial],
            cache_pages: 4 + c.below(5) as u32,
            readahead_pages: [0, 4][c.below(2) as usize],
            block_size: if c.chance(25) { 512 } else { 4096 },
            preempt_percent: [0, 20, 50][c.below(3) as usize],
            dirty_start: c.chance(50),
            journal: c.chance(70),
            tasks,
        }
    }

    /// Draws a scenario of direct writes and reads racing buffered ones,
    /// truncates, grows, punches and syncs of one file, on a cache of a few
    /// pages (direct I/O borrows its frames from it), half the time on a
    /// formatted filesystem.
    pub fn generate_direct(c: &mut Choices) -> Scenario {
        let initial = offset(c, None);
        let hot = c.chance(50).then(|| c.below(SPAN / PAGE));
        let ntasks = 2 + c.below(3) as usize;
        let tasks = (0..ntasks)
            .map(|_| {
                (0..1 + c.below(4))
                    .map(|_| match c.below(10) {
                        0..=2 => direct_op(c, hot, true),
                        3 | 4 => direct_op(c, hot, false),
                        _ => op(c, 1, &MIXES[0], hot),
                    })
                    .collect()
            })
            .collect();
        Scenario {
            initial: vec![initial],
            cache_pages: 4 + c.below(5) as u32,
            readahead_pages: [0, 4][c.below(2) as usize],
            block_size: if c.chance(25) { 512 } else { 4096 },
            preempt_percent: [0, 20, 50][c.below(3) as usize],
            dirty_start: c.chance(50),
            journal: c.chance(50),
            tasks,
        }
    }

    /// Draws a sync-heavy scenario ([`Scenario::generate_syncs`], always on
    /// a formatted filesystem) with one more task that takes steps of the
    /// log's background work (`Session::background_step`) between the
    /// others' operations, where the schedule puts them: the write-home
    /// and checkpoint steps the hosted thread runs, racing syncs, writes
    /// and punches of the pages they write home.
    pub fn generate_background(c: &mut Choices) -> Scenario {
        let mut s = Scenario::generate_syncs(c);
        s.journal = true;
        let steps = 2 + c.below(5) as usize;
        s.tasks.push(vec![Op::Background; steps]);
        s
    }

    /// Every operation with its global id (setup writes come first, ids
    /// `0..files`).
    pub fn numbered(&self) -> Vec<(usize, usize, Op)> {
        let mut id = self.initial.len();
        let mut v = Vec::new();
        for (t, ops) in self.tasks.iter().enumerate() {
            for op in ops {
                v.push((id, t, *op));
                id += 1;
            }
        }
        v
    }
}

/// An offset or size: page-aligned, near a page edge, or any word.
fn offset(c: &mut Choices, hot: Option<u64>) -> u64 {
    let page = match hot {
        Some(h) => (h + c.below(4)).saturating_sub(2).min(SPAN / PAGE - 1),
        None => c.below(SPAN / PAGE),
    };
    match c.below(3) {
        0 => page * PAGE,
        1 => (page * PAGE + PAGE - WORD * (1 + c.below(4))).min(SPAN),
        _ => c.below(SPAN / WORD) * WORD,
    }
}

impl Scenario {
    /// Draws a scenario of namespace operations (rename, unlink, create,
    /// mknod of special files, lookup over a few names, the initial files
    /// among them) racing
    /// writes, reads and syncs of the initial files through handles opened
    /// before the run, so a file renamed or unlinked under a writer keeps
    /// its data.
    pub fn generate_names(c: &mut Choices) -> Scenario {
        let files = 1 + c.below(2) as usize;
        let initial = (0..files).map(|_| offset(c, None)).collect();
        let ntasks = 2 + c.below(3) as usize;
        let tasks = (0..ntasks)
            .map(|_| {
                (0..1 + c.below(4))
                    .map(|_| {
                        let name = c.below(NAMES.len() as u64) as usize;
                        match c.below(11) {
                            0 | 1 => Op::Rename {
                                from: name,
                                to: c.below(NAMES.len() as u64) as usize,
                            },
                            2 => Op::Unlink { name },
                            3 => Op::Create { name },
                            4 => Op::Lookup { name },
                            10 => Op::Mknod {
                                name,
                                kind: c.below(SPECIAL.len() as u64) as usize,
                            },
                            5 => Op::Sync {
                                file: c.below(files as u64) as usize,
                            },
                            _ => op(c, files, &MIXES[2], None),
                        }
                    })
                    .collect()
            })
            .collect();
        Scenario {
            initial,
            cache_pages: 4 + c.below(5) as u32,
            readahead_pages: [0, 4][c.below(2) as usize],
            block_size: 4096,
            preempt_percent: [0, 20, 50][c.below(3) as usize],
            dirty_start: c.chance(50),
            journal: c.chance(50),
            tasks,
        }
    }
}

/// A write of one to four pages, aligned or not, in the four pages from
/// `hot` most of the time, inside `size` unless the draw lets it extend
/// the file.
fn write_op(c: &mut Choices, size: u64, hot: u64) -> Op {
    let len = PAGE * (1 + c.below(4)) - if c.chance(30) { WORD * c.below(8) } else { 0 };
    let limit = if c.chance(15) { SPAN } else { size };
    let off = if c.chance(70) {
        hot + c.below(4 * PAGE / WORD) * WORD
    } else {
        c.below(limit.saturating_sub(len) / WORD + 1) * WORD
    };
    Op::Write {
        file: 0,
        off: off.min(SPAN - len),
        len,
    }
}

/// A direct write or read of one to three pages, near `hot` if given.
fn direct_op(c: &mut Choices, hot: Option<u64>, write: bool) -> Op {
    let page = match hot {
        Some(h) => (h + c.below(4)).saturating_sub(2),
        None => c.below(SPAN / PAGE),
    }
    .min(SPAN / PAGE - 1);
    let len = (PAGE * (1 + c.below(3))).min(SPAN - page * PAGE);
    let (file, off) = (0, page * PAGE);
    if write {
        Op::DirectWrite { file, off, len }
    } else {
        Op::DirectRead { file, off, len }
    }
}

fn length(c: &mut Choices) -> u64 {
    match c.below(3) {
        0 => PAGE * (1 + c.below(3)),
        1 => WORD * (1 + c.below(64)),
        _ => WORD * (1 + c.below(3 * PAGE / WORD)),
    }
}

/// Weights of write, read, shrink, grow, punch and sync.
type Mix = [u64; 6];
const MIXES: [Mix; 3] = [
    [3, 3, 1, 1, 1, 1],
    // Shrinking operations against readers.
    [1, 4, 2, 1, 3, 0],
    // Writers against size changes.
    [5, 2, 2, 2, 1, 1],
];

fn op(c: &mut Choices, files: usize, mix: &Mix, hot: Option<u64>) -> Op {
    let file = c.below(files as u64) as usize;
    let off = offset(c, hot);
    let len = length(c).min(SPAN - off).max(WORD);
    let mut k = c.below(mix.iter().sum());
    let mut kind = 0;
    while k >= mix[kind] {
        k -= mix[kind];
        kind += 1;
    }
    match kind {
        0 => Op::Write { file, off, len },
        1 => Op::Read { file, off, len },
        2 => Op::SetLen { file, size: off },
        3 => Op::SetLen {
            file,
            size: (off + len).min(SPAN),
        },
        4 => Op::Punch { file, off, len },
        _ => Op::Sync { file },
    }
}

/// `n` sequential reads of one file, which grow the readahead window.
fn scan(c: &mut Choices, files: usize, n: usize) -> Vec<Op> {
    let file = c.below(files as u64) as usize;
    let len = PAGE / 2 * (1 + c.below(4));
    let start = c.below(SPAN / PAGE / 2) * PAGE;
    (0..n as u64)
        .map(|i| Op::Read {
            file,
            off: start + i * len,
            len,
        })
        .collect()
}
