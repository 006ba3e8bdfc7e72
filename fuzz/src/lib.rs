//! Fuzz inputs for pollfs. Each target's input type and checks live in a
//! module here, which the host tests also include (by path) to replay the
//! committed corpora on stable without libFuzzer.

pub mod auth;
pub mod input;
pub mod log_record;
pub mod nvme;
pub mod recovery;
pub mod tcp;
