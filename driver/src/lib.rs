//! pollfs-driver: a polled, user-space NVMe driver behind the engine's
//! block-device seam.
//!
//! Layers, bottom up:
//!
//! - [`spec`]: NVMe 1.4 wire formats: registers, 64-byte submission and
//!   16-byte completion entries, structured status, identify data.
//! - [`transport`]: the seam between what every NVMe transport shares and
//!   what differs: [`Transport`] (properties, creating and connecting
//!   queue pairs, the page-cache frames) and [`transport::Qpair`] (submit
//!   a command with its data, poll completions, reset for a reconnect).
//! - [`pcie`]: NVMe over PCIe: BAR0 registers and DMA memory
//!   ([`pcie::hal`]), rings with phase tags and doorbells, PRP lists,
//!   frames in DMA memory, and the two providers of registers and DMA
//!   memory: an emulated controller (`emu`, feature `emu`, std) and a real
//!   one through VFIO (`vfio`, feature `vfio`, std, Linux).
//! - [`tcp`]: NVMe over TCP, the sibling of `pcie`: PDUs, digests and
//!   queue logic (`no_std`) over non-blocking sockets (`tcp::net`, std),
//!   properties by Fabrics Property Get/Set, queues by Fabrics Connect,
//!   and a test target on loopback (`tcp::target`, feature `tcp-target`,
//!   which no product turns on).
//! - [`auth`]: NVMe in-band authentication (DH-HMAC-CHAP) for fabrics
//!   queues: `DHHC-1` secrets, SHA-2 HMACs, the RFC 7919 groups and the
//!   host's side of the exchange, with no I/O (the wire formats are in
//!   `spec::auth`; the TCP transport runs it after Connect).
//! - [`tls`]: TLS 1.3 with a pre-shared key for NVMe/TCP: the PSK
//!   interchange form and derivation (`no_std`), the handshake and
//!   records over the system's OpenSSL (`tls::channel`, feature `tls`;
//!   without it a name asking for TLS fails with `TlsError::NotBuilt`).
//! - [`qpair`]: command ids and queue protocol violations, per queue pair.
//! - [`controller`]: bring-up through properties, the admin queue, abort,
//!   reset and shutdown.
//! - [`io_queue`]: engine commands to NVMe commands: splitting beyond MDTS,
//!   timeouts from caller time, retry, reconnection after reset.
//! - [`device`]: [`NvmeDevice`], the `pollfs_core::dev::BlockDevice`.
//!
//! Everything from `qpair` up is transport-neutral and generic over one
//! [`Transport`] type, statically dispatched; it names no transport, and
//! its errors carry the transport's own as an opaque
//! [`Transport::Error`]. Every value read from the
//! device is validated before use; a device that lies gets an error, never
//! a panic or an out-of-bounds access. The crate is `no_std` + `alloc`
//! without `std` (which `emu` and `vfio` imply), and has no unsafe code
//! outside the VFIO backend's memory-mapping and system-call modules, the
//! TCP transport's socket calls, the emulated controller's DMA arena and
//! the page copy.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]
// Unsafe code is confined to five leaf modules: the VFIO backend's two
// (`pcie::vfio::mapping`, `pcie::vfio::sys`), the TCP socket calls
// (`tcp::sys`), the emulated controller's DMA arena (`pcie::emu::pages`)
// and the page copy (`pcie::page_copy`), all under `std` (`emu` implies
// it), which opt in with `allow(unsafe_code)`.
#![cfg_attr(not(feature = "std"), forbid(unsafe_code))]
#![cfg_attr(feature = "std", deny(unsafe_code))]

extern crate alloc;

pub mod auth;
pub mod clock;
pub mod controller;
pub mod device;
pub mod errno;
pub mod error;
pub mod io_queue;
pub mod pcie;
pub mod qpair;
pub mod spec;
pub mod tcp;
pub mod tls;
pub mod transport;

// The PCIe transport's two providers keep their short paths: the tools and
// tests name them constantly.
#[cfg(feature = "emu")]
pub use pcie::emu;
#[cfg(all(feature = "vfio", target_os = "linux"))]
pub use pcie::vfio;

pub use clock::Clock;
pub use controller::{Controller, ControllerInfo, DriverConfig};
pub use device::NvmeDevice;
pub use errno::Errno;
pub use error::DriverError;
pub use io_queue::{NvmeQueue, QueueStats};
pub use pcie::{NvmeFrames, PcieTransport};
pub use tcp::{TcpOptions, TcpTransport};
pub use transport::Transport;

#[cfg(feature = "emu")]
pub use emu::{EmuConfig, EmuController, EmuFrames, EmuMemory, EmulatedDevice};
