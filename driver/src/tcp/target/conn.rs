//! One connection of the test target: reads PDUs with blocking reads (a
//! short timeout so the target can stop), answers commands in order.

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::auth::CtrlAuth;
use super::tls::{accept, Wire};
use super::{Ctrl, Fault, Shared};
use crate::spec::auth::{CONNECT_AUTHREQ_ATR, SECP_DHCHAP, SPSP_DHCHAP};
use crate::spec::command::{admin_opcode, cns, io_opcode, SubmissionEntry};
use crate::spec::completion::CompletionEntry;
use crate::spec::fabrics::{cattr, fctype, ConnectData};
use crate::spec::identify::{IdentifyController, IdentifyNamespace, IDENTIFY_SIZE};
use crate::spec::regs::{Cap, Cc};
use crate::spec::sgl::sgl_id;
use crate::spec::status::{generic, Status, StatusType};
use crate::tcp::digest::{crc32c, DIGEST_LEN};
use crate::tcp::error::fes;
use crate::tcp::pdu::{
    check_header_digest, encode_capsule_resp, flags, parse_capsule_cmd, prefix, CommonHeader,
    DataHeader, Framing, IcReq, IcResp, PduType, R2t, TermReq, CH_LEN, TERM_MAX_PLEN,
    TX_HEADER_MAX,
};

/// Largest data a PDU from the host may carry here.
const MAX_DATA: usize = 16 << 20;

/// A PDU read off the wire.
struct Pdu {
    ch: CommonHeader,
    region: Vec<u8>,
    data: Vec<u8>,
    digest_ok: bool,
}

/// A write whose data comes by R2T.
struct Pending {
    sqe: SubmissionEntry,
    buf: Vec<u8>,
    got: u32,
    r2t_end: u32,
    fault: Option<Fault>,
}

/// Why the connection ends.
type End = io::Error;

fn end(msg: &'static str) -> End {
    io::Error::other(msg)
}

fn status(sct: StatusType, sc: u8) -> Status {
    Status::new(sct, sc, true)
}

struct Conn {
    sock: Wire,
    shared: Arc<Shared>,
    rx: Framing,
    tx: Framing,
    ready: bool,
    qid: Option<u16>,
    cntlid: u16,
    success_flag: bool,
    pending: BTreeMap<u16, Pending>,
    next_ttag: u16,
    /// The queue's authentication, when the target asks for it.
    auth: Option<CtrlAuth>,
    /// The host NQN its Connect gave.
    hostnqn: Vec<u8>,
}

pub(super) fn serve(sock: TcpStream, shared: Arc<Shared>) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(10)));
    let _ = sock.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = sock.set_nodelay(true);
    let tls = shared.tls.lock().clone();
    let sock = match tls {
        None => Wire::Plain(sock),
        Some(psk) => match accept(sock, &psk) {
            Ok(s) => {
                shared.stats.lock().tls_sessions += 1;
                Wire::Tls(alloc::boxed::Box::new(s))
            }
            Err(_) => {
                shared.stats.lock().tls_failures += 1;
                return;
            }
        },
    };
    let mut c = Conn {
        sock,
        shared,
        rx: Framing::default(),
        tx: Framing::default(),
        ready: false,
        qid: None,
        cntlid: 0,
        success_flag: false,
        pending: BTreeMap::new(),
        next_ttag: 1,
        auth: None,
        hostnqn: Vec::new(),
    };
    let _ = c.run();
    let mut ctrls = c.shared.ctrls.lock();
    match c.qid {
        // The association ends with its admin connection.
        Some(0) => {
            ctrls.remove(&c.cntlid);
        }
        Some(q) => {
            if let Some(ctrl) = ctrls.get_mut(&c.cntlid) {
                ctrl.qids.remove(&q);
            }
        }
        None => {}
    }
}

