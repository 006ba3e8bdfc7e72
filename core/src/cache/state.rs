//! The page state word: one `AtomicU64` per cache slot.
//!
//! ```text
//!  63            32 31    25 24 23        8  7   6   5   4   3   2   1   0
//! +----------------+--------+--+-----------+---+---+---+---+---+---+---+---+
//! |    version     | unused |IL|   pins    |LG | M | W |REF| WB| D | U | L |
//! +----------------+--------+--+-----------+---+---+---+---+---+---+---+---+
//! ```
//!
//! - `L` locked: the slot is being filled, evicted or invalidated; its bytes
//!   and key may change. Only the locker touches it.
//! - `U` uptodate: the frame holds the page's data.
//! - `D` dirty: the frame is newer than the device.
//! - `WB` writeback: a write of the frame to the device is in flight; the
//!   slot may not be freed, and a second writeback of the page waits.
//! - `REF` referenced: CLOCK's second-chance bit.
//! - `W` waiters: someone waits on the slot's wait queue (see the cache).
//! - `M` mapped: the page has a device block.
//! - `LG` logged: the frame's bytes are durable in a data record (staged
//!   or written); the page is dirty only because its block is not written
//!   yet, and a sync need not log it again. A writer's change clears it.
//! - `IL` in log: a data record for the page is staged or live, so the
//!   writeback that writes the page to its block logs a home record (or a
//!   replay could write the older logged bytes over the newer ones).
//! - pins: writers copying into the page, truncate and punch-hole holding an
//!   edge page, and syncs keeping the pages they wrote until their flush; a
//!   pinned page cannot be evicted or dropped.
//! - version: bumped whenever the slot stops holding the page it held
//!   (eviction, invalidation), so an optimistic reader that started before can
//!   tell its copy may belong to another page and retry.

/// Locked bit.
pub const LOCKED: u64 = 1 << 0;
/// Uptodate bit.
pub const UPTODATE: u64 = 1 << 1;
/// Dirty bit.
pub const DIRTY: u64 = 1 << 2;
/// Writeback bit.
pub const WRITEBACK: u64 = 1 << 3;
/// CLOCK reference bit.
pub const REFERENCED: u64 = 1 << 4;
/// The page has a device block (so a writer need not look it up). Pages
/// never outlive their blocks: truncate and punch-hole drop the pages before
/// freeing the blocks under them.
pub const MAPPED: u64 = 1 << 6;
/// The frame's bytes are durable in a data record.
pub const LOGGED: u64 = 1 << 7;
/// A data record for the page is staged or live.
pub const INLOG: u64 = 1 << 24;
/// One pin.
pub const PIN: u64 = 1 << 8;
/// All pin bits.
pub const PIN_MASK: u64 = 0xffff << 8;
const VERSION_SHIFT: u32 = 32;
/// The version field's bits.
pub const VERSION_MASK: u64 = !0 << VERSION_SHIFT;

/// The version field of a state word.
pub fn version(state: u64) -> u64 {
    state >> VERSION_SHIFT
}

/// A state word with the same version plus one and only the given flags.
pub fn next_version(state: u64, flags: u64) -> u64 {
    (version(state).wrapping_add(1) << VERSION_SHIFT) | flags
}

/// True if the slot could be evicted right now (given it holds a page).
pub fn evictable(state: u64) -> bool {
    state & (LOCKED | DIRTY | WRITEBACK | PIN_MASK) == 0 && state & UPTODATE != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_survives_flag_changes_and_wraps() {
        let s = next_version(0, LOCKED);
        assert_eq!(version(s), 1);
        assert_eq!(version(VERSION_MASK), u64::from(u32::MAX));
        assert_eq!(VERSION_MASK & (PIN_MASK | INLOG | 0xff), 0);
        assert_eq!(s & LOCKED, LOCKED);
        let top = !0xffff_ffffu64;
        assert_eq!(version(next_version(top, 0)), 0);
        assert!(evictable(UPTODATE | REFERENCED));
        assert!(!evictable(UPTODATE | PIN));
        assert!(!evictable(UPTODATE | DIRTY));
        assert!(!evictable(0));
    }
}
