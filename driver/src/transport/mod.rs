//! The transport seam: how the transport-neutral driver reaches an NVMe
//! controller, at the height of the queue pair (the shape of SPDK's
//! `nvme_transport.c`, where PCIe, TCP and RDMA are siblings).
//!
//! What is the same on every transport stays above this seam: command ids,
//! splitting at MDTS, timeouts, abort, retry, controller enable and reset,
//! and recovery of queues after a reset (`controller`, `io_queue`,
//! `qpair`). What differs sits below it:
//!
//! - **Properties.** CAP, VS, CC and CSTS are BAR0 registers on PCIe
//!   (NVMe 1.4, 3.1) and "properties" read with the Fabrics Property Get
//!   and Set commands on a fabric (NVMe-oF 1.1, 3.5), so enabling,
//!   disabling and waiting for CSTS.RDY can be written once.
//! - **Queues.** PCIe queues are host memory rings that the controller is
//!   told about with Create I/O SQ/CQ (and AQA/ASQ/ACQ for the admin
//!   queue); a fabric queue is a connection opened with Fabrics Connect.
//! - **Data.** PCIe describes a command's data with PRPs in DMA memory; a
//!   fabric with SGL descriptors, data in the capsule, or data PDUs. The
//!   neutral layer hands the transport [`Payload`]s (page-cache frames, a
//!   few bytes out, a buffer in) and never sees an address.
//!
//! - **Liveness.** A fabric association ends when its Keep Alive Timeout
//!   passes without a command and when its admin connection drops, so
//!   the transport asks for Keep Alive and reconnects the admin queue
//!   after a reset; PCIe needs neither.
//!
//! Everything is generic over one [`Transport`] type, so the hot path
//! (`Qpair::submit`, `Qpair::poll`) is statically dispatched and inlined;
//! see `docs/design/driver.md` for why this is a type parameter rather than an
//! enum of transports.

use pollfs_core::dev::FrameArena;
use pollfs_core::units::{FrameId, Nanos};

use crate::error::DriverError;
use crate::qpair::ProtocolError;
use crate::spec::command::SubmissionEntry;
use crate::spec::completion::CompletionEntry;
use crate::spec::identify::IdentifyController;

/// The controller properties the neutral layer uses (NVMe 1.4, 3.1;
/// NVMe-oF 1.1, 3.5 gives the same offsets and sizes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Property {
    /// Controller Capabilities, 64 bits.
    Cap,
    /// Version, 32 bits.
    Vs,
    /// Controller Configuration, 32 bits.
    Cc,
    /// Controller Status, 32 bits.
    Csts,
}

impl Property {
    /// The property's offset (BAR0 offset on PCIe, OFST of Property Get on
    /// a fabric).
    pub fn offset(self) -> usize {
        use crate::spec::regs::offset;
        match self {
            Property::Cap => offset::CAP,
            Property::Vs => offset::VS,
            Property::Cc => offset::CC,
            Property::Csts => offset::CSTS,
        }
    }
    /// True for the 64-bit properties.
    pub fn is_64bit(self) -> bool {
        matches!(self, Property::Cap)
    }
}

/// The data a command carries, as the neutral layer sees it; the
/// transport decides how to describe it to the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// No data.
    None,
    /// Page-cache frames, in order: the device reads them (Write) or
    /// fills them (Read), one 4 KiB frame per memory page.
    Frames(&'a [FrameId]),
    /// A few bytes the host sends (a Dataset Management range list): at
    /// most [`SMALL_PAYLOAD`] bytes.
    Out(&'a [u8]),
    /// A buffer of `len` bytes (at most [`SMALL_PAYLOAD`]) the device
    /// fills (identify data, log pages), read back with
    /// [`Qpair::read_inbound`].
    In(usize),
}

/// Largest [`Payload::Out`] or [`Payload::In`]: one 4 KiB page, the size of
/// identify data.
pub const SMALL_PAYLOAD: usize = 4096;

/// What a transport needs to set up one queue pair's host side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpairSpec {
    /// Queue id: 0 for the admin queue.
    pub qid: u16,
    /// Queue size in entries; at most `entries - 1` commands are in
    /// flight at once, with command ids `0..entries - 1`.
    pub entries: u16,
    /// Most frames one [`Payload::Frames`] carries (sizes per-command
    /// descriptor space such as PRP lists).
    pub max_frames: usize,
}

/// Why a queue pair refused a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QpairError {
    /// No room for another command now (a full submission ring).
    Full,
    /// The payload cannot be described: a frame outside the arena, more
    /// frames than the queue was set up for, or an oversized buffer.
    BadPayload,
    /// The command id is outside `0..entries - 1`, or `resubmit` named an
    /// id that was never submitted.
    BadCid,
    /// The transport itself failed (queue memory, a lost connection); the
    /// queue needs a reconnect.
    Broken,
}

impl core::fmt::Display for QpairError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            QpairError::Full => write!(f, "the submission queue is full"),
            QpairError::BadPayload => write!(f, "the command's data cannot be described"),
            QpairError::BadCid => write!(f, "command id out of range or never submitted"),
            QpairError::Broken => write!(f, "the queue's transport failed"),
        }
    }
}

