//! The TCP queue pair against an in-memory stream: the handshake, data in
//! both directions, and every check on what a controller sends, each
//! ending in its specific error, with no sockets involved.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use pollfs_core::dev::FrameArena;
use pollfs_core::units::{FrameId, Nanos};

use super::digest::crc32c;
use super::pdu::{
    encode_capsule_cmd, encode_capsule_resp, flags, parse_capsule_cmd, prefix, CommonHeader,
    DataHeader, Framing, IcReq, IcResp, PduType, R2t, TermReq, TERM_MAX_PLEN, TX_HEADER_MAX,
};
use super::stream::MemoryStream;
use super::{TcpError, TcpFrames, TcpQpair};
use crate::qpair::ProtocolError;
use crate::spec::command::SubmissionEntry;
use crate::spec::completion::CompletionEntry;
use crate::spec::status::{generic, Status};
use crate::transport::{Payload, Qpair};

const NONE: Framing = Framing {
    hdgst: false,
    ddgst: false,
    pda: 0,
};

/// Both digests on.
const DIGESTS: Framing = Framing {
    hdgst: true,
    ddgst: true,
    pda: 0,
};

struct Rig {
    qp: TcpQpair<MemoryStream>,
    wire: MemoryStream,
    frames: Arc<TcpFrames>,
    framing: Framing,
}

/// A queue of 8 entries over 16 frames, 4 frames per command, 4 KiB of
/// in-capsule data, connected with `framing` and MAXH2CDATA 4096.
fn rig_with(framing: Framing, max_recv: usize) -> Rig {
    let frames = Arc::new(TcpFrames::new(16));
    let mut qp = TcpQpair::new(1, 8, Some(frames.clone()), 4, 4096);
    let wire = MemoryStream::new(0, max_recv);
    qp.attach(
        wire.clone(),
        IcReq {
            hpda: 0,
            hdgst: framing.hdgst,
            ddgst: framing.ddgst,
            maxr2t: 0,
        },
    );
    let resp = IcResp {
        cpda: 0,
        hdgst: framing.hdgst,
        ddgst: framing.ddgst,
        maxh2cdata: 4096,
    };
    wire.feed(&resp.encode());
    for _ in 0..200 {
        qp.service(usize::MAX).unwrap();
    }
    assert!(qp.is_ready());
    let icreq = wire.take_sent();
    assert_eq!(icreq.len(), 128);
    assert_eq!(icreq[0], PduType::IcReq as u8);
    Rig {
        qp,
        wire,
        frames,
        framing,
    }
}

fn rig() -> Rig {
    rig_with(NONE, 0)
}

