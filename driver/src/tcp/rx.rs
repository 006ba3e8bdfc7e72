//! The receive side of a [`TcpQpair`]: PDUs from the controller pass
//! through a small buffer that holds header regions (and data digests)
//! only; data goes straight from the socket into the frame or buffer it
//! belongs to. Each receive asks for what the current step needs plus
//! the smallest header region the next PDU can have (24 bytes, 28 with
//! header digests), never more, so data never lands in the buffer and a
//! PDU with its data and the next PDU's header take one system call.
//! A receive that fills less than it asked for means the socket had
//! nothing more: the rest waits for the next poll, sparing a system call
//! that would find nothing.
//!
//! Checks, in order: the common header (type, HLEN, flags, PDO, PLEN
//! against what was negotiated, [`CommonHeader::check`]; eight bytes
//! equal to the last common header accepted on the ready connection are
//! that header, accepted with its result); the header
//! digest; the PDU-specific header (ICResp against ICReq; C2HData and R2T
//! against the command they name: in flight, direction, in order, inside
//! its buffer, one R2T at a time; a response capsule against this queue
//! and the command's data); the data digest. Anything else is a fatal
//! [`TcpError`]; a data digest mismatch fails only its command. Nothing
//! is parsed from bytes that have not arrived.

use super::digest::{Running, DIGEST_LEN};
use super::error::TcpError;
use super::pdu::{
    parse_capsule_resp, plain_capsule_header, prefix, CommonHeader, DataHeader, Extent, Framing,
    IcResp, PduType, R2t, TermReq, CAPSULE_RESP_HLEN, CH_LEN, DATA_HLEN, MAX_HEADER_REGION,
    R2T_HLEN, TERM_HLEN,
};
use super::qpair::{Dir, Phase, Source, TcpQpair};
use super::stream::{LinkError, Stream};
use super::tx::TxItem;
use crate::spec::completion::CompletionEntry;
use crate::spec::status::{generic, Status, StatusType};
use pollfs_core::units::{FrameId, PAGE_SIZE};

/// The header length of every PDU a controller may send once connected
/// (CapsuleResp, C2HData, R2T, C2HTermReq): the least a header region
/// holds, so reading this far ahead never reads data.
const READY_HLEN: usize = 24;
const _: () = assert!(
    CAPSULE_RESP_HLEN == READY_HLEN
        && DATA_HLEN == READY_HLEN
        && R2T_HLEN == READY_HLEN
        && TERM_HLEN == READY_HLEN
);

/// The receive buffer: the largest header region, and what may be read
/// with one: a data digest and the next PDU's smallest header region, or
/// a page received ahead of its header that turned out not to be the
/// data it was placed as ([`Ahead`]).
const RX_BUF: usize = PAGE_SIZE + MAX_HEADER_REGION + 1 + 2 * (DIGEST_LEN + READY_HLEN);

/// Bytes received ahead of their header: with one read in flight, a
/// receive at a PDU boundary asks for a header region of `ra` bytes, then
/// the read's first page straight into its frame (`k` bytes arrived
/// there), then a digest and the next header into the buffer. Once the
/// header is checked the bytes are either that read's data (a C2HData
/// for it at offset 0, its data right after a header region of `ra`
/// bytes) or they are moved back into the buffer in stream order, as if
/// received there.
#[derive(Clone, Copy, Debug)]
struct Ahead {
    cid: u16,
    frame: FrameId,
    ra: usize,
    k: usize,
}

/// Where the receiver is within the current PDU.
#[derive(Debug, Default)]
enum Stage {
    /// Reading a common header.
    #[default]
    Common,
    /// Reading the rest of the header region.
    Header(CommonHeader, Extent),
    /// Reading C2HData data for command `cid`, `left` bytes to go, the
    /// next at byte `at` of its buffer.
    Data {
        cid: u16,
        at: u32,
        left: u32,
        flags: u8,
        digest: Option<Running>,
    },
    /// Reading the data digest of a C2HData PDU.
    Digest { cid: u16, flags: u8, expect: u32 },
}

