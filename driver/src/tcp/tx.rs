//! The transmit side of a [`TcpQpair`]: a queue of PDUs to send, and the
//! batch being sent, resumed wherever the socket stopped taking bytes.
//!
//! A batch is the header regions (header, digest, padding) of up to
//! [`BATCH_PDUS`] queued PDUs built back to back in one buffer, the last
//! of them possibly followed by its data, read in place from the frames
//! or the command's buffer, and its data digest, computed over the data
//! when the PDU is built. One `send` gathers the headers, up to
//! [`GATHER_FRAMES`] frames and the digest, so the command capsules of
//! everything submitted since the last poll leave in one system call.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec;

use pollfs_core::units::PAGE_SIZE;

use crate::spec::command::SQE_SIZE;

use super::digest::{Running, DIGEST_LEN};
use super::error::TcpError;
use super::pdu::{
    encode_capsule_cmd, flags, DataHeader, PduType, CAPSULE_CMD_HLEN, CH_LEN, TX_HEADER_MAX,
};
use super::qpair::{Source, TcpQpair};
use super::stream::{LinkError, Stream};

/// Frames one send gathers at most.
const GATHER_FRAMES: usize = 8;
/// PDUs one batch holds at most.
const BATCH_PDUS: usize = 32;
/// Bytes of header regions one batch holds: any [`BATCH_PDUS`] headers.
const BATCH_BYTES: usize = BATCH_PDUS * TX_HEADER_MAX;

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

/// A PDU of the batch: where it ends in the batch's bytes on the wire.
#[derive(Clone, Copy, Debug, Default)]
struct Built {
    end: usize,
    cid: Option<u16>,
    last_of_r2t: bool,
}

/// The data that follows the batch's last header, and its digest.
#[derive(Clone, Copy, Debug, Default)]
struct Data {
    cid: u16,
    off: u32,
    len: u32,
    digest: [u8; DIGEST_LEN],
    digest_len: usize,
}

/// The transmit queue and the batch in transmission.
#[derive(Debug)]
pub(super) struct Tx {
    pub queue: VecDeque<TxItem>,
    /// Header regions of the batch, back to back.
    bytes: Box<[u8]>,
    len: usize,
    built: [Built; BATCH_PDUS],
    count: usize,
    /// PDUs of the batch reported sent.
    reported: usize,
    data: Option<Data>,
    /// Bytes of the batch sent so far.
    done: usize,
    /// The common header of a capsule without data on this connection,
    /// when it carries no header digest (the same for every command).
    pub plain_capsule: Option<[u8; CH_LEN]>,
}

impl Default for Tx {
    fn default() -> Self {
        Tx {
            queue: VecDeque::new(),
            bytes: vec![0; BATCH_BYTES].into_boxed_slice(),
            len: 0,
            built: [Built::default(); BATCH_PDUS],
            count: 0,
            reported: 0,
            data: None,
            done: 0,
            plain_capsule: None,
        }
    }
}

impl Tx {
    /// True when no PDU is partly sent: a TermReq may go out now.
    pub fn at_boundary(&self) -> bool {
        self.built
            .get(self.reported.wrapping_sub(1))
            .map_or(0, |b| b.end)
            == self.done
    }
    /// Bytes of the batch on the wire: headers, data, digest.
    fn total(&self) -> usize {
        self.len + self.data.map_or(0, |d| d.len as usize + d.digest_len)
    }
}

impl<S: Stream> TcpQpair<S> {
    /// Sends queued PDUs until the socket takes no more.
    #[inline]
    pub(super) fn flush(&mut self) -> Result<(), TcpError> {
        if self.tx.count == 0 && self.tx.queue.is_empty() {
            return Ok(());
        }
        self.send_queued()
    }

