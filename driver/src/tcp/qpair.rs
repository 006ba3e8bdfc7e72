//! [`TcpQpair`]: one NVMe/TCP connection carrying one queue pair
//! (NVMe/TCP 1.0, 3.2), polled by the thread that owns it.
//!
//! The queue keeps, per command id, the command as sent (with its SGL
//! descriptor) and where its data lives (page-cache frames, or a small
//! buffer for identify data, DSM ranges and Connect data), so a
//! resubmission after a reconnect sends the same command again and data
//! PDUs are copied straight between the socket and the frames. Transmit
//! ([`super::tx`]) and receive ([`super::rx`]) are state machines that do
//! as much as the socket allows without blocking and resume on the next
//! `submit` or `poll`.
//!
//! A fatal error (3.5) closes the connection and is reported by every
//! `poll` until the controller layer resets the queue and reconnects;
//! commands submitted meanwhile are kept and sent again after the
//! reconnect, like everything else in flight.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use pollfs_core::dev::FrameArena;
use pollfs_core::units::{FrameId, Nanos, PAGE_SIZE};

use super::error::TcpError;
use super::frames::TcpFrames;
use super::pdu::{Framing, IcReq};
use super::rx::Rx;
use super::stream::Stream;
use super::tx::{Tx, TxItem};
use crate::qpair::ProtocolError;
use crate::spec::command::SubmissionEntry;
use crate::spec::completion::CompletionEntry;
use crate::spec::sgl::SglDescriptor;
use crate::spec::status::Status;
use crate::transport::{Payload, Qpair, QpairError, SMALL_PAYLOAD};

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// No connection (new, or after `reset`).
    Closed,
    /// ICReq sent, waiting for ICResp.
    Handshake,
    /// Exchanging capsules.
    Ready,
    /// A fatal error closed the connection.
    Failed(TcpError),
}

/// Which way a command's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Dir {
    /// No data.
    #[default]
    None,
    /// Host to controller (a write).
    Out,
    /// Controller to host (a read).
    In,
}

/// Where a command's data lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) enum Source {
    /// Nowhere (no data).
    #[default]
    None,
    /// The first `n` entries of the command id's slice of frame ids.
    Frames(u16),
    /// The command's own buffer.
    Buffer,
}

/// One command id's state.
#[derive(Debug, Default)]
pub(super) struct Cmd {
    /// The command as last sent, SGL descriptor filled in.
    pub sqe: SubmissionEntry,
    /// True once a command was sent with this id (it can be resent).
    pub sent: bool,
    /// Sent and not yet completed.
    pub live: bool,
    pub dir: Dir,
    pub src: Source,
    /// Data length in bytes.
    pub len: u32,
    /// Small payloads: bytes out, or the buffer the controller fills.
    pub buf: Vec<u8>,
    /// The data travels inside the command capsule.
    pub in_capsule: bool,
    /// Reads: bytes received so far. Writes: bytes solicited by R2Ts.
    pub moved: u32,
    /// The C2HData PDU flagged LAST_PDU has arrived.
    pub last_seen: bool,
    /// The data of the latest R2T is not all sent yet.
    pub r2t_open: bool,
    /// PDUs of this command queued or being sent.
    pub tx_busy: u16,
    /// A data digest failed: the command completes with a transient
    /// transport error (3.5, "Digest Error handling").
    pub bad_digest: bool,
    /// A completion that waits for this command's PDU in transmission.
    pub held: Option<CompletionEntry>,
    /// Bumped each time the id is sent; the wire command id carries it in
    /// bits 15:12 (see [`wire_cid`]).
    pub gen: u16,
}

impl Cmd {
    fn restart(&mut self) {
        self.moved = 0;
        self.last_seen = false;
        self.r2t_open = false;
        self.bad_digest = false;
        self.held = None;
        self.tx_busy = 0;
    }
}

/// Command ids on the wire: the queue's id in bits 11:0 and a 4-bit
/// generation of that id in bits 15:12, so a response or data PDU left
/// over from an earlier use of the id (a duplicate, a late answer) names
/// an id that is not in flight instead of completing the command that
/// reuses it. Queues have at most 4096 entries, so ids fit in 12 bits.
pub(super) fn wire_cid(cid: u16, gen: u16) -> u16 {
    (cid & CID_MASK) | ((gen & 0xf) << 12)
}

/// The queue's id part of a wire command id.
pub(super) const CID_MASK: u16 = 0x0fff;

/// Counters, for tests and tools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// PDUs sent.
    pub pdus_out: u64,
    /// PDUs received.
    pub pdus_in: u64,
    /// Data digest mismatches (each failed its command with a transient
    /// transport error).
    pub data_digest_errors: u64,
    /// Fatal errors (each closed the connection).
    pub fatal_errors: u64,
}