/// Receive state.
#[derive(Debug)]
pub(super) struct Rx {
    stage: Stage,
    /// Bytes received and not yet used: `buf[start..end]`, beginning with
    /// the current PDU's header region (or data digest).
    buf: [u8; RX_BUF],
    start: usize,
    end: usize,
    /// The last receive of this poll filled less than it asked for.
    dry: bool,
    /// Bytes in a frame that follow the held header region.
    ahead: Option<Ahead>,
    /// The last common header accepted on the ready connection, as its
    /// eight bytes, with what parsing and checking it gave. Those depend
    /// only on the bytes, the phase, the negotiated framing and the
    /// queue's largest data length, all fixed while the connection is
    /// ready (a reconnect starts a new `Rx`), so the same eight bytes
    /// again are the same, accepted, header: the PDUs of a run of alike
    /// commands skip the field-by-field check.
    accepted: Option<(u64, CommonHeader, Extent)>,
}

impl Default for Rx {
    fn default() -> Self {
        Rx {
            stage: Stage::Common,
            buf: [0; RX_BUF],
            start: 0,
            end: 0,
            dry: false,
            ahead: None,
            accepted: None,
        }
    }
}

impl Rx {
    /// The header being processed, for an H2CTermReq.
    pub fn culprit(&self) -> &[u8] {
        let len = match self.stage {
            Stage::Header(_, ext) => ext.header,
            _ => CH_LEN,
        };
        let end = self.end.min(self.start + len.min(128));
        self.buf.get(self.start..end).unwrap_or(&[])
    }
    /// The received bytes not yet used.
    fn held(&self) -> usize {
        self.end - self.start
    }
    /// The current PDU, whose header region is the first `n` held
    /// bytes, is done.
    fn next_pdu(&mut self, n: usize) {
        self.stage = Stage::Common;
        self.consume(n);
    }
    /// Marks the first `n` held bytes used.
    #[inline]
    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
}

/// A transient transport error status, for a command whose data digest
/// failed.
fn transient() -> Status {
    Status::new(
        StatusType::Generic,
        generic::TRANSIENT_TRANSPORT_ERROR,
        false,
    )
}

impl<S: Stream> TcpQpair<S> {
    /// Processes arriving PDUs until the socket has nothing more or `max`
    /// completions are ready.
    pub(super) fn receive(&mut self, max: usize) -> Result<(), TcpError> {
        self.rx.dry = false;
        while self.ready.len() < max {
            let progressed = match self.rx.stage {
                Stage::Common => self.read_common()?,
                Stage::Header(ch, ext) => self.read_header(ch, ext)?,
                Stage::Data { .. } => self.read_data()?,
                Stage::Digest { .. } => self.read_digest()?,
            };
            if !progressed {
                return Ok(());
            }
        }
        Ok(())
    }

    /// How far past what it needs a receive at a PDU boundary may read:
    /// the next PDU's smallest header region.
    fn read_ahead(&self) -> usize {
        match self.phase {
            Phase::Ready => READY_HLEN + if self.rx_framing.hdgst { DIGEST_LEN } else { 0 },
            _ => CH_LEN,
        }
    }

    /// Receives into the buffer until it holds `need` bytes, asking for
    /// `ahead` more. `Ok(false)` when they have not all arrived.
    #[inline]
    fn fill_rx(&mut self, need: usize, ahead: usize) -> Result<bool, TcpError> {
        if self.rx.held() >= need {
            return Ok(true);
        }
        if self.rx.dry {
            return Ok(false);
        }
        self.recv_rx(need, ahead)
    }

    #[inline(never)]
    fn recv_rx(&mut self, need: usize, ahead: usize) -> Result<bool, TcpError> {
        let rx = &mut self.rx;
        if rx.start + need + ahead > RX_BUF {
            rx.buf.copy_within(rx.start..rx.end, 0);
            rx.end -= rx.start;
            rx.start = 0;
        }
        let to = (rx.start + need + ahead).min(RX_BUF);
        let stream = self
            .stream
            .as_mut()
            .ok_or(TcpError::Link(LinkError::Closed))?;
        let dst = rx.buf.get_mut(rx.end..to).unwrap_or(&mut []);
        let asked = dst.len();
        let n = stream.recv(&mut [dst])?.min(asked);
        rx.dry = n < asked;
        rx.end += n;
        Ok(rx.held() >= need)
    }

