//! Data movement of the emulated controller: between host memory (named
//! by a command's PRPs) and a buffer or the medium.
//!
//! A Read, Write, Write Zeroes or deallocate is checked and counted under
//! the controller's state lock, which hands back a [`Transfer`]; the
//! doorbell writer then runs it here with the lock released, so a small
//! command on one queue does not wait for a large one on another queue to
//! finish its copy (as on a real controller, whose queues are served in
//! parallel). Host memory locks each page and the medium each chunk, so
//! nothing here needs the state lock; the completion is posted under it
//! again afterwards.

use super::medium::Medium;
use super::memory::EmuMemory;
use super::protection::{PiCommand, PiStore};
use crate::pcie::prp;
use crate::spec::command::SubmissionEntry;
use crate::spec::protection::PiTuple;
use crate::spec::status::{generic, Status, StatusType};

const PAGE: usize = 4096;

/// The host memory a command's data lives in: `(bus address, bytes)` per
/// page, in order, as its PRPs name them.
pub(super) struct HostData {
    segs: Vec<(u64, usize)>,
}

impl HostData {
    /// The host pages of `len` bytes of `sqe`'s data (a PRP list is read
    /// from host memory); `None` for PRPs that do not describe them.
    pub fn of(mem: &EmuMemory, sqe: &SubmissionEntry, len: usize) -> Option<HostData> {
        let segs = prp::walk(sqe.prp1(), sqe.prp2(), len, PAGE, &mut |a| {
            mem.read_u64(a).ok()
        })
        .ok()?;
        Some(HostData { segs })
    }
    /// The host spans holding the data's bytes `[at, at + n)`: (bus
    /// address, offset from `at`, bytes).
    fn spans(&self, at: usize, n: usize) -> impl Iterator<Item = (u64, usize, usize)> + '_ {
        let end = at.saturating_add(n);
        let mut start = 0usize;
        self.segs.iter().filter_map(move |&(addr, len)| {
            let (s, e) = (start, start + len);
            start = e;
            let (lo, hi) = (s.max(at), e.min(end));
            (lo < hi).then(|| (addr.wrapping_add((lo - s) as u64), lo - at, hi - lo))
        })
    }
    /// Bytes described.
    fn len(&self) -> usize {
        self.segs.iter().map(|s| s.1).sum()
    }
    /// Device-side write: `src` to the host as the data's bytes from `at`.
    pub fn write(&self, mem: &EmuMemory, at: usize, src: &[u8]) -> bool {
        at + src.len() <= self.len()
            && self
                .spans(at, src.len())
                .all(|(addr, off, n)| mem.write(addr, &src[off..off + n]).is_ok())
    }
    /// Device-side read: fills `dst` from the host with the data's bytes
    /// from `at`.
    pub fn read(&self, mem: &EmuMemory, at: usize, dst: &mut [u8]) -> bool {
        at + dst.len() <= self.len()
            && self
                .spans(at, dst.len())
                .all(|(addr, off, n)| mem.read(addr, &mut dst[off..off + n]).is_ok())
    }
}

/// What a checked command does to the medium, in namespace bytes, with
/// its protection fields on a namespace formatted with PI.
#[derive(Debug)]
pub(super) enum Work {
    /// Medium -> host, each block's PI checked first; `misdirect` (a
    /// fault): reads of block `.0` are served from block `.1`, its data
    /// and its PI.
    Read {
        pos: u64,
        len: usize,
        pi: Option<PiCommand>,
        misdirect: Option<(u64, u64)>,
    },
    /// Host -> medium, each block's PI generated (PRACT).
    Write {
        pos: u64,
        len: usize,
        pi: Option<PiCommand>,
    },
    /// Zeroes each `(pos, len)`; on a protected namespace, the blocks'
    /// PI is generated for the zeroes (`pi`, Write Zeroes with PRACT) or
    /// left unwritten (deallocate, or no PRACT).
    Zero {
        ranges: Vec<(u64, u64)>,
        pi: Option<PiCommand>,
    },
}

/// A command checked and counted under the state lock, whose data moves
/// outside it.
#[derive(Debug)]
pub(super) struct Transfer {
    /// Its submission queue.
    pub qid: u16,
    /// The generation of that queue when the command was fetched: the
    /// completion is posted only into the same queue, not one deleted or
    /// re-created (by a reset) while the data moved.
    pub serial: u64,
    /// The command.
    pub sqe: SubmissionEntry,
    /// The data movement.
    pub work: Work,
    /// The namespace's block size, which PI is kept per.
    pub block_size: u32,
}

/// A block of zeroes, for the PI of zeroed blocks.
static ZERO_BLOCK: [u8; PAGE] = [0; PAGE];

impl Transfer {
    /// Moves the data, checking or generating PI in `store` (a protected
    /// namespace's); the status to complete the command with.
    pub fn run(&self, mem: &EmuMemory, medium: &Medium, store: Option<&PiStore>) -> Status {
        let host = |len| HostData::of(mem, &self.sqe, len);
        let bs = (self.block_size as usize).max(1);
        let lba_at = |pos: u64| pos / bs as u64;
        let mut check = Ok(());
        let done = match &self.work {
            Work::Read {
                pos,
                len,
                pi,
                misdirect,
            } => host(*len).is_some_and(|h| {
                let first = lba_at(*pos);
                medium.read_with(*pos, *len, |at, src| {
                    // A piece starts on a block boundary (chunks hold
                    // whole blocks).
                    src.chunks(bs).enumerate().all(|(k, block)| {
                        let off = at + k * bs;
                        let i = (off / bs) as u64;
                        let mut lba = first + i;
                        let mut other = Vec::new();
                        let mut data = block;
                        if let Some((from, to)) = *misdirect {
                            if from == lba {
                                other.resize(bs, 0);
                                let _ = medium.read_at(to * bs as u64, &mut other);
                                (data, lba) = (&other[..], to);
                            }
                        }
                        if let (Some(c), Some(s)) = (pi, store) {
                            if let Err(e) = c.check(i, s.get(lba), data) {
                                check = Err(e);
                                return false;
                            }
                        }
                        h.write(mem, off, data)
                    })
                })
            }),
            Work::Write { pos, len, pi } => host(*len).is_some_and(|h| {
                let first = lba_at(*pos);
                medium.write_with(*pos, *len, |at, dst| {
                    if !h.read(mem, at, dst) {
                        return false;
                    }
                    // Under the chunk's lock, with the data: a read sees
                    // both old or both new.
                    if let (Some(c), Some(s)) = (pi, store) {
                        for (k, block) in dst.chunks(bs).enumerate() {
                            let i = (at / bs + k) as u64;
                            s.set(first + i, c.generate(i, block));
                        }
                    }
                    true
                })
            }),
            Work::Zero { ranges, pi } => ranges.iter().all(|&(pos, len)| {
                let zeroed = medium.zero(pos, len);
                if let Some(s) = store {
                    let zeros = ZERO_BLOCK.get(..bs).unwrap_or(&[]);
                    for i in 0..len / bs as u64 {
                        let t = match pi {
                            Some(c) => c.generate(i, zeros),
                            None => PiTuple::UNWRITTEN,
                        };
                        s.set(lba_at(pos) + i, t);
                    }
                }
                zeroed
            }),
        };
        if let Err(e) = check {
            return e.status();
        }
        if done {
            Status::SUCCESS
        } else {
            Status::new(StatusType::Generic, generic::DATA_TRANSFER_ERROR, true)
        }
    }
}
