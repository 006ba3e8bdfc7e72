//! The emulated controller's register file, queues and completion posting.
//!
//! Commands are processed inside the SQ tail doorbell write, on the
//! writer's thread. Queue state, counters and fault knobs live in one
//! [`State`] behind one lock; a command that moves data (Read, Write,
//! Write Zeroes, deallocate) is fetched, checked and counted under it,
//! moves its data with the lock released ([`super::transfer`]), and is
//! completed under it again, so each queue's doorbell writer serves that
//! queue in parallel with the others, as a real controller's queues are
//! served. One queue's commands still run one after another in
//! submission order, so a run on one queue stays deterministic: what the
//! device does depends only on what the driver wrote and the time the
//! driver passed to `tick`.
//!
//! Two writers of one queue's doorbell (the admin queue, a hostile host)
//! share its commands: each is fetched once, by whichever takes it first
//! under the lock, and completed once, by the same writer. A command whose
//! queue is deleted or re-created (a controller reset) while its data
//! moves is not completed: each queue carries a serial number, checked
//! when the lock is taken again.
//!
//! The driver calls `tick` on every poll; one with no delayed completion
//! to release (no latency or reorder fault) only records the time and
//! takes no lock, so polling threads do not contend with the queues'
//! doorbell writers.

use std::collections::VecDeque;
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use pollfs_core::rng::SplitMix64;
use pollfs_core::units::Nanos;
use spin::{Mutex, MutexGuard};

use super::commands::Exec;
use super::faults::{Faults, Hostile};
use super::medium::Medium;
use super::memory::EmuMemory;
use super::protection::{Metadata, PiStore};
use super::transfer::Transfer;
use crate::pcie::hal::Registers;
use crate::spec::command::{SubmissionEntry, SQE_SIZE};
use crate::spec::completion::{CompletionEntry, CQE_SIZE};
use crate::spec::protection::{PiCheck, PiTuple, PiType};
use crate::spec::regs::{decode_doorbell, offset, Aqa, Cap, Cc, Csts};
use crate::spec::status::Status;

/// Shape of the emulated controller and its one namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmuConfig {
    /// Namespace size in bytes (rounded down to whole blocks).
    pub bytes: u64,
    /// Logical block size: 512 or 4096.
    pub block_size: u32,
    /// MDTS exponent (in 4 KiB pages); 0 means unlimited.
    pub mdts: u8,
    /// Largest queue the controller accepts (CAP.MQES + 1).
    pub max_queue_entries: u16,
    /// I/O queues the controller can grant.
    pub max_io_queues: u16,
    /// Doorbell stride exponent (CAP.DSTRD).
    pub dstrd: u8,
    /// CAP.TO in 500 ms units.
    pub timeout_500ms: u8,
    /// Metadata and protection information per block (none by default).
    pub metadata: Metadata,
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            bytes: 64 << 20,
            block_size: 512,
            mdts: 5,
            max_queue_entries: 1024,
            max_io_queues: 64,
            dstrd: 0,
            timeout_500ms: 2,
            metadata: Metadata::default(),
        }
    }
}

/// Command counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmuStats {
    /// Read commands executed.
    pub reads: u64,
    /// Write commands executed.
    pub writes: u64,
    /// Writes with FUA.
    pub fua_writes: u64,
    /// Flush commands.
    pub flushes: u64,
    /// Write Zeroes commands.
    pub write_zeroes: u64,
    /// Dataset Management commands.
    pub dsm: u64,
    /// Admin commands.
    pub admin: u64,
    /// Abort commands.
    pub aborts: u64,
    /// Controller resets (CC.EN 1 -> 0).
    pub resets: u64,
    /// Shutdown notifications (CC.SHN set).
    pub shutdowns: u64,
    /// I/O commands failed by injection.
    pub injected: u64,
    /// Reads, Writes and Write Zeroes executed with protection
    /// information (PRACT and PRCHK) on a protected namespace.
    pub pi_commands: u64,
    /// Commands failed by an end-to-end check (guard, application or
    /// reference tag).
    pub pi_errors: u64,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Sq {
    pub base: u64,
    pub entries: u16,
    pub head: u16,
    /// The last tail the host wrote to the doorbell.
    pub tail: u16,
    pub cqid: u16,
    /// Unique per queue creation (never reused, not even across resets).
    pub serial: u64,
}