    fn read_common(&mut self) -> Result<bool, TcpError> {
        if self.rx.held() == 0 && !self.rx.dry {
            if let Some(cid) = self.solo.filter(|_| self.phase == Phase::Ready) {
                self.recv_ahead(cid)?;
            }
        }
        if !self.fill_rx(CH_LEN, self.read_ahead() - CH_LEN)? {
            return Ok(false);
        }
        let at = self.rx.start;
        let ch_bytes = self
            .rx
            .buf
            .get(at..)
            .and_then(prefix::<CH_LEN>)
            .ok_or(TcpError::Link(LinkError::Other))?;
        let ready = self.phase == Phase::Ready;
        let key = u64::from_le_bytes(*ch_bytes);
        if let Some((k, ch, ext)) = self.rx.accepted.filter(|_| ready) {
            if k == key {
                self.rx.stage = Stage::Header(ch, ext);
                return self.read_header(ch, ext);
            }
        }
        let ch = CommonHeader::parse(ch_bytes)?;
        let t = ch.pdu_type;
        let allowed = match self.phase {
            Phase::Handshake => matches!(t, PduType::IcResp | PduType::C2hTermReq),
            _ => t.from_controller() && t != PduType::IcResp,
        };
        if !allowed {
            return Err(if t.from_controller() {
                TcpError::Sequence { pdu: t as u8 }
            } else {
                TcpError::HeaderField {
                    pdu: t as u8,
                    offset: 0,
                }
            });
        }
        let framing = if ready {
            self.rx_framing
        } else {
            Framing::default()
        };
        let ext = ch.check(&framing, self.max_len())?;
        if ready {
            self.rx.accepted = Some((key, ch, ext));
        }
        self.rx.stage = Stage::Header(ch, ext);
        self.read_header(ch, ext)
    }

    fn read_header(&mut self, ch: CommonHeader, ext: Extent) -> Result<bool, TcpError> {
        if let Some(a) = self.rx.ahead {
            if ext.header != a.ra || ch.pdu_type != PduType::C2hData {
                // Not data right after this header: the bytes placed
                // ahead are the stream's next bytes.
                self.rx.ahead = None;
                self.unplace(a)?;
            }
        }
        // A PDU without data ends with its header region: read the next
        // one's header with it.
        let ahead = if ext.data == 0 { self.read_ahead() } else { 0 };
        if !self.fill_rx(ext.header, ahead)? {
            return Ok(false);
        }
        self.stats.pdus_in += 1;
        self.on_header(ch, ext)?;
        Ok(true)
    }

    /// The one read in flight, if its data has not started: where its
    /// first page goes.
    fn solo_target(&self, cid: u16) -> Option<(FrameId, usize)> {
        let c = self.cmds.get(usize::from(cid))?;
        if !c.live || c.dir != Dir::In || c.moved != 0 || !matches!(c.src, Source::Frames(_)) {
            return None;
        }
        let frame = *self.frame_ids.get(usize::from(cid) * self.max_frames)?;
        Some((frame, (c.len as usize).min(PAGE_SIZE)))
    }

    /// At a PDU boundary with nothing held and one read in flight: one
    /// receive for a header region, the read's first page into its frame,
    /// and (for a one-page read) its digest and the next header.
    fn recv_ahead(&mut self, cid: u16) -> Result<(), TcpError> {
        let Some((frame, chunk)) = self.solo_target(cid) else {
            return Ok(());
        };
        let ra = self.read_ahead();
        let tail_len = if self
            .cmds
            .get(usize::from(cid))
            .is_some_and(|c| c.len as usize == chunk)
        {
            self.rx_framing.data_digest_len() + ra
        } else {
            0
        };
        let TcpQpair {
            stream, rx, frames, ..
        } = self;
        let stream = stream.as_mut().ok_or(TcpError::Link(LinkError::Closed))?;
        let frames = frames.as_ref().ok_or(TcpError::OutOfRange { cid })?;
        let (head, rest) = rx.buf.split_at_mut(ra);
        let tail = rest.get_mut(..tail_len).unwrap_or(&mut []);
        let asked = ra + chunk + tail.len();
        let mut page = frames
            .write_lock(frame)
            .ok_or(TcpError::OutOfRange { cid })?;
        let dst = page.get_mut(..chunk).ok_or(TcpError::OutOfRange { cid })?;
        let got = stream.recv(&mut [head, dst, tail])?.min(asked);
        drop(page);
        rx.dry = got < asked;
        rx.start = 0;
        if got <= ra {
            rx.end = got;
            return Ok(());
        }
        let k = (got - ra).min(chunk);
        rx.end = ra + (got - ra - k);
        rx.ahead = Some(Ahead { cid, frame, ra, k });
        Ok(())
    }

