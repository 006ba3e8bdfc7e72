//! Locks that operations await: byte-range locks and the lock-order check.
//!
//! Lock order, outermost first (see docs/design/engine.md, "Lock order"):
//!
//! 1. the inode lock ([`Level::Inode`]): size changes, truncate, punch-hole;
//! 2. the invalidate gate ([`Level::Gate`]): page instantiation by readers
//!    against truncate and punch-hole (writers are drained instead);
//! 3. the extent lock ([`Level::Extent`], striped): writers of a byte range;
//! 4. page locks (a bit in each page's state word).
//!
//! Debug builds check the first three with [`Held`].

mod order;
mod range;
mod striped;

pub use order::{Held, Level};
pub use range::{Mode, RangeGuard, RangeLock};
pub use striped::{StripedGuard, StripedLock};
