//! Counters a user can read.
//!
//! Each session counts into its own block (one writer, so plain relaxed
//! load-and-store, no shared cache line on the hot path); [`Fs::stats`]
//! sums the blocks of all sessions, live and closed.
//!
//! [`Fs::stats`]: crate::Fs::stats

use core::sync::atomic::{AtomicU64, Ordering};

use crate::dev::CommandKind;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// A snapshot of the engine's counters.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Stats {
            $($(#[$doc])* pub $name: u64,)*
        }

        /// Live counters of one session.
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $($name: AtomicU64,)*
        }

        /// Names of the counters, for printing.
        #[derive(Clone, Copy, Debug)]
        // The replayed counters are set once in the closed sessions' sum
        // at mount, never added to by a session.
        #[allow(non_camel_case_types, dead_code)]
        pub(crate) enum Counter {
            $($name,)*
        }

        impl Counters {
            fn cell(&self, c: Counter) -> &AtomicU64 {
                match c {
                    $(Counter::$name => &self.$name,)*
                }
            }
            pub(crate) fn add_to(&self, s: &mut Stats) {
                $(s.$name += self.$name.load(Ordering::Relaxed);)*
            }
        }

        impl Stats {
            /// `(name, value)` for every counter, in declaration order.
            pub fn fields(&self) -> [(&'static str, u64); [$(stringify!($name)),*].len()] {
                [$((stringify!($name), self.$name)),*]
            }

            /// The difference `self - earlier`, counter by counter.
            pub fn since(&self, earlier: &Stats) -> Stats {
                Stats { $($name: self.$name.wrapping_sub(earlier.$name),)* }
            }
        }
    };
}

counters! {
    /// Reads through the file API (cached and direct), each call once.
    reads,
    /// Bytes those reads returned.
    read_bytes,
    /// Writes through the file API (buffered and direct), each call once.
    writes,
    /// Bytes those writes took.
    write_bytes,
    /// Syncs of a file or a directory asked for.
    syncs,
    /// Page lookups that found the page cached.
    cache_hits,
    /// Page lookups that had to fill the page.
    cache_misses,
    /// Pages evicted to make room.
    evictions,
    /// Pages read ahead of the reader (beyond the page it asked for).
    readahead_pages,
    /// Read commands sent to the device.
    dev_reads,
    /// Bytes read from the device.
    dev_read_bytes,
    /// Write commands sent to the device.
    dev_writes,
    /// Bytes written to the device.
    dev_write_bytes,
    /// Flush commands.
    dev_flushes,
    /// Deallocate (trim) commands.
    dev_deallocates,
    /// Write-zeroes commands.
    dev_write_zeroes,
    /// Times an operation had to wait for a range, gate or inode lock.
    lock_waits,
    /// Times a writer was throttled by the dirty limit.
    dirty_throttles,
    /// Device commands that failed.
    dev_errors,
    /// Metadata log writes (each one FUA write of one or more blocks).
    log_writes,
    /// Bytes of those log writes.
    log_bytes,
    /// Checkpoints written.
    checkpoints,
    /// Bytes of checkpoint chains written.
    checkpoint_bytes,
    /// Time spent writing checkpoints, in nanoseconds of the
    /// configuration's clock: the image, its flush and the superblock.
    checkpoint_nanos,
    /// Of those, checkpoints written off the sync path (the log's
    /// background step, `Session::background_step`).
    background_checkpoints,
    /// Pages read or written by direct I/O (past the cache).
    direct_pages,
    /// Logged pages written home off the sync path (the background
    /// write-home, `Session::write_home_step`).
    homed_pages,
    /// Small syncs that found the log's share for data full and wrote
    /// their file's pages home themselves: the background write-home did
    /// not keep up.
    home_on_sync,
    /// Syncs that woke the write-home thread from its sleep (a system
    /// call and a wake-up on the sync's own time; a napping thread needs
    /// none).
    home_wakes,
    /// Background steps (`Session::background_step`) that failed: a home
    /// write, a checkpoint or the log thread's device queue refused. The
    /// step is tried again later; the count says it happened.
    background_errors,
    /// Log writes the mount replayed (set once, at mount).
    replayed_log_writes,
    /// Records those log writes held (set once, at mount).
    replayed_records,
}