    /// Puts bytes placed ahead back into the buffer, after the header
    /// region they followed, in stream order.
    fn unplace(&mut self, a: Ahead) -> Result<(), TcpError> {
        self.unplace_at(a, self.rx.start + a.ra)
    }

    /// Puts bytes placed ahead back into the buffer at `at`.
    #[cold]
    #[inline(never)]
    fn unplace_at(&mut self, a: Ahead, at: usize) -> Result<(), TcpError> {
        let TcpQpair { rx, frames, .. } = self;
        let (end, k) = (rx.end, a.k);
        if at > end || end + k > RX_BUF {
            return Err(TcpError::Link(LinkError::Other));
        }
        rx.buf.copy_within(at..end, at + k);
        let dst = rx.buf.get_mut(at..at + k).unwrap_or(&mut []);
        frames
            .as_ref()
            .ok_or(TcpError::OutOfRange { cid: a.cid })?
            .with(a.frame, 0, k, |b| dst.copy_from_slice(b))
            .map_err(|_| TcpError::OutOfRange { cid: a.cid })?;
        rx.end = end + k;
        Ok(())
    }

    /// A C2HData header right before bytes placed ahead has been checked
    /// and consumed: the bytes are the first `k` bytes of its data if it
    /// is for the placed read, at offset 0, with that much data; otherwise
    /// they go back into the buffer.
    // Inlined: a step of every read's completion, cheaper without
    // the call (`vm/io-cost.sh`).
    #[inline(always)]
    fn settle_ahead(&mut self, a: Ahead) -> Result<(), TcpError> {
        let Stage::Data {
            cid,
            at: 0,
            left,
            flags,
            ref mut digest,
        } = self.rx.stage
        else {
            return self.unplace_at(a, self.rx.start);
        };
        if cid != a.cid || (left as usize) < a.k {
            return self.unplace_at(a, self.rx.start);
        }
        let mut digest = digest.take();
        if let Some(d) = digest.as_mut() {
            let frames = self.frames.as_ref().ok_or(TcpError::OutOfRange { cid })?;
            frames
                .with(a.frame, 0, a.k, |b| d.update(b))
                .map_err(|_| TcpError::OutOfRange { cid })?;
        }
        let k = a.k as u32;
        if let Some(c) = self.cmds.get_mut(usize::from(cid)) {
            c.moved += k;
        }
        self.data_moved(cid, k, left - k, flags, digest)
    }

    /// A complete header region has arrived: check its digest and act on
    /// it.
    fn on_header(&mut self, ch: CommonHeader, ext: Extent) -> Result<(), TcpError> {
        let t = ch.pdu_type;
        let at = self.rx.start;
        let region = self.rx.buf.get(at..at + ext.header).unwrap_or(&[]);
        let digested = !matches!(t, PduType::IcResp | PduType::C2hTermReq);
        if digested && self.rx_framing.hdgst {
            super::pdu::check_header_digest(t, region)?;
        }
        let bad_len = TcpError::HeaderField {
            pdu: t as u8,
            offset: 2,
        };
        match t {
            PduType::IcResp => {
                let resp = IcResp::parse(prefix(region).ok_or(bad_len)?, &self.icreq)?;
                self.on_icresp(resp);
                self.rx.next_pdu(ext.header);
            }
            PduType::C2hTermReq => {
                let term = TermReq::parse(prefix(region).ok_or(bad_len)?);
                return Err(TcpError::Terminated { fes: term.fes });
            }
            PduType::CapsuleResp => {
                let cqe = parse_capsule_resp(prefix(region).ok_or(bad_len)?);
                self.on_response(cqe)?;
                self.rx.next_pdu(ext.header);
            }
            PduType::R2t => {
                let r2t = R2t::parse(prefix(region).ok_or(bad_len)?)?;
                self.on_r2t(r2t)?;
                self.rx.next_pdu(ext.header);
            }
            PduType::C2hData => {
                let h = DataHeader::parse(prefix(region).ok_or(bad_len)?, t, ext.data)?;
                self.on_c2h(ch.flags, h)?;
                self.rx.consume(ext.header);
                if let Some(a) = self.rx.ahead.take() {
                    self.settle_ahead(a)?;
                }
                return Ok(());
            }
            _ => {
                return Err(TcpError::HeaderField {
                    pdu: t as u8,
                    offset: 0,
                })
            }
        }
        Ok(())
    }

