//! Issuing NVMe commands for engine requests and accounting their
//! completions: piecewise trim/zero, retry on status.

use pollfs_core::dev::DevError;
use pollfs_core::units::Nanos;

use super::table::HandBack;
use super::{NvmeQueue, Unissued, MAX_ZERO_BLOCKS};
use crate::controller::Trouble;
use crate::qpair::ProtocolError;
use crate::spec::command::{DsmRange, SubmissionEntry};
use crate::spec::completion::CompletionEntry;
use crate::spec::protection::{prinfo, PiCheck};
use crate::transport::{Payload, Qpair, QpairError, Transport};

/// How a refusal by the transport reaches the engine.
fn refused(e: QpairError) -> DevError {
    match e {
        QpairError::Full => DevError::QueueFull,
        QpairError::BadPayload | QpairError::BadCid => DevError::InvalidRequest,
        _ => DevError::ControllerFailed,
    }
}

impl<T: Transport> NvmeQueue<T> {
    pub(super) fn ensure_live(&mut self) -> Result<(), DevError> {
        if self.ctrl.is_dead() {
            self.fail_all(DevError::ControllerFailed);
            return Err(DevError::ControllerFailed);
        }
        // Another queue may reset the controller while this one reconnects;
        // try a few times before giving up on this submission.
        for _ in 0..3 {
            if self.generation == self.ctrl.generation() {
                return Ok(());
            }
            self.resync();
        }
        if self.generation == self.ctrl.generation() {
            Ok(())
        } else {
            Err(DevError::ControllerFailed)
        }
    }

    /// Takes an id for `tag`'s next command and hands the command and its
    /// data to the transport.
    #[inline]
    pub(super) fn issue(
        &mut self,
        tag: u16,
        sqe: SubmissionEntry,
        payload: Payload<'_>,
    ) -> Result<(), DevError> {
        let cid = self.table.issue(tag).ok_or(DevError::QueueFull)?;
        self.send(cid, || sqe, payload)
    }

    /// Hands command `cid`, already in flight in the table, and its data
    /// to the transport, the entry built by `build` (where the transport
    /// keeps it); a command the transport refuses is taken out of the
    /// table again.
    #[inline]
    pub(super) fn send(
        &mut self,
        cid: u16,
        build: impl FnOnce() -> SubmissionEntry,
        payload: Payload<'_>,
    ) -> Result<(), DevError> {
        if let Err(e) = self.qp.submit_with(cid, build, payload) {
            self.table.unissue(cid);
            return Err(refused(e));
        }
        self.stats.commands += 1;
        Ok(())
    }

    /// Starts a request on a free command id, its tag.
    #[inline]
    pub(super) fn new_request(&mut self, rest: Option<Unissued>) -> Result<u16, DevError> {
        let tag = self.table.start(rest).ok_or(DevError::QueueFull)?;
        if rest.is_some() {
            self.with_rest.push_back(tag);
        }
        Ok(tag)
    }

    /// Hands a request back if nothing of it is outstanding or unissued.
    pub(super) fn maybe_complete(&mut self, tag: u16) {
        let finished = match self.table.request(tag) {
            Some(r) => r.merge.outstanding() == 0 && r.rest.is_none(),
            None => false,
        };
        if finished {
            self.complete(tag);
        }
    }

    /// Hands a finished request back.
    fn complete(&mut self, tag: u16) {
        if let Some(r) = self.table.request(tag) {
            let result = r.merge.result();
            self.table.finish(tag, result);
        }
    }

    /// Records an issue failure against a request; a request nothing of
    /// which reached the device is withdrawn so `submit` can report it.
    pub(super) fn abandon(&mut self, tag: u16, e: DevError) -> Option<DevError> {
        let r = self.table.request_mut(tag)?;
        r.rest = None;
        if r.merge.outstanding() == 0 {
            // Never handed to the engine: the tag is free at once.
            self.table.withdraw(tag);
            return Some(e);
        }
        r.merge.fail(e);
        None
    }