impl Rig {
    fn poll(&mut self) -> Result<Vec<CompletionEntry>, ProtocolError<TcpError>> {
        let mut out = Vec::new();
        // A receive that gets less than it asked for ends the poll, as
        // on a socket with nothing more: with `max_recv` each poll takes
        // a piece. Poll until everything fed is in, then some more.
        for _ in 0..100_000 {
            self.qp.poll(Nanos(0), usize::MAX, &mut out)?;
            if self.wire.pending() == 0 {
                break;
            }
        }
        for _ in 0..100 {
            self.qp.poll(Nanos(0), usize::MAX, &mut out)?;
        }
        Ok(out)
    }
    fn error(&mut self) -> TcpError {
        match self.poll() {
            Err(ProtocolError::Transport(e)) => e,
            other => panic!("expected a fatal error, got {other:?}"),
        }
    }
    /// Submits a read (opcode 02h) or write (01h) of frames `f` as `cid`
    /// and returns the capsule's wire command id.
    fn submit(&mut self, cid: u16, write: bool, f: &[FrameId]) -> u16 {
        let blocks = (f.len() * 8) as u32;
        let mut sqe = if write {
            SubmissionEntry::write(1, 0, blocks, false)
        } else {
            SubmissionEntry::read(1, 0, blocks)
        };
        sqe.set_cid(cid);
        self.qp.submit(&sqe, Payload::Frames(f)).unwrap();
        // At once on an idle queue, else with the next poll.
        self.qp.service(0).unwrap();
        let sent = self.wire.take_sent();
        let ch = CommonHeader::parse(prefix(&sent).unwrap()).unwrap();
        assert_eq!(ch.pdu_type, PduType::CapsuleCmd);
        let cmd = parse_capsule_cmd(prefix(&sent).unwrap());
        assert_eq!(cmd.cid() & 0xfff, cid);
        cmd.cid()
    }
    fn c2h(&self, cccid: u16, datao: u32, data: &[u8], fl: u8) {
        let mut hdr = [0u8; TX_HEADER_MAX];
        let h = DataHeader {
            cccid,
            ttag: 0,
            datao,
            datal: data.len() as u32,
        };
        let n = h.encode(PduType::C2hData, fl, &self.framing, &mut hdr);
        self.wire.feed(&hdr[..n]);
        self.wire.feed(data);
        if self.framing.ddgst {
            self.wire.feed(&crc32c(data).to_le_bytes());
        }
    }
    fn resp(&self, qid: u16, cid: u16, st: Status) {
        let mut hdr = [0u8; TX_HEADER_MAX];
        let cqe = CompletionEntry::new(0, 0, qid, cid, false, st);
        let n = encode_capsule_resp(&cqe, &self.framing, &mut hdr);
        self.wire.feed(&hdr[..n]);
    }
    fn r2t(&self, cccid: u16, ttag: u16, r2to: u32, r2tl: u32) {
        let mut hdr = [0u8; TX_HEADER_MAX];
        let n = R2t {
            cccid,
            ttag,
            r2to,
            r2tl,
        }
        .encode(&self.framing, &mut hdr);
        self.wire.feed(&hdr[..n]);
    }
}

fn page(seed: u8) -> Vec<u8> {
    (0..4096)
        .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
        .collect()
}

#[test]
fn a_read_lands_in_the_frames_and_the_success_flag_completes_it() {
    for max_recv in [0, 1, 7] {
        let mut r = rig_with(NONE, max_recv);
        let w = r.submit(3, false, &[FrameId(5), FrameId(2)]);
        r.c2h(w, 0, &page(1), 0);
        r.c2h(w, 4096, &page(2), flags::LAST_PDU | flags::SUCCESS);
        let done = r.poll().unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].cid(), 3, "the queue's id, not the wire's");
        assert!(done[0].plain_success());
        let mut b = vec![0u8; 4096];
        r.frames.read(FrameId(5), 0, &mut b).unwrap();
        assert_eq!(b, page(1));
        r.frames.read(FrameId(2), 0, &mut b).unwrap();
        assert_eq!(b, page(2));
    }
}

#[test]
fn each_data_pdu_comes_in_with_the_next_header_in_one_receive() {
    let mut r = rig();
    let a = r.submit(1, false, &[FrameId(1)]);
    let b = r.submit(2, false, &[FrameId(2)]);
    r.c2h(a, 0, &page(1), flags::LAST_PDU | flags::SUCCESS);
    r.c2h(b, 0, &page(2), flags::LAST_PDU | flags::SUCCESS);
    let before = r.wire.recv_calls();
    let mut out = Vec::new();
    r.qp.poll(Nanos(0), usize::MAX, &mut out).unwrap();
    assert_eq!(out.len(), 2);
    // The first header; the first data with the second header; the
    // second data, short of the header it asked for too: the socket has
    // nothing more and the poll stops receiving.
    assert_eq!(r.wire.recv_calls() - before, 3);
    let mut buf = vec![0u8; 4096];
    r.frames.read(FrameId(2), 0, &mut buf).unwrap();
    assert_eq!(buf, page(2));
}