#[derive(Debug)]
pub(super) struct Cq {
    pub base: u64,
    pub entries: u16,
    pub tail: u16,
    pub head: u16,
    pub phase: bool,
    pub overflow: VecDeque<CompletionEntry>,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Held {
    pub cqid: u16,
    pub entry: CompletionEntry,
    pub ready_at: Nanos,
}

/// Device state behind the register file.
#[derive(Debug)]
pub(super) struct State {
    pub config: EmuConfig,
    pub mem: EmuMemory,
    pub cap: Cap,
    pub cc: Cc,
    pub csts: u32,
    pub aqa: u32,
    pub asq: u64,
    pub acq: u64,
    pub sqs: Vec<Option<Sq>>,
    pub cqs: Vec<Option<Cq>>,
    pub blocks: u64,
    /// The next [`Sq::serial`].
    pub serials: u64,
    pub granted_queues: u16,
    pub now: Nanos,
    pub held: Vec<Held>,
    /// Commands whose completion was dropped: (cqid, entry).
    pub stuck: Vec<(u16, CompletionEntry)>,
    pub faults: Faults,
    pub stats: EmuStats,
    pub rng: SplitMix64,
    /// The namespace's PI type, when it is formatted with PI and the
    /// controller keeps its tuples.
    pub pi_type: Option<PiType>,
    /// Whether the format's data can be moved at all (see
    /// [`Metadata::served`]).
    pub served: bool,
}

/// The block size `config` asks for (512 unless 4096) and the namespace's
/// size in blocks.
fn geometry(config: &EmuConfig) -> (u32, u64) {
    let block_size = if config.block_size == 4096 { 4096 } else { 512 };
    (block_size, config.bytes / u64::from(block_size))
}

impl State {
    fn new(config: EmuConfig, mem: EmuMemory) -> State {
        let (block_size, blocks) = geometry(&config);
        let mqes = config.max_queue_entries.clamp(2, 4096) - 1;
        let queues = usize::from(config.max_io_queues) + 1;
        State {
            config: EmuConfig {
                block_size,
                ..config
            },
            mem,
            cap: Cap::build(mqes, config.timeout_500ms, config.dstrd, 0, 4),
            cc: Cc(0),
            csts: 0,
            aqa: 0,
            asq: 0,
            acq: 0,
            sqs: (0..queues).map(|_| None).collect(),
            cqs: (0..queues).map(|_| None).collect(),
            blocks,
            serials: 0,
            granted_queues: 0,
            now: Nanos(0),
            held: Vec::new(),
            stuck: Vec::new(),
            faults: Faults::default(),
            stats: EmuStats::default(),
            rng: SplitMix64::new(0x9e37_79b9_7f4a_7c15),
            pi_type: config.metadata.pi_type(),
            served: config.metadata.served(),
        }
    }

    pub fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// A serial number for a new submission queue.
    pub fn next_serial(&mut self) -> u64 {
        self.serials += 1;
        self.serials
    }

    fn bar_size(&self) -> usize {
        offset::DOORBELLS + self.sqs.len() * 2 * (4usize << self.cap.doorbell_stride())
    }

    /// CC.EN 1 -> 0: the controller forgets every queue and command.
    fn controller_reset(&mut self) {
        self.sqs.iter_mut().for_each(|q| *q = None);
        self.cqs.iter_mut().for_each(|q| *q = None);
        self.held.clear();
        self.stuck.clear();
        self.granted_queues = 0;
        self.csts = 0;
        self.stats.resets += 1;
    }

    /// CC.EN 0 -> 1: checks the configuration and sets up the admin queue.
    fn enable(&mut self) {
        let cc = self.cc;
        let aqa = Aqa(self.aqa);
        let bad = cc.iosqes() != 6
            || cc.iocqes() != 4
            || cc.mps_shift() != 12
            || (cc.0 >> 4) & 7 != 0
            || self.asq == 0
            || self.acq == 0
            || self.asq % 4096 != 0
            || self.acq % 4096 != 0
            || aqa.sq_entries() < 2
            || aqa.cq_entries() < 2;
        if bad {
            self.csts |= Csts::CFS;
            return;
        }
        let serial = self.next_serial();
        self.sqs[0] = Some(Sq {
            base: self.asq,
            entries: aqa.sq_entries() as u16,
            head: 0,
            tail: 0,
            cqid: 0,
            serial,
        });
        self.cqs[0] = Some(Cq {
            base: self.acq,
            entries: aqa.cq_entries() as u16,
            tail: 0,
            head: 0,
            phase: true,
            overflow: VecDeque::new(),
        });
        if !self.faults.never_ready {
            self.csts |= Csts::RDY;
        }
    }