impl core::error::Error for QpairError {}

/// A transport's own failures, as the neutral layer's errors
/// ([`DriverError`], [`ProtocolError`]) carry them: small, copyable values
/// that say what went wrong.
pub trait TransportError:
    Copy + Eq + core::fmt::Debug + core::fmt::Display + Send + Sync + 'static
{
    /// What failed, as messages name it ("DMA", "NVMe/TCP").
    const NAME: &'static str;
}

/// A transport that cannot fail by itself (the fake under unit tests).
impl TransportError for core::convert::Infallible {
    const NAME: &'static str = "none";
}

/// Runs admin commands synchronously for a transport that needs them to
/// manage queues or properties (PCIe's Create I/O SQ, a fabric's Property
/// Get). The controller implements it over its admin queue; a timeout or
/// a protocol violation there makes the controller reset afterwards.
pub trait AdminCommands<E> {
    /// Submits `sqe` on the admin queue and waits for its completion; an
    /// error status is `DriverError::Admin`.
    fn run(&mut self, sqe: SubmissionEntry) -> Result<CompletionEntry, DriverError<E>>;
}

/// One queue pair's host side: submission and completion of commands
/// whose ids the neutral layer has already chosen.
///
/// A queue pair belongs to one thread (it is `Send`, not shared); nothing
/// on its path takes a lock.
pub trait Qpair: Send + 'static {
    /// The transport's own failures (see [`Transport::Error`]).
    type Error: TransportError;
    /// Queue id.
    fn qid(&self) -> u16;
    /// Queue size in entries (one more than the command ids it has).
    fn entries(&self) -> u16;
    /// Sends `sqe` (its command id already set) with its data. The
    /// transport keeps what it needs to send the same command again with
    /// [`resubmit`](Self::resubmit) until the id is reused.
    fn submit(&mut self, sqe: &SubmissionEntry, payload: Payload<'_>) -> Result<(), QpairError>;
    /// As [`submit`](Self::submit), with the entry `build` returns given
    /// command id `cid`: a transport that keeps the entry (PCIe, to send
    /// it again) builds it straight where it keeps it, with no copy in
    /// between. The default builds it and calls `submit`.
    #[inline]
    fn submit_with(
        &mut self,
        cid: u16,
        build: impl FnOnce() -> SubmissionEntry,
        payload: Payload<'_>,
    ) -> Result<(), QpairError> {
        let mut sqe = build();
        sqe.set_cid(cid);
        self.submit(&sqe, payload)
    }
    /// Sends again the command last submitted with `cid`, with the same
    /// data (a retry after an error status or after a reconnect).
    fn resubmit(&mut self, cid: u16) -> Result<(), QpairError>;
    /// Appends up to `max` new completions to `out` and tells the
    /// controller they are consumed. Each entry has been checked against
    /// what the queue can legitimately see (its queue id, its submission
    /// window); the caller checks the command id. An error means the
    /// controller broke the queue protocol: entries appended before it
    /// are still valid, and the queue needs a reset.
    ///
    /// `now` is the caller's time, for transports that keep timers of
    /// their own (keep-alive on a fabric). PCIe has none; simulated
    /// hardware learns the time from [`Transport::tick`] instead.
    fn poll(
        &mut self,
        now: Nanos,
        max: usize,
        out: &mut alloc::vec::Vec<CompletionEntry>,
    ) -> Result<usize, ProtocolError<Self::Error>>;
    /// As [`poll`](Self::poll), offering each new completion to `take`
    /// as it is read: an entry `take` accepts (`Ok(true)`) is consumed
    /// there; from the first it declines (`Ok(false)`) on, entries are
    /// appended to `out` in order instead, as `poll` appends them. An
    /// error from `take` ends the poll with that error. Returns how many
    /// entries were read.
    ///
    /// A plain success (status all zero) may be offered with DW0 and DW1
    /// unread (zero): PCIe reads them only for entries that need them,
    /// and the I/O queue takes only plain successes, whose DW0 it does
    /// not use. Entries appended to `out` are whole.
    ///
    /// The default polls into `out` and offers the entries afterwards;
    /// a transport that reads completions one by one (PCIe) offers each
    /// as it reads it, and one that keeps a list of ready completions
    /// (TCP) offers them from there, so the usual completion never passes
    /// through `out`.
    #[inline]
    fn poll_each(
        &mut self,
        now: Nanos,
        max: usize,
        out: &mut alloc::vec::Vec<CompletionEntry>,
        take: &mut impl FnMut(CompletionEntry) -> Result<bool, ProtocolError<Self::Error>>,
    ) -> Result<usize, ProtocolError<Self::Error>> {
        let start = out.len();
        let polled = self.poll(now, max, out);
        let mut taken = 0;
        while let Some(&e) = out.get(start + taken) {
            if !take(e)? {
                break;
            }
            taken += 1;
        }
        out.drain(start..start + taken);
        polled
    }
    /// Copies out the bytes the device returned for command `cid`'s
    /// [`Payload::In`] (valid after its completion, until `cid` is reused).
    fn read_inbound(&self, cid: u16, dst: &mut [u8]) -> Result<(), QpairError>;
    /// Forgets everything in flight and returns to the just-created state
    /// (empty rings, a closed connection): the controller has dropped the
    /// queue (a reset) and [`Transport::connect_qpair`] comes next.
    fn reset(&mut self) -> Result<(), QpairError>;
}