    /// The connection is ready with what ICResp agreed to; commands
    /// submitted while connecting go out now. Out of line: once per
    /// connection, kept off the receive path's registers.
    #[cold]
    #[inline(never)]
    fn on_icresp(&mut self, resp: IcResp) {
        self.rx_framing = Framing {
            hdgst: resp.hdgst,
            ddgst: resp.ddgst,
            pda: self.icreq.hpda,
        };
        self.tx_framing = Framing {
            hdgst: resp.hdgst,
            ddgst: resp.ddgst,
            pda: resp.cpda,
        };
        self.maxh2cdata = resp.maxh2cdata;
        self.tx.plain_capsule = plain_capsule_header(&self.tx_framing);
        self.phase = Phase::Ready;
        for cid in 0..self.cmds.len() as u16 {
            let live = self.cmds.get(usize::from(cid)).is_some_and(|c| c.live);
            if live {
                if let Some(c) = self.cmds.get_mut(usize::from(cid)) {
                    c.tx_busy = 1;
                }
                self.tx.queue.push_back(TxItem::Capsule(cid));
            }
        }
    }

    /// Checks a C2HData header against its command (3.3.2.1) and starts
    /// receiving its data.
    #[inline(always)]
    fn on_c2h(&mut self, flags: u8, h: DataHeader) -> Result<(), TcpError> {
        use super::pdu::flags::{LAST_PDU, SUCCESS};
        let pdu = PduType::C2hData as u8;
        let cid = self
            .lookup(h.cccid)
            .ok_or(TcpError::UnknownCid { cid: h.cccid })?;
        let c = self
            .cmds
            .get(usize::from(cid))
            .ok_or(TcpError::UnknownCid { cid })?;
        if c.dir != Dir::In || c.last_seen {
            return Err(TcpError::Sequence { pdu });
        }
        if h.datao != c.moved {
            return Err(TcpError::Sequence { pdu });
        }
        if h.datao.checked_add(h.datal).is_none_or(|end| end > c.len) {
            return Err(TcpError::OutOfRange { cid });
        }
        if flags & SUCCESS != 0 && flags & LAST_PDU == 0 {
            return Err(TcpError::HeaderField { pdu, offset: 1 });
        }
        self.rx.stage = Stage::Data {
            cid,
            at: h.datao,
            left: h.datal,
            flags,
            digest: self.rx_framing.ddgst.then(Running::new),
        };
        Ok(())
    }

    fn read_data(&mut self) -> Result<bool, TcpError> {
        let (cid, at, left, flags, mut digest) = match &mut self.rx.stage {
            Stage::Data {
                cid,
                at,
                left,
                flags,
                digest,
            } => (*cid, *at, *left, *flags, digest.take()),
            _ => return Ok(false),
        };
        let n = if self.rx.dry && self.rx.held() == 0 {
            0
        } else {
            self.recv_data(cid, at, left, digest.as_mut())?
        };
        self.data_moved(cid, at + n, left - n, flags, digest)?;
        Ok(n > 0)
    }

    /// Data of the current C2HData PDU has arrived up to byte `at` of
    /// command `cid`'s buffer, `left` bytes still to come.
    // Inlined: a step of every read's completion, cheaper without
    // the call (`vm/io-cost.sh`).
    #[inline(always)]
    fn data_moved(
        &mut self,
        cid: u16,
        at: u32,
        left: u32,
        flags: u8,
        digest: Option<Running>,
    ) -> Result<(), TcpError> {
        if left > 0 {
            self.rx.stage = Stage::Data {
                cid,
                at,
                left,
                flags,
                digest,
            };
            return Ok(());
        }
        match digest {
            Some(d) => {
                self.rx.stage = Stage::Digest {
                    cid,
                    flags,
                    expect: d.finish(),
                };
                Ok(())
            }
            None => self.end_c2h(cid, flags, true),
        }
    }