    fn write_cc(&mut self, value: u32) {
        let old = self.cc;
        self.cc = Cc(value);
        if old.enabled() && !self.cc.enabled() {
            self.controller_reset();
        } else if !old.enabled() && self.cc.enabled() {
            self.enable();
        }
        if self.cc.shutdown() != 0 && old.shutdown() == 0 {
            self.csts = (self.csts & !(3 << 2)) | Csts::SHST_COMPLETE;
            self.stats.shutdowns += 1;
        }
    }

    fn running(&self) -> bool {
        self.cc.enabled() && self.csts & Csts::RDY != 0 && self.csts & Csts::CFS == 0
    }

    /// Writes one entry into a CQ ring, or queues it if the ring is full.
    pub fn post(&mut self, cqid: u16, entry: CompletionEntry) {
        let Some(Some(cq)) = self.cqs.get_mut(usize::from(cqid)) else {
            return;
        };
        let next = if cq.tail + 1 >= cq.entries {
            0
        } else {
            cq.tail + 1
        };
        if next == cq.head {
            cq.overflow.push_back(entry);
            return;
        }
        let phase = match self.faults.hostile {
            Some(Hostile::WrongPhase) if cqid != 0 => !cq.phase,
            _ => cq.phase,
        };
        let mut e = entry;
        e.dw3 = (e.dw3 & !(1 << 16)) | (u32::from(phase) << 16);
        // The SQ head is reported as of posting time, as hardware does,
        // so late (held, aborted) completions never move it backwards.
        if let Some(Some(sq)) = self.sqs.get(usize::from(e.sq_id())) {
            e.dw2 = (e.dw2 & !0xffff) | u32::from(sq.head);
        }
        if cqid != 0 && self.faults.hostile == Some(Hostile::BadSqHead) {
            e.dw2 = (e.dw2 & !0xffff) | 0xfff0;
        }
        if cqid == 0 && self.faults.hostile == Some(Hostile::AdminBadCid) {
            e.dw3 ^= 0x5a5a;
        }
        let addr = cq.base.wrapping_add(u64::from(cq.tail) * CQE_SIZE as u64);
        let bytes = e.to_bytes();
        // Body first, then the dword holding the phase tag.
        let _ = self.mem.write(addr, &bytes[..12]);
        let _ = self.mem.write(addr.wrapping_add(12), &bytes[12..]);
        cq.tail = next;
        if next == 0 {
            cq.phase = !cq.phase;
        }
    }

    /// Routes an I/O completion through the fault knobs.
    fn complete_io(&mut self, cqid: u16, mut entry: CompletionEntry) {
        if self.faults.drop_io > 0 {
            self.faults.drop_io -= 1;
            self.stuck.push((cqid, entry));
            return;
        }
        match self.faults.hostile {
            Some(Hostile::BadCid) => entry.dw3 ^= 0x5a5a,
            Some(Hostile::WrongSqId) => entry.dw2 = entry.dw2.wrapping_add(1 << 16),
            Some(Hostile::Duplicate) => self.post(cqid, entry),
            _ => {}
        }
        if self.faults.latency > 0 || self.faults.reorder {
            let ready_at = Nanos(self.now.0.saturating_add(self.faults.latency));
            self.held.push(Held {
                cqid,
                entry,
                ready_at,
            });
            return;
        }
        self.post(cqid, entry);
    }

    /// Releases held completions whose time has come.
    pub fn tick(&mut self, now: Nanos) {
        self.now = now;
        if self.held.is_empty() || !self.running() {
            return;
        }
        let mut due: Vec<Held> = Vec::new();
        self.held.retain(|h| {
            if h.ready_at <= now {
                due.push(*h);
                false
            } else {
                true
            }
        });
        if self.faults.reorder {
            due.reverse();
        }
        for h in due {
            self.post(h.cqid, h.entry);
        }
    }

