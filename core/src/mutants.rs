//! Planted bugs, for proving that the race and crash tests have teeth
//! (`--cfg pollfs_mutants`, set only by `just mutants`; like loom's `cfg`,
//! no feature, so feature unification or `--all-features` cannot plant them
//! in a product, and `lib.rs` refuses the cfg in a build without debug
//! assertions). Each switch re-introduces a bug that kernel filesystems or
//! md have shipped or could; a test turns one on and checks that a harness
//! catches it.

use core::sync::atomic::{AtomicU32, Ordering};

/// The planted bugs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    /// Punch-hole drops cached pages before closing the invalidate gate, so
    /// a reader can re-instantiate a page from a block about to be freed.
    PunchDropsBeforeGate = 1,
    /// Truncate does not drain in-flight writers.
    TruncateSkipsDrain = 2,
    /// A write that moves EOF does not take the inode lock (buffered and
    /// direct writes share the outline it is planted in).
    ExtendWithoutInodeLock = 4,
    /// A cached read accepts a copy even if the page changed under it.
    ReadSkipsVersionCheck = 8,
    /// A sync keeps the pages it wrote under writeback until its commit
    /// (instead of pinned): another sync of the file that meets one of them
    /// waits for it while keeping its own, and two syncs can wait for each
    /// other forever.
    SyncHoldsWriteback = 16,
    /// The background write-home retires a logged page (stages its home
    /// record) once its write completes, without FUA or a flush: a crash
    /// can keep the home record and lose the write, and with it the synced
    /// bytes (found by the crash tests, not the race harness).
    HomeBeforeDurable = 32,
    /// A mirror write goes to the legs without marking its regions in the
    /// write-intent bitmap, so a leg that misses it is not copied there
    /// when it returns.
    BitmapSkipsMark = 64,
    /// A mirror clears bitmap regions without flushing the legs first, so
    /// a crash can leave a region clean that the legs hold differently.
    BitmapClearsBeforeFlush = 128,
    /// The background write-home writes a page home by FUA without first
    /// flushing a trim or write of its block that completed unflushed
    /// (a block freed and trimmed, then given to the file): a crash can
    /// land the older one over it after its home record retired the
    /// logged copy (found by the crash tests).
    HomeOverUnflushed = 256,
}

static ACTIVE: AtomicU32 = AtomicU32::new(0);

/// Turns `m` on or off for the whole process.
pub fn set(m: Mutant, on: bool) {
    if on {
        ACTIVE.fetch_or(m as u32, Ordering::SeqCst);
    } else {
        ACTIVE.fetch_and(!(m as u32), Ordering::SeqCst);
    }
}

/// True if `m` is on.
pub fn active(m: Mutant) -> bool {
    ACTIVE.load(Ordering::Relaxed) & m as u32 != 0
}
