//! Command execution of the emulated controller: the admin set (chapter 5)
//! and the NVM set (chapter 6) over its namespace.
//!
//! Everything here runs under the state lock. An admin command runs whole
//! (its data is at most a page); an NVM command that moves data is only
//! checked and counted here, and hands back the [`Work`] that
//! [`super::transfer`] does with the lock released.
//!
//! The emulated device is as strict with the host as the driver is with
//! the device: every field the host supplies is range-checked and bad
//! input gets the status a real controller would return.

use std::collections::VecDeque;

use super::controller::{Cq, Sq, State};
use super::faults::Hostile;
use super::protection::{Metadata, PiCommand, Refusal};
use super::transfer::{HostData, Work};
use crate::spec::command::{
    admin_opcode, cns, feature, io_opcode, log_page, DsmRange, SubmissionEntry,
};
use crate::spec::completion::CompletionEntry;
use crate::spec::identify::{IdentifyController, IdentifyNamespace, IDENTIFY_SIZE};
use crate::spec::protection::{prinfo, Protection, INVALID_PROTECTION_INFO};
use crate::spec::status::{generic, specific, Status, StatusType};

const PAGE: usize = 4096;
const NSID: u32 = 1;

fn ok() -> (Status, u32) {
    (Status::SUCCESS, 0)
}

fn generic_err(sc: u8) -> (Status, u32) {
    (Status::new(StatusType::Generic, sc, true), 0)
}

fn specific_err(sc: u8) -> (Status, u32) {
    (Status::new(StatusType::CommandSpecific, sc, true), 0)
}

/// What an I/O command came to under the state lock.
#[derive(Debug)]
pub(super) enum Exec {
    /// Finished: the completion's status and DW0.
    Done(Status, u32),
    /// Checked and counted; its data moves outside the lock.
    Move(Work),
}

impl From<(Status, u32)> for Exec {
    fn from((status, dw0): (Status, u32)) -> Exec {
        Exec::Done(status, dw0)
    }
}

impl State {
    /// Moves `buf.len()` bytes between the host memory named by the
    /// command's PRPs and `buf` (`to_host`: device -> host), under the
    /// state lock: admin data and a deallocate's range list, all small.
    fn transfer(&self, sqe: &SubmissionEntry, buf: &mut [u8], to_host: bool) -> Result<(), ()> {
        let host = HostData::of(&self.mem, sqe, buf.len()).ok_or(())?;
        let done = if to_host {
            host.write(&self.mem, 0, buf)
        } else {
            host.read(&self.mem, 0, buf)
        };
        done.then_some(()).ok_or(())
    }

    fn mdts_bytes(&self) -> u64 {
        if self.config.mdts == 0 {
            u64::MAX
        } else {
            (PAGE as u64) << self.config.mdts.min(40)
        }
    }

    fn identify(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        let mut page = [0u8; IDENTIFY_SIZE];
        match sqe.cdw(10) as u8 {
            cns::CONTROLLER => {
                let mut model = [b' '; 40];
                model[..20].copy_from_slice(b"pollfs emulated NVMe");
                let mut serial = [b' '; 20];
                serial[..7].copy_from_slice(b"EMU0001");
                IdentifyController {
                    vid: 0x1b36,
                    serial,
                    model,
                    firmware: *b"1.0     ",
                    mdts: self.config.mdts,
                    cntlid: 1,
                    nn: 1,
                    oncs: (1 << 2) | (1 << 3),
                    vwc: true,
                    ioccsz: 0,
                }
                .encode(&mut page);
            }
            cns::NAMESPACE => {
                if sqe.nsid() != NSID {
                    return generic_err(generic::INVALID_NAMESPACE);
                }
                IdentifyNamespace {
                    nsze: self.blocks,
                    ncap: self.blocks,
                    block_size: self.config.block_size,
                }
                .encode(&mut page);
                let m = self.config.metadata;
                if m != Metadata::default() {
                    Protection::encode_format(&mut page, m.bytes, m.extended, m.dps);
                }
            }
            cns::ACTIVE_NAMESPACES => {
                if sqe.nsid() < NSID {
                    page[0..4].copy_from_slice(&NSID.to_le_bytes());
                }
            }
            _ => return generic_err(generic::INVALID_FIELD),
        }
        if self.faults.hostile == Some(Hostile::GarbageIdentify) {
            for b in page.iter_mut() {
                *b = self.random() as u8;
            }
        }
        match self.transfer(sqe, &mut page, true) {
            Ok(()) => ok(),
            Err(()) => generic_err(generic::DATA_TRANSFER_ERROR),
        }
    }

