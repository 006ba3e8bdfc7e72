//! Fuzz inputs for pollfs. The input types live in [`input`], which the
//! host tests also include (by path) to replay the committed corpus on
//! stable without libFuzzer.

pub mod input;
pub mod nvme;
pub mod tcp;
