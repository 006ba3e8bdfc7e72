//! Arbitrary DH-HMAC-CHAP messages from a controller into the host's
//! parsers and exchange (and arbitrary text into the secret parser): no
//! panic, replies as long as they say, no controller accepted without
//! its response.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pollfs_fuzz::auth::run(data));