    fn queue_id(&self, sqe: &SubmissionEntry) -> Option<usize> {
        let qid = usize::from(sqe.cdw(10) as u16);
        (qid >= 1 && qid <= usize::from(self.granted_queues) && qid < self.sqs.len()).then_some(qid)
    }

    fn queue_size(&self, sqe: &SubmissionEntry) -> Option<u16> {
        let entries = (sqe.cdw(10) >> 16) + 1;
        (entries >= 2 && entries <= self.cap.max_queue_entries()).then_some(entries as u16)
    }

    fn create_cq(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        let Some(qid) = self.queue_id(sqe) else {
            return specific_err(specific::INVALID_QID);
        };
        if self.cqs[qid].is_some() {
            return specific_err(specific::INVALID_QID);
        }
        let Some(entries) = self.queue_size(sqe) else {
            return specific_err(specific::INVALID_QUEUE_SIZE);
        };
        if sqe.cdw(11) & 1 == 0 || sqe.prp1() % PAGE as u64 != 0 || sqe.prp1() == 0 {
            return generic_err(generic::INVALID_FIELD);
        }
        self.cqs[qid] = Some(Cq {
            base: sqe.prp1(),
            entries,
            tail: 0,
            head: 0,
            phase: true,
            overflow: VecDeque::new(),
        });
        ok()
    }

    fn create_sq(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        let Some(qid) = self.queue_id(sqe) else {
            return specific_err(specific::INVALID_QID);
        };
        if self.sqs[qid].is_some() {
            return specific_err(specific::INVALID_QID);
        }
        let Some(entries) = self.queue_size(sqe) else {
            return specific_err(specific::INVALID_QUEUE_SIZE);
        };
        let cqid = (sqe.cdw(11) >> 16) as u16;
        if cqid == 0 || !matches!(self.cqs.get(usize::from(cqid)), Some(Some(_))) {
            return specific_err(specific::INVALID_CQ);
        }
        if sqe.cdw(11) & 1 == 0 || sqe.prp1() % PAGE as u64 != 0 || sqe.prp1() == 0 {
            return generic_err(generic::INVALID_FIELD);
        }
        let serial = self.next_serial();
        self.sqs[qid] = Some(Sq {
            base: sqe.prp1(),
            entries,
            head: 0,
            tail: 0,
            cqid,
            serial,
        });
        ok()
    }

    fn delete_sq(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        let Some(qid) = self.queue_id(sqe) else {
            return specific_err(specific::INVALID_QID);
        };
        if self.sqs[qid].take().is_none() {
            return specific_err(specific::INVALID_QID);
        }
        // Commands of the deleted SQ that are still inside the device are
        // dropped; their completions will never be posted.
        let sqid = qid as u16;
        self.held.retain(|h| h.entry.sq_id() != sqid);
        self.stuck.retain(|(_, e)| e.sq_id() != sqid);
        ok()
    }

    fn delete_cq(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        let Some(qid) = self.queue_id(sqe) else {
            return specific_err(specific::INVALID_QID);
        };
        if self.cqs[qid].is_none() {
            return specific_err(specific::INVALID_QID);
        }
        if self
            .sqs
            .iter()
            .flatten()
            .any(|s| usize::from(s.cqid) == qid)
        {
            return specific_err(specific::INVALID_QUEUE_DELETION);
        }
        self.cqs[qid] = None;
        ok()
    }

    fn abort(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        self.stats.aborts += 1;
        let sqid = sqe.cdw(10) as u16;
        let cid = (sqe.cdw(10) >> 16) as u16;
        let aborted = Status::new(StatusType::Generic, generic::ABORT_REQUESTED, true);
        let matches = |e: &CompletionEntry| e.sq_id() == sqid && e.cid() == cid;
        let mut found = None;
        if let Some(i) = self.held.iter().position(|h| matches(&h.entry)) {
            let h = self.held.remove(i);
            found = Some((h.cqid, h.entry));
        } else if self.faults.stuck_abortable {
            if let Some(i) = self.stuck.iter().position(|(_, e)| matches(e)) {
                found = Some(self.stuck.remove(i));
            }
        }
        match found {
            Some((cqid, e)) => {
                let entry = CompletionEntry::new(0, e.sq_head(), sqid, cid, false, aborted);
                self.post(cqid, entry);
                (Status::SUCCESS, 0)
            }
            // DW0 bit 0 set: the command was not aborted.
            None => (Status::SUCCESS, 1),
        }
    }