#[test]
fn poll_each_takes_completions_until_one_is_declined_then_keeps_them_in_order() {
    let mut r = rig();
    let wires: Vec<u16> = (0..4)
        .map(|cid| r.submit(cid, false, &[FrameId(u32::from(cid))]))
        .collect();
    let error = Status::new(
        crate::spec::status::StatusType::Generic,
        generic::LBA_OUT_OF_RANGE,
        true,
    );
    r.c2h(wires[0], 0, &page(1), flags::LAST_PDU | flags::SUCCESS);
    r.c2h(wires[1], 0, &page(2), flags::LAST_PDU);
    r.resp(1, wires[1], error);
    r.c2h(wires[2], 0, &page(3), flags::LAST_PDU | flags::SUCCESS);
    r.c2h(wires[3], 0, &page(4), flags::LAST_PDU | flags::SUCCESS);
    let (mut taken, mut out) = (Vec::new(), Vec::new());
    let n =
        r.qp.poll_each(Nanos(0), 3, &mut out, &mut |e: CompletionEntry| {
            if !e.plain_success() {
                return Ok(false);
            }
            taken.push(e.cid());
            Ok(true)
        })
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(taken, [0]);
    let kept: Vec<u16> = out.iter().map(|e| e.cid()).collect();
    assert_eq!(kept, [1, 2], "declined and later entries, in order");
    assert_eq!(out[0].status(), error);
    // The fourth is handed out by the next poll, not lost or repeated.
    let mut rest = Vec::new();
    r.qp.poll(Nanos(0), usize::MAX, &mut rest).unwrap();
    let rest: Vec<u16> = rest.iter().map(|e| e.cid()).collect();
    assert_eq!(rest, [3]);
}

#[test]
fn an_error_from_poll_each_s_taker_ends_the_poll_with_it() {
    let mut r = rig();
    let a = r.submit(1, false, &[FrameId(1)]);
    let b = r.submit(2, false, &[FrameId(2)]);
    r.c2h(a, 0, &page(1), flags::LAST_PDU | flags::SUCCESS);
    r.c2h(b, 0, &page(2), flags::LAST_PDU | flags::SUCCESS);
    let mut out = Vec::new();
    let got =
        r.qp.poll_each(Nanos(0), usize::MAX, &mut out, &mut |e: CompletionEntry| {
            Err(ProtocolError::UnknownCid(e.cid()))
        });
    assert_eq!(got, Err(ProtocolError::UnknownCid(1)));
    assert!(out.is_empty());
    // The refused entry is consumed; the one after it stays for the next poll.
    let mut rest = Vec::new();
    r.qp.poll(Nanos(0), usize::MAX, &mut rest).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].cid(), 2);
}

#[test]
fn the_first_command_of_an_idle_queue_leaves_at_once_the_rest_with_the_poll() {
    let mut r = rig();
    let mut sqe = SubmissionEntry::read(1, 0, 8);
    sqe.set_cid(1);
    r.qp.submit(&sqe, Payload::Frames(&[FrameId(1)])).unwrap();
    assert_eq!(r.wire.take_sent().len(), 72, "sent from submit");
    for cid in [2, 3] {
        sqe.set_cid(cid);
        r.qp.submit(&sqe, Payload::Frames(&[FrameId(u32::from(cid))]))
            .unwrap();
    }
    assert!(r.wire.take_sent().is_empty(), "waiting for the poll");
    r.qp.service(0).unwrap();
    let sent = r.wire.take_sent();
    assert_eq!(sent.len(), 2 * 72, "both in one batch");
    assert_eq!(
        parse_capsule_cmd(prefix(&sent[72..]).unwrap()).cid() & 0xfff,
        3
    );
}

#[test]
fn a_page_received_ahead_of_a_header_that_is_not_its_own_goes_back_in_order() {
    for framing in [NONE, DIGESTS] {
        // Data in two PDUs of half a page: the first page's bytes that
        // arrive with the first header hold the second PDU too.
        let mut r = rig_with(framing, 0);
        let w = r.submit(1, false, &[FrameId(3)]);
        let p = page(7);
        r.c2h(w, 0, &p[..2048], 0);
        r.c2h(w, 2048, &p[2048..], flags::LAST_PDU | flags::SUCCESS);
        let done = r.poll().unwrap();
        assert_eq!(done.len(), 1);
        assert!(done[0].plain_success());
        let mut b = vec![0u8; 4096];
        r.frames.read(FrameId(3), 0, &mut b).unwrap();
        assert_eq!(b, p);

        // A response first (an error), then a stale data PDU for the same
        // read: the response completes it, the data PDU is refused.
        let mut r = rig_with(framing, 0);
        let w = r.submit(2, false, &[FrameId(4)]);
        let err = Status::new(crate::spec::status::StatusType::Media, 0x81, true);
        r.resp(1, w, err);
        r.c2h(w, 0, &page(8), flags::LAST_PDU | flags::SUCCESS);
        let mut out = Vec::new();
        let e = r.qp.poll(Nanos(0), usize::MAX, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status(), err);
        assert!(matches!(
            e,
            Err(ProtocolError::Transport(TcpError::UnknownCid { .. }))
        ));
    }
}

