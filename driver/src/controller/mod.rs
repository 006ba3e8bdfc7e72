//! Controller bring-up, the admin queue and controller reset (NVMe 1.4,
//! 7.6.1 "Initialization" and 7.3 "Resets").
//!
//! Admin work is rare and blocking: each admin routine holds the admin
//! lock, submits one command and polls for its completion with a deadline
//! taken from the caller's [`Clock`]. The I/O path touches the admin queue
//! only to send Abort (fire and forget) and to ask for a reset.
//!
//! A reset bumps the controller's generation. Every I/O queue compares its
//! own generation on its next submit or poll and, if it changed, recreates
//! its rings on the device and resubmits what was in flight; so a reset
//! needs no access to other threads' queues.

mod admin;
mod config;
mod reset;
#[cfg(test)]
mod tests;

use alloc::boxed::Box;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use spin::Mutex;

use admin::{Admin, Ctx, Link};
pub use config::DriverConfig;

use crate::clock::Clock;
use crate::error::{DriverError, Stage};
use crate::spec::command::{log_page, SubmissionEntry};
use crate::spec::completion::CompletionEntry;
use crate::spec::identify::{IdentifyController, IdentifyNamespace, IDENTIFY_SIZE};
use crate::spec::protection::Protection;
use crate::spec::regs::{Cap, Csts};
use crate::transport::{Payload, Property, Qpair, Transport};
use pollfs_core::units::Nanos;
use pollfs_core::DeviceHealth;

/// Memory page size the driver uses (CC.MPS = 0).
pub const MPS_SHIFT: u32 = 12;
/// `1 << MPS_SHIFT`.
pub const MPS: usize = 1 << MPS_SHIFT;

/// What bring-up learned about the controller and namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    /// Capabilities register.
    pub cap: Cap,
    /// Version register.
    pub version: u32,
    /// Identify Controller data.
    pub identify: IdentifyController,
    /// Identify Namespace data for the chosen namespace.
    pub namespace: IdentifyNamespace,
    /// The namespace's protection information, if it is formatted with
    /// it: every Read, Write and Write Zeroes then carries PRACT and PRCHK
    /// (`spec::protection`).
    pub protection: Option<Protection>,
    /// Bytes one command may carry (from MDTS).
    pub mdts_bytes: u64,
    /// I/O queues the controller granted.
    pub io_queues: u16,
    /// Entries per I/O queue.
    pub io_entries: u16,
}

/// One NVMe controller: its transport, admin queue and the state its I/O
/// queues share. Shared by every queue through an `Arc`.
pub struct Controller<T: Transport> {
    transport: T,
    clock: Box<dyn Clock>,
    config: DriverConfig,
    info: ControllerInfo,
    admin: Mutex<Admin<T::Qpair>>,
    generation: AtomicU64,
    resets_in_a_row: AtomicU32,
    resets: AtomicU32,
    dead: AtomicBool,
    /// Keep Alive period, if the transport needs one, and when the next
    /// Keep Alive is due (caller's time).
    keep_alive: Option<u64>,
    next_keep_alive: AtomicU64,
    /// What the I/O queues met, summed over all of them (counted where it
    /// happens, which is never the usual path), for [`Controller::health`].
    troubles: [AtomicU64; TROUBLES],
}

/// What an I/O queue counts into its controller's [`Controller::health`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trouble {
    /// The queue re-created itself after a reset and sent again what it
    /// had in flight.
    QueueRecovery,
    /// A command hit its deadline.
    Timeout,
    /// A command was sent again after an error status or a reset.
    Retry,
    /// The device broke the protocol.
    ProtocolError,
    /// A command failed an end-to-end protection check (guard,
    /// application or reference tag).
    IntegrityError,
}

const TROUBLES: usize = 5;