    fn get_log_page(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        let dwords = ((sqe.cdw(10) >> 16) | ((sqe.cdw(11) & 0xffff) << 16)) as usize + 1;
        let len = dwords * 4;
        if len > PAGE {
            return generic_err(generic::INVALID_FIELD);
        }
        let mut page = [0u8; PAGE];
        match sqe.cdw(10) as u8 {
            log_page::ERROR => {}
            log_page::SMART => {
                // Composite temperature in kelvin, then counters (u128 LE):
                // data units are thousands of 512-byte units.
                page[1..3].copy_from_slice(&300u16.to_le_bytes());
                let units = |n: u64| n.div_ceil(1000);
                let put = |p: &mut [u8; PAGE], at: usize, v: u64| {
                    p[at..at + 8].copy_from_slice(&v.to_le_bytes());
                };
                put(&mut page, 32, units(self.stats.reads));
                put(&mut page, 48, units(self.stats.writes));
                put(&mut page, 64, self.stats.reads);
                put(&mut page, 80, self.stats.writes);
            }
            _ => return specific_err(0x09),
        }
        match self.transfer(sqe, &mut page[..len], true) {
            Ok(()) => ok(),
            Err(()) => generic_err(generic::DATA_TRANSFER_ERROR),
        }
    }

    fn queue_count(&self) -> u32 {
        let n = u32::from(self.granted_queues.max(1)) - 1;
        n | (n << 16)
    }

    /// Executes one admin command.
    pub(super) fn admin(&mut self, sqe: &SubmissionEntry) -> (Status, u32) {
        self.stats.admin += 1;
        match sqe.opcode() {
            admin_opcode::IDENTIFY => self.identify(sqe),
            admin_opcode::SET_FEATURES if sqe.cdw(10) as u8 == feature::NUMBER_OF_QUEUES => {
                let nsq = (sqe.cdw(11) & 0xffff) + 1;
                let ncq = (sqe.cdw(11) >> 16) + 1;
                if nsq == 0x1_0000 || ncq == 0x1_0000 {
                    return generic_err(generic::INVALID_FIELD);
                }
                let max = u32::from(self.config.max_io_queues.max(1));
                self.granted_queues = nsq.min(ncq).min(max) as u16;
                (Status::SUCCESS, self.queue_count())
            }
            admin_opcode::GET_FEATURES if sqe.cdw(10) as u8 == feature::NUMBER_OF_QUEUES => {
                (Status::SUCCESS, self.queue_count())
            }
            admin_opcode::CREATE_IO_CQ => self.create_cq(sqe),
            admin_opcode::CREATE_IO_SQ => self.create_sq(sqe),
            admin_opcode::DELETE_IO_SQ => self.delete_sq(sqe),
            admin_opcode::DELETE_IO_CQ => self.delete_cq(sqe),
            admin_opcode::ABORT => self.abort(sqe),
            admin_opcode::GET_LOG_PAGE => self.get_log_page(sqe),
            admin_opcode::SET_FEATURES | admin_opcode::GET_FEATURES => {
                generic_err(generic::INVALID_FIELD)
            }
            _ => generic_err(generic::INVALID_OPCODE),
        }
    }

    /// The medium byte range of `blocks` blocks from `slba`, if in range.
    fn range(&self, slba: u64, blocks: u64) -> Option<core::ops::Range<usize>> {
        let end = slba.checked_add(blocks)?;
        if end > self.blocks {
            return None;
        }
        let bs = u64::from(self.config.block_size);
        Some(usize::try_from(slba * bs).ok()?..usize::try_from(end * bs).ok()?)
    }

    /// The protection fields of a Read, Write or Write Zeroes on a
    /// protected namespace (`Ok(None)` on one without PI), counted, or the
    /// status that refuses the command.
    fn protection(&mut self, sqe: &SubmissionEntry) -> Result<Option<PiCommand>, (Status, u32)> {
        if !self.served {
            // Metadata this emulation cannot move (the driver refuses
            // such a namespace before any I/O).
            return Err(generic_err(generic::INVALID_FIELD));
        }
        let Some(pi_type) = self.pi_type else {
            return Ok(None);
        };
        match PiCommand::of(sqe, pi_type) {
            Ok(c) => {
                self.stats.pi_commands += 1;
                Ok(Some(c))
            }
            Err(Refusal::NoPract) => Err(generic_err(generic::INVALID_FIELD)),
            Err(Refusal::ReferenceTag) => Err(specific_err(INVALID_PROTECTION_INFO)),
        }
    }

