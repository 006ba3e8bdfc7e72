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
        #[allow(non_camel_case_types)]
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
    /// Checkpoints written.
    checkpoints,
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
