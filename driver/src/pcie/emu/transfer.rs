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
use crate::pcie::prp;
use crate::spec::command::SubmissionEntry;
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

/// What a checked command does to the medium, in namespace bytes.
#[derive(Debug)]
pub(super) enum Work {
    /// Medium -> host.
    Read { pos: u64, len: usize },
    /// Host -> medium.
    Write { pos: u64, len: usize },
    /// Zeroes each `(pos, len)`.
    Zero(Vec<(u64, u64)>),
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
}

impl Transfer {
    /// Moves the data; the status to complete the command with.
    pub fn run(&self, mem: &EmuMemory, medium: &Medium) -> Status {
        let host = |len| HostData::of(mem, &self.sqe, len);
        let done = match &self.work {
            Work::Read { pos, len } => host(*len)
                .is_some_and(|h| medium.read_with(*pos, *len, |at, src| h.write(mem, at, src))),
            Work::Write { pos, len } => host(*len)
                .is_some_and(|h| medium.write_with(*pos, *len, |at, dst| h.read(mem, at, dst))),
            Work::Zero(ranges) => ranges.iter().all(|&(pos, len)| medium.zero(pos, len)),
        };
        if done {
            Status::SUCCESS
        } else {
            Status::new(StatusType::Generic, generic::DATA_TRANSFER_ERROR, true)
        }
    }
}
