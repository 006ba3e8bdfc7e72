//! Debug-build check of the lock order.

#[cfg(debug_assertions)]
use core::sync::atomic::{AtomicU8, Ordering};

/// The lock levels, outermost first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// The inode lock.
    Inode = 0,
    /// The invalidate gate.
    Gate = 1,
    /// The extent (byte-range) lock.
    Extent = 2,
}

/// The locks one operation holds. Each operation owns one; acquiring a lock
/// at a level at or inside one already held is a lock-order violation and
/// panics in debug builds. Release builds compile this to nothing.
#[derive(Debug, Default)]
pub struct Held {
    #[cfg(debug_assertions)]
    bits: AtomicU8,
}

impl Held {
    /// Nothing held.
    pub const fn new() -> Held {
        Held {
            #[cfg(debug_assertions)]
            bits: AtomicU8::new(0),
        }
    }
    /// Records that `level` is being acquired.
    pub fn acquire(&self, level: Level) {
        #[cfg(debug_assertions)]
        {
            let held = self.bits.load(Ordering::Relaxed);
            assert!(
                held >> (level as u8) == 0,
                "lock order violated: acquiring {level:?} while holding levels {held:#05b}"
            );
            self.bits.fetch_or(1 << level as u8, Ordering::Relaxed);
        }
        let _ = level;
    }
    /// Records that `level` was released.
    pub fn release(&self, level: Level) {
        #[cfg(debug_assertions)]
        self.bits.fetch_and(!(1 << level as u8), Ordering::Relaxed);
        let _ = level;
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn outer_then_inner_is_allowed() {
        let h = Held::new();
        h.acquire(Level::Inode);
        h.acquire(Level::Gate);
        h.acquire(Level::Extent);
        h.release(Level::Extent);
        h.release(Level::Gate);
        h.acquire(Level::Gate);
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn inner_then_outer_panics() {
        let h = Held::new();
        h.acquire(Level::Extent);
        h.acquire(Level::Inode);
    }
}
