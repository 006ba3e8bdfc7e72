//! The device a filesystem is on, named by a device spec.
//!
//! Only `emu` (an emulated NVMe controller in memory, empty at each
//! open) is opened here for now; the workspace's device-spec crate
//! replaces this opener.

use crate::error::Fail;

/// The device type every handle of this library works on.
pub type Dev = pollfs_driver::EmulatedDevice;

/// Bytes of an emulated device.
const EMU_BYTES: u64 = 2 << 30;

/// Opens the device `spec` names, with `frames` DMA frames (the cache and
/// the engine's metadata).
pub(crate) fn open(spec: &str, frames: u32) -> Result<Dev, Fail> {
    match spec {
        "emu" => pollfs_driver::NvmeDevice::emulated(EMU_BYTES, 4096, frames)
            .map_err(|e| Fail::new(libc::EIO, format!("emulated NVMe device: {e}"))),
        other => Err(Fail::new(
            libc::ENODEV,
            format!("device spec {other:?}: this build opens only `emu`"),
        )),
    }
}
