//! pollfs-core: the pollfs engine.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod dev;
pub mod units;