impl Counters {
    /// Adds `n` to counter `c`. Only the owning session calls this, so a
    /// load and a store suffice.
    #[inline]
    pub(crate) fn add(&self, c: Counter, n: u64) {
        let cell = self.cell(c);
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Counts one read through the file API that returned `bytes`.
    #[inline(always)]
    pub(crate) fn read(&self, bytes: usize) {
        self.add(Counter::reads, 1);
        self.add(Counter::read_bytes, bytes as u64);
    }

    /// Counts one write through the file API that took `bytes`.
    pub(crate) fn write(&self, bytes: usize) {
        self.add(Counter::writes, 1);
        self.add(Counter::write_bytes, bytes as u64);
    }

    /// Counts one device command of `kind` moving `bytes`.
    pub(crate) fn command(&self, kind: CommandKind, bytes: u64) {
        match kind {
            CommandKind::Read => {
                self.add(Counter::dev_reads, 1);
                self.add(Counter::dev_read_bytes, bytes);
            }
            CommandKind::Write => {
                self.add(Counter::dev_writes, 1);
                self.add(Counter::dev_write_bytes, bytes);
            }
            CommandKind::Flush => self.add(Counter::dev_flushes, 1),
            CommandKind::Deallocate => self.add(Counter::dev_deallocates, 1),
            CommandKind::WriteZeroes => self.add(Counter::dev_write_zeroes, 1),
        }
    }
}

impl Stats {
    /// Cache hit rate in `[0, 1]`, or 0 with no lookups.
    pub fn hit_rate(&self) -> f64 {
        let total = self.cache_hits + self.cache_misses;
        if total == 0 {
            0.0
        } else {
            self.cache_hits as f64 / total as f64
        }
    }
}

/// One device's commands and errors, and what its driver counted of its
/// own recoveries: for each leg of a volume ([`crate::dev::BlockDevice::leg_counts`]),
/// the commands the volume sent it; for a device alone, the engine's own
/// `dev_*` counters are its commands, and only [`DeviceHealth`] is the
/// device's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounts {
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
    /// The device's own recoveries.
    pub health: DeviceHealth,
}

/// What a device's driver counted of its own trouble
/// ([`crate::dev::BlockDevice::health`]): all zero for a device with no
/// controller (RAM, a file).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceHealth {
    /// Controller resets.
    pub resets: u64,
    /// Times a queue re-created itself after a reset and sent again what
    /// it had in flight.
    pub queue_recoveries: u64,
    /// Commands that hit their deadline.
    pub timeouts: u64,
    /// Commands sent again after an error status or a reset.
    pub retries: u64,
    /// Replies from the device that broke the protocol.
    pub protocol_errors: u64,
    /// New associations with a fabric controller after the old one was
    /// lost (NVMe/TCP).
    pub reconnects: u64,
}

