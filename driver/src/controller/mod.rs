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

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use spin::Mutex;

use admin::{admin_command, enable, probe, reap_discarded, set_queue_count, Admin};
pub use config::DriverConfig;

use crate::error::{DriverError, Stage};
use crate::hal::{Clock, DmaAllocator, DmaRegion, Registers};
use crate::queue::{CidPool, QueuePair};
use crate::spec::command::{log_page, SubmissionEntry, SQE_SIZE};
use crate::spec::completion::{CompletionEntry, CQE_SIZE};
use crate::spec::identify::{IdentifyController, IdentifyNamespace, IDENTIFY_SIZE};
use crate::spec::regs::{offset, Cap, Csts};

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
    /// Bytes one command may carry (from MDTS).
    pub mdts_bytes: u64,
    /// I/O queues the controller granted.
    pub io_queues: u16,
    /// Entries per I/O queue.
    pub io_entries: u16,
}

/// One NVMe controller: registers, admin queue and shared state of its
/// I/O queues. Shared by every queue through an `Arc`.
pub struct Controller<R: Registers, A: DmaAllocator> {
    regs: R,
    dma: A,
    clock: Box<dyn Clock>,
    config: DriverConfig,
    info: ControllerInfo,
    admin: Mutex<Admin<A::Region>>,
    generation: AtomicU64,
    resets_in_a_row: AtomicU32,
    resets: AtomicU32,
    dead: AtomicBool,
}

impl<R: Registers, A: DmaAllocator> core::fmt::Debug for Controller<R, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Controller")
            .field("info", &self.info)
            .field("generation", &self.generation)
            .field("dead", &self.dead)
            .finish_non_exhaustive()
    }
}

impl<R: Registers, A: DmaAllocator> Controller<R, A> {
    /// Brings the controller up: reset, admin queue, enable, identify the
    /// controller and namespace, and negotiate the number of I/O queues.
    pub fn new(
        regs: R,
        dma: A,
        clock: Box<dyn Clock>,
        config: DriverConfig,
    ) -> Result<Self, DriverError> {
        let raw_cap = regs.read64(offset::CAP);
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
        let admin_entries = config.admin_entries.clamp(2, max_entries);
        let n = usize::from(admin_entries);
        let qp = QueuePair::new(
            0,
            admin_entries,
            dma.alloc(n * SQE_SIZE)?,
            dma.alloc(n * CQE_SIZE)?,
            cap.doorbell_stride(),
        )?;
        let mut admin = Admin {
            qp,
            cids: CidPool::new(admin_entries - 1),
            discard: vec![false; n],
            buf: dma.alloc(IDENTIFY_SIZE)?,
            free_qids: Vec::new(),
        };
        let probed = enable(&regs, &*clock, cap, &admin.qp)
            .and_then(|()| probe(&regs, &*clock, &config, &mut admin));
        let (identify, namespace, granted) = match probed {
            Ok(p) => p,
            Err(e) => {
                // Stop the controller before its admin rings are freed.
                regs.write32(offset::CC, 0);
                return Err(e);
            }
        };
        let version = regs.read32(offset::VS);
        admin.free_qids = (1..=granted).rev().collect();
        // "No limit" (MDTS 0) and huge limits are capped at what the engine
        // may ask for, so per-command PRP list space stays bounded.
        let cap_bytes = config
            .max_transfer
            .map_or(1 << 20, u64::from)
            .max(MPS as u64);
        let mdts_bytes = identify.max_transfer(cap.mps_min_shift(), cap_bytes);
        if mdts_bytes < MPS as u64 {
            regs.write32(offset::CC, 0);
            return Err(DriverError::Unsupported("MDTS below one page"));
        }
        let info = ControllerInfo {
            cap,
            version,
            identify,
            namespace,
            mdts_bytes,
            io_queues: granted,
            io_entries: config.io_entries.clamp(2, max_entries),
        };
        Ok(Controller {
            regs,
            dma,
            clock,
            config,
            info,
            admin: Mutex::new(admin),
            generation: AtomicU64::new(0),
            resets_in_a_row: AtomicU32::new(0),
            resets: AtomicU32::new(0),
            dead: AtomicBool::new(false),
        })
    }

