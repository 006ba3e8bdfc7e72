//! Space management: the block allocator and per-file extent maps.

mod allocator;
mod extent;

pub use allocator::{AllocError, Allocator};
pub use extent::{Extent, ExtentMap};