impl<T: Transport> core::fmt::Debug for Controller<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Controller")
            .field("info", &self.info)
            .field("generation", &self.generation)
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Controller<T> {
    /// Brings the controller up: admin queue, reset, enable, identify the
    /// controller and namespace, and negotiate the number of I/O queues.
    pub fn new(
        transport: T,
        clock: Box<dyn Clock>,
        config: DriverConfig,
    ) -> Result<Self, DriverError<T::Error>> {
        // The admin queue comes first: a fabric reads properties over it.
        let mut entries = config.admin_entries.clamp(2, 4096);
        let mut admin = Admin::new(transport.create_admin_qpair(entries)?);
        let ctx = Ctx {
            transport: &transport,
            clock: &*clock,
            timeout: config.admin_timeout,
        };
        let raw_cap = ctx.get(&mut admin, Property::Cap)?;
        if raw_cap == u64::MAX {
            return Err(DriverError::DeviceGone);
        }
        let cap = Cap(raw_cap);
        if !cap.supports_nvm_command_set() {
            return Err(DriverError::Unsupported("NVM command set"));
        }
        if cap.mps_min_shift() > MPS_SHIFT || cap.mps_max_shift() < MPS_SHIFT {
            return Err(DriverError::Unsupported("4 KiB memory pages"));
        }
        let max_entries = cap.max_queue_entries().min(4096) as u16;
        if max_entries < 2 {
            return Err(DriverError::Unsupported("queues of two entries"));
        }
        if entries > max_entries {
            entries = max_entries;
            admin = Admin::new(transport.create_admin_qpair(entries)?);
        }
        let probed = ctx
            .enable(&mut admin, cap)
            .and_then(|()| ctx.probe(&mut admin, &config));
        let admin::Probed {
            controller: identify,
            namespace,
            protection,
            granted,
        } = match probed {
            Ok(p) => p,
            Err(e) => {
                // Stop the controller before its admin queue is freed.
                let _ = ctx.set(&mut admin, Property::Cc, 0);
                return Err(e);
            }
        };
        transport.identified(&identify);
        let version = ctx.get32(&mut admin, Property::Vs).unwrap_or(0);
        admin.free_qids = (1..=granted).rev().collect();
        // "No limit" (MDTS 0) and huge limits are capped at what the engine
        // may ask for, so per-command descriptor space stays bounded.
        let cap_bytes = config
            .max_transfer
            .map_or(1 << 20, u64::from)
            .max(MPS as u64);
        let mdts_bytes = identify.max_transfer(cap.mps_min_shift(), cap_bytes);
        if mdts_bytes < MPS as u64 {
            let _ = ctx.set(&mut admin, Property::Cc, 0);
            return Err(DriverError::Unsupported("MDTS below one page"));
        }
        let info = ControllerInfo {
            cap,
            version,
            identify,
            namespace,
            protection,
            mdts_bytes,
            io_queues: granted,
            io_entries: config.io_entries.clamp(2, max_entries),
        };
        let keep_alive = transport.keep_alive_interval();
        Ok(Controller {
            transport,
            clock,
            config,
            info,
            admin: Mutex::new(admin),
            generation: AtomicU64::new(0),
            resets_in_a_row: AtomicU32::new(0),
            resets: AtomicU32::new(0),
            dead: AtomicBool::new(false),
            keep_alive,
            next_keep_alive: AtomicU64::new(0),
            troubles: Default::default(),
        })
    }

    fn ctx(&self) -> Ctx<'_, T> {
        Ctx {
            transport: &self.transport,
            clock: &*self.clock,
            timeout: self.config.admin_timeout,
        }
    }

    /// What bring-up learned.
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    /// The configuration in force.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }
    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }
    /// Bumped by every reset.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    /// Resets performed so far.
    pub fn resets(&self) -> u32 {
        self.resets.load(Ordering::Relaxed)
    }
    /// Counts one `trouble` an I/O queue met.
    pub fn count(&self, trouble: Trouble) {
        self.troubles[trouble as usize].fetch_add(1, Ordering::Relaxed);
    }
    /// Resets, and what the I/O queues and the transport met, so far.
    pub fn health(&self) -> DeviceHealth {
        let t = |k: Trouble| self.troubles[k as usize].load(Ordering::Relaxed);
        DeviceHealth {
            resets: u64::from(self.resets()),
            queue_recoveries: t(Trouble::QueueRecovery),
            timeouts: t(Trouble::Timeout),
            retries: t(Trouble::Retry),
            protocol_errors: t(Trouble::ProtocolError),
            reconnects: self.transport.reconnects(),
        }
    }
    /// Commands that failed an end-to-end protection information check
    /// (each attempt counted, retries included), summed over the I/O
    /// queues. Not part of [`health`](Self::health): the engine's
    /// `DeviceHealth` has no field for it yet.
    pub fn integrity_errors(&self) -> u64 {
        self.troubles[Trouble::IntegrityError as usize].load(Ordering::Relaxed)
    }
    /// True once the controller has been given up on.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }
    /// Records that an I/O succeeded, which ends a run of resets.
    pub fn note_success(&self) {
        if self.resets_in_a_row.load(Ordering::Relaxed) != 0 {
            self.resets_in_a_row.store(0, Ordering::Relaxed);
        }
    }
    /// True if CSTS shows a fatal controller error (or the controller is
    /// gone). While another thread holds the admin queue (which a fabric
    /// reads CSTS through) this answers `false`: that thread is already
    /// talking to the controller, and the next health check asks again.
    pub fn is_fatal(&self) -> bool {
        match self.admin.try_lock() {
            Some(mut admin) => self.fatal_locked(&mut admin),
            None => false,
        }
    }
    fn fatal_locked(&self, admin: &mut Admin<T::Qpair>) -> bool {
        match self.ctx().get32(admin, Property::Csts) {
            Ok(csts) => Csts(csts).fatal(),
            Err(_) => true,
        }
    }

    /// Runs one admin command synchronously. A protocol violation or a
    /// timeout on the admin queue resets the controller, since the admin
    /// queue can no longer be trusted.
    pub fn admin(&self, sqe: SubmissionEntry) -> Result<CompletionEntry, DriverError<T::Error>> {
        self.with_admin(|ctx, admin| ctx.command(admin, sqe, Payload::None, &mut []))
    }

    /// Runs `f` on the locked admin queue, then resets the controller if
    /// `f` left the admin queue untrustworthy.
    fn with_admin<R>(
        &self,
        f: impl FnOnce(&Ctx<'_, T>, &mut Admin<T::Qpair>) -> Result<R, DriverError<T::Error>>,
    ) -> Result<R, DriverError<T::Error>> {
        if self.is_dead() {
            return Err(DriverError::Dead);
        }
        let seen = self.generation();
        let result = {
            let mut admin = self.admin.lock();
            f(&self.ctx(), &mut admin)
        };
        if let Err(DriverError::Protocol(_) | DriverError::Timeout(Stage::Admin)) = result {
            let _ = self.reset(seen);
        }
        result
    }

    /// Reads `dst.len()` bytes (at most 4 KiB, a multiple of 4) of log page
    /// `lid` (Get Log Page, 5.14) for all namespaces.
    pub fn get_log_page(&self, lid: u8, dst: &mut [u8]) -> Result<(), DriverError<T::Error>> {
        let len = dst.len().min(IDENTIFY_SIZE);
        let sqe = SubmissionEntry::get_log_page(lid, 0xffff_ffff, (len / 4) as u32, 0);
        self.with_admin(|ctx, admin| {
            ctx.command(admin, sqe, Payload::In(len), &mut dst[..len])
                .map(drop)
        })
    }

    /// The SMART / Health log (512 bytes).
    pub fn smart_log(&self) -> Result<[u8; 512], DriverError<T::Error>> {
        let mut b = [0u8; 512];
        self.get_log_page(log_page::SMART, &mut b)?;
        Ok(b)
    }

    /// Takes an I/O queue id.
    pub fn alloc_qid(&self) -> Result<u16, DriverError<T::Error>> {
        self.admin
            .lock()
            .free_qids
            .pop()
            .ok_or(DriverError::NoQueues)
    }
    /// Returns an I/O queue id. It goes to the back of the line (ids are
    /// taken from the end): a fabric target tears a queue down after its
    /// connection closes, asynchronously, and refuses a Connect for an id
    /// it still holds.
    pub fn free_qid(&self, qid: u16) {
        self.admin.lock().free_qids.insert(0, qid);
    }

    /// Makes the controller serve the I/O queue pair `qp` (at creation and
    /// after a reset).
    pub fn connect_qpair(&self, qp: &mut T::Qpair) -> Result<(), DriverError<T::Error>> {
        self.with_admin(|ctx, admin| {
            let mut link = Link { ctx, admin };
            ctx.transport.connect_qpair(qp, &mut link)
        })
    }
    /// Makes the controller drop I/O queue `qid`.
    pub fn disconnect_qpair(&self, qid: u16) -> Result<(), DriverError<T::Error>> {
        self.with_admin(|ctx, admin| {
            let mut link = Link { ctx, admin };
            ctx.transport.disconnect_qpair(qid, &mut link)
        })
    }

    /// Sends Abort for `cid` on `sqid` without waiting for its result; the
    /// aborted command itself completes (or not) on its own queue.
    pub fn send_abort(&self, sqid: u16, cid: u16) -> bool {
        if self.is_dead() {
            return false;
        }
        let mut admin = self.admin.lock();
        let _ = self.ctx().reap_discarded(&mut admin);
        Self::fire(&mut admin, SubmissionEntry::abort(sqid, cid))
    }

    /// Passes the caller's time on: to the transport, and, on a transport
    /// that needs Keep Alive, sends one when it is due (fire and forget,
    /// skipped while another thread holds the admin queue). Every I/O
    /// queue's `poll` calls this; an idle device needs
    /// [`NvmeDevice::tick`](crate::NvmeDevice::tick) now and then. A
    /// broken admin queue found here resets the controller.
    // Inlined into every I/O queue's poll: PCIe pays one branch.
    #[inline]
    pub fn tick(&self, now: Nanos) {
        self.transport.tick(now);
        if let Some(every) = self.keep_alive {
            if now.0 >= self.next_keep_alive.load(Ordering::Relaxed) {
                self.keep_alive(now, every);
            }
        }
    }

    #[cold]
    fn keep_alive(&self, now: Nanos, every: u64) {
        if self.is_dead() {
            return;
        }
        let seen = self.generation();
        let broken = {
            let Some(mut admin) = self.admin.try_lock() else {
                return;
            };
            self.next_keep_alive
                .store(now.0.saturating_add(every), Ordering::Relaxed);
            let reaped = self.ctx().reap_discarded(&mut admin);
            // With every admin id taken (discarded Aborts pile up) the
            // next tick tries again.
            reaped.is_err()
                || (admin.cids.available() > 0
                    && !Self::fire(&mut admin, SubmissionEntry::keep_alive()))
        };
        if broken {
            let _ = self.reset(seen);
        }
    }

    /// Submits `sqe` on the admin queue with its result to be discarded.
    fn fire(admin: &mut Admin<T::Qpair>, mut sqe: SubmissionEntry) -> bool {
        let Some(acid) = admin.cids.alloc() else {
            return false;
        };
        sqe.set_cid(acid);
        if let Some(d) = admin.discard.get_mut(usize::from(acid)) {
            *d = true;
        }
        if admin.qp.submit(&sqe, Payload::None).is_err() {
            admin.cids.release(acid);
            if let Some(d) = admin.discard.get_mut(usize::from(acid)) {
                *d = false;
            }
            return false;
        }
        true
    }

    /// Drains completions of fire-and-forget admin commands.
    pub fn reap_admin(&self) -> Result<(), DriverError<T::Error>> {
        if let Some(mut admin) = self.admin.try_lock() {
            self.ctx().reap_discarded(&mut admin)?;
        }
        Ok(())
    }
}
