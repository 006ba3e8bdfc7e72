//! Filesystems for tests.

use pollfs_core::dev::fault::{FaultPlan, FaultyDevice};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::{Config, Fs};
use pollfs_driver::{EmulatedDevice, NvmeDevice};

/// A hosted configuration: waiting threads yield the CPU instead of
/// spinning, which matters when tests run more threads than cores. Idle
/// inodes are looked at after every other use (`idle_inodes`), so the
/// tests' few files leave memory and are built again from the durable
/// view as often as a large filesystem's do.
pub fn config(cache_pages: u32) -> Config {
    Config {
        cache_pages,
        idle_inodes: 2,
        ..pollfs_hosted::config()
    }
}

/// A filesystem on the emulated NVMe controller, driven by the real driver,
/// wrapped in a fault plan.
pub fn faulty_nvme_fs(
    bytes: u64,
    block_size: u32,
    cache_pages: u32,
) -> (Fs<FaultyDevice<EmulatedDevice>>, FaultPlan) {
    let nvme = NvmeDevice::emulated(bytes, block_size, cache_pages).expect("emulated nvme");
    let plan = FaultPlan::new();
    let fs = Fs::new(FaultyDevice::new(nvme, plan.clone()), config(cache_pages)).expect("mount");
    (fs, plan)
}

/// A filesystem on a RAM device of `bytes` bytes with `block_size`-byte
/// blocks, a cache of `cache_pages` pages, and a fault plan.
pub fn faulty_fs(
    bytes: u64,
    block_size: u32,
    cache_pages: u32,
) -> (Fs<FaultyDevice<RamDevice>>, FaultPlan) {
    let ram = RamDevice::new(bytes, block_size, cache_pages).expect("ram device");
    let plan = FaultPlan::new();
    let fs = Fs::new(FaultyDevice::new(ram, plan.clone()), config(cache_pages)).expect("mount");
    (fs, plan)
}

/// A filesystem on a RAM device.
pub fn ram_fs(bytes: u64, cache_pages: u32) -> Fs<RamDevice> {
    let ram = RamDevice::new(bytes, 4096, cache_pages).expect("ram device");
    Fs::new(ram, config(cache_pages)).expect("mount")
}

/// fsck of `dev` (the hosted clock, yielding while it waits): it must
/// find no problem. Returns its report.
pub fn fsck_clean<D: pollfs_core::dev::BlockDevice>(dev: &D) -> pollfs_core::persist::CheckReport {
    let report = pollfs_core::persist::check(
        dev,
        pollfs_core::hosted::monotonic_clock,
        std::thread::yield_now,
    )
    .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    report
}
