//! Arbitrary byte streams from an NVMe/TCP controller into the initiator's
//! receive path (PDU parsing and the queue's state machine), with reads
//! and writes of every shape in flight: errors and reconnects, never a
//! panic, a hang or a completion for a command not in flight.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| pollfs_fuzz::tcp::run(data));
