//! The admin queue and the blocking sequences built on it: enabling the
//! controller, identify, queue-count negotiation, and one-command-at-a-time
//! admin submission with a deadline from the caller's clock. All of it
//! goes through the [`Transport`], so it is the same on every transport.

use alloc::vec::Vec;

use pollfs_core::units::Nanos;

use super::config::DriverConfig;
use super::MPS_SHIFT;
use crate::clock::Clock;
use crate::error::{DriverError, Stage};
use crate::qpair::{CidPool, ProtocolError};
use crate::spec::command::{cns, SubmissionEntry};
use crate::spec::completion::CompletionEntry;
use crate::spec::identify::{
    active_list_contains, IdentifyController, IdentifyNamespace, IDENTIFY_SIZE,
};
use crate::spec::protection::Protection;
use crate::spec::regs::{Cap, Cc, Csts};
use crate::spec::status::Status;
use crate::transport::{AdminCommands, Payload, Property, Qpair, QpairError, Transport};

/// What [`Ctx::probe`] learned.
pub struct Probed {
    pub controller: IdentifyController,
    pub namespace: IdentifyNamespace,
    pub protection: Option<Protection>,
    /// I/O queues granted.
    pub granted: u16,
}

/// The admin queue pair and what travels with it; behind the controller's
/// admin lock.
pub(super) struct Admin<Q> {
    pub qp: Q,
    pub cids: CidPool,
    /// Ids of fire-and-forget commands (Abort) whose results are dropped.
    pub discard: Vec<bool>,
    pub free_qids: Vec<u16>,
    /// Completions taken from the queue and not yet looked at.
    pub reaped: Vec<CompletionEntry>,
}

impl<Q: Qpair> Admin<Q> {
    pub fn new(qp: Q) -> Admin<Q> {
        let n = usize::from(qp.entries());
        Admin {
            cids: CidPool::new(qp.entries() - 1),
            qp,
            discard: alloc::vec![false; n],
            free_qids: Vec::new(),
            reaped: Vec::with_capacity(n),
        }
    }
    /// Forgets every command (the controller dropped the queue).
    pub fn forget(&mut self) -> Result<(), DriverError<Q::Error>> {
        self.qp.reset().map_err(qpair_error)?;
        self.cids = CidPool::new(self.qp.entries() - 1);
        self.discard.fill(false);
        self.reaped.clear();
        Ok(())
    }
}

pub(super) fn qpair_error<E>(e: QpairError) -> DriverError<E> {
    DriverError::Qpair(e)
}

/// What every admin sequence needs besides the queue itself.
pub(super) struct Ctx<'a, T> {
    pub transport: &'a T,
    pub clock: &'a dyn Clock,
    /// Deadline for each admin command.
    pub timeout: u64,
}

/// The admin queue, locked, as the transport sees it.
pub(super) struct Link<'a, 'b, T: Transport> {
    pub ctx: &'a Ctx<'b, T>,
    pub admin: &'a mut Admin<T::Qpair>,
}

impl<T: Transport> AdminCommands<T::Error> for Link<'_, '_, T> {
    fn run(&mut self, sqe: SubmissionEntry) -> Result<CompletionEntry, DriverError<T::Error>> {
        self.ctx.command(self.admin, sqe, Payload::None, &mut [])
    }
}

pub(super) fn deadline(clock: &dyn Clock, span: u64) -> Nanos {
    Nanos(clock.now().0.saturating_add(span))
}