    #[inline(never)]
    fn send_queued(&mut self) -> Result<(), TcpError> {
        loop {
            if self.stream.is_none() {
                return Ok(());
            }
            if self.tx.count == 0 {
                if self.tx.queue.is_empty() {
                    return Ok(());
                }
                self.fill();
            }
            self.send_some()?;
            while let Some(&b) = self.tx.built.get(self.tx.reported) {
                if self.tx.reported >= self.tx.count || b.end > self.tx.done {
                    break;
                }
                self.tx.reported += 1;
                self.stats.pdus_out += 1;
                if let Some(cid) = b.cid {
                    self.pdu_sent(cid, b.last_of_r2t);
                }
            }
            if self.tx.done < self.tx.total() {
                return Ok(());
            }
            let t = &mut self.tx;
            (t.len, t.count, t.reported, t.done, t.data) = (0, 0, 0, 0, None);
            if t.queue.is_empty() {
                return Ok(());
            }
        }
    }

    /// Builds queued PDUs into the batch, up to the first that carries
    /// data.
    fn fill(&mut self) {
        while let Some(&item) = self.tx.queue.front() {
            if !self.append(item) {
                return;
            }
            self.tx.queue.pop_front();
        }
    }

    /// Queues the command capsule of `cid`, built straight into the batch
    /// when nothing is queued before it.
    pub(super) fn queue_capsule(&mut self, cid: u16) {
        let item = TxItem::Capsule(cid);
        if !self.tx.queue.is_empty() || !self.append(item) {
            self.tx.queue.push_back(item);
        }
    }

