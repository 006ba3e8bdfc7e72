//! An in-memory transport for unit tests of the layers above: a
//! controller that answers bring-up, and queue pairs whose commands
//! complete, wait, fail, vanish or draw a bogus completion on demand.
//!
//! Everything it sees goes into an event log, so a test can check the
//! order in which the neutral layer talked to the controller.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use pollfs_core::dev::{frame_span, DevError, FrameArena};
use pollfs_core::units::{FrameId, Nanos};
use spin::Mutex;

use super::{AdminCommands, Payload, Property, Qpair, QpairError, QpairSpec, Transport};
use core::convert::Infallible;

use crate::error::DriverError;
use crate::qpair::ProtocolError;
use crate::spec::command::{admin_opcode, cns, SubmissionEntry};
use crate::spec::completion::CompletionEntry;
use crate::spec::identify::{IdentifyController, IdentifyNamespace, IDENTIFY_SIZE};
use crate::spec::regs::{Cap, Cc, Csts};
use crate::spec::status::{generic, Status, StatusType};

/// What the fake does with the next command sent on a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Complete at once with this status.
    Complete(Status),
    /// Complete with this status once the caller's time reaches the given
    /// time.
    At(Nanos, Status),
    /// Never complete.
    Drop,
    /// Complete with a command id that is not in flight.
    Bogus,
}

/// What the neutral layer asked of the fake controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A property was written.
    Set(Property, u64),
    /// The admin queue was attached before enable.
    EnableAdmin,
    /// A command was sent (or sent again) on queue `qid`.
    Sent {
        qid: u16,
        opcode: u8,
        slba: u64,
        nlb: u32,
    },
    /// An I/O queue was connected.
    Connect(u16),
    /// An I/O queue was disconnected.
    Disconnect(u16),
}

/// The fake controller's state, shared by the transport and its queues.
#[derive(Debug)]
pub struct State {
    pub cap: Cap,
    pub cc: u32,
    pub csts: u32,
    /// CSTS.RDY follows CC.EN (false: it never changes).
    pub ready_follows_cc: bool,
    pub identify: IdentifyController,
    pub namespace: IdentifyNamespace,
    pub queues: u16,
    /// Actions for the next commands on I/O queues, then admin commands;
    /// when empty, commands succeed.
    pub io_plan: VecDeque<Action>,
    pub admin_plan: VecDeque<Action>,
    pub log: Vec<Event>,
    /// Which queues the controller serves now, by a token per connection;
    /// a reset (CC.EN 1 -> 0) forgets all of them.
    live: BTreeMap<u16, u64>,
    next_token: u64,
}

impl State {
    pub fn sent(&self, opcode: u8) -> usize {
        let is = |e: &&Event| matches!(e, Event::Sent { qid, opcode: o, .. } if *qid != 0 && *o == opcode);
        self.log.iter().filter(is).count()
    }
    pub fn admin_sent(&self, opcode: u8) -> usize {
        let is = |e: &&Event| matches!(e, Event::Sent { qid: 0, opcode: o, .. } if *o == opcode);
        self.log.iter().filter(is).count()
    }
    pub fn count(&self, event: Event) -> usize {
        self.log.iter().filter(|e| **e == event).count()
    }
}

/// The fake transport.
#[derive(Clone, Debug)]
pub struct FakeTransport {
    pub state: Arc<Mutex<State>>,
}

impl FakeTransport {
    /// A controller with one 1 GiB namespace of 512-byte blocks, MDTS of
    /// 8 KiB, Write Zeroes and DSM, and 4 I/O queues.
    pub fn new() -> FakeTransport {
        let identify = IdentifyController {
            vid: 0x1b36,
            serial: [b' '; 20],
            model: [b' '; 40],
            firmware: [b' '; 8],
            mdts: 1,
            cntlid: 1,
            nn: 1,
            oncs: (1 << 2) | (1 << 3),
            vwc: true,
            ioccsz: 0,
        };
        let blocks = (1 << 30) / 512;
        FakeTransport {
            state: Arc::new(Mutex::new(State {
                cap: Cap::build(63, 1, 0, 0, 0),
                cc: 0,
                csts: 0,
                ready_follows_cc: true,
                identify,
                namespace: IdentifyNamespace {
                    nsze: blocks,
                    ncap: blocks,
                    block_size: 512,
                },
                queues: 4,
                io_plan: VecDeque::new(),
                admin_plan: VecDeque::new(),
                log: Vec::new(),
                live: BTreeMap::new(),
                next_token: 1,
            })),
        }
    }
}

/// Frames that only count (the fake moves no data).
#[derive(Debug)]
pub struct FakeFrames(pub u32);

