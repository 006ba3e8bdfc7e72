//! The NVMe/TCP initiator's receive path under arbitrary bytes from the
//! controller: an ICResp (or anything else), then C2HData, R2T, response
//! capsules, TermReqs and garbage, cut into arbitrary pieces, against a
//! queue pair with reads and writes of every shape in flight. The queue
//! must never panic, must end every bad stream in a fatal error, must
//! never hand out a completion for a command that is not in flight, and
//! must stay usable after a reset and a new connection.
//!
//! Input layout (no `arbitrary` needed, so the corpus stays readable):
//!
//! - byte 0: bit 0 header digests, bit 1 data digests, bit 2 a valid
//!   ICResp is fed first, bit 3 the host's sends are taken 7 bytes at a
//!   time (PDUs left half sent), bits 4..=7 the size of the pieces the
//!   controller's bytes arrive in (0: all at once);
//! - byte 1: which of the eight commands to submit once connected;
//! - the rest: the bytes the controller sends.
//!
//! Shared with `driver/tests/tcp_corpus.rs` (by path), which replays the
//! committed corpus on stable.

use std::sync::Arc;

use pollfs_core::units::{FrameId, Nanos};
use pollfs_driver::spec::command::SubmissionEntry;
use pollfs_driver::spec::completion::CompletionEntry;
use pollfs_driver::tcp::pdu::{IcReq, IcResp};
use pollfs_driver::tcp::stream::MemoryStream;
use pollfs_driver::tcp::{TcpFrames, TcpQpair};
use pollfs_driver::transport::{Payload, Qpair};

/// Entries of the fuzzed queue (ids 0..=6 for commands).
const ENTRIES: u16 = 8;

/// The commands the harness can have in flight, by id.
fn command(cid: u16) -> (SubmissionEntry, Payload<'static>) {
    const ONE: &[FrameId] = &[FrameId(0)];
    const FOUR: &[FrameId] = &[FrameId(1), FrameId(2), FrameId(3), FrameId(4)];
    const TWO: &[FrameId] = &[FrameId(5), FrameId(6)];
    // One Dataset Management range: 8 blocks at LBA 16.
    static RANGE: [u8; 16] = [0, 0, 0, 0, 8, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0];
    let mut e = match cid {
        0 => (SubmissionEntry::read(1, 0, 8), Payload::Frames(ONE)),
        1 => (SubmissionEntry::read(1, 8, 32), Payload::Frames(FOUR)),
        2 => (SubmissionEntry::write(1, 0, 8, false), Payload::Frames(ONE)),
        3 => (
            SubmissionEntry::write(1, 8, 32, true),
            Payload::Frames(FOUR),
        ),
        4 => (SubmissionEntry::flush(1), Payload::None),
        5 => (SubmissionEntry::deallocate(1, 1, 0), Payload::Out(&RANGE)),
        _ => (
            SubmissionEntry::write(1, 40, 16, false),
            Payload::Frames(TWO),
        ),
    };
    e.0.set_cid(cid);
    e
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let (cfg, rest) = data.split_first().map_or((0, &[][..]), |(c, r)| (*c, r));
    let (mask, stream_bytes) = rest.split_first().map_or((0x7f, &[][..]), |(m, r)| (*m, r));
    let hdgst = cfg & 1 != 0;
    let ddgst = cfg & 2 != 0;
    let piece = usize::from(cfg >> 4);
    let frames = Arc::new(TcpFrames::new(8));
    // 4 KiB in the capsule: commands 2 and 5 go in it, 3 and 6 by R2T.
    let mut qp: TcpQpair<MemoryStream> = TcpQpair::new(1, ENTRIES, Some(frames), 4, 4096);
    let req = IcReq {
        hpda: 0,
        hdgst,
        ddgst,
        maxr2t: 0,
    };
    let mut wire = MemoryStream::new(if cfg & 8 != 0 { 7 } else { 0 }, 0);
    qp.attach(wire.clone(), req);
    if cfg & 4 != 0 {
        let resp = IcResp {
            cpda: 0,
            hdgst,
            ddgst,
            maxh2cdata: 4096,
        };
        wire.feed(&resp.encode());
    }
    let mut live = [false; ENTRIES as usize];
    let mut submitted = false;
    let mut reconnects = 0;
    let mut out: Vec<CompletionEntry> = Vec::new();
    let pieces: Vec<&[u8]> = if piece == 0 {
        vec![stream_bytes]
    } else {
        stream_bytes.chunks(piece).collect()
    };
    for p in pieces
        .iter()
        .copied()
        .chain(std::iter::repeat_n(&[][..], 4))
    {
        wire.feed(p);
        // Bounded: a piece can only be consumed so many ways.
        for _ in 0..8 {
            out.clear();
            let r = qp.poll(Nanos(0), usize::MAX, &mut out);
            for c in &out {
                let id = usize::from(c.cid());
                assert!(
                    live.get(id).copied().unwrap_or(false),
                    "completion for command {} which is not in flight",
                    c.cid()
                );
                live[id] = false;
            }
            if r.is_err() {
                assert!(qp.failure().is_some(), "an error closes the connection");
                // Start over on a new connection, as a reset does, and
                // send everything in flight again.
                if reconnects == 2 {
                    return;
                }
                reconnects += 1;
                let _ = qp.reset();
                wire = MemoryStream::new(0, 0);
                qp.attach(wire.clone(), req);
                wire.feed(
                    &IcResp {
                        cpda: 0,
                        hdgst,
                        ddgst,
                        maxh2cdata: 8192,
                    }
                    .encode(),
                );
                let _ = qp.service(usize::MAX);
                for (cid, l) in live.iter().enumerate() {
                    if *l {
                        let resent = qp.resubmit(cid as u16);
                        assert!(resent.is_ok(), "{resent:?}");
                    }
                }
                break;
            }
            if qp.is_ready() && !submitted {
                submitted = true;
                for cid in 0..ENTRIES - 1 {
                    if mask & (1 << cid) != 0 {
                        let (sqe, payload) = command(cid);
                        let sent = qp.submit(&sqe, payload);
                        assert!(sent.is_ok(), "{sent:?}");
                        live[usize::from(cid)] = true;
                    }
                }
            }
            if wire.pending() == 0 {
                break;
            }
        }
        let _ = wire.take_sent();
    }
}