#[test]
fn a_capsule_from_the_connections_cached_header_is_what_the_encoder_builds() {
    for framing in [NONE, DIGESTS] {
        let mut r = rig_with(framing, 0);
        let mut sqe = SubmissionEntry::read(1, 9, 8);
        sqe.set_cid(3);
        r.qp.submit(&sqe, Payload::Frames(&[FrameId(4)])).unwrap();
        r.qp.service(0).unwrap();
        let sent = r.wire.take_sent();
        let cmd = parse_capsule_cmd(prefix(&sent).unwrap());
        let mut want = [0u8; TX_HEADER_MAX];
        let n = encode_capsule_cmd(&cmd, 0, &framing, &mut want);
        assert_eq!(&sent[..], &want[..n]);
    }
}

#[test]
fn with_digests_a_bad_data_digest_fails_only_its_command() {
    let mut r = rig_with(DIGESTS, 5);
    let w = r.submit(0, false, &[FrameId(0)]);
    let mut hdr = [0u8; TX_HEADER_MAX];
    let h = DataHeader {
        cccid: w,
        ttag: 0,
        datao: 0,
        datal: 4096,
    };
    let n = h.encode(PduType::C2hData, flags::LAST_PDU, &DIGESTS, &mut hdr);
    r.wire.feed(&hdr[..n]);
    r.wire.feed(&page(3));
    r.wire.feed(&(crc32c(&page(3)) ^ 1).to_le_bytes());
    r.resp(1, w, Status::SUCCESS);
    let done = r.poll().unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status().sc, generic::TRANSIENT_TRANSPORT_ERROR);
    assert!(done[0].status().may_retry());
    assert_eq!(r.qp.stats().data_digest_errors, 1);
    // The connection is still good.
    let w = r.submit(1, false, &[FrameId(1)]);
    r.c2h(w, 0, &page(4), flags::LAST_PDU | flags::SUCCESS);
    assert!(r.poll().unwrap()[0].plain_success());
}

#[test]
fn a_bad_header_digest_is_fatal() {
    let hd = Framing {
        hdgst: true,
        ddgst: false,
        pda: 0,
    };
    let mut r = rig_with(hd, 0);
    let w = r.submit(0, false, &[FrameId(0)]);
    let mut hdr = [0u8; TX_HEADER_MAX];
    let cqe = CompletionEntry::new(0, 0, 1, w, false, Status::SUCCESS);
    let n = encode_capsule_resp(&cqe, &hd, &mut hdr);
    hdr[n - 1] ^= 0x40;
    r.wire.feed(&hdr[..n]);
    assert!(matches!(r.error(), TcpError::HeaderDigest { pdu: 5, .. }));
    // The host told the controller why before closing.
    let term = r.wire.take_sent();
    assert_eq!(term[0], PduType::H2cTermReq as u8);
    let t = TermReq::parse(prefix(&term).unwrap());
    assert_eq!(t.fes, 3);
    let received = u32::from_le_bytes(hdr[24..28].try_into().unwrap());
    assert_eq!(t.fei, received, "FEI is the digest received");
    assert_eq!(&term[24..52], &hdr[..28], "the offending header follows");
}

