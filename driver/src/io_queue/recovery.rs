//! Timeouts, abort, and recovery after a controller reset: the queue
//! reconnects through the transport and resubmits what it had in flight.

use alloc::vec::Vec;

use pollfs_core::dev::DevError;
use pollfs_core::units::Nanos;

use super::NvmeQueue;
use crate::controller::Trouble;
use crate::transport::{Qpair, Transport};

impl<T: Transport> NvmeQueue<T> {
    pub(super) fn fail_all(&mut self, e: DevError) {
        for cid in 0..self.table.capacity() as u16 {
            if self.table.is_busy(cid) {
                self.finish(cid, Err(e));
            }
        }
        let tags: Vec<u16> = self.with_rest.drain(..).collect();
        for tag in tags {
            if let Some(r) = self.table.request_mut(tag) {
                r.rest = None;
                r.merge.fail(e);
            }
            self.maybe_complete(tag);
        }
    }

    /// After a controller reset: reconnect the queue and resubmit what was
    /// in flight.
    pub(super) fn resync(&mut self) {
        let max_resets = self.ctrl.config().max_resets;
        let mut created = false;
        for _ in 0..=max_resets {
            if self.ctrl.is_dead() {
                break;
            }
            let gen = self.ctrl.generation();
            if self.qp.reset().is_ok() && self.ctrl.connect_qpair(&mut self.qp).is_ok() {
                self.generation = gen;
                created = true;
                break;
            }
            let _ = self.ctrl.reset(gen);
        }
        if !created {
            self.fail_all(DevError::ControllerFailed);
            return;
        }
        self.stats.resyncs += 1;
        self.ctrl.count(Trouble::QueueRecovery);
        let max = self.ctrl.config().max_retries;
        for cid in 0..self.table.capacity() as u16 {
            let Some(c) = self.table.command_mut(cid) else {
                continue;
            };
            let (timed_out, retries) = (c.timed_out, c.retries);
            if timed_out {
                self.finish(cid, Err(DevError::Timeout));
            } else if retries >= max || !self.resubmit(cid) {
                self.finish(cid, Err(DevError::ControllerFailed));
            }
        }
    }

    /// Resets the controller (unless another queue already did) and
    /// recovers this queue.
    pub(super) fn recover(&mut self) {
        let _ = self.ctrl.reset(self.generation);
        if self.ctrl.is_dead() {
            self.fail_all(DevError::ControllerFailed);
        } else {
            self.resync();
        }
    }

    /// At each scan interval: arms the deadlines of commands submitted
    /// since the last scan, checks the armed ones, and reads controller
    /// health. Between scans a poll does nothing here, so a command's
    /// deadline starts at the first scan after its submission: it is
    /// aborted between `command_timeout` and `command_timeout + 2 *
    /// health_interval` after the first poll that sees it in flight.
    pub(super) fn check_timeouts(&mut self, now: Nanos) {
        if now < self.next_scan || self.table.commands() == 0 {
            return;
        }
        self.scan(now);
    }

    #[cold]
    fn scan(&mut self, now: Nanos) {
        let cfg = *self.ctrl.config();
        self.next_scan = Nanos(now.0.saturating_add(cfg.health_interval));
        let mut need_reset = self.ctrl.is_fatal();
        let mut aborting = false;
        let qid = self.qp.qid();
        for cid in 0..self.table.capacity() as u16 {
            let Some(s) = self.table.command_mut(cid) else {
                continue;
            };
            match (s.deadline, s.abort_by) {
                (None, _) => s.deadline = Some(Nanos(now.0.saturating_add(cfg.command_timeout))),
                (Some(d), None) if now > d => {
                    s.timed_out = true;
                    s.abort_by = Some(Nanos(now.0.saturating_add(cfg.abort_timeout)));
                    self.stats.timeouts += 1;
                    self.ctrl.count(Trouble::Timeout);
                    aborting = true;
                    if !self.ctrl.send_abort(qid, cid) {
                        need_reset = true;
                    }
                }
                (_, Some(by)) if now > by => need_reset = true,
                (_, Some(_)) => aborting = true,
                _ => {}
            }
        }
        if aborting && self.ctrl.reap_admin().is_err() {
            need_reset = true;
        }
        if need_reset {
            self.recover();
        }
    }
}
