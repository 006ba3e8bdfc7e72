//! NVMe 1.4 wire formats: registers, queue entries, status, identify
//! data and end-to-end protection information, and the NVMe over Fabrics 1.1 commands and SGL descriptors a
//! fabric transport sends in place of PRPs. Pure data and encoding, no
//! I/O, so every layout is unit-tested in isolation.

pub mod auth;
pub mod command;
pub mod completion;
pub mod fabrics;
pub mod identify;
pub mod protection;
pub mod regs;
pub mod sgl;
pub mod status;