/// A way to reach one NVMe controller: its properties, its queue pairs,
/// and the memory the engine's page-cache frames live in.
pub trait Transport: Send + Sync + 'static {
    /// What can go wrong in the transport itself: DMA memory on PCIe, the
    /// connection on TCP. The neutral layer carries it in its errors
    /// without looking inside.
    type Error: TransportError;
    /// This transport's queue pair (the admin queue and I/O queues alike).
    type Qpair: Qpair<Error = Self::Error>;
    /// The page-cache frames, in memory the transport moves data with
    /// (DMA memory on PCIe).
    type Frames: FrameArena + Send + Sync + 'static;

    /// Reads a property. `admin` is the admin queue, which a fabric sends
    /// Property Get on; PCIe reads BAR0 and ignores it. A controller that
    /// has gone away reads as all ones.
    fn get_property(
        &self,
        admin: &mut dyn AdminCommands<Self::Error>,
        property: Property,
    ) -> Result<u64, DriverError<Self::Error>>;
    /// Writes a property (Property Set on a fabric).
    fn set_property(
        &self,
        admin: &mut dyn AdminCommands<Self::Error>,
        property: Property,
        value: u64,
    ) -> Result<(), DriverError<Self::Error>>;
    /// Passes the caller's time to the transport while the controller
    /// waits on it (a CSTS poll, an admin completion). Real hardware
    /// ignores it; the emulated controller releases completions it holds
    /// back to model latency.
    fn tick(&self, _now: Nanos) {}

    /// Sets up the admin queue's host side; it is usable for commands once
    /// [`enable_admin`](Self::enable_admin) and CC.EN=1 have run. On a
    /// fabric this connects the admin queue (Fabrics Connect with QID 0),
    /// which properties need, so it comes first on every transport.
    fn create_admin_qpair(&self, entries: u16) -> Result<Self::Qpair, DriverError<Self::Error>>;
    /// Called with the controller disabled, just before CC.EN is set: PCIe
    /// tells the controller where the admin rings are (AQA, ASQ, ACQ); a
    /// fabric has nothing left to do.
    fn enable_admin(&self, admin: &mut Self::Qpair) -> Result<(), DriverError<Self::Error>>;

    /// After a reset has forgotten the admin queue (`Qpair::reset`) and
    /// before properties are written again: a fabric opens a new
    /// connection and association (Fabrics Connect with QID 0; the old
    /// controller is gone with its connection), trying for a while if the
    /// controller cannot be reached. PCIe has nothing to do: its rings are
    /// attached again by [`enable_admin`](Self::enable_admin).
    fn reconnect_admin(&self, _admin: &mut Self::Qpair) -> Result<(), DriverError<Self::Error>> {
        Ok(())
    }
    /// New associations [`reconnect_admin`](Self::reconnect_admin) made
    /// so far (a fabric's; PCIe makes none).
    fn reconnects(&self) -> u64 {
        0
    }
    /// What Identify Controller reported, once, at bring-up: a fabric
    /// reads the in-capsule data size of its I/O queues (IOCCSZ) there.
    fn identified(&self, _identify: &IdentifyController) {}
    /// How often the controller must hear from the host, in the clock's
    /// units: a fabric controller ends an association whose Keep Alive
    /// Timeout passes without a command (NVMe 1.4, 7.12). `None`: never.
    fn keep_alive_interval(&self) -> Option<u64> {
        None
    }

    /// Allocates the page-cache frames, `count` 4 KiB frames.
    fn alloc_frames(&self, count: u32) -> Result<Self::Frames, DriverError<Self::Error>>;
    /// Sets up an I/O queue pair's host side over `frames`; nothing is
    /// asked of the controller yet.
    fn create_qpair(
        &self,
        spec: QpairSpec,
        frames: &alloc::sync::Arc<Self::Frames>,
    ) -> Result<Self::Qpair, DriverError<Self::Error>>;
    /// Makes the controller serve `qp` (PCIe: Create I/O CQ, then SQ; a
    /// fabric: a connection and Fabrics Connect). Used at creation and to
    /// reconnect after a reset.
    fn connect_qpair(
        &self,
        qp: &mut Self::Qpair,
        admin: &mut dyn AdminCommands<Self::Error>,
    ) -> Result<(), DriverError<Self::Error>>;
    /// Makes the controller drop I/O queue `qid` and whatever it still
    /// holds (PCIe: Delete I/O SQ, then CQ). By id, because a reset drops
    /// queues that other threads own. Best effort: a status error on the
    /// first step does not stop the second.
    fn disconnect_qpair(
        &self,
        qid: u16,
        admin: &mut dyn AdminCommands<Self::Error>,
    ) -> Result<(), DriverError<Self::Error>>;
}

#[cfg(test)]
pub(crate) mod fake;
