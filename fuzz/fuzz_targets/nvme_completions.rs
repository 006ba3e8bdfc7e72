//! File operations through the real NVMe driver while the emulated
//! controller lies in its completions (bad command ids, bad SQ heads, wrong
//! queue ids, stale phase tags, duplicates), stalls, reorders, fails or
//! swallows commands. The engine and driver must return errors, never panic
//! and never hang; time is virtual, so timeouts, aborts and resets happen
//! within a few thousand polls.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pollfs_fuzz::nvme::{run, NvmeInput};

fuzz_target!(|input: NvmeInput| run(&input));
