//! [`TcpTransport`]: a controller behind NVMe/TCP connections.
//!
//! - **Properties** are read and written with Fabrics Property Get and
//!   Set on the admin queue (NVMe-oF 1.1, 3.5 and 3.6), so the neutral
//!   controller code enables, checks and shuts down the controller as it
//!   does on PCIe.
//! - **Queues** are connections: a TCP connection, ICReq/ICResp, then
//!   Fabrics Connect (3.3). The admin queue connects first (properties
//!   need it) and learns the controller id its I/O queues then connect to.
//! - **Reset** drops every connection; the admin queue reconnects (a new
//!   association, trying for `reconnect_timeout` while the target is
//!   unreachable), the I/O queues follow when their owners notice.
//! - **Authentication**: when a Connect response asks for it
//!   (AUTHREQ.ATR), the queue runs DH-HMAC-CHAP ([`crate::auth`]) over
//!   Authentication Send and Receive before anything else, with the keys
//!   in [`TcpOptions::dhchap`]; every connection does, reconnects too.
//!   An authentication failure is final: no reconnect loop retries it.
//! - **Keep Alive** (NVMe/TCP 1.0, 3.4: required): the admin Connect
//!   asks for `kato_ms`, and the controller layer sends Keep Alive at half
//!   that period from the callers' clock.
//!
//! The blocking steps (connecting, ICReq, Connect) run on the transport's
//! own clock with `setup_timeout`, spinning on non-blocking sockets: they
//! happen at bring-up and after a reset only.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pollfs_core::units::Nanos;
use spin::Mutex;

use super::error::TcpError;
use super::frames::TcpFrames;
use super::pdu::IcReq;
use super::qpair::TcpQpair;
use super::stream::{Connector, LinkError};
use crate::auth::{AuthError, DhchapConfig, Exchange};
use crate::clock::Clock;
use crate::error::DriverError;
use crate::qpair::ProtocolError;
use crate::spec::auth::{CONNECT_AUTHREQ_ASCR, CONNECT_AUTHREQ_ATR, RECEIVE_LEN};
use crate::spec::command::SubmissionEntry;
use crate::spec::fabrics::{cattr, ConnectData, Nqn, CNTLID_DYNAMIC, FABRICS_OPCODE};
use crate::spec::identify::IdentifyController;
use crate::tls::psk::TlsPsk;
use crate::transport::{AdminCommands, Payload, Property, Qpair, QpairSpec, Transport};

/// In-capsule data every NVMe/TCP controller accepts on the admin queue
/// (NVMe/TCP 1.0, 3.3, "Capsules": 8,192 bytes).
pub const ADMIN_IN_CAPSULE: u32 = 8192;

/// How to talk to one NVMe/TCP subsystem. Times are in the clock's units
/// (nanoseconds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpOptions {
    /// The subsystem to connect to.
    pub subnqn: Nqn,
    /// This host's NQN.
    pub hostnqn: Nqn,
    /// This host's identifier (Connect data).
    pub hostid: [u8; 16],
    /// Ask for header digests.
    pub header_digest: bool,
    /// Ask for data digests.
    pub data_digest: bool,
    /// HPDA asked for in ICReq (0's based dwords; Linux's target accepts
    /// only 0).
    pub hpda: u8,
    /// Keep Alive Timeout asked for in the admin Connect, milliseconds
    /// (0: none).
    pub kato_ms: u32,
    /// Deadline for connecting one queue (TCP, ICResp, Connect).
    pub setup_timeout: u64,
    /// How long a reset keeps trying to reach the controller again.
    pub reconnect_timeout: u64,
    /// Cap on in-capsule data on I/O queues (the controller's IOCCSZ caps
    /// it too); larger writes go by R2T. Best left at its default, no cap
    /// beyond IOCCSZ: Linux's nvmet-tcp (6.1) waits for in-capsule data
    /// for every write up to its inline size, so a write that size sent
    /// by R2T instead never gets its R2T there.
    pub max_in_capsule: u32,
    /// Ask I/O queues to run without SQ head updates, so a successful read
    /// needs no response capsule (the C2HData SUCCESS flag).
    pub success_flag: bool,
    /// DH-HMAC-CHAP keys, for a controller that requires authentication
    /// (none: such a controller is refused with [`AuthError::NoKey`]).
    pub dhchap: Option<Arc<DhchapConfig>>,
    /// TLS with this pre-shared key on every connection, before ICReq
    /// (none: in the clear). The connector sets the channel up; digests
    /// stay off under it (NVMe/TCP 1.0c, 3.6.1).
    pub tls: Option<Arc<TlsPsk>>,
}

