//! Engine settings.

use crate::units::Nanos;

/// Engine settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Page-cache capacity in 4 KiB pages; 0 means every frame the device
    /// offers. Must not exceed the device's frames.
    pub cache_pages: u32,
    /// Dirty pages allowed before writers are made to write back; 0 means
    /// half the cache.
    pub dirty_limit_pages: u32,
    /// Largest readahead window in pages; 0 turns readahead off.
    pub readahead_pages: u32,
    /// Serialise every operation on a file with a file-wide lock, as
    /// filesystems did before range locking (for comparisons).
    pub file_lock: bool,
    /// Monotonic time, passed to device polling for command timeouts.
    pub clock: fn() -> Nanos,
    /// Called while an operation waits (for a lock, a page or the device):
    /// a spin hint by default; hosted users may yield the thread.
    pub idle: fn(),
    /// Called when a future waits for a device completion under an executor
    /// other than the synchronous methods' loop, with the task's waker and
    /// how many times this wait has been polled: it must wake the waker
    /// when the device queue is worth polling again. The default wakes it
    /// at once (busy polling); `pollfs_hosted::config` spins briefly, then
    /// wakes it from a timer with growing delays.
    pub park: fn(&core::task::Waker, u32),
    /// Wall-clock time in nanoseconds since the Unix epoch, for the times
    /// of files. The default (for builds with no OS) is always 0;
    /// `hosted::config` reads the system clock.
    pub wall_clock: fn() -> u64,
    /// Owner of the root directory a new filesystem is made with.
    pub root_owner: (u32, u32),
    /// A sync with at most this many dirty pages to make durable puts
    /// their bytes in its log write (one device command) instead of
    /// writing them to their blocks first; the blocks are written later,
    /// off the sync path. 0 turns it off.
    pub log_data_pages: u32,
    /// Starts the driver of the log's background steps (writing logged
    /// pages home, checkpoints off the sync path) once a mount with a log
    /// has loaded: the hosted layer's thread (`pollfs_hosted::config`
    /// names it), an application's reactor. It keeps the log's share for
    /// data below its limit so that no sync waits for a batch of home
    /// writes. `None`: whoever wants that drives
    /// [`Session::background_step`](super::Session::background_step)
    /// itself (from an idle loop, say); a sync that finds the share full
    /// writes home itself either way. The engine starts no thread (see
    /// `background`).
    pub background: Option<super::background::StartBackground>,
    /// Inodes used since the last look at them before idle ones are
    /// looked at again: shrunk to what an unused inode needs and, with a
    /// log, let go of when the durable view describes them exactly (built
    /// again from it when next used). Bounds what idle inodes hold beyond
    /// the cache; a look costs about three list entries per use. 0 counts
    /// as 1.
    pub idle_inodes: u32,
}

fn no_clock() -> Nanos {
    Nanos(0)
}

fn wake_now(waker: &core::task::Waker, _polls: u32) {
    waker.wake_by_ref();
}

fn no_wall_clock() -> u64 {
    0
}

impl Default for Config {
    fn default() -> Config {
        Config {
            cache_pages: 0,
            dirty_limit_pages: 0,
            readahead_pages: 256,
            file_lock: false,
            clock: no_clock,
            idle: core::hint::spin_loop,
            park: wake_now,
            wall_clock: no_wall_clock,
            root_owner: (0, 0),
            log_data_pages: 4,
            background: None,
            idle_inodes: 1024,
        }
    }
}
