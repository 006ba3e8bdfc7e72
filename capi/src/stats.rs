//! The filesystem's counters for C: `pollfs_fs_stats` fills a
//! `PollfsStats`, the engine's [`Stats`] field for field, the gauges
//! `pollfs stat` shows beside them, and the device's and each leg's
//! commands, errors and recoveries. The caller passes the size of the
//! struct it was compiled with; the library fills that many bytes, so a
//! program built against an older header (a shorter struct: fields are
//! only ever added at the end) keeps working with a newer library.

use core::ffi::{c_int, c_void};

use pollfs_core::dev::BlockDevice;
use pollfs_core::{DeviceCounts, Stats};
use pollfs_device::control::stats::Gauges;

use crate::error::{int, Fail};
use crate::fs::{fs_of, PollfsFs};
use crate::raw;

/// A filesystem's counters (they only grow while it is mounted), gauges
/// (the seven fields from `dirty_pages`, read at the same time), and the
/// figures of its device and of each leg of the mirror or stripe it is
/// on, as `pollfs_fs_stats` fills them. Every figure is a `uint64_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollfsStats {
    /// Reads through the file API (cached and direct), each call once.
    pub reads: u64,
    /// Bytes those reads returned.
    pub read_bytes: u64,
    /// Writes through the file API (buffered and direct), each call once.
    pub writes: u64,
    /// Bytes those writes took.
    pub write_bytes: u64,
    /// Syncs of a file or a directory asked for.
    pub syncs: u64,
    /// Page lookups that found the page cached.
    pub cache_hits: u64,
    /// Page lookups that had to fill the page.
    pub cache_misses: u64,
    /// Pages evicted to make room.
    pub evictions: u64,
    /// Pages read ahead of the reader.
    pub readahead_pages: u64,
    /// Read commands sent to the device.
    pub dev_reads: u64,
    /// Bytes read from the device.
    pub dev_read_bytes: u64,
    /// Write commands sent to the device.
    pub dev_writes: u64,
    /// Bytes written to the device.
    pub dev_write_bytes: u64,
    /// Flush commands.
    pub dev_flushes: u64,
    /// Deallocate (trim) commands.
    pub dev_deallocates: u64,
    /// Write-zeroes commands.
    pub dev_write_zeroes: u64,
    /// Times an operation waited for a range, gate or inode lock.
    pub lock_waits: u64,
    /// Times a writer was throttled by the dirty limit.
    pub dirty_throttles: u64,
    /// Device commands that failed.
    pub dev_errors: u64,
    /// Metadata log writes.
    pub log_writes: u64,
    /// Bytes of those log writes.
    pub log_bytes: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Bytes of checkpoint chains written.
    pub checkpoint_bytes: u64,
    /// Time spent writing checkpoints, in nanoseconds.
    pub checkpoint_nanos: u64,
    /// Of the checkpoints, those written off the sync path.
    pub background_checkpoints: u64,
    /// Pages read or written by direct I/O.
    pub direct_pages: u64,
    /// Logged pages written home off the sync path.
    pub homed_pages: u64,
    /// Syncs that wrote their file's pages home themselves.
    pub home_on_sync: u64,
    /// Syncs that woke the write-home thread.
    pub home_wakes: u64,
    /// Background steps that failed (tried again later).
    pub background_errors: u64,
    /// Log writes the mount replayed.
    pub replayed_log_writes: u64,
    /// Records those log writes held.
    pub replayed_records: u64,
    /// Gauge: dirty pages in the cache.
    pub dirty_pages: u64,
    /// Gauge: the cache's size in pages.
    pub cache_pages: u64,
    /// Gauge: log blocks in use since the last checkpoint.
    pub log_used_blocks: u64,
    /// Gauge: the log's size in blocks.
    pub log_blocks: u64,
    /// Gauge: blocks (4 KiB) of the data area.
    pub data_blocks: u64,
    /// Gauge: of those, free.
    pub free_blocks: u64,
    /// Gauge: live inodes.
    pub inodes: u64,
    /// The device the filesystem is on: its commands are the engine's
    /// (`dev_*` above), its recoveries the driver's.
    pub device: PollfsDeviceStats,
    /// Legs of the mirror or stripe the filesystem is on (0 on a single
    /// device); `leg[0..legs]` are theirs, by position.
    pub legs: u64,
    /// Each leg's commands (as its volume sent them), errors and
    /// recoveries.
    pub leg: [PollfsDeviceStats; POLLFS_MAX_LEGS],
}