/// The host identifier used when none is given.
const DEFAULT_HOSTID: [u8; 16] = *b"pollfs-host-id01";

impl TcpOptions {
    /// Defaults for subsystem `subnqn`: no digests, a 30 s Keep Alive
    /// Timeout, 5 s to set up a queue, 30 s to get a controller back after
    /// a reset, as much in-capsule data as IOCCSZ allows, the SUCCESS flag
    /// asked for.
    pub fn new(subnqn: Nqn) -> TcpOptions {
        // 68 ASCII bytes: always a valid NQN.
        let hostnqn = default_hostnqn(&DEFAULT_HOSTID).unwrap_or_else(|_| subnqn.clone());
        TcpOptions {
            subnqn,
            hostnqn,
            hostid: DEFAULT_HOSTID,
            header_digest: false,
            data_digest: false,
            hpda: 0,
            kato_ms: 30_000,
            setup_timeout: 5_000_000_000,
            reconnect_timeout: 30_000_000_000,
            max_in_capsule: u32::MAX,
            success_flag: true,
            dhchap: None,
            tls: None,
        }
    }
}

/// The UUID-based NQN for a host id (NVMe 1.4, 7.9:
/// `nqn.2014-08.org.nvmexpress:uuid:` and the UUID in hex).
pub fn default_hostnqn(hostid: &[u8; 16]) -> Result<Nqn, crate::spec::fabrics::NqnError> {
    const PREFIX: &[u8] = b"nqn.2014-08.org.nvmexpress:uuid:";
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = alloc::vec::Vec::with_capacity(PREFIX.len() + 36);
    s.extend_from_slice(PREFIX);
    for (i, b) in hostid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push(b'-');
        }
        s.push(HEX[usize::from(b >> 4)]);
        s.push(HEX[usize::from(b & 15)]);
    }
    Nqn::from_bytes(&s)
}

/// A controller reached through NVMe/TCP connections made by `C`.
pub struct TcpTransport<C: Connector> {
    connector: C,
    options: TcpOptions,
    clock: Box<dyn Clock>,
    /// The controller id the admin Connect returned (the association).
    cntlid: AtomicU32,
    /// In-capsule data allowed on I/O queues, from IOCCSZ.
    io_in_capsule: AtomicU32,
    /// Connections of live I/O queues, so a reset can end them.
    links: Mutex<BTreeMap<u16, C::Handle>>,
    connections: AtomicU64,
    /// New associations after a reset.
    reconnects: AtomicU64,
    /// The next authentication transaction id.
    transaction: AtomicU32,
}

impl<C: Connector> core::fmt::Debug for TcpTransport<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpTransport")
            .field("subnqn", &self.options.subnqn)
            .field("cntlid", &self.cntlid.load(Ordering::Relaxed))
            .field("connections", &self.connections())
            .finish_non_exhaustive()
    }
}

/// A Connect refused for now, not for good: Command Sequence Error
/// (generic 0Ch) or Connect Controller Busy (command specific 81h).
fn busy(status: crate::spec::status::Status) -> bool {
    use crate::spec::status::StatusType;
    matches!(
        (status.sct, status.sc),
        (StatusType::Generic, 0x0c) | (StatusType::CommandSpecific, 0x81)
    )
}

fn tcp(e: TcpError) -> DriverError<TcpError> {
    DriverError::Protocol(ProtocolError::Transport(e))
}

/// True for an authentication failure or a refused secure channel,
/// which trying again cannot mend.
fn final_error(e: &DriverError<TcpError>) -> bool {
    match e {
        DriverError::Protocol(ProtocolError::Transport(TcpError::Auth(_))) => true,
        DriverError::Protocol(ProtocolError::Transport(TcpError::Link(LinkError::Tls(t)))) => {
            t.is_final()
        }
        _ => false,
    }
}

