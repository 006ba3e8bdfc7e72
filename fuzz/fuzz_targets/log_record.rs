//! Arbitrary bytes through the record, frame and superblock parsers: no
//! panic, and records that decode re-encode to exactly the input.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| pollfs_fuzz::log_record::run(bytes));