    /// What bring-up learned.
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    /// The configuration in force.
    pub fn config(&self) -> &DriverConfig {
        &self.config
    }
    /// The register interface.
    pub fn regs(&self) -> &R {
        &self.regs
    }
    /// The DMA allocator.
    pub fn dma(&self) -> &A {
        &self.dma
    }
    /// Bumped by every reset.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
    /// Resets performed so far.
    pub fn resets(&self) -> u32 {
        self.resets.load(Ordering::Relaxed)
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
    /// True if CSTS shows a fatal controller error (or the device is gone).
    pub fn is_fatal(&self) -> bool {
        let csts = self.regs.read32(offset::CSTS);
        csts == u32::MAX || Csts(csts).fatal()
    }

    /// Runs one admin command synchronously. A protocol violation or a
    /// timeout on the admin queue resets the controller, since the admin
    /// queue can no longer be trusted.
    pub fn admin(&self, sqe: SubmissionEntry) -> Result<CompletionEntry, DriverError> {
        if self.is_dead() {
            return Err(DriverError::Dead);
        }
        let seen = self.generation();
        let result = {
            let mut admin = self.admin.lock();
            admin_command(
                &self.regs,
                &*self.clock,
                self.config.admin_timeout,
                &mut admin,
                sqe,
            )
        };
        self.after_admin(seen, result)
    }

    fn after_admin<T>(&self, seen: u64, r: Result<T, DriverError>) -> Result<T, DriverError> {
        if let Err(DriverError::Protocol(_) | DriverError::Timeout(Stage::Admin)) = r {
            let _ = self.reset(seen);
        }
        r
    }

    /// Reads `dst.len()` bytes (at most 4 KiB, a multiple of 4) of log page
    /// `lid` (Get Log Page, 5.14) for all namespaces.
    pub fn get_log_page(&self, lid: u8, dst: &mut [u8]) -> Result<(), DriverError> {
        if self.is_dead() {
            return Err(DriverError::Dead);
        }
        let seen = self.generation();
        let len = dst.len().min(IDENTIFY_SIZE);
        let result = {
            let mut admin = self.admin.lock();
            admin.buf.fill(0, IDENTIFY_SIZE, 0)?;
            let buf = admin.buf.iova().0;
            let sqe = SubmissionEntry::get_log_page(lid, 0xffff_ffff, (len / 4) as u32, buf);
            admin_command(
                &self.regs,
                &*self.clock,
                self.config.admin_timeout,
                &mut admin,
                sqe,
            )
            .and_then(|_| Ok(admin.buf.read(0, &mut dst[..len])?))
        };
        self.after_admin(seen, result)
    }

    /// The SMART / Health log (512 bytes).
    pub fn smart_log(&self) -> Result<[u8; 512], DriverError> {
        let mut b = [0u8; 512];
        self.get_log_page(log_page::SMART, &mut b)?;
        Ok(b)
    }

    /// Takes an I/O queue id.
    pub fn alloc_qid(&self) -> Result<u16, DriverError> {
        self.admin
            .lock()
            .free_qids
            .pop()
            .ok_or(DriverError::NoQueues)
    }
    /// Returns an I/O queue id.
    pub fn free_qid(&self, qid: u16) {
        self.admin.lock().free_qids.push(qid);
    }

    /// Creates the device side of an I/O queue pair over `qp`'s rings:
    /// CQ first, then the SQ bound to it (5.3, 5.4).
    pub fn create_io_queue(&self, qp: &QueuePair<A::Region>) -> Result<(), DriverError> {
        let qid = qp.qid();
        self.admin(SubmissionEntry::create_io_cq(
            qid,
            qp.entries(),
            qp.cq_iova(),
        ))?;
        let sq = SubmissionEntry::create_io_sq(qid, qp.entries(), qp.sq_iova(), qid);
        if let Err(e) = self.admin(sq) {
            let _ = self.admin(SubmissionEntry::delete_io_cq(qid));
            return Err(e);
        }
        Ok(())
    }
    /// Deletes an I/O queue pair from the device: SQ first (which aborts
    /// whatever it still holds), then its CQ.
    pub fn delete_io_queue(&self, qid: u16) -> Result<(), DriverError> {
        self.admin(SubmissionEntry::delete_io_sq(qid))?;
        self.admin(SubmissionEntry::delete_io_cq(qid))?;
        Ok(())
    }

    /// Sends Abort for `cid` on `sqid` without waiting for its result; the
    /// aborted command itself completes (or not) on its own queue.
    pub fn send_abort(&self, sqid: u16, cid: u16) -> bool {
        if self.is_dead() {
            return false;
        }
        let mut admin = self.admin.lock();
        let _ = reap_discarded(&self.regs, &mut admin);
        let Some(acid) = admin.cids.alloc() else {
            return false;
        };
        let mut sqe = SubmissionEntry::abort(sqid, cid);
        sqe.set_cid(acid);
        if let Some(d) = admin.discard.get_mut(usize::from(acid)) {
            *d = true;
        }
        if admin.qp.submit(&self.regs, &sqe).is_err() {
            admin.cids.release(acid);
            return false;
        }
        true
    }

    /// Drains completions of fire-and-forget admin commands.
    pub fn reap_admin(&self) -> Result<(), DriverError> {
        if let Some(mut admin) = self.admin.try_lock() {
            reap_discarded(&self.regs, &mut admin)?;
        }
        Ok(())
    }

    /// Resets the controller if nobody has since generation `seen`:
    /// disable, re-create the admin queue, enable, renegotiate queues.
    /// After `max_resets` resets in a row without a successful I/O the
    /// controller is declared dead.
    pub fn reset(&self, seen: u64) -> Result<(), DriverError> {
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
        if in_a_row >= self.config.max_resets {
            self.dead.store(true, Ordering::Release);
            // Leave the controller disabled so it stops touching memory.
            self.regs.write32(offset::CC, 0);
            return Err(DriverError::Dead);
        }
        let result = self.reinit(&mut admin);
        if result.is_err() {
            self.regs.write32(offset::CC, 0);
            if in_a_row + 1 >= self.config.max_resets {
                self.dead.store(true, Ordering::Release);
            }
        }
        result
    }

    fn reinit(&self, admin: &mut Admin<A::Region>) -> Result<(), DriverError> {
        self.delete_live_queues(admin);
        admin.qp.reset()?;
        admin.cids = CidPool::new(admin.qp.entries() - 1);
        admin.discard.fill(false);
        // CC.EN 1 -> 0 resets the controller (7.3.2).
        self.regs.write32(offset::CC, 0);
        enable(&self.regs, &*self.clock, self.info.cap, &admin.qp)?;
        let want = self.info.io_queues;
        let granted = set_queue_count(
            &self.regs,
            &*self.clock,
            self.config.admin_timeout,
            admin,
            want,
        )?;
        if granted < want {
            return Err(DriverError::NoQueues);
        }
        Ok(())
    }
}

impl<R: Registers, A: DmaAllocator> Controller<R, A> {
    /// Before a reset of a controller that still answers: deletes the I/O
    /// queues the driver created (SQ, which makes the device finish or
    /// abort what it holds, then CQ), so nothing is in flight inside the
    /// device when CC.EN drops. Some devices misbehave when their queues
    /// are live across a disable (QEMU 7.2 frees the queues under
    /// in-flight block I/O and crashes; some SSDs have been reported to
    /// hang). Best effort: a status error moves on to the next queue, any
    /// other failure (timeout, protocol violation) stops here and the reset
    /// proceeds anyway. The queues' owners resubmit after the reset
    /// whatever they had not reaped, as before.
    fn delete_live_queues(&self, admin: &mut Admin<A::Region>) {
        if self.is_fatal() || !Csts(self.regs.read32(offset::CSTS)).ready() {
            return;
        }
        // Allocated ids; one whose creation failed just gets a status error.
        let live: Vec<u16> = (1..=self.info.io_queues)
            .filter(|q| !admin.free_qids.contains(q))
            .collect();
        for qid in live {
            for sqe in [
                SubmissionEntry::delete_io_sq(qid),
                SubmissionEntry::delete_io_cq(qid),
            ] {
                let r = admin_command(
                    &self.regs,
                    &*self.clock,
                    self.config.admin_timeout,
                    admin,
                    sqe,
                );
                match r {
                    Ok(_) | Err(DriverError::Admin { .. }) => {}
                    Err(_) => return,
                }
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
        let _admin = self.admin.lock();
        let cc = self.regs.read32(offset::CC);
        self.regs.write32(offset::CC, (cc & !(3 << 14)) | (1 << 14));
        let until = admin::deadline(&*self.clock, self.info.cap.timeout_ns().max(500_000_000));
        loop {
            let csts = self.regs.read32(offset::CSTS);
            if csts == u32::MAX || Csts(csts).fatal() {
                return false;
            }
            if csts & (3 << 2) == Csts::SHST_COMPLETE {
                return true;
            }
            let now = self.clock.now();
            self.regs.tick(now);
            if now > until {
                return false;
            }
            core::hint::spin_loop();
        }
    }
}

impl<R: Registers, A: DmaAllocator> Drop for Controller<R, A> {
    /// Every queue holds the controller, so this runs after the last one is
    /// gone: shut the controller down, then disable it so it stops touching
    /// DMA memory before the admin rings are freed.
    fn drop(&mut self) {
        let _ = self.shutdown();
        self.regs.write32(offset::CC, 0);
    }
}