impl<C: Connector> TcpTransport<C> {
    /// A transport connecting through `connector` with `options`;
    /// `clock` bounds its blocking setup steps.
    pub fn new(connector: C, options: TcpOptions, clock: impl Clock + 'static) -> Self {
        TcpTransport {
            connector,
            options,
            clock: Box::new(clock),
            cntlid: AtomicU32::new(u32::from(CNTLID_DYNAMIC)),
            io_in_capsule: AtomicU32::new(0),
            links: Mutex::new(BTreeMap::new()),
            connections: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            transaction: AtomicU32::new(0),
        }
    }
    /// The options in force.
    pub fn options(&self) -> &TcpOptions {
        &self.options
    }
    /// Connections opened so far (each queue's first one and every
    /// reconnect).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
    /// The controller id of the current association.
    pub fn cntlid(&self) -> u16 {
        self.cntlid.load(Ordering::Relaxed) as u16
    }

    fn deadline(&self, span: u64) -> Nanos {
        Nanos(self.clock.now().0.saturating_add(span))
    }

    /// Connects `qp`: TCP, ICReq/ICResp, Fabrics Connect to controller
    /// `cntlid`. Returns the controller id the Connect answered with and
    /// the connection's handle.
    fn establish(
        &self,
        qp: &mut TcpQpair<C::Stream>,
        cntlid: u16,
    ) -> Result<(u16, C::Handle), DriverError<TcpError>> {
        let o = &self.options;
        let _ = qp.reset();
        let (stream, handle) = self
            .connector
            .connect()
            .map_err(|e| tcp(TcpError::Link(e)))?;
        self.connections.fetch_add(1, Ordering::Relaxed);
        qp.attach(
            stream,
            IcReq {
                hpda: o.hpda.min(super::pdu::MAX_PDA),
                hdgst: o.header_digest,
                ddgst: o.data_digest,
                maxr2t: 0,
            },
        );
        let until = self.deadline(o.setup_timeout);
        self.wait(qp, until, |qp| qp.is_ready().then_some(()))?;
        let qid = qp.qid();
        let (flags, kato) = if qid == 0 {
            (0, o.kato_ms)
        } else if o.success_flag {
            (cattr::SQ_FLOW_CONTROL_DISABLE, 0)
        } else {
            (0, 0)
        };
        let sqe = SubmissionEntry::connect(qid, qp.entries(), flags, kato);
        let data = ConnectData {
            hostid: o.hostid,
            cntlid,
            subnqn: o.subnqn.clone(),
            hostnqn: o.hostnqn.clone(),
        }
        .encode();
        qp.submit_own(sqe, Payload::Out(&data))
            .map_err(DriverError::Qpair)?;
        let done = self.wait(qp, until, |qp| qp.take_own_completion())?;
        let status = done.status();
        if !status.is_success() {
            let _ = qp.reset();
            return Err(DriverError::Admin {
                opcode: FABRICS_OPCODE,
                status,
            });
        }
        let authenticated = if done.dw0 & CONNECT_AUTHREQ_ASCR != 0 {
            Err(tcp(TcpError::Auth(AuthError::SecureChannel)))
        } else if done.dw0 & CONNECT_AUTHREQ_ATR != 0 {
            self.authenticate(qp)
        } else {
            Ok(())
        };
        if let Err(e) = authenticated {
            let _ = qp.reset();
            return Err(e);
        }
        Ok((done.connect_cntlid(), handle))
    }

    /// DH-HMAC-CHAP on `qp` after its Connect: negotiate, challenge,
    /// reply, success1 and, when the host checks the controller,
    /// success2; AUTH_Failure2 to the controller when the host gives up.
    fn authenticate(&self, qp: &mut TcpQpair<C::Stream>) -> Result<(), DriverError<TcpError>> {
        let o = &self.options;
        let config = o
            .dhchap
            .as_deref()
            .ok_or(tcp(TcpError::Auth(AuthError::NoKey)))?;
        let until = self.deadline(o.setup_timeout);
        let t_id = self.transaction.fetch_add(1, Ordering::Relaxed) as u16;
        let mut ex = Exchange::new(config, o.hostnqn.as_bytes(), o.subnqn.as_bytes(), t_id);
        self.auth_send(qp, until, &ex.negotiate())?;
        let challenge = self.auth_receive(qp, until)?;
        let reply = match ex.reply(&challenge) {
            Ok(r) => r,
            Err(e) => return Err(self.auth_failed(qp, until, &ex, e)),
        };
        // A connection closed from here on is the controller's answer.
        let refused = |e| match e {
            DriverError::Protocol(ProtocolError::Transport(TcpError::Link(
                LinkError::Closed | LinkError::Reset,
            ))) => tcp(TcpError::Auth(AuthError::ClosedAfterReply)),
            e => e,
        };
        self.auth_send(qp, until, &reply).map_err(refused)?;
        let success1 = self.auth_receive(qp, until).map_err(refused)?;
        match ex.finish(&success1) {
            Ok(Some(success2)) => self.auth_send(qp, until, &success2),
            Ok(None) => Ok(()),
            Err(e) => Err(self.auth_failed(qp, until, &ex, e)),
        }
    }