/// One NVMe/TCP queue pair over a stream `S`.
pub struct TcpQpair<S: Stream> {
    pub(super) qid: u16,
    pub(super) entries: u16,
    pub(super) stream: Option<S>,
    pub(super) phase: Phase,
    /// What was asked in ICReq.
    pub(super) icreq: IcReq,
    /// PDUs from the controller: digests and HPDA.
    pub(super) rx_framing: Framing,
    /// PDUs to the controller: digests and CPDA.
    pub(super) tx_framing: Framing,
    pub(super) maxh2cdata: u32,
    pub(super) frames: Option<Arc<TcpFrames>>,
    pub(super) max_frames: usize,
    /// Largest in-capsule data for this queue (0: none).
    pub(super) in_capsule: u32,
    /// Indexed by command id; the last id is the queue's own (Connect).
    pub(super) cmds: Vec<Cmd>,
    /// `max_frames` frame ids per command id.
    pub(super) frame_ids: Vec<FrameId>,
    pub(super) tx: Tx,
    pub(super) rx: Rx,
    /// Completions ready to be handed out.
    pub(super) ready: Vec<CompletionEntry>,
    /// The completion of the queue's own command (Connect).
    pub(super) internal: Option<CompletionEntry>,
    /// Commands in flight.
    pub(super) in_flight: u16,
    /// The one command in flight, when there is one and the queue knows
    /// which (it forgets when two become one).
    pub(super) solo: Option<u16>,
    /// The completion a C2HData PDU with the SUCCESS flag stands for
    /// (command id 0; [`complete`](Self::complete) sets it).
    pub(super) success: CompletionEntry,
    pub(super) stats: TcpStats,
    pub(super) last_error: Option<TcpError>,
}

