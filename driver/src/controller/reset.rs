//! Controller reset (NVMe 1.4, 7.3.2), shutdown (7.6.2), and the teardown
//! when the last queue lets the controller go.
//!
//! A reset bumps the controller's generation. Every I/O queue compares its
//! own generation on its next submit or poll and, if it changed,
//! reconnects and resubmits what was in flight; so a reset needs no access
//! to other threads' queues.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::admin::{deadline, Admin, Ctx, Link};
use super::Controller;
use crate::error::DriverError;
use crate::spec::regs::{Cc, Csts};
use crate::transport::{Property, Transport};

impl<T: Transport> Controller<T> {
    /// Resets the controller if nobody has since generation `seen`:
    /// disable, start the admin queue afresh, enable, renegotiate queues.
    /// After `max_resets` resets in a row without a successful I/O the
    /// controller is declared dead.
    pub fn reset(&self, seen: u64) -> Result<(), DriverError<T::Error>> {
        let mut admin = self.admin.lock();
        if self.generation.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        if self.is_dead() {
            return Err(DriverError::Dead);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.resets.fetch_add(1, Ordering::Relaxed);
        let in_a_row = self.resets_in_a_row.fetch_add(1, Ordering::Relaxed);
        let ctx = self.ctx();
        if in_a_row >= self.config.max_resets {
            self.dead.store(true, Ordering::Release);
            // Leave the controller disabled so it stops touching memory.
            let _ = ctx.set(&mut admin, Property::Cc, 0);
            return Err(DriverError::Dead);
        }
        let result = self.reinit(&ctx, &mut admin);
        if result.is_err() {
            let _ = ctx.set(&mut admin, Property::Cc, 0);
            if in_a_row + 1 >= self.config.max_resets {
                self.dead.store(true, Ordering::Release);
            }
        }
        result
    }

    fn reinit(
        &self,
        ctx: &Ctx<'_, T>,
        admin: &mut Admin<T::Qpair>,
    ) -> Result<(), DriverError<T::Error>> {
        self.drop_live_queues(ctx, admin);
        admin.forget()?;
        ctx.transport.reconnect_admin(&mut admin.qp)?;
        // CC.EN 1 -> 0 resets the controller (7.3.2).
        ctx.set(admin, Property::Cc, 0)?;
        ctx.enable(admin, self.info.cap)?;
        let want = self.info.io_queues;
        let granted = ctx.set_queue_count(admin, want)?;
        if granted < want {
            return Err(DriverError::NoQueues);
        }
        Ok(())
    }

    /// Before a reset of a controller that still answers: disconnects the
    /// I/O queues the driver created, so nothing is in flight inside the
    /// device when CC.EN drops. Some devices misbehave when their queues
    /// are live across a disable (QEMU 7.2 frees the queues under
    /// in-flight block I/O and crashes; some SSDs have been reported to
    /// hang). Best effort: a status error moves on to the next queue, any
    /// other failure (timeout, protocol violation) stops here and the reset
    /// proceeds anyway. The queues' owners resubmit after the reset
    /// whatever they had not reaped, as before.
    fn drop_live_queues(&self, ctx: &Ctx<'_, T>, admin: &mut Admin<T::Qpair>) {
        let healthy = match ctx.get32(admin, Property::Csts) {
            Ok(csts) => !Csts(csts).fatal() && Csts(csts).ready(),
            Err(_) => false,
        };
        if !healthy {
            return;
        }
        // Allocated ids; one whose creation failed just gets a status error.
        let live: Vec<u16> = (1..=self.info.io_queues)
            .filter(|q| !admin.free_qids.contains(q))
            .collect();
        for qid in live {
            let mut link = Link {
                ctx,
                admin: &mut *admin,
            };
            match ctx.transport.disconnect_qpair(qid, &mut link) {
                Ok(()) | Err(DriverError::Admin { .. }) => {}
                Err(_) => return,
            }
        }
    }

    /// Normal shutdown (7.6.2): CC.SHN = 01b, then wait for CSTS.SHST to
    /// report completion (bounded by CAP.TO on the caller's clock), so a
    /// volatile write cache reaches the medium. Returns whether the
    /// controller reported completion.
    pub fn shutdown(&self) -> bool {
        if self.is_dead() {
            return false;
        }
        let mut admin = self.admin.lock();
        self.shutdown_locked(&mut admin)
    }

    fn shutdown_locked(&self, admin: &mut Admin<T::Qpair>) -> bool {
        let ctx = self.ctx();
        let Ok(cc) = ctx.get32(admin, Property::Cc) else {
            return false;
        };
        let shn = Cc(cc).with_normal_shutdown();
        if ctx.set(admin, Property::Cc, u64::from(shn.0)).is_err() {
            return false;
        }
        let until = deadline(&*self.clock, self.info.cap.timeout_ns().max(500_000_000));
        loop {
            let csts = match ctx.get32(admin, Property::Csts) {
                Ok(c) => Csts(c),
                Err(_) => return false,
            };
            if csts.fatal() {
                return false;
            }
            if csts.shutdown_complete() {
                return true;
            }
            let now = self.clock.now();
            self.transport.tick(now);
            if now > until {
                return false;
            }
            core::hint::spin_loop();
        }
    }
}

impl<T: Transport> Drop for Controller<T> {
    /// Every queue holds the controller, so this runs after the last one is
    /// gone: shut the controller down, then disable it so it stops touching
    /// memory before the admin queue is freed.
    fn drop(&mut self) {
        let mut admin = self.admin.lock();
        if !self.is_dead() {
            let _ = self.shutdown_locked(&mut admin);
        }
        let _ = self.ctx().set(&mut admin, Property::Cc, 0);
    }
}