impl FrameArena for FakeFrames {
    fn frame_count(&self) -> u32 {
        self.0
    }
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError> {
        frame_span(self.0, frame, offset, dst.len())?;
        dst.fill(0);
        Ok(())
    }
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError> {
        frame_span(self.0, frame, offset, src.len()).map(|_| ())
    }
    fn fill(&self, frame: FrameId, offset: usize, len: usize, _: u8) -> Result<(), DevError> {
        frame_span(self.0, frame, offset, len).map(|_| ())
    }
}

/// A fake queue pair.
#[derive(Debug)]
pub struct FakeQpair {
    qid: u16,
    entries: u16,
    state: Arc<Mutex<State>>,
    /// The controller's token for this queue's connection (0: none).
    token: u64,
    sent: Vec<Option<SubmissionEntry>>,
    /// Frames in the arena the queue was created over (a frame outside
    /// it is refused, as every transport refuses it).
    frames: u32,
    inbound: Vec<[u8; IDENTIFY_SIZE]>,
    /// Completions and the time they become visible.
    pending: Vec<(Nanos, CompletionEntry)>,
}

impl FakeQpair {
    fn new(state: Arc<Mutex<State>>, qid: u16, entries: u16, frames: u32) -> FakeQpair {
        let ids = usize::from(entries) - 1;
        FakeQpair {
            qid,
            entries,
            state,
            token: 0,
            sent: vec![None; ids],
            frames,
            inbound: vec![[0; IDENTIFY_SIZE]; if qid == 0 { ids } else { 0 }],
            pending: Vec::new(),
        }
    }

    fn served(&self, s: &State) -> bool {
        if self.qid == 0 {
            return Cc(s.cc).enabled();
        }
        s.live.get(&self.qid) == Some(&self.token)
    }

    /// Plays the controller for one command.
    fn execute(&mut self, sqe: &SubmissionEntry) -> Result<(), QpairError> {
        let cid = sqe.cid();
        let slot = self
            .sent
            .get_mut(usize::from(cid))
            .ok_or(QpairError::BadCid)?;
        *slot = Some(*sqe);
        let state = self.state.clone();
        let mut s = state.lock();
        s.log.push(Event::Sent {
            qid: self.qid,
            opcode: sqe.opcode(),
            slba: sqe.slba(),
            nlb: sqe.nlb(),
        });
        if !self.served(&s) {
            return Ok(());
        }
        let planned = if self.qid == 0 {
            s.admin_plan.pop_front()
        } else {
            s.io_plan.pop_front()
        };
        let mut dw0 = 0;
        if self.qid == 0 {
            dw0 = self.admin_data(&s, sqe);
        }
        drop(s);
        let (at, status, cid) = match planned.unwrap_or(Action::Complete(Status::SUCCESS)) {
            Action::Complete(st) => (Nanos(0), st, cid),
            Action::At(t, st) => (t, st, cid),
            Action::Drop => return Ok(()),
            Action::Bogus => (Nanos(0), Status::SUCCESS, cid ^ 0x4000),
        };
        let e = CompletionEntry::new(dw0, 0, self.qid, cid, true, status);
        self.pending.push((at, e));
        Ok(())
    }

    /// Admin command results: identify data into the inbound buffer, the
    /// granted queue count in DW0.
    fn admin_data(&mut self, s: &State, sqe: &SubmissionEntry) -> u32 {
        let cid = usize::from(sqe.cid());
        let Some(page) = self.inbound.get_mut(cid) else {
            return 0;
        };
        match (sqe.opcode(), sqe.cdw(10) as u8) {
            (admin_opcode::IDENTIFY, cns::CONTROLLER) => s.identify.encode(page),
            (admin_opcode::IDENTIFY, cns::NAMESPACE) => s.namespace.encode(page),
            (admin_opcode::IDENTIFY, cns::ACTIVE_NAMESPACES) => {
                page.fill(0);
                page[0] = 1;
            }
            (admin_opcode::SET_FEATURES, _) => {
                let n = u32::from(s.queues - 1);
                return n | (n << 16);
            }
            _ => {}
        }
        0
    }
}