    /// Builds `item` into the batch if the batch can take it (room, and no
    /// PDU with data already ending it).
    fn append(&mut self, item: TxItem) -> bool {
        if self.tx.count >= BATCH_PDUS || self.tx.data.is_some() {
            return false;
        }
        let at = self.tx.len;
        let Some(out) = self
            .tx
            .bytes
            .get_mut(at..at + TX_HEADER_MAX)
            .and_then(|s| <&mut [u8; TX_HEADER_MAX]>::try_from(s).ok())
        else {
            return false;
        };
        let cmd = self.cmds.get(usize::from(item.cid().unwrap_or(u16::MAX)));
        let (hdr_len, data) = match (item, cmd, self.tx.plain_capsule) {
            // The usual capsule: no data, no header digest, its common
            // header the same every time.
            (TxItem::Capsule(_), Some(c), Some(ch)) if !c.in_capsule => {
                let (head, rest) = out.split_at_mut(CH_LEN);
                head.copy_from_slice(&ch);
                if let Some(s) = rest.get_mut(..SQE_SIZE) {
                    s.copy_from_slice(&c.sqe.to_bytes());
                }
                (CAPSULE_CMD_HLEN, None)
            }
            _ => build(item, out, &self.icreq, &self.tx_framing, cmd),
        };
        self.tx.len += hdr_len;
        let mut end = self.tx.len;
        if let Some(mut d) = data {
            if self.tx_framing.ddgst {
                let mut run = Running::new();
                self.each_chunk(d.cid, d.off, d.len, |c| run.update(c));
                d.digest = run.finish().to_le_bytes();
                d.digest_len = DIGEST_LEN;
            }
            end += d.len as usize + d.digest_len;
            self.tx.data = Some(d);
        }
        if let Some(b) = self.tx.built.get_mut(self.tx.count) {
            *b = Built {
                end,
                cid: item.cid(),
                last_of_r2t: matches!(item, TxItem::H2c { last: true, .. }),
            };
        }
        self.tx.count += 1;
        true
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

    /// One send of the rest of the batch.
    fn send_some(&mut self) -> Result<(), TcpError> {
        if self.tx.data.is_some() {
            return self.send_with_data();
        }
        let tx = &mut self.tx;
        let Some(stream) = self.stream.as_mut() else {
            return Ok(());
        };
        let head = tx.bytes.get(tx.done.min(tx.len)..tx.len).unwrap_or(&[]);
        tx.done += stream.send(&[head])?;
        Ok(())
    }

    /// One gathering send of the rest of a batch whose last PDU carries
    /// data: headers, data, digest.
    #[inline(never)]
    fn send_with_data(&mut self) -> Result<(), TcpError> {
        let TcpQpair {
            stream,
            tx,
            frames,
            cmds,
            frame_ids,
            max_frames,
            ..
        } = self;
        let (Some(stream), Some(d)) = (stream.as_mut(), tx.data) else {
            return Ok(());
        };
        let head = tx.bytes.get(tx.done.min(tx.len)..tx.len).unwrap_or(&[]);
        // Frames locked for this send, and the byte range of each.
        let mut locked: [Option<(spin::RwLockReadGuard<'_, _>, usize, usize)>; GATHER_FRAMES] =
            Default::default();
        let mut parts: [&[u8]; GATHER_FRAMES + 2] = [&[]; GATHER_FRAMES + 2];
        let mut k = 0;
        if !head.is_empty() {
            parts[0] = head;
            k = 1;
        }
        let data_len = d.len as usize;
        let data_from = tx.done.saturating_sub(tx.len);
        let mut data_to = data_from;
        let cid = usize::from(d.cid);
        if data_from < data_len {
            let cmd = cmds.get(cid);
            match cmd.map(|c| c.src) {
                Some(Source::Buffer) => {
                    let base = d.off as usize;
                    if let Some(b) = cmd.and_then(|c| c.buf.get(base + data_from..base + data_len))
                    {
                        parts[k] = b;
                        k += 1;
                        data_to = data_len;
                    }
                }
                Some(Source::Frames(_)) => {
                    let mut at = d.off as usize + data_from;
                    let end = d.off as usize + data_len;
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
                    data_to = at - d.off as usize;
                }
                _ => {}
            }
            if data_to == data_from {
                // The data vanished (cannot happen for a described
                // command): end the connection rather than send garbage.
                return Err(TcpError::Link(LinkError::Other));
            }
        }
        for (g, within, n) in locked.iter().flatten() {
            parts[k] = g.get(*within..*within + *n).unwrap_or(&[]);
            k += 1;
        }
        if data_to == data_len {
            let digest_from = tx.done.saturating_sub(tx.len + data_len);
            if digest_from < d.digest_len {
                parts[k] = d.digest.get(digest_from..d.digest_len).unwrap_or(&[]);
                k += 1;
            }
        }
        let n = stream.send(parts.get(..k).unwrap_or(&[]))?;
        drop(locked);
        tx.done += n;
        Ok(())
    }
}

/// Builds the header region of `item` into `out`: its length, and the
/// data that follows it (without its digest yet).
fn build(
    item: TxItem,
    out: &mut [u8; TX_HEADER_MAX],
    icreq: &super::pdu::IcReq,
    framing: &super::pdu::Framing,
    cmd: Option<&super::qpair::Cmd>,
) -> (usize, Option<Data>) {
    match item {
        TxItem::IcReq => {
            let b = icreq.encode();
            if let Some(h) = out.get_mut(..b.len()) {
                h.copy_from_slice(&b);
            }
            (b.len(), None)
        }
        TxItem::Capsule(cid) => {
            let Some(c) = cmd else {
                return (0, None);
            };
            let data = if c.in_capsule { c.len } else { 0 };
            let n = encode_capsule_cmd(&c.sqe, data as usize, framing, out);
            let data = (data > 0).then_some(Data {
                cid,
                off: 0,
                len: data,
                ..Data::default()
            });
            (n, data)
        }
        TxItem::H2c {
            cid,
            ttag,
            offset,
            len,
            last,
        } => {
            let gen = cmd.map_or(0, |c| c.gen);
            let h = DataHeader {
                cccid: super::qpair::wire_cid(cid, gen),
                ttag,
                datao: offset,
                datal: len,
            };
            let extra = if last { flags::LAST_PDU } else { 0 };
            let n = h.encode(PduType::H2cData, extra, framing, out);
            (
                n,
                Some(Data {
                    cid,
                    off: offset,
                    len,
                    ..Data::default()
                }),
            )
        }
    }
}