    /// Checks and counts a Read or Write; its data moves outside the lock.
    fn read_write(&mut self, sqe: &SubmissionEntry, write: bool) -> Exec {
        let blocks = u64::from(sqe.nlb());
        let Some(r) = self.range(sqe.slba(), blocks) else {
            return generic_err(generic::LBA_OUT_OF_RANGE).into();
        };
        if r.len() as u64 > self.mdts_bytes() {
            return generic_err(generic::INVALID_FIELD).into();
        }
        let pi = match self.protection(sqe) {
            Ok(pi) => pi,
            Err(refused) => return refused.into(),
        };
        let (pos, len) = (r.start as u64, r.len());
        if write {
            self.stats.writes += 1;
            self.stats.fua_writes += u64::from(sqe.fua());
            Exec::Move(Work::Write { pos, len, pi })
        } else {
            self.stats.reads += 1;
            let misdirect = self.faults.misdirect_read;
            Exec::Move(Work::Read {
                pos,
                len,
                pi,
                misdirect,
            })
        }
    }

    /// The medium bytes of `blocks` blocks from `slba`, to zero, if in range.
    fn zero(&self, slba: u64, blocks: u64) -> Option<(u64, u64)> {
        self.range(slba, blocks)
            .map(|r| (r.start as u64, r.len() as u64))
    }

    fn dataset_management(&mut self, sqe: &SubmissionEntry) -> Exec {
        self.stats.dsm += 1;
        let ranges = (sqe.cdw(10) & 0xff) as usize + 1;
        let mut raw = vec![0u8; ranges * 16];
        if self.transfer(sqe, &mut raw, false).is_err() {
            return generic_err(generic::DATA_TRANSFER_ERROR).into();
        }
        let zero: Option<Vec<(u64, u64)>> = raw
            .chunks_exact(16)
            .map(|c| {
                let mut b = [0u8; 16];
                b.copy_from_slice(c);
                let d = DsmRange::from_bytes(&b);
                self.zero(d.slba, u64::from(d.blocks))
            })
            .collect();
        let Some(zero) = zero else {
            return generic_err(generic::LBA_OUT_OF_RANGE).into();
        };
        if sqe.cdw(11) & (1 << 2) != 0 {
            // Deallocated blocks read back as zeroes here, with
            // unwritten PI.
            return Exec::Move(Work::Zero {
                ranges: zero,
                pi: None,
            });
        }
        ok().into()
    }

    /// Executes one NVM command, or checks and counts one that moves data.
    pub(super) fn io(&mut self, sqe: &SubmissionEntry) -> Exec {
        if self.faults.fail_io > 0 {
            self.faults.fail_io -= 1;
            self.stats.injected += 1;
            let st = self.faults.error_status.unwrap_or(Status::new(
                StatusType::Media,
                crate::spec::status::media::UNRECOVERED_READ,
                true,
            ));
            return Exec::Done(st, 0);
        }
        let nsid_ok =
            sqe.nsid() == NSID || (sqe.opcode() == io_opcode::FLUSH && sqe.nsid() == u32::MAX);
        if !nsid_ok {
            return generic_err(generic::INVALID_NAMESPACE).into();
        }
        match sqe.opcode() {
            io_opcode::READ => self.read_write(sqe, false),
            io_opcode::WRITE => self.read_write(sqe, true),
            io_opcode::FLUSH => {
                self.stats.flushes += 1;
                ok().into()
            }
            io_opcode::WRITE_ZEROES => {
                self.stats.write_zeroes += 1;
                let Some(range) = self.zero(sqe.slba(), u64::from(sqe.nlb())) else {
                    return generic_err(generic::LBA_OUT_OF_RANGE).into();
                };
                // Without PRACT the zeroed blocks' PI is left unwritten
                // (no metadata comes with Write Zeroes); with no data to
                // check, a PRCHK bit is refused, as QEMU's controller does.
                if self.pi_type.is_some() && sqe.prinfo() & !prinfo::PRACT != 0 {
                    return specific_err(INVALID_PROTECTION_INFO).into();
                }
                let pi = match self.protection(sqe) {
                    Ok(pi) => pi,
                    Err(_) if self.served && sqe.prinfo() & prinfo::PRACT == 0 => None,
                    Err(refused) => return refused.into(),
                };
                Exec::Move(Work::Zero {
                    ranges: vec![range],
                    pi,
                })
            }
            io_opcode::DATASET_MANAGEMENT => self.dataset_management(sqe),
            _ => generic_err(generic::INVALID_OPCODE).into(),
        }
    }
}
