//! pollfs devices by name: one [`DeviceSpec`] parsed in one place, and
//! one way to open it, for every front door (the `pollfs` command, the C
//! library, the SQLite VFS).
//!
//! - [`spec`]: the names (`emu`, `ram`, `file:PATH`, `vfio:PCI_ADDR`,
//!   `nvme-tcp://HOST:PORT/NQN`, `mirror:(..)`, `stripe:CHUNK:(..)`), each
//!   mistake a [`SpecProblem`].
//! - [`open`](mod@open): the rules for opening one ([`open()`],
//!   [`open_fs`]): files made, locked, looked at before a format; the
//!   legs of a volume on one frame arena.
//! - [`any`]: [`AnyDevice`], the one concrete device type, and
//!   [`DeviceJob`] to run code at the device's own type; [`given`]: a
//!   device the caller built, passed in as an `AnyDevice` (a test's
//!   recording device under the C library).
//! - [`error`]: [`OpenError`], one kind per mistake.
//! - [`control`]: live administration of an open mirror over a Unix
//!   socket (the protocol, the server, the client).
//! - [`file`] (what is at a `file:` path), [`lock`] (one pollfs process
//!   per device file), [`signature`] (what a device holds) and [`units`]
//!   (sizes and times as fio writes them) serve the rules above and the
//!   command line.
//!
//! `lock` (`flock(2)`) and `control::sys` (`SO_PEERCRED`, `poll(2)`) hold
//! the only unsafe code here.
#![deny(unsafe_code)]

pub mod any;
pub mod control;
pub mod error;
pub mod file;
pub mod given;
pub mod lock;
pub mod open;
pub mod signature;
pub mod spec;
pub mod units;

pub use any::{AnyDevice, AnyFrames, AnyQueue, Closer, DeviceJob, LegKind};
pub use error::{Arenas, DriverFault, OpenError, OpenErrorKind};
pub use open::{new_uuid, open, open_fs, open_fs_with, run, Access, OpenOptions, DEFAULT_SIZE};
pub use spec::{DeviceSpec, Leaf, SpecError, SpecProblem};

#[cfg(test)]
mod open_tests;