    /// Issues further pieces of trim/zero requests while ids are free.
    pub(super) fn pump(&mut self) {
        while let Some(&tag) = self.with_rest.front() {
            if !self.table.can_issue(tag) {
                return;
            }
            let rest = self.table.request(tag).and_then(|r| r.rest);
            let Some(mut rest) = rest else {
                self.with_rest.pop_front();
                self.maybe_complete(tag);
                continue;
            };
            let nsid = self.ctrl.config().nsid;
            let range;
            let (sqe, payload, n) = if rest.zeroes {
                let n = rest.blocks.min(MAX_ZERO_BLOCKS);
                // On a protected namespace the controller writes the PI
                // of the zeroes too, so later reads check as any block
                // (PRACT alone: there is no data to check).
                let mut sqe = SubmissionEntry::write_zeroes(nsid, rest.lba, n as u32);
                if self.prinfo != 0 {
                    sqe.protect(self.prinfo & prinfo::PRACT, rest.lba as u32);
                }
                (sqe, Payload::None, n)
            } else {
                let n = rest.blocks.min(u64::from(u32::MAX));
                range = DsmRange {
                    attributes: 0,
                    blocks: n as u32,
                    slba: rest.lba,
                }
                .to_bytes();
                (
                    SubmissionEntry::deallocate(nsid, 1, 0),
                    Payload::Out(&range),
                    n,
                )
            };
            match self.issue(tag, sqe, payload) {
                Ok(()) => {
                    rest.lba += n;
                    rest.blocks -= n;
                    if let Some(r) = self.table.request_mut(tag) {
                        r.rest = (rest.blocks > 0).then_some(rest);
                    }
                }
                Err(DevError::QueueFull) => return,
                Err(e) => {
                    if let Some(r) = self.table.request_mut(tag) {
                        r.rest = None;
                        r.merge.fail(e);
                    }
                }
            }
        }
    }

    /// One NVMe command finished: release its id and account it to its
    /// request.
    #[inline]
    pub(super) fn finish(&mut self, cid: u16, result: Result<(), DevError>) {
        if let Some(tag) = self.table.release(cid) {
            self.account(tag, result);
        }
    }

    /// Accounts a released command's result to its request `tag`, and
    /// finishes the request if that was its last piece (its completion
    /// then waits for the poll's hand-back).
    #[inline]
    fn account(&mut self, tag: u16, result: Result<(), DevError>) {
        if result.is_ok() {
            self.ctrl.note_success();
        }
        let mut none = |_| {};
        let mut out = HandBack {
            done: &mut none,
            room: 0,
            handed: 0,
        };
        self.table.account(tag, result, &mut out);
    }

    pub(super) fn resubmit(&mut self, cid: u16) -> bool {
        let Some(c) = self.table.command_mut(cid) else {
            return false;
        };
        c.retries += 1;
        c.deadline = None;
        c.abort_by = None;
        if self.qp.resubmit(cid).is_err() {
            return false;
        }
        self.stats.commands += 1;
        self.stats.retries += 1;
        self.ctrl.count(Trouble::Retry);
        true
    }

    #[inline]
    pub(super) fn on_completion(
        &mut self,
        e: CompletionEntry,
        out: &mut HandBack<'_>,
    ) -> Result<(), ProtocolError<T::Error>> {
        let cid = e.cid();
        if e.plain_success() {
            // The usual case: ending the command is the check that it was
            // in flight.
            if !self.table.succeed(cid, out) {
                return Err(ProtocolError::UnknownCid(cid));
            }
            self.ctrl.note_success();
            return Ok(());
        }
        let Some(c) = self.table.command_mut(cid) else {
            return Err(ProtocolError::UnknownCid(cid));
        };
        let (retries, timed_out) = (c.retries, c.timed_out);
        let status = e.status();
        if PiCheck::from_status(status).is_some() {
            self.stats.integrity_errors += 1;
            self.ctrl.count(Trouble::IntegrityError);
        }
        let max = self.ctrl.config().max_retries;
        if status.may_retry() && retries < max && !timed_out && self.resubmit(cid) {
            return Ok(());
        }
        self.finish(cid, status.to_result());
        Ok(())
    }

    /// Takes what completed from the transport and accounts it, handing
    /// finished requests to `out` as far as it has room. `false` means the
    /// controller broke the queue protocol (the queue needs a reset); the
    /// caller only counts it, so which rule was broken is not carried out
    /// of the hot path.
    #[inline]
    pub(super) fn reap(&mut self, now: Nanos, out: &mut HandBack<'_>) -> bool {
        self.reaped.clear();
        let limit = usize::from(self.qp.entries());
        // The usual completion, a plain success, is accounted as it is
        // read (releasing its id is the check that it was in flight); from
        // the first other one on, entries wait in `reaped` for the full
        // path, which may resubmit through the queue pair.
        let (table, ctrl) = (&mut self.table, &self.ctrl);
        let polled = self.qp.poll_each(now, limit, &mut self.reaped, &mut |e| {
            if !e.plain_success() {
                return Ok(false);
            }
            let cid = e.cid();
            if !table.succeed(cid, out) {
                return Err(ProtocolError::UnknownCid(cid));
            }
            ctrl.note_success();
            Ok(true)
        });
        for i in 0..self.reaped.len() {
            let e = self.reaped[i];
            if self.on_completion(e, out).is_err() {
                return false;
            }
        }
        polled.is_ok()
    }
}