impl Conn {
    fn run(&mut self) -> Result<(), End> {
        loop {
            while self.shared.stalled.load(Ordering::Relaxed) {
                if self.shared.stop.load(Ordering::Relaxed) {
                    return Err(end("stopped"));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let pdu = self.read_pdu()?;
            if self.shared.stalled.load(Ordering::Relaxed) {
                // Read, never answered.
                continue;
            }
            self.on_pdu(pdu)?;
        }
    }

    /// Reads exactly `buf.len()` bytes, checking for a stop between
    /// timeouts.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), End> {
        let mut at = 0;
        while at < buf.len() {
            if self.shared.stop.load(Ordering::Relaxed) {
                return Err(end("stopped"));
            }
            match self.sock.read(buf.get_mut(at..).unwrap_or(&mut [])) {
                Ok(0) => return Err(end("closed")),
                Ok(n) => at += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn send(&mut self, parts: &[&[u8]]) -> Result<(), End> {
        for p in parts {
            self.sock.write_all(p)?;
        }
        Ok(())
    }

    fn terminate(&mut self, status: u16, info: u32, culprit: &[u8]) -> End {
        let mut out = [0u8; TERM_MAX_PLEN];
        let n = TermReq {
            fes: status,
            fei: info,
        }
        .encode(PduType::C2hTermReq, culprit, &mut out);
        let _ = self.send(&[out.get(..n).unwrap_or(&[])]);
        end("terminated")
    }

    fn read_pdu(&mut self) -> Result<Pdu, End> {
        let mut head = [0u8; CH_LEN];
        self.fill(&mut head)?;
        let ch = match CommonHeader::parse(&head) {
            Ok(ch) => ch,
            Err(_) => return Err(self.terminate(fes::INVALID_HEADER_FIELD, 0, &head)),
        };
        let framing = if self.ready {
            self.rx
        } else {
            Framing::default()
        };
        let ext = match ch.check(&framing, MAX_DATA) {
            Ok(e) => e,
            Err(_) => return Err(self.terminate(fes::INVALID_HEADER_FIELD, 0, &head)),
        };
        let mut region = vec![0u8; ext.header];
        if let Some(h) = region.get_mut(..CH_LEN) {
            h.copy_from_slice(&head);
        }
        self.fill(region.get_mut(CH_LEN..).unwrap_or(&mut []))?;
        let digested = !matches!(ch.pdu_type, PduType::IcReq | PduType::H2cTermReq);
        if self.ready && digested && self.rx.hdgst {
            if let Err(crate::tcp::TcpError::HeaderDigest { .. }) =
                check_header_digest(ch.pdu_type, &region)
            {
                let received = crate::tcp::pdu::received_header_digest(ch.pdu_type, &region);
                return Err(self.terminate(fes::HEADER_DIGEST, received, &region));
            }
        }
        let mut data = vec![0u8; ext.data];
        self.fill(&mut data)?;
        let mut digest_ok = true;
        if ext.digest > 0 {
            let mut d = [0u8; DIGEST_LEN];
            self.fill(&mut d)?;
            digest_ok = u32::from_le_bytes(d) == crc32c(&data);
        }
        Ok(Pdu {
            ch,
            region,
            data,
            digest_ok,
        })
    }

    fn on_pdu(&mut self, p: Pdu) -> Result<(), End> {
        match p.ch.pdu_type {
            PduType::IcReq if !self.ready => {
                let req = prefix(&p.region)
                    .and_then(|b| IcReq::parse(b).ok())
                    .ok_or_else(|| end("bad ICReq"))?;
                let cfg = &self.shared.config;
                let resp = IcResp {
                    cpda: cfg.cpda,
                    hdgst: req.hdgst,
                    ddgst: req.ddgst,
                    maxh2cdata: cfg.maxh2cdata,
                };
                self.rx = Framing {
                    hdgst: req.hdgst,
                    ddgst: req.ddgst,
                    pda: cfg.cpda,
                };
                self.tx = Framing {
                    hdgst: req.hdgst,
                    ddgst: req.ddgst,
                    pda: req.hpda,
                };
                self.ready = true;
                self.send(&[&resp.encode()])
            }
            PduType::CapsuleCmd if self.ready => {
                let sqe = prefix(&p.region)
                    .map(parse_capsule_cmd)
                    .ok_or_else(|| end("short capsule"))?;
                self.on_command(sqe, p.data, p.digest_ok)
            }
            PduType::H2cData if self.ready => {
                let h = prefix(&p.region)
                    .and_then(|b| DataHeader::parse(b, PduType::H2cData, p.data.len()).ok())
                    .ok_or_else(|| end("bad H2CData"))?;
                self.on_h2c(h, p.ch.flags, &p.data, p.digest_ok)
            }
            PduType::H2cTermReq => Err(end("host terminated")),
            _ => Err(self.terminate(fes::SEQUENCE_ERROR, 0, &p.region)),
        }
    }

    fn take_fault(&mut self) -> Option<Fault> {
        let f = self.shared.faults.lock().pop_front()?;
        self.shared.stats.lock().faults += 1;
        Some(f)
    }

    fn on_command(
        &mut self,
        sqe: SubmissionEntry,
        icd: Vec<u8>,
        digest_ok: bool,
    ) -> Result<(), End> {
        let is_connect = sqe.fctype() == Some(fctype::CONNECT);
        if self.qid.is_none() && !is_connect {
            return Err(self.terminate(fes::SEQUENCE_ERROR, 0, &[]));
        }
        let io = self.qid.is_some_and(|q| q > 0) && sqe.fctype().is_none();
        let fault = if io { self.take_fault() } else { None };
        match fault {
            Some(Fault::DropConnection) => return Err(end("fault: drop")),
            Some(Fault::Stall) => return Ok(()),
            Some(Fault::BadPduType) => {
                let mut b = [0u8; 24];
                b[0] = 0x08;
                b[2] = 24;
                b[4] = 24;
                return self.send(&[&b]);
            }
            Some(Fault::Terminate) => {
                return Err(self.terminate(fes::INVALID_HEADER_FIELD, 4, &[]))
            }
            _ => {}
        }
        if !digest_ok {
            let st = Status::new(
                StatusType::Generic,
                generic::TRANSIENT_TRANSPORT_ERROR,
                false,
            );
            return self.respond(&sqe, st, 0, 0, fault);
        }
        let sgl = sqe.sgl();
        let writes = match sqe.fctype() {
            Some(fctype::CONNECT | fctype::AUTH_SEND) => true,
            Some(_) => false,
            None => sqe.opcode() & 3 == 1 && sgl.length > 0,
        };
        if writes && sgl.id == sgl_id::TRANSPORT_DATA_BLOCK {
            return self.solicit(sqe, fault);
        }
        if writes && (sgl.id != sgl_id::DATA_BLOCK_OFFSET || icd.len() != sgl.length as usize) {
            let st = status(StatusType::Generic, 0x0f); // Data SGL Length Invalid
            return self.respond(&sqe, st, 0, 0, fault);
        }
        if writes && sqe.fctype().is_none() {
            self.shared.stats.lock().in_capsule_writes += 1;
        }
        self.execute(sqe, icd, fault)
    }

    /// Starts an R2T exchange for a command whose data is not in the
    /// capsule.
    fn solicit(&mut self, sqe: SubmissionEntry, fault: Option<Fault>) -> Result<(), End> {
        let len = sqe.sgl().length;
        if len as usize > MAX_DATA {
            return self.respond(&sqe, status(StatusType::Generic, 0x0f), 0, 0, fault);
        }
        let ttag = self.next_ttag;
        self.next_ttag = self.next_ttag.wrapping_add(1).max(1);
        self.pending.insert(
            ttag,
            Pending {
                sqe,
                buf: vec![0u8; len as usize],
                got: 0,
                r2t_end: 0,
                fault,
            },
        );
        self.next_r2t(ttag)
    }

    fn next_r2t(&mut self, ttag: u16) -> Result<(), End> {
        let chunk = self.shared.config.r2t_chunk.max(4);
        let Some(p) = self.pending.get_mut(&ttag) else {
            return Ok(());
        };
        let len = p.buf.len() as u32;
        let mut r = R2t {
            cccid: p.sqe.cid(),
            ttag,
            r2to: p.got,
            r2tl: (len - p.got).min(chunk),
        };
        if p.fault == Some(Fault::R2tOutOfRange) {
            p.fault = None;
            r.r2tl = len - p.got + 4096;
        }
        p.r2t_end = r.r2to + r.r2tl;
        let mut hdr = [0u8; TX_HEADER_MAX];
        let n = r.encode(&self.tx, &mut hdr);
        self.shared.stats.lock().r2ts += 1;
        self.send(&[hdr.get(..n).unwrap_or(&[])])
    }

    fn on_h2c(&mut self, h: DataHeader, fl: u8, data: &[u8], digest_ok: bool) -> Result<(), End> {
        self.shared.stats.lock().h2c_pdus += 1;
        let maxh2c = self.shared.config.maxh2cdata;
        let check = match self.pending.get_mut(&h.ttag) {
            None => Err((fes::INVALID_HEADER_FIELD, 10)),
            Some(p) if h.cccid != p.sqe.cid() || h.datao != p.got => Err((fes::SEQUENCE_ERROR, 0)),
            Some(_) if h.datal > maxh2c => Err((fes::LIMIT_EXCEEDED, 0)),
            Some(p) if h.datao + h.datal > p.r2t_end => Err((fes::OUT_OF_RANGE, 0)),
            Some(p) => {
                let end_at = h.datao + h.datal;
                if let Some(dst) = p.buf.get_mut(h.datao as usize..end_at as usize) {
                    dst.copy_from_slice(data);
                }
                p.got = end_at;
                let last = fl & flags::LAST_PDU != 0;
                if last == (end_at == p.r2t_end) {
                    Ok((last, (end_at as usize) < p.buf.len()))
                } else {
                    Err((fes::SEQUENCE_ERROR, 0))
                }
            }
        };
        let (last, more) = match check {
            Ok(v) => v,
            Err((status, info)) => return Err(self.terminate(status, info, &[])),
        };
        if !digest_ok {
            if let Some(p) = self.pending.remove(&h.ttag) {
                let st = Status::new(
                    StatusType::Generic,
                    generic::TRANSIENT_TRANSPORT_ERROR,
                    false,
                );
                return self.respond(&p.sqe, st, 0, 0, p.fault);
            }
        }
        if !last {
            return Ok(());
        }
        if more {
            return self.next_r2t(h.ttag);
        }
        let Some(p) = self.pending.remove(&h.ttag) else {
            return Ok(());
        };
        self.execute(p.sqe, p.buf, p.fault)
    }

    /// Runs a command whose data (if it sends any) is in `data`.
    fn execute(
        &mut self,
        sqe: SubmissionEntry,
        data: Vec<u8>,
        fault: Option<Fault>,
    ) -> Result<(), End> {
        if let Some(t) = sqe.fctype() {
            return self.fabrics(t, sqe, &data);
        }
        if self.auth.as_ref().is_some_and(|a| !a.done()) {
            // Authentication Required (NVMe Base 2.0, Figure 103).
            let st = status(StatusType::CommandSpecific, 0x91);
            return self.respond(&sqe, st, 0, 0, fault);
        }
        if self.qid == Some(0) {
            self.admin(sqe, fault)
        } else {
            self.io(sqe, &data, fault)
        }
    }

    fn fabrics(&mut self, t: u8, sqe: SubmissionEntry, data: &[u8]) -> Result<(), End> {
        let invalid = Status::new(StatusType::CommandSpecific, 0x82, true);
        match t {
            fctype::CONNECT => {
                let Some(d) = ConnectData::parse(data) else {
                    return self.respond(&sqe, invalid, 0, 0, None);
                };
                let qid = sqe.connect_qid();
                let cfg = &self.shared.config;
                if d.subnqn != self.shared.nqn
                    || self.qid.is_some()
                    || sqe.connect_entries() > u32::from(cfg.max_entries)
                    || qid > cfg.queues
                {
                    return self.respond(&sqe, invalid, 0, 0, None);
                }
                let cntlid = if qid == 0 {
                    let mut next = self.shared.next_cntlid.lock();
                    let id = *next;
                    *next = next.wrapping_add(1).clamp(1, 0xffef);
                    self.shared.ctrls.lock().insert(id, Ctrl::default());
                    id
                } else {
                    let mut ctrls = self.shared.ctrls.lock();
                    let Some(ctrl) = ctrls.get_mut(&d.cntlid).filter(|c| c.csts & 1 != 0) else {
                        drop(ctrls);
                        return self.respond(&sqe, invalid, 0, 0, None);
                    };
                    if !ctrl.qids.insert(qid) {
                        drop(ctrls);
                        // Still held by a connection being torn down.
                        let seq = status(StatusType::Generic, 0x0c);
                        return self.respond(&sqe, seq, 0, 0, None);
                    }
                    d.cntlid
                };
                self.qid = Some(qid);
                self.cntlid = cntlid;
                self.success_flag = qid > 0
                    && self.shared.config.success_flag
                    && sqe.connect_cattr() & cattr::SQ_FLOW_CONTROL_DISABLE != 0;
                self.shared.stats.lock().connects += 1;
                let mut dw0 = u32::from(cntlid);
                if self.shared.auth.lock().is_some() {
                    self.auth = Some(CtrlAuth::new());
                    self.hostnqn = d.hostnqn.as_bytes().to_vec();
                    dw0 |= CONNECT_AUTHREQ_ATR;
                }
                self.respond(&sqe, Status::SUCCESS, dw0, 0, None)
            }
            fctype::AUTH_SEND | fctype::AUTH_RECEIVE => self.authenticate(t, sqe, data),
            fctype::PROPERTY_GET if self.qid == Some(0) => {
                let cfg = &self.shared.config;
                let (cc, csts) = self.ctrl();
                let v: u64 = match sqe.property_offset() {
                    0x00 => {
                        // MQES, CQR, TO = 1 s, the NVM command set,
                        // 4 KiB pages only.
                        Cap::build(cfg.max_entries - 1, 2, 0, 0, 0).0
                    }
                    0x08 => 0x0001_0400,
                    0x14 => u64::from(cc),
                    0x1c => u64::from(csts),
                    _ => {
                        return self.respond(
                            &sqe,
                            status(StatusType::Generic, generic::INVALID_FIELD),
                            0,
                            0,
                            None,
                        )
                    }
                };
                self.respond(&sqe, Status::SUCCESS, v as u32, (v >> 32) as u32, None)
            }
            fctype::PROPERTY_SET if self.qid == Some(0) && sqe.property_offset() == 0x14 => {
                let cc = Cc(sqe.property_value() as u32);
                let mut ctrls = self.shared.ctrls.lock();
                if let Some(c) = ctrls.get_mut(&self.cntlid) {
                    c.cc = cc.0;
                    c.csts = u32::from(cc.enabled());
                    if cc.shutdown() != 0 {
                        c.csts |= 2 << 2;
                    }
                }
                drop(ctrls);
                self.respond(&sqe, Status::SUCCESS, 0, 0, None)
            }
            _ => self.respond(
                &sqe,
                status(StatusType::Generic, generic::INVALID_FIELD),
                0,
                0,
                None,
            ),
        }
    }

    /// Authentication Send or Receive on a queue that authenticates.
    fn authenticate(&mut self, t: u8, sqe: SubmissionEntry, data: &[u8]) -> Result<(), End> {
        let protocol = sqe.cdw(10).to_le_bytes();
        let cfg = self.shared.auth.lock().clone();
        let (Some(cfg), Some(mut a)) = (cfg, self.auth.take()) else {
            let st = status(StatusType::Generic, generic::INVALID_FIELD);
            return self.respond(&sqe, st, 0, 0, None);
        };
        if protocol[1..] != [SPSP_DHCHAP, SPSP_DHCHAP, SECP_DHCHAP] {
            self.auth = Some(a);
            let st = status(StatusType::Generic, generic::INVALID_FIELD);
            return self.respond(&sqe, st, 0, 0, None);
        }
        if t == fctype::AUTH_RECEIVE && a.failing() && cfg.silent_failure {
            self.shared.stats.lock().auth_failures += 1;
            return Err(end("authentication failed (no AUTH_Failure1)"));
        }
        let was_done = a.done();
        let result = if t == fctype::AUTH_SEND {
            let tl = (sqe.cdw(11) as usize).min(data.len());
            let subnqn = self.shared.nqn.as_bytes().to_vec();
            a.on_send(&cfg, data.get(..tl).unwrap_or(&[]), &self.hostnqn, &subnqn);
            self.respond(&sqe, Status::SUCCESS, 0, 0, None)
        } else {
            let al = (sqe.cdw(11) as usize).min(sqe.sgl().length as usize);
            let m = a.on_receive(&cfg, al);
            self.send_data(&sqe, m.get(..al).unwrap_or(&[]), None)
        };
        if a.done() && !was_done {
            self.shared.stats.lock().auths += 1;
        }
        let failed = a.failed();
        self.auth = Some(a);
        if failed {
            self.shared.stats.lock().auth_failures += 1;
            result?;
            // As Linux's target: a failed authentication ends the
            // controller's connection.
            return Err(end("authentication failed"));
        }
        result
    }

    /// The controller's CC and CSTS.
    fn ctrl(&self) -> (u32, u32) {
        self.shared
            .ctrls
            .lock()
            .get(&self.cntlid)
            .map_or((0, 0), |c| (c.cc, c.csts))
    }

    fn admin(&mut self, sqe: SubmissionEntry, fault: Option<Fault>) -> Result<(), End> {
        if self.ctrl().0 & 1 == 0 {
            let st = status(StatusType::Generic, 0x0c); // Command Sequence Error
            return self.respond(&sqe, st, 0, 0, fault);
        }
        let cfg = self.shared.config.clone();
        match sqe.opcode() {
            admin_opcode::IDENTIFY => {
                let mut page = [0u8; IDENTIFY_SIZE];
                match sqe.cdw(10) as u8 {
                    cns::CONTROLLER => {
                        let mut model = [b' '; 40];
                        model[..18].copy_from_slice(b"pollfs test target");
                        let mut serial = [b' '; 20];
                        serial[..8].copy_from_slice(b"TCPTEST1");
                        IdentifyController {
                            vid: 0,
                            serial,
                            model,
                            firmware: *b"1.0     ",
                            mdts: cfg.mdts,
                            cntlid: self.cntlid,
                            nn: 1,
                            oncs: (1 << 2) | (1 << 3),
                            vwc: true,
                            ioccsz: (64 + cfg.in_capsule) / 16,
                        }
                        .encode(&mut page);
                    }
                    cns::NAMESPACE => IdentifyNamespace {
                        nsze: cfg.blocks,
                        ncap: cfg.blocks,
                        block_size: cfg.block_size,
                    }
                    .encode(&mut page),
                    cns::ACTIVE_NAMESPACES => page[0] = 1,
                    _ => {
                        let st = status(StatusType::Generic, generic::INVALID_FIELD);
                        return self.respond(&sqe, st, 0, 0, fault);
                    }
                }
                let n = (sqe.sgl().length as usize).min(IDENTIFY_SIZE);
                self.send_data(&sqe, page.get(..n).unwrap_or(&[]), fault)
            }
            admin_opcode::GET_LOG_PAGE => {
                let n = (sqe.sgl().length as usize).min(IDENTIFY_SIZE);
                self.send_data(&sqe, &vec![0u8; n], fault)
            }
            admin_opcode::SET_FEATURES => {
                let n = u32::from(cfg.queues - 1);
                self.respond(&sqe, Status::SUCCESS, n | (n << 16), 0, fault)
            }
            admin_opcode::GET_FEATURES => self.respond(&sqe, Status::SUCCESS, 0, 0, fault),
            admin_opcode::KEEP_ALIVE => {
                self.shared.stats.lock().keep_alives += 1;
                self.respond(&sqe, Status::SUCCESS, 0, 0, fault)
            }
            // Not aborted (DW0 bit 0): the command finishes on its own.
            admin_opcode::ABORT => self.respond(&sqe, Status::SUCCESS, 1, 0, fault),
            _ => {
                let st = status(StatusType::Generic, generic::INVALID_OPCODE);
                self.respond(&sqe, st, 0, 0, fault)
            }
        }
    }

    fn io(&mut self, sqe: SubmissionEntry, data: &[u8], fault: Option<Fault>) -> Result<(), End> {
        let cfg = &self.shared.config;
        let bs = u64::from(cfg.block_size);
        let blocks = cfg.blocks;
        if sqe.nsid() != 1 {
            let st = status(StatusType::Generic, generic::INVALID_NAMESPACE);
            return self.respond(&sqe, st, 0, 0, fault);
        }
        let range = |slba: u64, nlb: u64| -> Option<core::ops::Range<usize>> {
            let end = slba.checked_add(nlb)?;
            (end <= blocks).then_some((slba * bs) as usize..(end * bs) as usize)
        };
        let out_of_range = status(StatusType::Generic, generic::LBA_OUT_OF_RANGE);
        match sqe.opcode() {
            io_opcode::READ => {
                let Some(r) = range(sqe.slba(), u64::from(sqe.nlb())) else {
                    return self.respond(&sqe, out_of_range, 0, 0, fault);
                };
                if sqe.sgl().length as usize != r.len() {
                    return self.respond(&sqe, status(StatusType::Generic, 0x0f), 0, 0, fault);
                }
                let bytes = self.shared.medium.lock().get(r).map(<[u8]>::to_vec);
                let bytes = bytes.unwrap_or_default();
                self.send_data(&sqe, &bytes, fault)
            }
            io_opcode::WRITE => {
                let Some(r) = range(sqe.slba(), u64::from(sqe.nlb())) else {
                    return self.respond(&sqe, out_of_range, 0, 0, fault);
                };
                if data.len() != r.len() {
                    return self.respond(&sqe, status(StatusType::Generic, 0x0f), 0, 0, fault);
                }
                if let Some(dst) = self.shared.medium.lock().get_mut(r) {
                    dst.copy_from_slice(data);
                }
                self.respond(&sqe, Status::SUCCESS, 0, 0, fault)
            }
            io_opcode::FLUSH => self.respond(&sqe, Status::SUCCESS, 0, 0, fault),
            io_opcode::WRITE_ZEROES => {
                let Some(r) = range(sqe.slba(), u64::from(sqe.nlb())) else {
                    return self.respond(&sqe, out_of_range, 0, 0, fault);
                };
                if let Some(dst) = self.shared.medium.lock().get_mut(r) {
                    dst.fill(0);
                }
                self.respond(&sqe, Status::SUCCESS, 0, 0, fault)
            }
            io_opcode::DATASET_MANAGEMENT => {
                let ranges = (sqe.cdw(10) & 0xff) as usize + 1;
                for i in 0..ranges {
                    let Some(e) = data
                        .get(i * 16..i * 16 + 16)
                        .and_then(|b| b.try_into().ok())
                    else {
                        return self.respond(&sqe, status(StatusType::Generic, 0x0f), 0, 0, fault);
                    };
                    let d = crate::spec::command::DsmRange::from_bytes(e);
                    let Some(r) = range(d.slba, u64::from(d.blocks)) else {
                        return self.respond(&sqe, out_of_range, 0, 0, fault);
                    };
                    // Deallocated blocks read as zeros here.
                    if let Some(dst) = self.shared.medium.lock().get_mut(r) {
                        dst.fill(0);
                    }
                }
                self.respond(&sqe, Status::SUCCESS, 0, 0, fault)
            }
            _ => {
                let st = status(StatusType::Generic, generic::INVALID_OPCODE);
                self.respond(&sqe, st, 0, 0, fault)
            }
        }
    }

    /// Sends `bytes` in C2HData PDUs, then the response unless the SUCCESS
    /// flag stands for it.
    fn send_data(
        &mut self,
        sqe: &SubmissionEntry,
        bytes: &[u8],
        fault: Option<Fault>,
    ) -> Result<(), End> {
        let chunk = self.shared.config.c2h_chunk.max(4) as usize;
        let elide = self.success_flag && fault.is_none();
        let mut at = 0;
        let mut first = true;
        while at < bytes.len() {
            let n = chunk.min(bytes.len() - at);
            let last = at + n == bytes.len();
            let mut fl = if last { flags::LAST_PDU } else { 0 };
            if last && elide {
                fl |= flags::SUCCESS;
            }
            let mut cid = sqe.cid();
            if first && fault == Some(Fault::UnknownCid) {
                cid ^= 0x8000;
            }
            let h = DataHeader {
                cccid: cid,
                ttag: 0,
                datao: at as u32,
                datal: n as u32,
            };
            let mut hdr = [0u8; TX_HEADER_MAX];
            let hl = h.encode(PduType::C2hData, fl, &self.tx, &mut hdr);
            let part = bytes.get(at..at + n).unwrap_or(&[]);
            let mut digest = crc32c(part).to_le_bytes();
            if first {
                match fault {
                    Some(Fault::HeaderDigest) if self.tx.hdgst => hdr[24] ^= 0xff,
                    Some(Fault::DataDigest) => digest[0] ^= 0xff,
                    Some(Fault::Truncate) => {
                        let half = hdr.get(..hl / 2).unwrap_or(&[]);
                        self.send(&[half])?;
                        return Err(end("fault: truncate"));
                    }
                    _ => {}
                }
            }
            let dd: &[u8] = if self.tx.ddgst { &digest } else { &[] };
            self.send(&[hdr.get(..hl).unwrap_or(&[]), part, dd])?;
            self.shared.stats.lock().c2h_pdus += 1;
            at += n;
            first = false;
        }
        if elide && !bytes.is_empty() {
            self.shared.stats.lock().success_flag_reads += 1;
            return Ok(());
        }
        // Faults already applied to the data PDUs do not apply again.
        let fault = match fault {
            Some(Fault::HeaderDigest | Fault::DataDigest | Fault::UnknownCid)
                if !bytes.is_empty() =>
            {
                None
            }
            f => f,
        };
        self.respond(sqe, Status::SUCCESS, 0, 0, fault)
    }

    fn respond(
        &mut self,
        sqe: &SubmissionEntry,
        st: Status,
        dw0: u32,
        dw1: u32,
        fault: Option<Fault>,
    ) -> Result<(), End> {
        let qid = self.qid.unwrap_or(0);
        let mut cid = sqe.cid();
        if fault == Some(Fault::UnknownCid) {
            cid ^= 0x8000;
        }
        let mut cqe = CompletionEntry::new(dw0, 0, qid, cid, false, st);
        cqe.dw1 = dw1;
        let mut hdr = [0u8; TX_HEADER_MAX];
        let n = encode_capsule_resp(&cqe, &self.tx, &mut hdr);
        match fault {
            Some(Fault::Truncate) => {
                let half = hdr.get(..n / 2).unwrap_or(&[]);
                self.send(&[half])?;
                return Err(end("fault: truncate"));
            }
            Some(Fault::HeaderDigest) if self.tx.hdgst => hdr[24] ^= 0xff,
            _ => {}
        }
        let pdu = hdr.get(..n).unwrap_or(&[]);
        self.send(&[pdu])?;
        if fault == Some(Fault::Duplicate) {
            self.send(&[pdu])?;
        }
        Ok(())
    }
}