impl<T: Transport> Ctx<'_, T> {
    pub fn get(
        &self,
        admin: &mut Admin<T::Qpair>,
        p: Property,
    ) -> Result<u64, DriverError<T::Error>> {
        let mut link = Link { ctx: self, admin };
        self.transport.get_property(&mut link, p)
    }
    /// A 32-bit property; all ones means the controller is gone.
    pub fn get32(
        &self,
        admin: &mut Admin<T::Qpair>,
        p: Property,
    ) -> Result<u32, DriverError<T::Error>> {
        let v = self.get(admin, p)? as u32;
        if v == u32::MAX {
            return Err(DriverError::DeviceGone);
        }
        Ok(v)
    }
    pub fn set(
        &self,
        admin: &mut Admin<T::Qpair>,
        p: Property,
        v: u64,
    ) -> Result<(), DriverError<T::Error>> {
        let mut link = Link { ctx: self, admin };
        self.transport.set_property(&mut link, p, v)
    }

    /// Polls CSTS until RDY equals `want`, CFS is set, or `until` passes.
    fn wait_ready(
        &self,
        admin: &mut Admin<T::Qpair>,
        want: bool,
        until: Nanos,
        stage: Stage,
    ) -> Result<(), DriverError<T::Error>> {
        loop {
            let csts = Csts(self.get32(admin, Property::Csts)?);
            if want && csts.fatal() {
                return Err(DriverError::Fatal);
            }
            if csts.ready() == want {
                return Ok(());
            }
            let now = self.clock.now();
            self.transport.tick(now);
            if now > until {
                return Err(DriverError::Timeout(stage));
            }
            core::hint::spin_loop();
        }
    }

    /// Clears CC.EN and waits for RDY=0, lets the transport attach the
    /// admin queue, then sets CC.EN with the driver's configuration and
    /// waits for RDY=1 (7.6.1).
    pub fn enable(
        &self,
        admin: &mut Admin<T::Qpair>,
        cap: Cap,
    ) -> Result<(), DriverError<T::Error>> {
        let to = cap.timeout_ns().max(500_000_000);
        let cc = Cc(self.get32(admin, Property::Cc)?);
        let ready = Csts(self.get32(admin, Property::Csts)?).ready();
        if cc.enabled() || ready {
            self.set(admin, Property::Cc, u64::from(cc.0 & !1))?;
        }
        let until = deadline(self.clock, to);
        self.wait_ready(admin, false, until, Stage::Disable)?;
        self.transport.enable_admin(&mut admin.qp)?;
        let cc = Cc::for_driver(MPS_SHIFT, true);
        self.set(admin, Property::Cc, u64::from(cc.0))?;
        let until = deadline(self.clock, to);
        self.wait_ready(admin, true, until, Stage::Enable)
    }

    /// Identify controller, active namespaces and the namespace, then
    /// negotiate the number of I/O queues.
    pub fn probe(
        &self,
        admin: &mut Admin<T::Qpair>,
        config: &DriverConfig,
    ) -> Result<Probed, DriverError<T::Error>> {
        let mut page = [0u8; IDENTIFY_SIZE];
        let identify = |cns, nsid| SubmissionEntry::identify(cns, nsid, 0);
        let data = Payload::In(IDENTIFY_SIZE);
        self.command(admin, identify(cns::CONTROLLER, 0), data, &mut page)?;
        let controller = IdentifyController::parse(&page)?;
        if config.nsid == 0 || config.nsid > controller.nn {
            return Err(DriverError::Unsupported("namespace id beyond NN"));
        }
        self.command(admin, identify(cns::ACTIVE_NAMESPACES, 0), data, &mut page)?;
        if !active_list_contains(&page, config.nsid) {
            return Err(DriverError::Unsupported("namespace not active"));
        }
        self.command(
            admin,
            identify(cns::NAMESPACE, config.nsid),
            data,
            &mut page,
        )?;
        let namespace = IdentifyNamespace::parse(&page)?;
        let protection = Protection::parse(&page)?;
        let want = config.max_io_queues.clamp(1, u16::MAX - 1);
        let granted = self.set_queue_count(admin, want)?;
        Ok(Probed {
            controller,
            namespace,
            protection,
            granted,
        })
    }

    pub fn set_queue_count(
        &self,
        admin: &mut Admin<T::Qpair>,
        want: u16,
    ) -> Result<u16, DriverError<T::Error>> {
        let sqe = SubmissionEntry::set_num_queues(want, want);
        let done = self.command(admin, sqe, Payload::None, &mut [])?;
        let nsqa = (done.dw0 & 0xffff) as u16;
        let ncqa = (done.dw0 >> 16) as u16;
        // Both fields are 0-based; 0xffff would mean 65536, which is invalid.
        let granted = nsqa.min(ncqa).saturating_add(1).min(want);
        if nsqa == u16::MAX || ncqa == u16::MAX || granted == 0 {
            return Err(DriverError::Unsupported("number of queues"));
        }
        Ok(granted)
    }

    /// Drains completions of fire-and-forget commands; any other
    /// completion is a protocol violation (nobody is waiting for one).
    pub fn reap_discarded(&self, admin: &mut Admin<T::Qpair>) -> Result<(), DriverError<T::Error>> {
        admin.reaped.clear();
        let now = self.clock.now();
        let max = usize::from(admin.qp.entries());
        let polled = admin.qp.poll(now, max, &mut admin.reaped);
        for i in 0..admin.reaped.len() {
            let cid = admin.reaped[i].cid();
            let discard = admin.discard.get_mut(usize::from(cid));
            match discard {
                Some(d) if *d && admin.cids.release(cid) => *d = false,
                _ => return Err(ProtocolError::UnknownCid(cid).into()),
            }
        }
        polled.map(drop).map_err(DriverError::from)
    }

    /// Submits `sqe` with `payload` on the admin queue and polls until it
    /// completes, the deadline passes, or the controller breaks protocol.
    /// For a [`Payload::In`] command, `inbound` receives the data.
    pub fn command(
        &self,
        admin: &mut Admin<T::Qpair>,
        mut sqe: SubmissionEntry,
        payload: Payload<'_>,
        inbound: &mut [u8],
    ) -> Result<CompletionEntry, DriverError<T::Error>> {
        let until = deadline(self.clock, self.timeout);
        let cid = loop {
            if let Some(cid) = admin.cids.alloc() {
                break cid;
            }
            self.reap_discarded(admin)?;
            let now = self.clock.now();
            self.transport.tick(now);
            if now > until {
                return Err(DriverError::Timeout(Stage::Admin));
            }
        };
        sqe.set_cid(cid);
        if let Err(e) = admin.qp.submit(&sqe, payload) {
            admin.cids.release(cid);
            return Err(qpair_error(e));
        }
        let mut now = self.clock.now();
        loop {
            admin.reaped.clear();
            let polled = admin.qp.poll(now, 1, &mut admin.reaped);
            if let Some(&e) = admin.reaped.first() {
                let got = e.cid();
                if !admin.cids.release(got) {
                    return Err(ProtocolError::UnknownCid(got).into());
                }
                match admin.discard.get_mut(usize::from(got)) {
                    Some(d) if *d => *d = false,
                    _ if got == cid => {
                        let status: Status = e.status();
                        if !status.is_success() {
                            return Err(DriverError::Admin {
                                opcode: sqe.opcode(),
                                status,
                            });
                        }
                        if !inbound.is_empty() {
                            admin.qp.read_inbound(cid, inbound).map_err(qpair_error)?;
                        }
                        return Ok(e);
                    }
                    _ => return Err(ProtocolError::UnknownCid(got).into()),
                }
                continue;
            }
            polled?;
            now = self.clock.now();
            self.transport.tick(now);
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
    }
}