    /// Records a new SQ tail from the host; `false` if the queue is not
    /// there, the controller is not running or the tail is out of range
    /// (the write is then ignored).
    fn ring_sq(&mut self, qid: u16, tail: u32) -> bool {
        if !self.running() {
            return false;
        }
        let Some(Some(sq)) = self.sqs.get_mut(usize::from(qid)) else {
            return false;
        };
        let Ok(tail) = u16::try_from(tail) else {
            return false;
        };
        if tail >= sq.entries {
            return false;
        }
        sq.tail = tail;
        true
    }

    /// Fetches and executes queue `qid`'s commands from its head up to the
    /// tail the host last wrote, completing each, until the queue is empty
    /// (`None`) or a command's data must move (returned, fetched, checked
    /// and counted: the caller moves it with the lock released and then
    /// calls [`finish`](Self::finish)).
    fn run_sq(&mut self, qid: u16) -> Option<Transfer> {
        while self.running() {
            let sq = self.sqs.get_mut(usize::from(qid))?.as_mut()?;
            if sq.head == sq.tail {
                return None;
            }
            let addr = sq.base.wrapping_add(u64::from(sq.head) * SQE_SIZE as u64);
            sq.head = if sq.head + 1 >= sq.entries {
                0
            } else {
                sq.head + 1
            };
            let serial = sq.serial;
            let mut raw = [0u8; SQE_SIZE];
            if self.mem.read(addr, &mut raw).is_err() {
                self.csts |= Csts::CFS;
                return None;
            }
            let sqe = SubmissionEntry::from_bytes(&raw);
            let (status, dw0) = if qid == 0 {
                self.admin(&sqe)
            } else {
                match self.io(&sqe) {
                    Exec::Done(status, dw0) => (status, dw0),
                    Exec::Move(work) => {
                        return Some(Transfer {
                            qid,
                            serial,
                            sqe,
                            work,
                            block_size: self.config.block_size,
                        })
                    }
                }
            };
            self.complete(qid, serial, &sqe, status, dw0);
        }
        None
    }

    /// Completes a transfer that moved its data outside the lock.
    fn finish(&mut self, t: &Transfer, status: Status) {
        if PiCheck::from_status(status).is_some() {
            self.stats.pi_errors += 1;
        }
        if self.running() {
            self.complete(t.qid, t.serial, &t.sqe, status, 0);
        }
    }

    /// Posts the completion of `sqe`, fetched from queue `qid` when its
    /// serial was `serial`; nothing if that queue is gone (an admin command
    /// deleted it, or a reset did while the command's data moved).
    fn complete(&mut self, qid: u16, serial: u64, sqe: &SubmissionEntry, status: Status, dw0: u32) {
        let Some(Some(sq)) = self.sqs.get(usize::from(qid)).copied() else {
            return;
        };
        if sq.serial != serial {
            return;
        }
        let entry = CompletionEntry::new(dw0, sq.head, qid, sqe.cid(), false, status);
        if qid == 0 {
            self.post(sq.cqid, entry);
        } else {
            self.complete_io(sq.cqid, entry);
        }
    }