impl<S: Stream> core::fmt::Debug for TcpQpair<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpQpair")
            .field("qid", &self.qid)
            .field("entries", &self.entries)
            .field("phase", &self.phase)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<S: Stream> TcpQpair<S> {
    /// A queue pair with `entries` entries (ids `0..entries - 1` for the
    /// controller layer, `entries - 1` for the queue's own Connect), whose
    /// commands carry up to `max_frames` frames of `frames` and up to
    /// `in_capsule` bytes of in-capsule data. No connection yet.
    pub fn new(
        qid: u16,
        entries: u16,
        frames: Option<Arc<TcpFrames>>,
        max_frames: usize,
        in_capsule: u32,
    ) -> TcpQpair<S> {
        // Wire command ids keep 12 bits for the id.
        let entries = entries.clamp(2, CID_MASK + 1);
        let ids = usize::from(entries);
        let max_frames = if frames.is_some() { max_frames } else { 0 };
        TcpQpair {
            qid,
            entries,
            stream: None,
            phase: Phase::Closed,
            icreq: IcReq {
                hpda: 0,
                hdgst: false,
                ddgst: false,
                maxr2t: 0,
            },
            rx_framing: Framing::default(),
            tx_framing: Framing::default(),
            maxh2cdata: 0,
            frames,
            max_frames,
            in_capsule,
            cmds: (0..ids).map(|_| Cmd::default()).collect(),
            frame_ids: vec![FrameId(0); ids * max_frames],
            tx: Tx::default(),
            rx: Rx::default(),
            ready: Vec::with_capacity(ids),
            internal: None,
            in_flight: 0,
            solo: None,
            success: CompletionEntry::new(0, 0, qid, 0, false, Status::SUCCESS),
            stats: TcpStats::default(),
            last_error: None,
        }
    }

    /// The id of the queue's own command (Connect).
    pub(super) fn own_cid(&self) -> u16 {
        self.entries - 1
    }

    /// Largest data length of any command on this queue.
    pub(super) fn max_len(&self) -> usize {
        (self.max_frames * PAGE_SIZE).max(SMALL_PAYLOAD)
    }

    /// Counters.
    pub fn stats(&self) -> TcpStats {
        self.stats
    }
    /// The error that last closed the connection.
    pub fn last_error(&self) -> Option<TcpError> {
        self.last_error
    }
    /// True once ICResp has been accepted.
    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Ready
    }
    /// The fatal error the connection is stopped on, if any.
    pub fn failure(&self) -> Option<TcpError> {
        match self.phase {
            Phase::Failed(e) => Some(e),
            _ => None,
        }
    }
    /// What the connection negotiated: (header digests, data digests,
    /// MAXH2CDATA, CPDA).
    pub fn negotiated(&self) -> (bool, bool, u32, u8) {
        (
            self.tx_framing.hdgst,
            self.tx_framing.ddgst,
            self.maxh2cdata,
            self.tx_framing.pda,
        )
    }

    /// Starts a connection over `stream`: sends ICReq asking for `req`.
    /// The queue must be closed (new or reset).
    pub fn attach(&mut self, stream: S, req: IcReq) {
        self.close();
        self.stream = Some(stream);
        self.icreq = req;
        self.phase = Phase::Handshake;
        self.tx.queue.push_back(TxItem::IcReq);
    }

    /// Sends the queue's own command `sqe` (Fabrics Connect, or an
    /// Authentication Send or Receive) with `payload` (a small buffer)
    /// in the last command id; its completion is read with
    /// [`take_own_completion`](Self::take_own_completion), the data it
    /// brought in with [`own_inbound`](Self::own_inbound).
    pub fn submit_own(
        &mut self,
        mut sqe: SubmissionEntry,
        payload: Payload<'_>,
    ) -> Result<(), QpairError> {
        if matches!(payload, Payload::Frames(_)) {
            return Err(QpairError::BadPayload);
        }
        let cid = self.own_cid();
        sqe.set_cid(cid);
        self.internal = None;
        self.describe(&sqe, payload)?;
        self.start(cid);
        Ok(())
    }
    /// The completion of the queue's own command, once it has arrived.
    pub fn take_own_completion(&mut self) -> Option<CompletionEntry> {
        self.internal.take()
    }
    /// The data the queue's own command read (empty if it read none).
    pub fn own_inbound(&self) -> &[u8] {
        match self.cmds.get(usize::from(self.own_cid())) {
            Some(c) if c.src == Source::Buffer && c.dir == Dir::In => &c.buf,
            _ => &[],
        }
    }

    /// Sends what can be sent and processes what has arrived, producing
    /// at most about `max` completions; a fatal error closes the
    /// connection and is returned (now and by every later call).
    pub fn service(&mut self, max: usize) -> Result<(), TcpError> {
        match self.phase {
            Phase::Closed => return Ok(()),
            Phase::Failed(e) => return Err(e),
            Phase::Handshake | Phase::Ready => {}
        }
        let result = self
            .flush()
            .and_then(|()| self.receive(max))
            .and_then(|()| self.flush());
        if let Err(e) = result {
            self.fail(e);
            return Err(e);
        }
        Ok(())
    }

    /// Closes the connection after a fatal error, telling the controller
    /// why when the error is the controller's (best effort: one
    /// non-blocking send).
    #[cold]
    #[inline(never)]
    pub(super) fn fail(&mut self, e: TcpError) {
        if let (Some((fes, mut fei)), Some(stream)) = (e.term_req(), self.stream.as_mut()) {
            let mut out = [0u8; super::pdu::TERM_MAX_PLEN];
            let culprit = self.rx.culprit();
            if let TcpError::HeaderDigest { pdu } = e {
                if let Some(t) = super::pdu::PduType::from_byte(pdu) {
                    fei = super::pdu::received_header_digest(t, culprit);
                }
            }
            let n = super::pdu::TermReq { fes, fei }.encode(
                super::pdu::PduType::H2cTermReq,
                culprit,
                &mut out,
            );
            // Only if no PDU is half sent: a TermReq must start on a PDU
            // boundary.
            if self.tx.at_boundary() {
                let _ = stream.send(&[out.get(..n).unwrap_or(&[])]);
            }
        }
        self.stream = None;
        self.phase = Phase::Failed(e);
        self.last_error = Some(e);
        self.stats.fatal_errors += 1;
    }

    /// Drops the connection and every transfer in progress; commands keep
    /// their description so they can be sent again.
    #[inline(never)]
    fn close(&mut self) {
        self.stream = None;
        self.phase = Phase::Closed;
        self.tx = Tx::default();
        self.rx = Rx::default();
        self.ready.clear();
        self.internal = None;
        self.in_flight = 0;
        self.solo = None;
        self.rx_framing = Framing::default();
        self.tx_framing = Framing::default();
        for c in &mut self.cmds {
            c.live = false;
            c.restart();
        }
    }

    /// Records command `sqe` (its id already set) and where its data is,
    /// and fills in its SGL descriptor. Nothing is sent.
    fn describe(&mut self, sqe: &SubmissionEntry, payload: Payload<'_>) -> Result<(), QpairError> {
        let cid = usize::from(sqe.cid());
        let in_capsule = self.in_capsule;
        let frame_count = self.frames.as_ref().map_or(0, |f| f.frame_count());
        let max_frames = self.max_frames;
        let cmd = self.cmds.get_mut(cid).ok_or(QpairError::BadCid)?;
        // Opcode bits 1:0 give the direction of data transfer (NVMe 1.4,
        // the opcode tables of chapters 5 and 6): 01b host to controller,
        // 10b controller to host.
        let opcode_dir = match sqe.opcode() & 3 {
            1 => Some(Dir::Out),
            2 => Some(Dir::In),
            _ => None,
        };
        let (dir, src, len) = match payload {
            Payload::None => (Dir::None, Source::None, 0),
            Payload::Frames(f) => {
                let dir = opcode_dir.ok_or(QpairError::BadPayload)?;
                if f.is_empty() || f.len() > max_frames || f.iter().any(|x| x.0 >= frame_count) {
                    return Err(QpairError::BadPayload);
                }
                let slot = self
                    .frame_ids
                    .get_mut(cid * max_frames..cid * max_frames + f.len())
                    .ok_or(QpairError::BadPayload)?;
                match (slot, f) {
                    // One page, the usual command: a store, not a call to
                    // copy a slice of unknown length.
                    ([d], [s]) => *d = *s,
                    (d, s) => d.copy_from_slice(s),
                }
                (dir, Source::Frames(f.len() as u16), f.len() * PAGE_SIZE)
            }
            Payload::Out(b) => {
                if b.len() > SMALL_PAYLOAD {
                    return Err(QpairError::BadPayload);
                }
                cmd.buf.clear();
                cmd.buf.extend_from_slice(b);
                (Dir::Out, Source::Buffer, b.len())
            }
            Payload::In(n) => {
                if n > SMALL_PAYLOAD {
                    return Err(QpairError::BadPayload);
                }
                cmd.buf.clear();
                cmd.buf.resize(n, 0);
                (Dir::In, Source::Buffer, n)
            }
        };
        let len = len as u32;
        cmd.dir = if len == 0 { Dir::None } else { dir };
        cmd.src = src;
        cmd.len = len;
        cmd.in_capsule = cmd.dir == Dir::Out && len <= in_capsule;
        cmd.sqe = *sqe;
        cmd.sqe.set_sgl(if cmd.in_capsule {
            SglDescriptor::in_capsule(len)
        } else {
            SglDescriptor::transport(len)
        });
        cmd.sent = true;
        Ok(())
    }

    /// (Re)starts command `cid`: queues its capsule if connected.
    fn start(&mut self, cid: u16) {
        let ready = self.phase == Phase::Ready;
        if let Some(c) = self.cmds.get_mut(usize::from(cid)) {
            c.restart();
            if !c.live {
                self.in_flight += 1;
            }
            self.solo = (self.in_flight == 1).then_some(cid);
            c.live = true;
            c.gen = (c.gen + 1) & 0xf;
            c.sqe.set_cid(wire_cid(cid, c.gen));
            if ready {
                c.tx_busy = 1;
                self.queue_capsule(cid);
            }
        }
        // The first command of an idle queue leaves at once; commands
        // submitted while others are in flight leave together with the
        // next poll, in one send.
        if ready && self.in_flight == 1 {
            if let Err(e) = self.flush() {
                self.fail(e);
            }
        }
    }

    /// The queue's id for wire command id `wire`, if that command is in
    /// flight (same id, same generation).
    pub(super) fn lookup(&self, wire: u16) -> Option<u16> {
        let cid = wire & CID_MASK;
        let c = self.cmds.get(usize::from(cid))?;
        (c.live && wire_cid(cid, c.gen) == wire).then_some(cid)
    }

    /// Command `cid` is finished with completion `cqe`: it is handed out
    /// (with the queue's id, not the wire's) now, or once its PDU in
    /// transmission has been sent.
    /// Inlined into each receive step that completes a command: a call
    /// per completion cost more than its body (`vm/io-cost.sh`).
    #[inline(always)]
    pub(super) fn complete(&mut self, cid: u16, mut cqe: CompletionEntry) {
        cqe.dw3 = (cqe.dw3 & !0xffff) | u32::from(cid);
        // Queued PDUs of a finished command are never sent.
        let dropped = if self.tx.queue.is_empty() {
            0
        } else {
            self.unqueue(cid)
        };
        let own = cid == self.own_cid();
        let Some(c) = self.cmds.get_mut(usize::from(cid)) else {
            return;
        };
        if c.live {
            self.in_flight -= 1;
            self.solo = None;
        }
        c.live = false;
        c.tx_busy = c.tx_busy.saturating_sub(dropped);
        if c.tx_busy > 0 {
            c.held = Some(cqe);
        } else if own {
            self.internal = Some(cqe);
        } else {
            self.ready.push(cqe);
        }
    }

    /// Drops the queued PDUs of command `cid`; how many there were.
    #[inline(never)]
    fn unqueue(&mut self, cid: u16) -> u16 {
        let mut dropped = 0u16;
        self.tx.queue.retain(|item| {
            let mine = item.cid() == Some(cid);
            dropped += u16::from(mine);
            !mine
        });
        dropped
    }

    /// A PDU of command `cid` has been sent completely.
    pub(super) fn pdu_sent(&mut self, cid: u16, last_of_r2t: bool) {
        let own = cid == self.own_cid();
        let Some(c) = self.cmds.get_mut(usize::from(cid)) else {
            return;
        };
        c.tx_busy = c.tx_busy.saturating_sub(1);
        if last_of_r2t {
            c.r2t_open = false;
        }
        if c.tx_busy == 0 {
            if let Some(cqe) = c.held.take() {
                if own {
                    self.internal = Some(cqe);
                } else {
                    self.ready.push(cqe);
                }
            }
        }
    }

    /// The frame holding byte `at` of command `cid`'s data, and the offset
    /// in it.
    pub(super) fn frame_at(&self, cid: u16, at: u32) -> Option<(FrameId, usize)> {
        let base = usize::from(cid) * self.max_frames;
        let at = at as usize;
        let id = *self.frame_ids.get(base + at / PAGE_SIZE)?;
        Some((id, at % PAGE_SIZE))
    }
}