impl Qpair for FakeQpair {
    type Error = Infallible;
    fn qid(&self) -> u16 {
        self.qid
    }
    fn entries(&self) -> u16 {
        self.entries
    }
    fn submit(&mut self, sqe: &SubmissionEntry, payload: Payload<'_>) -> Result<(), QpairError> {
        if let Payload::Frames(f) = payload {
            if f.is_empty() || f.iter().any(|x| x.0 >= self.frames) {
                return Err(QpairError::BadPayload);
            }
        }
        self.execute(sqe)
    }
    fn resubmit(&mut self, cid: u16) -> Result<(), QpairError> {
        let sqe = self
            .sent
            .get(usize::from(cid))
            .copied()
            .flatten()
            .ok_or(QpairError::BadCid)?;
        self.execute(&sqe)
    }
    fn poll(
        &mut self,
        now: Nanos,
        max: usize,
        out: &mut Vec<CompletionEntry>,
    ) -> Result<usize, ProtocolError<Infallible>> {
        if !self.served(&self.state.lock()) {
            self.pending.clear();
            return Ok(0);
        }
        let mut n = 0;
        while n < max {
            let Some(i) = self.pending.iter().position(|(at, _)| *at <= now) else {
                break;
            };
            out.push(self.pending.remove(i).1);
            n += 1;
        }
        Ok(n)
    }
    fn read_inbound(&self, cid: u16, dst: &mut [u8]) -> Result<(), QpairError> {
        let page = self
            .inbound
            .get(usize::from(cid))
            .ok_or(QpairError::BadCid)?;
        let src = page.get(..dst.len()).ok_or(QpairError::BadPayload)?;
        dst.copy_from_slice(src);
        Ok(())
    }
    fn reset(&mut self) -> Result<(), QpairError> {
        self.pending.clear();
        self.token = 0;
        Ok(())
    }
}

impl Transport for FakeTransport {
    type Error = Infallible;
    type Qpair = FakeQpair;
    type Frames = FakeFrames;

    fn get_property(
        &self,
        _: &mut dyn AdminCommands<Infallible>,
        p: Property,
    ) -> Result<u64, DriverError<Infallible>> {
        let s = self.state.lock();
        Ok(match p {
            Property::Cap => s.cap.0,
            Property::Vs => 0x0001_0400,
            Property::Cc => u64::from(s.cc),
            Property::Csts => u64::from(s.csts),
        })
    }
    fn set_property(
        &self,
        _: &mut dyn AdminCommands<Infallible>,
        p: Property,
        v: u64,
    ) -> Result<(), DriverError<Infallible>> {
        let mut s = self.state.lock();
        s.log.push(Event::Set(p, v));
        if p == Property::Cc {
            let (was, cc) = (Cc(s.cc), Cc(v as u32));
            s.cc = cc.0;
            if was.enabled() && !cc.enabled() {
                s.live.clear();
            }
            if s.ready_follows_cc {
                s.csts = (s.csts & !Csts::RDY) | u32::from(cc.enabled());
            }
            if cc.shutdown() == 1 {
                s.csts |= Csts::SHST_COMPLETE;
            }
        }
        Ok(())
    }
    fn create_admin_qpair(&self, entries: u16) -> Result<FakeQpair, DriverError<Infallible>> {
        Ok(FakeQpair::new(self.state.clone(), 0, entries, 0))
    }
    fn enable_admin(&self, admin: &mut FakeQpair) -> Result<(), DriverError<Infallible>> {
        admin.pending.clear();
        self.state.lock().log.push(Event::EnableAdmin);
        Ok(())
    }
    fn alloc_frames(&self, count: u32) -> Result<FakeFrames, DriverError<Infallible>> {
        Ok(FakeFrames(count))
    }
    fn create_qpair(
        &self,
        spec: QpairSpec,
        frames: &Arc<FakeFrames>,
    ) -> Result<FakeQpair, DriverError<Infallible>> {
        Ok(FakeQpair::new(
            self.state.clone(),
            spec.qid,
            spec.entries,
            frames.0,
        ))
    }
    fn connect_qpair(
        &self,
        qp: &mut FakeQpair,
        _: &mut dyn AdminCommands<Infallible>,
    ) -> Result<(), DriverError<Infallible>> {
        let mut s = self.state.lock();
        s.log.push(Event::Connect(qp.qid));
        let token = s.next_token;
        s.next_token += 1;
        s.live.insert(qp.qid, token);
        qp.token = token;
        Ok(())
    }
    fn disconnect_qpair(
        &self,
        qid: u16,
        _: &mut dyn AdminCommands<Infallible>,
    ) -> Result<(), DriverError<Infallible>> {
        let mut s = self.state.lock();
        s.log.push(Event::Disconnect(qid));
        s.live.remove(&qid);
        Ok(())
    }
}

/// A retryable error status (no DNR).
pub fn transient() -> Status {
    Status::new(StatusType::Generic, generic::INTERNAL_ERROR, false)
}

/// The same error with DNR set.
pub fn permanent() -> Status {
    Status::new(StatusType::Generic, generic::INTERNAL_ERROR, true)
}

/// A clock that advances 1 ms each time it is read, so blocking waits
/// reach their deadlines without real time passing.
pub fn ticking_clock() -> impl Fn() -> Nanos + Send + Sync + 'static {
    let t = Arc::new(core::sync::atomic::AtomicU64::new(0));
    move || Nanos(t.fetch_add(1_000_000, core::sync::atomic::Ordering::Relaxed))
}