    fn cq_doorbell(&mut self, qid: u16, head: u32) {
        let Some(Some(cq)) = self.cqs.get_mut(usize::from(qid)) else {
            return;
        };
        if head >= u32::from(cq.entries) {
            return;
        }
        cq.head = head as u16;
        let pending: Vec<CompletionEntry> = cq.overflow.drain(..).collect();
        for e in pending {
            self.post(qid, e);
        }
    }
}

/// The emulated controller: registers in, DMA through [`EmuMemory`].
#[derive(Debug)]
pub struct EmuController {
    /// Registers, queues, counters and fault knobs. Held for the whole of
    /// a register access except while a command's data moves; taken
    /// before any host page lock or medium chunk lock, never while one is
    /// held.
    state: Mutex<State>,
    /// The namespace's blocks, shared by every queue's data transfers
    /// (it synchronises itself, a chunk at a time).
    medium: Medium,
    /// The PI tuple of every block, on a namespace formatted with PI (each
    /// tuple one atomic word, written under its block's medium chunk lock
    /// with the data).
    pi: Option<PiStore>,
    /// Host memory, for data transfers outside the state lock (the same
    /// address space as the state's).
    mem: EmuMemory,
    /// Test hook: the I/O queue whose data transfers wait before moving
    /// any data, outside the state lock (0: none).
    park: AtomicU16,
    /// Data transfers waiting on `park`.
    parked: AtomicUsize,
    /// The latest time passed to `tick`, which commands completed later
    /// count their latency from.
    now: AtomicU64,
    /// Whether the state holds completions for `tick` to release, as of
    /// the last release of the state lock: a `tick` with none to release
    /// (every poll of a driver whose completions are not delayed) then
    /// leaves the lock to the queues' doorbell writers.
    holding: AtomicBool,
}

impl EmuController {
    fn with_medium(config: EmuConfig, mem: EmuMemory, medium: Medium) -> Arc<EmuController> {
        let mut state = State::new(config, mem.clone());
        let pi = state.pi_type.and_then(|_| PiStore::new(state.blocks));
        if pi.is_none() && state.pi_type.is_some() {
            // No memory for the tuples: the namespace serves no data
            // rather than serving it unprotected.
            state.pi_type = None;
            state.served = false;
        }
        Arc::new(EmuController {
            state: Mutex::new(state),
            medium,
            pi,
            mem,
            park: AtomicU16::new(0),
            parked: AtomicUsize::new(0),
            now: AtomicU64::new(0),
            holding: AtomicBool::new(false),
        })
    }
    /// The namespace's size in bytes: whole blocks.
    fn medium_bytes(config: &EmuConfig) -> u64 {
        let (block_size, blocks) = geometry(config);
        blocks * u64::from(block_size)
    }
    /// A controller over a RAM namespace; its DMA goes through `mem`.
    pub fn new(config: EmuConfig, mem: EmuMemory) -> Arc<EmuController> {
        let medium = Medium::ram(Self::medium_bytes(&config));
        Self::with_medium(config, mem, medium)
    }
    /// A controller whose namespace lives in `file` (grown to the
    /// namespace size if shorter), so its contents outlive the process.
    pub fn with_file(
        config: EmuConfig,
        mem: EmuMemory,
        file: File,
    ) -> std::io::Result<Arc<EmuController>> {
        let bytes = Self::medium_bytes(&config);
        if file.metadata()?.len() < bytes {
            file.set_len(bytes)?;
        }
        Ok(Self::with_medium(config, mem, Medium::file(file, bytes)))
    }
    /// Changes the fault knobs.
    pub fn set_faults(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.state.lock().faults);
    }
    /// Current fault knobs.
    pub fn faults(&self) -> Faults {
        self.state.lock().faults
    }
    /// Sets CSTS.CFS: the controller stops processing until reset.
    pub fn set_fatal(&self) {
        self.state.lock().csts |= Csts::CFS;
    }
    /// Command counters.
    pub fn stats(&self) -> EmuStats {
        self.state.lock().stats
    }
    /// I/O submission queues the host has created and not deleted.
    pub fn io_queues(&self) -> usize {
        self.state.lock().sqs.iter().skip(1).flatten().count()
    }
    /// Commands currently stuck (completion dropped).
    pub fn stuck(&self) -> usize {
        self.state.lock().stuck.len()
    }
    /// Copies raw namespace bytes out (past the end reads as zero).
    pub fn read_medium(&self, offset: u64, dst: &mut [u8]) {
        let _ = self.medium.read_at(offset, dst);
    }
    /// Copies raw bytes into the namespace (clipped at the end).
    pub fn write_medium(&self, offset: u64, src: &[u8]) {
        let _ = self.medium.write_at(offset, src);
    }
    /// Block `lba`'s stored PI tuple, on a namespace formatted with PI.
    pub fn pi_tuple(&self, lba: u64) -> Option<PiTuple> {
        self.pi.as_ref().map(|s| s.get(lba))
    }
    /// Replaces block `lba`'s stored PI tuple (to corrupt its guard or a
    /// tag on demand); nothing on a namespace without PI.
    pub fn set_pi_tuple(&self, lba: u64, t: PiTuple) {
        if let Some(s) = &self.pi {
            s.set(lba, t);
        }
    }
    /// Test hook: from now on, each data transfer of I/O queue `qid`
    /// (Read, Write, Write Zeroes, deallocate) waits after its command is
    /// fetched, checked and counted, outside the state lock and before
    /// any data moves, until the hook is moved to another queue or turned
    /// off (`qid` 0). [`parked_transfers`](Self::parked_transfers) counts
    /// the waiting ones, so a test can act while a transfer is in
    /// progress without depending on timing.
    pub fn park_transfers(&self, qid: u16) {
        self.park.store(qid, Ordering::Release);
    }
    /// Data transfers waiting on [`park_transfers`](Self::park_transfers).
    pub fn parked_transfers(&self) -> usize {
        self.parked.load(Ordering::Acquire)
    }
    /// Whether the state lock is held (by anyone), for tests that check a
    /// parked transfer holds no lock.
    #[cfg(test)]
    pub(super) fn state_locked(&self) -> bool {
        self.state.is_locked()
    }
    /// Waits while the test hook parks queue `qid`'s transfers.
    fn wait_if_parked(&self, qid: u16) {
        if self.park.load(Ordering::Acquire) != qid {
            return;
        }
        self.parked.fetch_add(1, Ordering::AcqRel);
        while self.park.load(Ordering::Acquire) == qid {
            std::thread::yield_now();
        }
        self.parked.fetch_sub(1, Ordering::AcqRel);
    }
    /// Takes the state lock, its clock at the latest `tick`.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut s = self.state.lock();
        s.now = Nanos(self.now.load(Ordering::Acquire));
        s
    }
    /// Releases the state lock, noting whether it holds completions.
    fn unlock(&self, s: MutexGuard<'_, State>) {
        self.holding.store(!s.held.is_empty(), Ordering::Release);
        drop(s);
    }
    /// An SQ tail doorbell write: the queue's commands run up to the new
    /// tail, each data transfer with the state lock (`s`) released.
    fn sq_doorbell<'a>(
        &'a self,
        mut s: MutexGuard<'a, State>,
        qid: u16,
        tail: u32,
    ) -> MutexGuard<'a, State> {
        if !s.ring_sq(qid, tail) {
            return s;
        }
        while let Some(t) = s.run_sq(qid) {
            self.unlock(s);
            self.wait_if_parked(qid);
            let status = t.run(&self.mem, &self.medium, self.pi.as_ref());
            s = self.lock();
            s.finish(&t, status);
        }
        s
    }
}