#[test]
fn c2hdata_is_checked_against_its_command() {
    type Case = (&'static str, fn(&Rig, u16), fn(TcpError) -> bool);
    let cases: [Case; 6] = [
        (
            "unknown command id",
            |r, w| r.c2h(w ^ 1, 0, &page(1), flags::LAST_PDU),
            |e| matches!(e, TcpError::UnknownCid { .. }),
        ),
        (
            "an earlier generation of the id",
            |r, w| r.c2h(w.wrapping_sub(0x1000), 0, &page(1), flags::LAST_PDU),
            |e| matches!(e, TcpError::UnknownCid { .. }),
        ),
        (
            "beyond the buffer",
            |r, w| r.c2h(w, 4096, &page(1), flags::LAST_PDU),
            |e| {
                matches!(
                    e,
                    TcpError::Sequence { pdu: 7 } | TcpError::OutOfRange { .. }
                )
            },
        ),
        (
            "longer than the buffer",
            |r, w| r.c2h(w, 0, &[0u8; 8192], flags::LAST_PDU),
            |e| matches!(e, TcpError::OutOfRange { .. }),
        ),
        (
            "SUCCESS without LAST_PDU",
            |r, w| r.c2h(w, 0, &page(1), flags::SUCCESS),
            |e| e == TcpError::HeaderField { pdu: 7, offset: 1 },
        ),
        (
            "SUCCESS before all the data",
            |r, w| r.c2h(w, 0, &page(1)[..2048], flags::LAST_PDU | flags::SUCCESS),
            |e| matches!(e, TcpError::MissingData { .. }),
        ),
    ];
    for (what, send, ok) in cases {
        let mut r = rig();
        let w = r.submit(2, false, &[FrameId(0)]);
        send(&r, w);
        let e = r.error();
        assert!(ok(e), "{what}: {e:?}");
        assert_eq!(r.qp.failure(), Some(e));
    }
    // Data for a write is out of sequence.
    let mut r = rig();
    let w = r.submit(2, true, &[FrameId(0), FrameId(1)]);
    r.c2h(w, 0, &page(1), flags::LAST_PDU);
    assert_eq!(r.error(), TcpError::Sequence { pdu: 7 });
}

#[test]
fn a_common_header_one_byte_off_the_last_accepted_one_is_checked_in_full() {
    // A C2HData header, the same as the one just accepted but for one
    // byte of its common header: flags (a header digest nobody
    // negotiated), HLEN, PDO, PLEN.
    let cases: [(&str, usize, u8, TcpError); 4] = [
        (
            "a header digest flag",
            1,
            flags::HDGSTF | flags::LAST_PDU | flags::SUCCESS,
            TcpError::HeaderField { pdu: 7, offset: 1 },
        ),
        ("HLEN", 2, 25, TcpError::HeaderField { pdu: 7, offset: 2 }),
        ("PDO", 3, 20, TcpError::HeaderField { pdu: 7, offset: 3 }),
        // PLEN 0x1018 -> 0x11018: more data than any command's buffer.
        ("PLEN", 6, 0x01, TcpError::HeaderField { pdu: 7, offset: 4 }),
    ];
    for (what, at, byte, expect) in cases {
        let mut r = rig();
        let fl = flags::LAST_PDU | flags::SUCCESS;
        let w = r.submit(2, false, &[FrameId(0)]);
        r.c2h(w, 0, &page(1), fl);
        assert_eq!(r.poll().unwrap().len(), 1, "{what}: the first read");
        let w = r.submit(2, false, &[FrameId(0)]);
        let mut hdr = [0u8; TX_HEADER_MAX];
        let h = DataHeader {
            cccid: w,
            ttag: 0,
            datao: 0,
            datal: 4096,
        };
        let n = h.encode(PduType::C2hData, fl, &r.framing, &mut hdr);
        hdr[at] = byte;
        r.wire.feed(&hdr[..n]);
        r.wire.feed(&page(2));
        assert_eq!(r.error(), expect, "{what}");
    }
}

#[test]
fn responses_are_checked_against_the_queue_and_the_data() {
    let mut r = rig();
    let w = r.submit(0, false, &[FrameId(0)]);
    r.resp(2, w, Status::SUCCESS);
    assert_eq!(r.error(), TcpError::WrongQueue { sqid: 2 });

    let mut r = rig();
    let w = r.submit(0, false, &[FrameId(0)]);
    r.resp(1, w, Status::SUCCESS);
    assert!(
        matches!(r.error(), TcpError::MissingData { .. }),
        "success before the data"
    );

    let mut r = rig();
    let w = r.submit(0, false, &[FrameId(0)]);
    r.c2h(w, 0, &page(1), flags::LAST_PDU);
    r.resp(1, w, Status::SUCCESS);
    r.resp(1, w, Status::SUCCESS);
    let mut out = Vec::new();
    let e = r.qp.poll(Nanos(0), usize::MAX, &mut out);
    assert_eq!(out.len(), 1, "the first response completes the command");
    assert!(matches!(
        e,
        Err(ProtocolError::Transport(TcpError::UnknownCid { .. }))
    ));

    // An error status needs no data.
    let mut r = rig();
    let w = r.submit(0, false, &[FrameId(0)]);
    let err = Status::new(crate::spec::status::StatusType::Media, 0x81, true);
    r.resp(1, w, err);
    assert_eq!(r.poll().unwrap()[0].status(), err);
}

#[test]
fn small_writes_go_in_the_capsule_with_their_digest() {
    let dd = Framing {
        hdgst: false,
        ddgst: true,
        pda: 0,
    };
    let mut r = rig_with(dd, 0);
    r.frames.write(FrameId(7), 0, &page(9)).unwrap();
    let mut sqe = SubmissionEntry::write(1, 0, 8, false);
    sqe.set_cid(4);
    r.qp.submit(&sqe, Payload::Frames(&[FrameId(7)])).unwrap();
    r.qp.service(0).unwrap();
    let sent = r.wire.take_sent();
    let ch = CommonHeader::parse(prefix(&sent).unwrap()).unwrap();
    assert_eq!(ch.plen as usize, 72 + 4096 + 4);
    assert_eq!(sent.len(), 72 + 4096 + 4);
    let cmd = parse_capsule_cmd(prefix(&sent).unwrap());
    assert_eq!(cmd.sgl().id, crate::spec::sgl::sgl_id::DATA_BLOCK_OFFSET);
    assert_eq!(&sent[72..72 + 4096], &page(9)[..]);
    assert_eq!(&sent[72 + 4096..], &crc32c(&page(9)).to_le_bytes());
}

#[test]
fn large_writes_answer_r2ts_in_maxh2cdata_pieces() {
    let mut r = rig();
    let f = [FrameId(0), FrameId(1), FrameId(2)];
    for (i, &x) in f.iter().enumerate() {
        r.frames.write(x, 0, &page(i as u8 + 1)).unwrap();
    }
    let w = r.submit(1, true, &f);
    r.r2t(w, 77, 0, 8192);
    r.poll().unwrap();
    let sent = r.wire.take_sent();
    assert_eq!(sent.len(), 2 * (24 + 4096), "two H2CData of MAXH2CDATA");
    let first = DataHeader::parse(prefix(&sent).unwrap(), PduType::H2cData, 4096).unwrap();
    assert_eq!((first.cccid, first.ttag, first.datao), (w, 77, 0));
    assert_eq!(sent[1] & flags::LAST_PDU, 0);
    let second = &sent[24 + 4096..];
    assert_eq!(second[1] & flags::LAST_PDU, flags::LAST_PDU);
    assert_eq!(&second[24..], &page(2)[..]);
    r.r2t(w, 78, 8192, 4096);
    assert!(r.poll().unwrap().is_empty());
    assert_eq!(r.wire.take_sent().len(), 24 + 4096);
    // The controller answers once it has all the data.
    r.resp(1, w, Status::SUCCESS);
    let done = r.poll().unwrap();
    assert_eq!(done.len(), 1);
}

#[test]
fn r2ts_are_checked_against_the_command() {
    type Case = (&'static str, fn(&Rig, u16), fn(TcpError) -> bool);
    let cases: [Case; 4] = [
        (
            "beyond the buffer",
            |r, w| r.r2t(w, 1, 0, 3 * 4096),
            |e| matches!(e, TcpError::OutOfRange { .. }),
        ),
        (
            "not from the start",
            |r, w| r.r2t(w, 1, 4096, 4096),
            |e| e == TcpError::Sequence { pdu: 9 },
        ),
        (
            "a second R2T while the first is served",
            |r, w| {
                r.r2t(w, 1, 0, 4096);
                r.r2t(w, 2, 4096, 4096);
            },
            |e| matches!(e, TcpError::R2tLimit { .. }),
        ),
        (
            "an empty R2T",
            |r, w| r.r2t(w, 1, 0, 0),
            |e| e == TcpError::HeaderField { pdu: 9, offset: 16 },
        ),
    ];
    for (what, send, ok) in cases {
        let mut r = rig();
        let w = r.submit(0, true, &[FrameId(0), FrameId(1)]);
        send(&r, w);
        let e = r.error();
        assert!(ok(e), "{what}: {e:?}");
    }
    let mut r = rig();
    let w = r.submit(0, false, &[FrameId(0)]);
    r.r2t(w, 1, 0, 4096);
    assert_eq!(r.error(), TcpError::Sequence { pdu: 9 }, "R2T for a read");
}

#[test]
fn a_termreq_an_icresp_after_the_handshake_and_bad_types_are_fatal() {
    let mut r = rig();
    let mut out = [0u8; TERM_MAX_PLEN];
    let n = TermReq { fes: 2, fei: 0 }.encode(PduType::C2hTermReq, &[1, 2, 3], &mut out);
    r.wire.feed(&out[..n]);
    assert_eq!(r.error(), TcpError::Terminated { fes: 2 });

    let mut r = rig();
    let resp = IcResp {
        cpda: 0,
        hdgst: false,
        ddgst: false,
        maxh2cdata: 4096,
    };
    r.wire.feed(&resp.encode());
    assert_eq!(r.error(), TcpError::Sequence { pdu: 1 });

    let mut r = rig();
    r.wire
        .feed(&[PduType::CapsuleCmd as u8, 0, 72, 0, 72, 0, 0, 0]);
    assert_eq!(
        r.error(),
        TcpError::HeaderField { pdu: 4, offset: 0 },
        "a host-to-controller PDU"
    );

    let mut r = rig();
    r.wire.feed(&[0x0a, 0, 24, 0, 24, 0, 0, 0]);
    assert_eq!(
        r.error(),
        TcpError::HeaderField {
            pdu: 0x0a,
            offset: 0
        }
    );

    let mut r = rig();
    r.wire.close();
    assert!(matches!(r.error(), TcpError::Link(_)));
}

#[test]
fn an_icresp_with_a_digest_nobody_asked_for_is_refused() {
    let mut qp: TcpQpair<MemoryStream> = TcpQpair::new(0, 4, None, 0, 8192);
    let wire = MemoryStream::new(0, 0);
    qp.attach(
        wire.clone(),
        IcReq {
            hpda: 0,
            hdgst: false,
            ddgst: false,
            maxr2t: 0,
        },
    );
    let resp = IcResp {
        cpda: 0,
        hdgst: true,
        ddgst: false,
        maxh2cdata: 4096,
    };
    wire.feed(&resp.encode());
    assert_eq!(
        qp.service(usize::MAX),
        Err(TcpError::Unsupported { offset: 11 })
    );
}

#[test]
fn after_a_reset_and_a_reconnect_a_command_is_sent_again_with_a_new_generation() {
    let mut r = rig();
    let w = r.submit(2, false, &[FrameId(0), FrameId(1)]);
    r.wire.close();
    assert!(matches!(r.error(), TcpError::Link(_)));
    r.qp.reset().unwrap();
    let wire = MemoryStream::new(0, 0);
    r.qp.attach(
        wire.clone(),
        IcReq {
            hpda: 0,
            hdgst: false,
            ddgst: false,
            maxr2t: 0,
        },
    );
    wire.feed(
        &IcResp {
            cpda: 0,
            hdgst: false,
            ddgst: false,
            maxh2cdata: 4096,
        }
        .encode(),
    );
    r.wire = wire;
    r.poll().unwrap();
    r.wire.take_sent();
    r.qp.resubmit(2).unwrap();
    r.qp.service(0).unwrap();
    let sent = r.wire.take_sent();
    let cmd = parse_capsule_cmd(prefix(&sent).unwrap());
    assert_eq!(cmd.cid() & 0xfff, 2);
    assert_ne!(cmd.cid(), w, "a new generation");
    assert_eq!(cmd.nlb(), 16);
    r.c2h(cmd.cid(), 0, &[0u8; 8192], flags::LAST_PDU | flags::SUCCESS);
    assert_eq!(r.poll().unwrap()[0].cid(), 2);
    assert_eq!(r.qp.resubmit(5), Err(crate::transport::QpairError::BadCid));
}