/// Most legs a mirror or a stripe has: the length of `PollfsStats.leg`.
pub const POLLFS_MAX_LEGS: usize = 8;

const _: () = assert!(POLLFS_MAX_LEGS == pollfs_core::volume::MAX_LEGS);

/// One device's commands, errors and recoveries (a `PollfsStats`
/// field). Every field is a `uint64_t` and only grows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollfsDeviceStats {
    /// Read commands.
    pub reads: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write commands.
    pub writes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Flush commands.
    pub flushes: u64,
    /// Deallocate (trim) commands.
    pub deallocates: u64,
    /// Write-zeroes commands.
    pub write_zeroes: u64,
    /// Commands refused or failed.
    pub errors: u64,
    /// Controller resets.
    pub resets: u64,
    /// Queues that re-created themselves after a reset.
    pub queue_recoveries: u64,
    /// Commands that hit their deadline.
    pub timeouts: u64,
    /// Commands sent again after an error status or a reset.
    pub retries: u64,
    /// Replies that broke the NVMe protocol.
    pub protocol_errors: u64,
    /// New associations with a fabric controller (NVMe/TCP).
    pub reconnects: u64,
}

impl PollfsDeviceStats {
    fn of(c: &DeviceCounts) -> PollfsDeviceStats {
        let h = &c.health;
        PollfsDeviceStats {
            reads: c.reads,
            read_bytes: c.read_bytes,
            writes: c.writes,
            write_bytes: c.write_bytes,
            flushes: c.flushes,
            deallocates: c.deallocates,
            write_zeroes: c.write_zeroes,
            errors: c.errors,
            resets: h.resets,
            queue_recoveries: h.queue_recoveries,
            timeouts: h.timeouts,
            retries: h.retries,
            protocol_errors: h.protocol_errors,
            reconnects: h.reconnects,
        }
    }
}

/// The gauges after the counters in [`PollfsStats`].
const GAUGES: usize = 7;

// Every counter of the engine has its field here, and every figure of a
// device in `PollfsDeviceStats`: one added there and not here fails the
// build (both are all `u64`).
const _: () = assert!(
    core::mem::size_of::<PollfsStats>()
        == core::mem::size_of::<Stats>()
            + 8 * GAUGES
            + 8
            + (1 + POLLFS_MAX_LEGS) * core::mem::size_of::<PollfsDeviceStats>()
);
const _: () =
    assert!(core::mem::size_of::<PollfsDeviceStats>() == core::mem::size_of::<DeviceCounts>());

impl PollfsStats {
    /// The counters `s`, gauges zero.
    fn counters(s: &Stats) -> PollfsStats {
        PollfsStats {
            reads: s.reads,
            read_bytes: s.read_bytes,
            writes: s.writes,
            write_bytes: s.write_bytes,
            syncs: s.syncs,
            cache_hits: s.cache_hits,
            cache_misses: s.cache_misses,
            evictions: s.evictions,
            readahead_pages: s.readahead_pages,
            dev_reads: s.dev_reads,
            dev_read_bytes: s.dev_read_bytes,
            dev_writes: s.dev_writes,
            dev_write_bytes: s.dev_write_bytes,
            dev_flushes: s.dev_flushes,
            dev_deallocates: s.dev_deallocates,
            dev_write_zeroes: s.dev_write_zeroes,
            lock_waits: s.lock_waits,
            dirty_throttles: s.dirty_throttles,
            dev_errors: s.dev_errors,
            log_writes: s.log_writes,
            log_bytes: s.log_bytes,
            checkpoints: s.checkpoints,
            checkpoint_bytes: s.checkpoint_bytes,
            checkpoint_nanos: s.checkpoint_nanos,
            background_checkpoints: s.background_checkpoints,
            direct_pages: s.direct_pages,
            homed_pages: s.homed_pages,
            home_on_sync: s.home_on_sync,
            home_wakes: s.home_wakes,
            background_errors: s.background_errors,
            replayed_log_writes: s.replayed_log_writes,
            replayed_records: s.replayed_records,
            ..PollfsStats::default()
        }
    }
}

