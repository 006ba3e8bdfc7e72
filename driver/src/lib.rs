//! pollfs-driver: a polled, user-space NVMe driver behind the engine's
//! block-device seam.
//!
//! Layers, bottom up:
//!
//! - [`hal`]: the hardware boundary: register access ([`hal::Registers`]),
//!   DMA memory ([`hal::DmaAllocator`], [`hal::DmaRegion`]) and the
//!   caller's clock. Everything above is generic over it.
//! - [`spec`]: NVMe 1.4 wire formats: registers, 64-byte submission and
//!   16-byte completion entries, structured status, identify data.
//! - [`prp`]: describing a transfer's memory pages to the device.
//! - [`words`]: byte access to shared DMA memory through atomic words.
//! - [`queue`]: one SQ/CQ ring pair, phase tags, doorbells, command ids.
//! - [`controller`]: bring-up, the admin queue, abort and reset.
//! - [`io_queue`]: engine commands to NVMe commands: splitting beyond MDTS,
//!   timeouts from caller time, retry, recovery after reset.
//! - [`device`]: [`NvmeDevice`], the `pollfs_core::dev::BlockDevice`.
//! - `emu` (feature `emu`, std): an emulated controller over plain memory,
//!   with fault knobs, and `NvmeDevice::emulated`.
//! - `vfio` (feature `vfio`, std, Linux): BAR0 and DMA memory through VFIO,
//!   and `NvmeDevice::vfio`.
//!
//! Every value read from the device is validated before use; a device that
//! lies gets an error, never a panic or an out-of-bounds access. The core
//! is `no_std` + `alloc` and has no unsafe code; the only unsafe code is in
//! the VFIO backend's memory-mapping and system-call modules.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]
// Unsafe code is confined to the VFIO backend's two leaf modules
// (`vfio::mapping`, `vfio::sys`), which opt in with `allow(unsafe_code)`.
#![cfg_attr(not(feature = "vfio"), forbid(unsafe_code))]
#![cfg_attr(feature = "vfio", deny(unsafe_code))]

extern crate alloc;

pub mod controller;
pub mod device;
pub mod error;
pub mod hal;
pub mod io_queue;
pub mod prp;
pub mod queue;
pub mod spec;
pub mod words;

#[cfg(feature = "emu")]
pub mod emu;
#[cfg(all(feature = "vfio", target_os = "linux"))]
pub mod vfio;

pub use controller::{Controller, ControllerInfo, DriverConfig};
pub use device::{NvmeDevice, NvmeFrames};
pub use error::DriverError;
pub use io_queue::{NvmeQueue, QueueStats};

#[cfg(feature = "emu")]
pub use emu::{EmuConfig, EmuController, EmuMemory, EmulatedDevice};