    /// The host gives up on `ex` for `e`: it says why in AUTH_Failure2
    /// (best effort), unless the controller gave up first.
    fn auth_failed(
        &self,
        qp: &mut TcpQpair<C::Stream>,
        until: Nanos,
        ex: &Exchange<'_>,
        e: AuthError,
    ) -> DriverError<TcpError> {
        if !matches!(e, AuthError::Refused { .. }) {
            let _ = self.auth_send(qp, until, &ex.failure2(e));
        }
        tcp(TcpError::Auth(e))
    }

    /// Runs the queue's own command `sqe` with `payload` to completion.
    fn own_command(
        &self,
        qp: &mut TcpQpair<C::Stream>,
        until: Nanos,
        sqe: SubmissionEntry,
        payload: Payload<'_>,
    ) -> Result<(), DriverError<TcpError>> {
        qp.submit_own(sqe, payload).map_err(DriverError::Qpair)?;
        let done = self.wait(qp, until, |qp| qp.take_own_completion())?;
        let status = done.status();
        if !status.is_success() {
            return Err(DriverError::Admin {
                opcode: FABRICS_OPCODE,
                status,
            });
        }
        Ok(())
    }

    /// Authentication Send of `msg`.
    fn auth_send(
        &self,
        qp: &mut TcpQpair<C::Stream>,
        until: Nanos,
        msg: &[u8],
    ) -> Result<(), DriverError<TcpError>> {
        let sqe = SubmissionEntry::auth_send(msg.len() as u32);
        self.own_command(qp, until, sqe, Payload::Out(msg))
    }

    /// Authentication Receive: the controller's next message.
    fn auth_receive(
        &self,
        qp: &mut TcpQpair<C::Stream>,
        until: Nanos,
    ) -> Result<Vec<u8>, DriverError<TcpError>> {
        let sqe = SubmissionEntry::auth_receive(RECEIVE_LEN as u32);
        self.own_command(qp, until, sqe, Payload::In(RECEIVE_LEN))?;
        Ok(qp.own_inbound().to_vec())
    }

    /// [`establish`](Self::establish) for an I/O queue, tried again while
    /// the controller answers Command Sequence Error or Controller Busy:
    /// after a queue's connection closes, the target keeps its id until
    /// it has torn the queue down (Linux: "qid has already been created").
    fn establish_io(
        &self,
        qp: &mut TcpQpair<C::Stream>,
    ) -> Result<(u16, C::Handle), DriverError<TcpError>> {
        let until = self.deadline(self.options.setup_timeout);
        loop {
            match self.establish(qp, self.cntlid()) {
                Err(DriverError::Admin { status, .. })
                    if busy(status) && self.clock.now() <= until =>
                {
                    self.connector.pause();
                }
                other => return other,
            }
        }
    }

    /// Services `qp` until `done` gives a value, a fatal error, or `until`.
    fn wait<R>(
        &self,
        qp: &mut TcpQpair<C::Stream>,
        until: Nanos,
        mut done: impl FnMut(&mut TcpQpair<C::Stream>) -> Option<R>,
    ) -> Result<R, DriverError<TcpError>> {
        loop {
            // A controller may answer and close at once (Linux's target
            // after AUTH_Failure1): the answer counts, the close after it
            // fails the next step.
            let serviced = qp.service(usize::MAX);
            if let Some(r) = done(qp) {
                return Ok(r);
            }
            serviced.map_err(tcp)?;
            if self.clock.now() > until {
                qp.fail(TcpError::SetupTimeout);
                return Err(tcp(TcpError::SetupTimeout));
            }
            core::hint::spin_loop();
        }
    }

    /// Connects the admin queue, a new association each time.
    fn connect_admin(&self, qp: &mut TcpQpair<C::Stream>) -> Result<(), DriverError<TcpError>> {
        let (cntlid, _handle) = self.establish(qp, CNTLID_DYNAMIC)?;
        self.cntlid.store(u32::from(cntlid), Ordering::Relaxed);
        Ok(())
    }
}

