//! NVMe 1.4 wire formats: registers, queue entries, status and identify
//! data. Pure data and encoding, no I/O, so every layout is unit-tested in
//! isolation.

pub mod command;
pub mod completion;
pub mod identify;
pub mod regs;
pub mod status;
