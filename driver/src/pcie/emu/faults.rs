//! Fault knobs of the emulated controller.
//!
//! Each knob models one way real devices misbehave, so that every recovery
//! path of the driver can be driven deterministically from a test.

use crate::spec::status::Status;

/// Ways a hostile controller corrupts what it reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostile {
    /// I/O completions carry a command id that was never submitted.
    BadCid,
    /// I/O completions report an SQ head outside the ring.
    BadSqHead,
    /// I/O completions name another submission queue.
    WrongSqId,
    /// I/O completions are written with the phase tag of the previous pass,
    /// so the host never sees them.
    WrongPhase,
    /// Every I/O completion is posted twice.
    Duplicate,
    /// Identify data is random bytes.
    GarbageIdentify,
    /// Admin completions carry a command id that was never submitted.
    AdminBadCid,
}

/// The knobs. All default to off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// I/O completions are held until the caller's time (as passed to
    /// `Registers::tick`) is this many nanoseconds past submission.
    pub latency: u64,
    /// Held completions are released newest first.
    pub reorder: bool,
    /// The next this-many I/O commands fail with `error_status` instead of
    /// executing.
    pub fail_io: u32,
    /// The status `fail_io` uses.
    pub error_status: Option<Status>,
    /// The next this-many I/O commands execute but their completions are
    /// swallowed (the command is "stuck" in the device).
    pub drop_io: u32,
    /// Whether Abort can free a stuck command (it then completes with
    /// Command Abort Requested). When false, Abort reports "not aborted".
    pub stuck_abortable: bool,
    /// Malformed completions or identify data.
    pub hostile: Option<Hostile>,
    /// CSTS.RDY never sets after CC.EN=1.
    pub never_ready: bool,
    /// A misdirected read: reads of block `.0` are served from block `.1`
    /// (its data, and its PI on a protected namespace), as by a drive
    /// whose mapping went wrong.
    pub misdirect_read: Option<(u64, u64)>,
}