impl<S: Stream> Qpair for TcpQpair<S> {
    type Error = TcpError;
    fn qid(&self) -> u16 {
        self.qid
    }
    fn entries(&self) -> u16 {
        self.entries
    }
    fn submit(&mut self, sqe: &SubmissionEntry, payload: Payload<'_>) -> Result<(), QpairError> {
        let cid = sqe.cid();
        if cid >= self.own_cid() {
            return Err(QpairError::BadCid);
        }
        if let Err(e) = self.describe(sqe, payload) {
            if let Some(c) = self.cmds.get_mut(usize::from(cid)) {
                c.sent = false;
            }
            return Err(e);
        }
        self.start(cid);
        Ok(())
    }
    fn resubmit(&mut self, cid: u16) -> Result<(), QpairError> {
        match self.cmds.get(usize::from(cid)) {
            Some(c) if c.sent && cid < self.own_cid() => {}
            _ => return Err(QpairError::BadCid),
        }
        self.start(cid);
        Ok(())
    }
    fn poll(
        &mut self,
        _now: Nanos,
        max: usize,
        out: &mut Vec<CompletionEntry>,
    ) -> Result<usize, ProtocolError<TcpError>> {
        let result = self.service(max);
        let n = max.min(self.ready.len());
        out.extend(self.ready.drain(..n));
        result.map(|()| n).map_err(ProtocolError::Transport)
    }
    /// Offers the completions the receive made ready straight from the
    /// queue's own list, so the usual one is accounted without passing
    /// through `out`.
    fn poll_each(
        &mut self,
        _now: Nanos,
        max: usize,
        out: &mut Vec<CompletionEntry>,
        take: &mut impl FnMut(CompletionEntry) -> Result<bool, ProtocolError<TcpError>>,
    ) -> Result<usize, ProtocolError<TcpError>> {
        let result = self.service(max);
        let n = max.min(self.ready.len());
        let mut taken = 0;
        while let Some(&e) = self.ready.get(taken).filter(|_| taken < n) {
            match take(e) {
                Ok(true) => taken += 1,
                Ok(false) => break,
                Err(err) => {
                    self.ready.drain(..=taken);
                    return Err(err);
                }
            }
        }
        if taken < n {
            out.extend_from_slice(self.ready.get(taken..n).unwrap_or(&[]));
        }
        if n == self.ready.len() {
            self.ready.clear();
        } else {
            self.ready.drain(..n);
        }
        result.map(|()| n).map_err(ProtocolError::Transport)
    }
    fn read_inbound(&self, cid: u16, dst: &mut [u8]) -> Result<(), QpairError> {
        let c = self.cmds.get(usize::from(cid)).ok_or(QpairError::BadCid)?;
        if c.src != Source::Buffer || c.dir != Dir::In {
            return Err(QpairError::BadPayload);
        }
        let src = c.buf.get(..dst.len()).ok_or(QpairError::BadPayload)?;
        dst.copy_from_slice(src);
        Ok(())
    }
    fn reset(&mut self) -> Result<(), QpairError> {
        self.close();
        Ok(())
    }
}