impl Registers for EmuController {
    fn read32(&self, off: usize) -> u32 {
        let s = self.state.lock();
        match off {
            offset::CAP => s.cap.0 as u32,
            0x04 => (s.cap.0 >> 32) as u32,
            offset::VS => 0x0001_0400,
            offset::INTMS | offset::INTMC => 0,
            offset::CC => s.cc.0,
            offset::CSTS => s.csts,
            offset::AQA => s.aqa,
            offset::ASQ => s.asq as u32,
            0x2c => (s.asq >> 32) as u32,
            offset::ACQ => s.acq as u32,
            0x34 => (s.acq >> 32) as u32,
            o if o < s.bar_size() => 0,
            _ => u32::MAX,
        }
    }
    fn write32(&self, off: usize, value: u32) {
        let mut s = self.lock();
        match off {
            offset::CC => s.write_cc(value),
            offset::AQA => s.aqa = value,
            offset::ASQ => s.asq = (s.asq & !0xffff_ffff) | u64::from(value),
            0x2c => s.asq = (s.asq & 0xffff_ffff) | (u64::from(value) << 32),
            offset::ACQ => s.acq = (s.acq & !0xffff_ffff) | u64::from(value),
            0x34 => s.acq = (s.acq & 0xffff_ffff) | (u64::from(value) << 32),
            o if o >= offset::DOORBELLS && o < s.bar_size() => {
                let dstrd = s.cap.doorbell_stride();
                match decode_doorbell(o, dstrd) {
                    Some((qid, true)) => s.cq_doorbell(qid, value),
                    Some((qid, false)) => s = self.sq_doorbell(s, qid, value),
                    None => {}
                }
            }
            _ => {}
        }
        self.unlock(s);
    }
    fn tick(&self, now: Nanos) {
        self.now.store(now.0, Ordering::Release);
        if !self.holding.load(Ordering::Acquire) {
            return;
        }
        let mut s = self.lock();
        s.tick(now);
        self.unlock(s);
    }
}