impl DeviceHealth {
    /// `(name, value)` for every field, in declaration order.
    pub fn fields(&self) -> [(&'static str, u64); 6] {
        [
            ("resets", self.resets),
            ("queue_recoveries", self.queue_recoveries),
            ("timeouts", self.timeouts),
            ("retries", self.retries),
            ("protocol_errors", self.protocol_errors),
            ("reconnects", self.reconnects),
        ]
    }
}

impl DeviceCounts {
    /// `(name, value)` for every figure, the health's included, in
    /// declaration order.
    pub fn fields(&self) -> [(&'static str, u64); 14] {
        let h = self.health.fields();
        [
            ("reads", self.reads),
            ("read_bytes", self.read_bytes),
            ("writes", self.writes),
            ("write_bytes", self.write_bytes),
            ("flushes", self.flushes),
            ("deallocates", self.deallocates),
            ("write_zeroes", self.write_zeroes),
            ("errors", self.errors),
            h[0],
            h[1],
            h[2],
            h[3],
            h[4],
            h[5],
        ]
    }
    /// The engine's own count of its commands to its device, from `s`:
    /// the figures of a device with no legs.
    pub fn of_engine(s: &Stats, health: DeviceHealth) -> DeviceCounts {
        DeviceCounts {
            reads: s.dev_reads,
            read_bytes: s.dev_read_bytes,
            writes: s.dev_writes,
            write_bytes: s.dev_write_bytes,
            flushes: s.dev_flushes,
            deallocates: s.dev_deallocates,
            write_zeroes: s.dev_write_zeroes,
            errors: s.dev_errors,
            health,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::dev::ram::RamDevice;
    use crate::fs::{Config, Fs};

    fn config() -> Config {
        Config {
            cache_pages: 32,
            dirty_limit_pages: 16,
            ..Config::default()
        }
    }

    #[test]
    fn each_read_write_and_sync_is_counted_once_with_its_bytes() {
        let fs = Fs::format(RamDevice::new(16 << 20, 4096, 64).unwrap(), config(), 5).unwrap();
        let s = fs.session().unwrap();
        let f = fs.create("a").unwrap();
        let before = fs.stats();
        s.write_all_at(&f, &[1; 6000], 0).unwrap();
        let mut buf = [0u8; 4096];
        // A whole-page hit (the fast path), then a read across pages.
        assert_eq!(s.read_at(&f, &mut buf, 0).unwrap(), 4096);
        assert_eq!(s.read_at(&f, &mut buf[..3000], 3000).unwrap(), 3000);
        s.sync_data(&f).unwrap();
        // Direct I/O counts as reads and writes too.
        s.write_direct(&f, &buf, 8192).unwrap();
        assert_eq!(s.read_direct(&f, &mut buf, 8192).unwrap(), 4096);
        let d = fs.stats().since(&before);
        assert_eq!((d.writes, d.write_bytes), (2, 6000 + 4096));
        assert_eq!((d.reads, d.read_bytes), (3, 4096 + 3000 + 4096));
        assert_eq!(d.syncs, 1);
        assert_eq!(d.log_writes, 1);
        assert!(d.log_bytes >= 4096, "{d:?}");
        let (used, size) = fs.log_fill();
        assert!(used > 0 && used < size, "{used} of {size}");
    }

    #[test]
    fn a_checkpoint_counts_its_bytes_and_a_remount_what_it_replayed() {
        let dev = RamDevice::new(16 << 20, 4096, 64).unwrap();
        let fs = Fs::format(dev.clone(), config(), 6).unwrap();
        let s = fs.session().unwrap();
        let f = fs.create("a").unwrap();
        s.write_all_at(&f, &[2; 4096], 0).unwrap();
        s.sync_data(&f).unwrap();
        let logged = fs.stats().log_writes;
        assert!(logged > 0);
        drop((f, s));
        // Dropped without a checkpoint: the next mount replays the log.
        drop(fs);
        let fs = Fs::mount(dev.clone(), config()).unwrap();
        let s = fs.stats();
        // At least the sync's; the format's own log writes may be there
        // too, since the last checkpoint.
        assert!(s.replayed_log_writes >= logged, "{s:?}");
        assert!(s.replayed_records > 0, "{s:?}");
        let before = fs.stats();
        fs.clone().unmount().unwrap();
        let d = fs.stats().since(&before);
        assert_eq!(d.checkpoints, 1);
        assert!(d.checkpoint_bytes > 0, "{d:?}");
        assert_eq!(fs.log_fill().0, 0, "a checkpoint empties the log");
        drop(fs);
        let fs = Fs::mount(dev, config()).unwrap();
        assert_eq!(
            fs.stats().replayed_log_writes,
            0,
            "nothing after a checkpoint"
        );
    }
}
