//! The transmit side of a [`TcpQpair`]: a queue of PDUs to send and the
//! one being sent, resumed wherever the socket stopped taking bytes.
//!
//! A PDU is its header region (header, digest, padding) built when it
//! becomes current, then its data read in place from the frames or the
//! command's buffer, then the data digest, computed over the data when the
//! PDU is built. One `send` gathers the header, up to
//! [`GATHER_FRAMES`] frames and the digest.

use alloc::collections::VecDeque;

use pollfs_core::units::PAGE_SIZE;

use super::digest::{Running, DIGEST_LEN};
use super::error::TcpError;
use super::pdu::{encode_capsule_cmd, flags, DataHeader, PduType, TX_HEADER_MAX};
use super::qpair::{Source, TcpQpair};
use super::stream::Stream;

/// Frames one send gathers at most.
const GATHER_FRAMES: usize = 8;

/// A PDU waiting to be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TxItem {
    /// The connection's ICReq.
    IcReq,
    /// The command capsule of a command id, with in-capsule data if any.
    Capsule(u16),
    /// Data a controller asked for with an R2T.
    H2c {
        cid: u16,
        ttag: u16,
        offset: u32,
        len: u32,
        /// Last H2CData PDU answering its R2T.
        last: bool,
    },
}

impl TxItem {
    /// The command the PDU belongs to.
    pub fn cid(&self) -> Option<u16> {
        match *self {
            TxItem::IcReq => None,
            TxItem::Capsule(c) | TxItem::H2c { cid: c, .. } => Some(c),
        }
    }
}

/// The PDU being sent.
#[derive(Debug)]
pub(super) struct TxPdu {
    hdr: [u8; TX_HEADER_MAX],
    hdr_len: usize,
    cid: Option<u16>,
    data_off: u32,
    data_len: u32,
    digest: [u8; DIGEST_LEN],
    digest_len: usize,
    /// Bytes of the PDU sent so far.
    done: usize,
    last_of_r2t: bool,
}

impl TxPdu {
    fn total(&self) -> usize {
        self.hdr_len + self.data_len as usize + self.digest_len
    }
}

/// The transmit queue.
#[derive(Debug, Default)]
pub(super) struct Tx {
    pub queue: VecDeque<TxItem>,
    pub cur: Option<TxPdu>,
}

impl<S: Stream> TcpQpair<S> {
    /// Sends queued PDUs until the socket takes no more.
    pub(super) fn flush(&mut self) -> Result<(), TcpError> {
        loop {
            if self.stream.is_none() {
                return Ok(());
            }
            if self.tx.cur.is_none() {
                let Some(item) = self.tx.queue.pop_front() else {
                    return Ok(());
                };
                self.tx.cur = Some(self.build(item));
            }
            let Some(finished) = self.send_some()? else {
                return Ok(());
            };
            self.tx.cur = None;
            self.stats.pdus_out += 1;
            if let (Some(cid), last) = finished {
                self.pdu_sent(cid, last);
            }
        }
    }

    /// Builds the header region (and data digest) of `item`.
    fn build(&self, item: TxItem) -> TxPdu {
        let mut p = TxPdu {
            hdr: [0; TX_HEADER_MAX],
            hdr_len: 0,
            cid: item.cid(),
            data_off: 0,
            data_len: 0,
            digest: [0; DIGEST_LEN],
            digest_len: 0,
            done: 0,
            last_of_r2t: false,
        };
        match item {
            TxItem::IcReq => {
                let b = self.icreq.encode();
                if let Some(h) = p.hdr.get_mut(..b.len()) {
                    h.copy_from_slice(&b);
                }
                p.hdr_len = b.len();
            }
            TxItem::Capsule(cid) => {
                let (sqe, data) = match self.cmds.get(usize::from(cid)) {
                    Some(c) => (c.sqe, if c.in_capsule { c.len } else { 0 }),
                    None => Default::default(),
                };
                p.hdr_len = encode_capsule_cmd(&sqe, data as usize, &self.tx_framing, &mut p.hdr);
                p.data_len = data;
            }
            TxItem::H2c {
                cid,
                ttag,
                offset,
                len,
                last,
            } => {
                let gen = self.cmds.get(usize::from(cid)).map_or(0, |c| c.gen);
                let h = DataHeader {
                    cccid: super::qpair::wire_cid(cid, gen),
                    ttag,
                    datao: offset,
                    datal: len,
                };
                let extra = if last { flags::LAST_PDU } else { 0 };
                p.hdr_len = h.encode(PduType::H2cData, extra, &self.tx_framing, &mut p.hdr);
                p.data_off = offset;
                p.data_len = len;
                p.last_of_r2t = last;
            }
        }
        if p.data_len > 0 && self.tx_framing.ddgst {
            if let Some(cid) = p.cid {
                let mut d = Running::new();
                self.each_chunk(cid, p.data_off, p.data_len, |c| d.update(c));
                p.digest = d.finish().to_le_bytes();
            }
            p.digest_len = DIGEST_LEN;
        }
        p
    }

