//! Changes to a small valid image, raw and crafted with valid checksums
//! (superblock fields, frame headers, records at and past their limits,
//! damage to the tree, new log writes): check and mount must answer, never
//! panic or hang, and agree; a mounted image must walk, read, write, sync
//! and remount; an image check finds problems in must be repaired or
//! refused.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pollfs_fuzz::recovery::{run, RecoveryInput};

fuzz_target!(|input: RecoveryInput| run(&input));