    /// Receives up to `left` bytes of command `cid`'s data at byte `at` of
    /// its buffer, straight into the frame or buffer, adding them to
    /// `digest`; with the last of them, the data digest and the next
    /// PDU's header into the receive buffer. Returns the count (0:
    /// nothing has arrived).
    fn recv_data(
        &mut self,
        cid: u16,
        at: u32,
        left: u32,
        digest: Option<&mut Running>,
    ) -> Result<u32, TcpError> {
        let page = PAGE_SIZE;
        let tail_len = self.rx_framing.data_digest_len() + self.read_ahead();
        let TcpQpair {
            stream,
            rx,
            cmds,
            frames,
            frame_ids,
            max_frames,
            ..
        } = self;
        let stream = stream.as_mut().ok_or(TcpError::Link(LinkError::Closed))?;
        let cmd = cmds
            .get_mut(usize::from(cid))
            .ok_or(TcpError::UnknownCid { cid })?;
        let mut digest = digest;
        let (buf, start, end, dry) = (&mut rx.buf, &mut rx.start, &mut rx.end, &mut rx.dry);
        // Receives into `dst`, and into the buffer's tail when `dst` ends
        // the data; or, when the buffer holds bytes (data placed ahead
        // and put back), copies them. Returns the bytes that went into
        // `dst`.
        let mut take = |dst: &mut [u8], last: bool| -> Result<usize, TcpError> {
            if *end > *start {
                let n = (*end - *start).min(dst.len());
                let src = buf.get(*start..*start + n).unwrap_or(&[]);
                if let Some(d) = dst.get_mut(..src.len()) {
                    d.copy_from_slice(src);
                }
                if let Some(d) = digest.as_deref_mut() {
                    d.update(src);
                }
                *start += src.len();
                if *start == *end {
                    (*start, *end) = (0, 0);
                }
                return Ok(src.len());
            }
            let want = dst.len();
            let tail = if last {
                buf.get_mut(..tail_len).unwrap_or(&mut [])
            } else {
                &mut []
            };
            let asked = want + tail.len();
            let got = stream.recv(&mut [&mut *dst, tail])?.min(asked);
            *dry = got < asked;
            *end = got.saturating_sub(want);
            let n = got.min(want);
            if let (Some(d), Some(bytes)) = (digest.as_deref_mut(), dst.get(..n)) {
                d.update(bytes);
            }
            Ok(n)
        };
        let n = match cmd.src {
            Source::Buffer => {
                let dst = cmd
                    .buf
                    .get_mut(at as usize..(at + left) as usize)
                    .ok_or(TcpError::OutOfRange { cid })?;
                take(dst, true)?
            }
            Source::Frames(_) => {
                let within = at as usize % page;
                let frame = frame_ids
                    .get(usize::from(cid) * *max_frames + at as usize / page)
                    .copied()
                    .ok_or(TcpError::OutOfRange { cid })?;
                let chunk = (page - within).min(left as usize);
                let frames = frames.as_ref().ok_or(TcpError::OutOfRange { cid })?;
                let last = chunk == left as usize;
                frames
                    .with_mut(frame, within, chunk, |dst| take(dst, last))
                    .map_err(|_| TcpError::OutOfRange { cid })??
            }
            Source::None => {
                return Err(TcpError::Sequence {
                    pdu: PduType::C2hData as u8,
                })
            }
        };
        cmd.moved += n as u32;
        Ok(n as u32)
    }

    fn read_digest(&mut self) -> Result<bool, TcpError> {
        let Stage::Digest { cid, flags, expect } = self.rx.stage else {
            return Ok(false);
        };
        if !self.fill_rx(DIGEST_LEN, self.read_ahead())? {
            return Ok(false);
        }
        let at = self.rx.start;
        let got = self
            .rx
            .buf
            .get(at..)
            .and_then(prefix::<DIGEST_LEN>)
            .map_or(0, |d| u32::from_le_bytes(*d));
        self.rx.consume(DIGEST_LEN);
        self.end_c2h(cid, flags, got == expect)?;
        Ok(true)
    }