    /// Runs `f` over bytes `[off, off + len)` of command `cid`'s data, in
    /// order, one frame (or the buffer) at a time.
    pub(super) fn each_chunk(&self, cid: u16, off: u32, len: u32, mut f: impl FnMut(&[u8])) {
        let Some(c) = self.cmds.get(usize::from(cid)) else {
            return;
        };
        let end = off.saturating_add(len);
        match c.src {
            Source::None => {}
            Source::Buffer => {
                if let Some(b) = c.buf.get(off as usize..end as usize) {
                    f(b);
                }
            }
            Source::Frames(_) => {
                let Some(frames) = self.frames.as_ref() else {
                    return;
                };
                let mut at = off;
                while at < end {
                    let Some((frame, within)) = self.frame_at(cid, at) else {
                        return;
                    };
                    let n = (PAGE_SIZE - within).min((end - at) as usize);
                    if frames.with(frame, within, n, &mut f).is_err() {
                        return;
                    }
                    at += n as u32;
                }
            }
        }
    }

    /// One gathering send of the current PDU. `Ok(None)` while it is not
    /// all sent; `Ok(Some((cid, last_of_r2t)))` once it is.
    fn send_some(&mut self) -> Result<Option<(Option<u16>, bool)>, TcpError> {
        let TcpQpair {
            stream,
            tx,
            frames,
            cmds,
            frame_ids,
            max_frames,
            ..
        } = self;
        let (Some(stream), Some(p)) = (stream.as_mut(), tx.cur.as_mut()) else {
            return Ok(None);
        };
        let hdr_len = p.hdr_len;
        let data_len = p.data_len as usize;
        // Frames locked for this send, and the byte range of each.
        let mut locked: [Option<(spin::RwLockReadGuard<'_, _>, usize, usize)>; GATHER_FRAMES] =
            Default::default();
        let mut parts: [&[u8]; GATHER_FRAMES + 2] = [&[]; GATHER_FRAMES + 2];
        let mut k = 0;
        if p.done < hdr_len {
            parts[0] = p.hdr.get(p.done..hdr_len).unwrap_or(&[]);
            k = 1;
        }
        let data_from = p.done.saturating_sub(hdr_len);
        let mut data_to = data_from;
        let cid = usize::from(p.cid.unwrap_or(u16::MAX));
        if data_from < data_len {
            let cmd = cmds.get(cid);
            match cmd.map(|c| c.src) {
                Some(Source::Buffer) => {
                    let base = p.data_off as usize;
                    if let Some(b) = cmd.and_then(|c| c.buf.get(base + data_from..base + data_len))
                    {
                        parts[k] = b;
                        k += 1;
                        data_to = data_len;
                    }
                }
                Some(Source::Frames(_)) => {
                    let mut at = p.data_off as usize + data_from;
                    let end = p.data_off as usize + data_len;
                    let mut i = 0;
                    while at < end && i < GATHER_FRAMES {
                        let Some(&frame) = frame_ids.get(cid * *max_frames + at / PAGE_SIZE) else {
                            break;
                        };
                        let Some(g) = frames.as_ref().and_then(|f| f.read_lock(frame)) else {
                            break;
                        };
                        let within = at % PAGE_SIZE;
                        let n = (PAGE_SIZE - within).min(end - at);
                        locked[i] = Some((g, within, n));
                        at += n;
                        i += 1;
                    }
                    data_to = at - p.data_off as usize;
                }
                _ => {}
            }
            if data_to == data_from {
                // The data vanished (cannot happen for a described
                // command): end the connection rather than send garbage.
                return Err(TcpError::Link(super::stream::LinkError::Other));
            }
        }
        for (g, within, n) in locked.iter().flatten() {
            parts[k] = g.get(*within..*within + *n).unwrap_or(&[]);
            k += 1;
        }
        if data_to == data_len {
            let digest_from = p.done.saturating_sub(hdr_len + data_len);
            if digest_from < p.digest_len {
                parts[k] = p.digest.get(digest_from..p.digest_len).unwrap_or(&[]);
                k += 1;
            }
        }
        let n = stream.send(parts.get(..k).unwrap_or(&[]))?;
        drop(locked);
        p.done += n;
        if p.done >= p.total() {
            return Ok(Some((p.cid, p.last_of_r2t)));
        }
        Ok(None)
    }
}
