//! The admin queue and the blocking sequences built on it: enabling the
//! controller, identify, queue-count negotiation, and one-command-at-a-time
//! admin submission with a deadline from the caller's clock.

use alloc::vec::Vec;

use pollfs_core::units::Nanos;

use super::config::DriverConfig;
use super::MPS_SHIFT;
use crate::error::{DriverError, Stage};
use crate::hal::{Clock, DmaRegion, Registers};
use crate::queue::{CidPool, ProtocolError, QueuePair};
use crate::spec::command::{cns, SubmissionEntry};
use crate::spec::completion::CompletionEntry;
use crate::spec::identify::{
    active_list_contains, IdentifyController, IdentifyNamespace, IDENTIFY_SIZE,
};
use crate::spec::regs::{offset, Aqa, Cap, Cc, Csts};
use crate::spec::status::Status;

/// The admin queue pair and what travels with it; behind the controller's
/// admin lock.
pub(super) struct Admin<D: DmaRegion> {
    pub qp: QueuePair<D>,
    pub cids: CidPool,
    /// Ids of fire-and-forget commands (Abort) whose results are dropped.
    pub discard: Vec<bool>,
    /// 4 KiB buffer for identify and log data.
    pub buf: D,
    pub free_qids: Vec<u16>,
}

pub(super) fn deadline(clock: &dyn Clock, span: u64) -> Nanos {
    Nanos(clock.now().0.saturating_add(span))
}

/// Polls CSTS until RDY equals `want`, CFS is set, or `deadline` passes.
fn wait_ready<R: Registers>(
    regs: &R,
    clock: &dyn Clock,
    want: bool,
    until: Nanos,
    stage: Stage,
) -> Result<(), DriverError> {
    loop {
        let csts = regs.read32(offset::CSTS);
        if csts == u32::MAX {
            return Err(DriverError::DeviceGone);
        }
        let csts = Csts(csts);
        if want && csts.fatal() {
            return Err(DriverError::Fatal);
        }
        if csts.ready() == want {
            return Ok(());
        }
        let now = clock.now();
        regs.tick(now);
        if now > until {
            return Err(DriverError::Timeout(stage));
        }
        core::hint::spin_loop();
    }
}

/// Clears CC.EN and waits for RDY=0, then programs the admin queue and
/// sets CC.EN with the driver's configuration and waits for RDY=1.
pub(super) fn enable<R: Registers, D: DmaRegion>(
    regs: &R,
    clock: &dyn Clock,
    cap: Cap,
    qp: &QueuePair<D>,
) -> Result<(), DriverError> {
    let to = cap.timeout_ns().max(500_000_000);
    let cc = Cc(regs.read32(offset::CC));
    if cc.enabled() || Csts(regs.read32(offset::CSTS)).ready() {
        regs.write32(offset::CC, cc.0 & !1);
    }
    wait_ready(regs, clock, false, deadline(clock, to), Stage::Disable)?;
    regs.write32(offset::AQA, Aqa::new(qp.entries(), qp.entries()).0);
    regs.write64(offset::ASQ, qp.sq_iova());
    regs.write64(offset::ACQ, qp.cq_iova());
    regs.write32(offset::CC, Cc::for_driver(MPS_SHIFT, true).0);
    wait_ready(regs, clock, true, deadline(clock, to), Stage::Enable)
}

/// Identify controller, active namespaces and the namespace, then
/// negotiate the number of I/O queues.
pub(super) fn probe<R: Registers, D: DmaRegion>(
    regs: &R,
    clock: &dyn Clock,
    config: &DriverConfig,
    admin: &mut Admin<D>,
) -> Result<(IdentifyController, IdentifyNamespace, u16), DriverError> {
    let timeout = config.admin_timeout;
    let mut page = [0u8; IDENTIFY_SIZE];
    let buf = admin.buf.iova().0;
    let sqe = SubmissionEntry::identify(cns::CONTROLLER, 0, buf);
    admin_command(regs, clock, timeout, admin, sqe)?;
    admin.buf.read(0, &mut page)?;
    let identify = IdentifyController::parse(&page)?;
    if config.nsid == 0 || config.nsid > identify.nn {
        return Err(DriverError::Unsupported("namespace id beyond NN"));
    }
    let sqe = SubmissionEntry::identify(cns::ACTIVE_NAMESPACES, 0, buf);
    admin_command(regs, clock, timeout, admin, sqe)?;
    admin.buf.read(0, &mut page)?;
    if !active_list_contains(&page, config.nsid) {
        return Err(DriverError::Unsupported("namespace not active"));
    }
    let sqe = SubmissionEntry::identify(cns::NAMESPACE, config.nsid, buf);
    admin_command(regs, clock, timeout, admin, sqe)?;
    admin.buf.read(0, &mut page)?;
    let namespace = IdentifyNamespace::parse(&page)?;
    let want = config.max_io_queues.clamp(1, u16::MAX - 1);
    let granted = set_queue_count(regs, clock, timeout, admin, want)?;
    Ok((identify, namespace, granted))
}