/// Fills the first `size` bytes of `*out` (pass `sizeof(PollfsStats)`)
/// with the filesystem's counters and gauges; `size` may be less, for a
/// program built against an older, shorter `PollfsStats`, and not more
/// (`-EINVAL`). The counters are summed over every thread's session, so
/// a call costs a lock and a sum, not the threads doing I/O anything.
/// Thread-safe.
///
/// # Safety
/// `fs` is a live handle; `out` points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn pollfs_fs_stats(
    fs: *const PollfsFs,
    out: *mut PollfsStats,
    size: usize,
) -> c_int {
    int("pollfs_fs_stats", || {
        if size > core::mem::size_of::<PollfsStats>() {
            return Err(Fail::inval(
                "size is more than this library's sizeof(PollfsStats)",
            ));
        }
        // SAFETY: the caller's contract.
        let fs = unsafe { fs_of(fs) }?;
        // SAFETY: the caller's contract: `size` writable bytes at `out`.
        let out = unsafe { raw::bytes_mut(out.cast::<c_void>(), size) }?;
        let g = Gauges::of(&fs);
        let stats = fs.stats();
        let dev = fs.device();
        let mut leg = [PollfsDeviceStats::default(); POLLFS_MAX_LEGS];
        let legs = dev.leg_counts();
        for (out, counts) in leg.iter_mut().zip(&legs) {
            *out = PollfsDeviceStats::of(counts);
        }
        let all = PollfsStats {
            device: PollfsDeviceStats::of(&DeviceCounts::of_engine(&stats, dev.health())),
            legs: legs.len().min(POLLFS_MAX_LEGS) as u64,
            leg,
            dirty_pages: g.dirty_pages,
            cache_pages: g.cache_pages,
            log_used_blocks: g.log_used_blocks,
            log_blocks: g.log_blocks,
            data_blocks: g.data_blocks,
            free_blocks: g.free_blocks,
            inodes: g.inodes,
            ..PollfsStats::counters(&stats)
        };
        // SAFETY: `all` is a live local of `size_of::<PollfsStats>()`
        // bytes (all `u64`, so no padding), borrowed for this statement.
        let bytes = unsafe {
            raw::bytes(
                (&all as *const PollfsStats).cast::<c_void>(),
                core::mem::size_of::<PollfsStats>(),
            )
        }?;
        out.copy_from_slice(&bytes[..size]);
        Ok(0)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::file::{pollfs_close, pollfs_fsync, pollfs_pwrite};
    use crate::fs::{pollfs_format, pollfs_open, pollfs_unmount};

    fn stats(fs: *const PollfsFs, size: usize) -> (c_int, PollfsStats) {
        let mut s = PollfsStats::default();
        // SAFETY: a live handle; `s` has `size_of::<PollfsStats>()` >= `size`
        // writable bytes.
        let r = unsafe { pollfs_fs_stats(fs, &mut s, size) };
        (r, s)
    }

    #[test]
    fn the_counters_move_with_writes_and_a_shorter_struct_gets_its_prefix() {
        let full = core::mem::size_of::<PollfsStats>();
        let mut fs = core::ptr::null_mut();
        let mut file = core::ptr::null_mut();
        // SAFETY: C strings, no options, writable outputs; the handles are
        // live until closed below.
        unsafe {
            assert_eq!(
                pollfs_format(c"ram".as_ptr(), core::ptr::null(), &mut fs),
                0
            );
            let flags = libc::O_CREAT | libc::O_RDWR;
            assert_eq!(pollfs_open(fs, c"/a".as_ptr(), flags, 0o644, &mut file), 0);
        }
        let (r, before) = stats(fs, full);
        assert_eq!(r, 0);
        assert!(
            before.cache_pages > 0 && before.log_blocks > 0,
            "{before:?}"
        );
        let data = [5u8; 8192];
        // SAFETY: a live file, `data` readable for its length.
        unsafe {
            assert_eq!(
                pollfs_pwrite(file, data.as_ptr().cast(), data.len(), 0),
                8192
            );
            assert_eq!(pollfs_fsync(file), 0);
        }
        let (_, after) = stats(fs, full);
        assert_eq!(after.writes, before.writes + 1);
        assert_eq!(after.write_bytes, before.write_bytes + 8192);
        assert_eq!(after.syncs, before.syncs + 1);
        assert!(after.log_writes + after.checkpoints > before.log_writes + before.checkpoints);
        // The same figures as the Rust library's, field for field.
        // SAFETY: a live handle.
        let held = unsafe { fs_of(fs) }.unwrap();
        assert_eq!(
            PollfsStats::counters(&held.stats()),
            PollfsStats {
                dirty_pages: 0,
                cache_pages: 0,
                log_used_blocks: 0,
                log_blocks: 0,
                data_blocks: 0,
                free_blocks: 0,
                inodes: 0,
                device: PollfsDeviceStats::default(),
                legs: 0,
                leg: Default::default(),
                ..after
            }
        );
        // The device's commands are the engine's; `ram` is one device.
        assert_eq!(after.device.writes, after.dev_writes);
        assert_eq!(after.device.write_bytes, after.dev_write_bytes);
        assert_eq!((after.device.errors, after.device.resets), (0, 0));
        assert_eq!(after.legs, 0);
        drop(held);
        // An older header's struct: its fields are filled, the rest left.
        let (r, prefix) = stats(fs, 2 * 8);
        assert_eq!(r, 0);
        assert_eq!(
            (prefix.reads, prefix.read_bytes),
            (after.reads, after.read_bytes)
        );
        assert_eq!(prefix.writes, 0, "past the size given");
        assert_eq!(stats(fs, full + 8).0, -libc::EINVAL);
        // SAFETY: live handles, given up.
        unsafe {
            assert_eq!(pollfs_close(file), 0);
            assert_eq!(pollfs_unmount(fs), 0);
        }
    }

    #[test]
    fn each_leg_of_a_mirror_has_its_figures_in_its_place() {
        let mut fs = core::ptr::null_mut();
        let mut file = core::ptr::null_mut();
        // SAFETY: C strings, no options, writable outputs; the handles are
        // live until closed below.
        unsafe {
            assert_eq!(
                pollfs_format(c"mirror:(ram,ram)".as_ptr(), core::ptr::null(), &mut fs),
                0
            );
            let flags = libc::O_CREAT | libc::O_RDWR;
            assert_eq!(pollfs_open(fs, c"/a".as_ptr(), flags, 0o644, &mut file), 0);
        }
        let (_, before) = stats(fs, core::mem::size_of::<PollfsStats>());
        assert_eq!(before.legs, 2);
        // SAFETY: a live handle; 8 KiB readable bytes.
        unsafe {
            assert_eq!(
                pollfs_pwrite(file, [6u8; 8192].as_ptr().cast(), 8192, 0),
                8192
            );
            assert_eq!(pollfs_fsync(file), 0);
        }
        let (r, after) = stats(fs, core::mem::size_of::<PollfsStats>());
        assert_eq!(r, 0);
        for i in 0..2 {
            let (b, a) = (before.leg[i], after.leg[i]);
            // Every write the engine sent reached each leg.
            assert!(
                a.write_bytes - b.write_bytes >= after.dev_write_bytes - before.dev_write_bytes,
                "leg {i}: {a:?}"
            );
            assert_eq!(a.errors, 0);
        }
        assert_eq!(after.leg[2], PollfsDeviceStats::default(), "no third leg");
        // SAFETY: live handles, given up.
        unsafe {
            assert_eq!(pollfs_close(file), 0);
            assert_eq!(pollfs_unmount(fs), 0);
        }
    }
}