impl<C: Connector> Transport for TcpTransport<C> {
    type Error = TcpError;
    type Qpair = TcpQpair<C::Stream>;
    type Frames = TcpFrames;

    fn get_property(
        &self,
        admin: &mut dyn AdminCommands<TcpError>,
        property: Property,
    ) -> Result<u64, DriverError<TcpError>> {
        let wide = property.is_64bit();
        let done = admin.run(SubmissionEntry::property_get(
            property.offset() as u32,
            wide,
        ))?;
        let v = done.property_value();
        Ok(if wide { v } else { v & u64::from(u32::MAX) })
    }
    fn set_property(
        &self,
        admin: &mut dyn AdminCommands<TcpError>,
        property: Property,
        value: u64,
    ) -> Result<(), DriverError<TcpError>> {
        admin
            .run(SubmissionEntry::property_set(
                property.offset() as u32,
                property.is_64bit(),
                value,
            ))
            .map(drop)
    }

    fn create_admin_qpair(&self, entries: u16) -> Result<Self::Qpair, DriverError<TcpError>> {
        let mut qp = TcpQpair::new(0, entries, None, 0, ADMIN_IN_CAPSULE);
        self.connect_admin(&mut qp)?;
        Ok(qp)
    }
    fn enable_admin(&self, _admin: &mut Self::Qpair) -> Result<(), DriverError<TcpError>> {
        Ok(())
    }
    /// A new association: the controller the admin queue talked to is
    /// gone with its connection. Retries while the target refuses or
    /// fails, up to `reconnect_timeout`.
    fn reconnect_admin(&self, admin: &mut Self::Qpair) -> Result<(), DriverError<TcpError>> {
        let until = self.deadline(self.options.reconnect_timeout);
        loop {
            match self.connect_admin(admin) {
                Ok(()) => {
                    self.reconnects.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) if final_error(&e) || self.clock.now() > until => return Err(e),
                Err(_) => self.connector.pause(),
            }
        }
    }
    fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }
    fn identified(&self, identify: &IdentifyController) {
        // IOCCSZ counts 16-byte units of the whole capsule, the 64-byte
        // entry included (NVMe/TCP 1.0, Figure 11).
        let capsule = u64::from(identify.ioccsz) * 16;
        let data = capsule
            .saturating_sub(64)
            .min(u64::from(self.options.max_in_capsule));
        self.io_in_capsule.store(data as u32, Ordering::Relaxed);
    }
    fn keep_alive_interval(&self) -> Option<u64> {
        let kato = u64::from(self.options.kato_ms);
        (kato > 0).then_some(kato * 1_000_000 / 2)
    }

    fn alloc_frames(&self, count: u32) -> Result<Self::Frames, DriverError<TcpError>> {
        Ok(TcpFrames::new(count))
    }
    fn create_qpair(
        &self,
        spec: QpairSpec,
        frames: &Arc<Self::Frames>,
    ) -> Result<Self::Qpair, DriverError<TcpError>> {
        Ok(TcpQpair::new(
            spec.qid,
            spec.entries,
            Some(frames.clone()),
            spec.max_frames,
            self.io_in_capsule.load(Ordering::Relaxed),
        ))
    }
    fn connect_qpair(
        &self,
        qp: &mut Self::Qpair,
        _admin: &mut dyn AdminCommands<TcpError>,
    ) -> Result<(), DriverError<TcpError>> {
        let (_, handle) = self.establish_io(qp)?;
        if let Some(old) = self.links.lock().insert(qp.qid(), handle) {
            self.connector.shut(&old);
        }
        Ok(())
    }
    /// Ends the queue's connection; the controller drops the queue with
    /// it (NVMe-oF 1.1 has no command to delete an I/O queue).
    fn disconnect_qpair(
        &self,
        qid: u16,
        _admin: &mut dyn AdminCommands<TcpError>,
    ) -> Result<(), DriverError<TcpError>> {
        if let Some(h) = self.links.lock().remove(&qid) {
            self.connector.shut(&h);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_host_nqn_is_the_uuid_form() {
        let n = default_hostnqn(&[0x12; 16]).unwrap();
        assert_eq!(
            n.as_str(),
            "nqn.2014-08.org.nvmexpress:uuid:12121212-1212-1212-1212-121212121212"
        );
    }
}