pub(super) fn set_queue_count<R: Registers, D: DmaRegion>(
    regs: &R,
    clock: &dyn Clock,
    timeout: u64,
    admin: &mut Admin<D>,
    want: u16,
) -> Result<u16, DriverError> {
    let done = admin_command(
        regs,
        clock,
        timeout,
        admin,
        SubmissionEntry::set_num_queues(want, want),
    )?;
    let nsqa = (done.dw0 & 0xffff) as u16;
    let ncqa = (done.dw0 >> 16) as u16;
    // Both fields are 0-based; 0xffff would mean 65536, which is invalid.
    let granted = nsqa.min(ncqa).saturating_add(1).min(want);
    if nsqa == u16::MAX || ncqa == u16::MAX || granted == 0 {
        return Err(DriverError::Unsupported("number of queues"));
    }
    Ok(granted)
}

pub(super) fn reap_discarded<R: Registers, D: DmaRegion>(
    regs: &R,
    admin: &mut Admin<D>,
) -> Result<(), DriverError> {
    let mut any = false;
    let result = loop {
        match admin.qp.pop() {
            Ok(Some(e)) => {
                any = true;
                let cid = e.cid();
                let discard = admin
                    .discard
                    .get(usize::from(cid))
                    .copied()
                    .unwrap_or(false);
                if !discard || !admin.cids.release(cid) {
                    break Err(ProtocolError::UnknownCid(cid).into());
                }
                if let Some(d) = admin.discard.get_mut(usize::from(cid)) {
                    *d = false;
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.into()),
        }
    };
    if any {
        admin.qp.ring_cq(regs);
    }
    result
}

/// Submits `sqe` on the admin queue and polls until it completes, the
/// deadline passes, or the controller breaks protocol.
pub(super) fn admin_command<R: Registers, D: DmaRegion>(
    regs: &R,
    clock: &dyn Clock,
    timeout: u64,
    admin: &mut Admin<D>,
    mut sqe: SubmissionEntry,
) -> Result<CompletionEntry, DriverError> {
    let until = deadline(clock, timeout);
    let cid = loop {
        if let Some(cid) = admin.cids.alloc() {
            break cid;
        }
        reap_discarded(regs, admin)?;
        let now = clock.now();
        regs.tick(now);
        if now > until {
            return Err(DriverError::Timeout(Stage::Admin));
        }
    };
    sqe.set_cid(cid);
    if let Err(e) = admin.qp.submit(regs, &sqe) {
        admin.cids.release(cid);
        return Err(e.into());
    }
    loop {
        let popped = admin.qp.pop();
        match popped {
            Ok(Some(e)) => {
                admin.qp.ring_cq(regs);
                let got = e.cid();
                if !admin.cids.release(got) {
                    return Err(ProtocolError::UnknownCid(got).into());
                }
                let discard = admin.discard.get_mut(usize::from(got));
                match discard {
                    Some(d) if *d => *d = false,
                    _ if got == cid => {
                        let status: Status = e.status();
                        if !status.is_success() {
                            return Err(DriverError::Admin {
                                opcode: sqe.opcode(),
                                status,
                            });
                        }
                        return Ok(e);
                    }
                    _ => return Err(ProtocolError::UnknownCid(got).into()),
                }
            }
            Ok(None) => {
                let now = clock.now();
                regs.tick(now);
                if now > until {
                    // A late completion for it is then expected, not a
                    // protocol violation.
                    if let Some(d) = admin.discard.get_mut(usize::from(cid)) {
                        *d = true;
                    }
                    return Err(DriverError::Timeout(Stage::Admin));
                }
                core::hint::spin_loop();
            }
            Err(e) => return Err(e.into()),
        }
    }
}