    /// The data of a C2HData PDU has all arrived (its digest matching or
    /// not).
    // Inlined: a step of every read's completion, cheaper without
    // the call (`vm/io-cost.sh`).
    #[inline(always)]
    fn end_c2h(&mut self, cid: u16, flags: u8, digest_ok: bool) -> Result<(), TcpError> {
        use super::pdu::flags::{LAST_PDU, SUCCESS};
        self.rx.stage = Stage::Common;
        if !digest_ok {
            self.stats.data_digest_errors += 1;
        }
        let qid = self.qid;
        let c = self
            .cmds
            .get_mut(usize::from(cid))
            .ok_or(TcpError::UnknownCid { cid })?;
        c.bad_digest |= !digest_ok;
        if flags & LAST_PDU != 0 {
            c.last_seen = true;
        }
        if flags & SUCCESS != 0 {
            if c.moved != c.len {
                return Err(TcpError::MissingData { cid });
            }
            // 3.3.2.1: the host synthesizes a completion with the Command
            // Specific and Status fields cleared.
            let cqe = if c.bad_digest {
                CompletionEntry::new(0, 0, qid, cid, false, transient())
            } else {
                self.success
            };
            self.complete(cid, cqe);
        }
        Ok(())
    }

    /// A response capsule: checked against this queue and its command.
    fn on_response(&mut self, mut cqe: CompletionEntry) -> Result<(), TcpError> {
        let cid = self
            .lookup(cqe.cid())
            .ok_or(TcpError::UnknownCid { cid: cqe.cid() })?;
        // A Connect that failed may come back from no queue at all (Linux
        // answers with SQ id 0 when it did not install the queue).
        if cqe.sq_id() != self.qid && cid != self.own_cid() {
            return Err(TcpError::WrongQueue { sqid: cqe.sq_id() });
        }
        let c = self
            .cmds
            .get(usize::from(cid))
            .ok_or(TcpError::UnknownCid { cid })?;
        let status = cqe.status();
        if status.is_success() {
            let data_done = match c.dir {
                Dir::None => true,
                Dir::In => c.moved == c.len,
                Dir::Out => c.in_capsule || (c.moved == c.len && !c.r2t_open),
            };
            if !data_done {
                return Err(TcpError::MissingData { cid });
            }
            if c.bad_digest {
                let (dw0, sq_head, qid, phase) = (cqe.dw0, cqe.sq_head(), cqe.sq_id(), cqe.phase());
                cqe = CompletionEntry::new(dw0, sq_head, qid, cid, phase, transient());
            }
        }
        self.complete(cid, cqe);
        Ok(())
    }

    /// An R2T (3.3.2.2): the next range of the command's data, inside its
    /// buffer, while no other R2T of it is being served; answered with
    /// H2CData PDUs of at most MAXH2CDATA bytes.
    fn on_r2t(&mut self, r: R2t) -> Result<(), TcpError> {
        let pdu = PduType::R2t as u8;
        let cid = self
            .lookup(r.cccid)
            .ok_or(TcpError::UnknownCid { cid: r.cccid })?;
        let max = self.maxh2cdata.max(super::pdu::MIN_MAXH2CDATA);
        let c = self
            .cmds
            .get_mut(usize::from(cid))
            .ok_or(TcpError::UnknownCid { cid })?;
        if c.dir != Dir::Out || c.in_capsule {
            return Err(TcpError::Sequence { pdu });
        }
        if c.r2t_open {
            return Err(TcpError::R2tLimit { cid });
        }
        if r.r2to != c.moved {
            return Err(TcpError::Sequence { pdu });
        }
        let end = r
            .r2to
            .checked_add(r.r2tl)
            .filter(|&e| e <= c.len)
            .ok_or(TcpError::OutOfRange { cid })?;
        c.moved = end;
        c.r2t_open = true;
        let mut at = r.r2to;
        while at < end {
            let len = (end - at).min(max);
            c.tx_busy += 1;
            self.tx.queue.push_back(TxItem::H2c {
                cid,
                ttag: r.ttag,
                offset: at,
                len,
                last: at + len == end,
            });
            at += len;
        }
        Ok(())
    }
}
