//! The `recovery` fuzz input: changes to a small valid image, raw (bytes
//! flipped or set in the superblocks, log writes, the index's pages, the
//! carried frames, anywhere) and crafted with valid checksums (superblock
//! fields, frame headers, index page headers and bytes, a page in another
//! page's place, records with values at and past their limits, records
//! made from nothing or from the image's entries, the index built again
//! from edited records or somewhere else, damage to the namespace it
//! holds, new log writes with the next sequence number, the carried chain
//! moved; extended-attribute records set and removed, with names in every
//! namespace and past the rules, values at and past 64 KiB). Then:
//!
//! - `persist::check` returns a report, never panics;
//! - `Fs::mount` returns, never panics or hangs; it mounts exactly the
//!   images `check` calls clean;
//! - a mounted image: the tree walks (every entry names an inode of its
//!   kind that its name looks up), every file reads (to its length where
//!   it is small, at every size and extent edge the records name
//!   otherwise), every symbolic link's target is as long as its size,
//!   every inode's extended attributes read back within the rules, the
//!   invariants hold, a write, an attribute, a new directory, a move and a
//!   sync work, and the image remounts with them, from the log and from an
//!   unmount's checkpoint (or from what a failed unmount left);
//! - an image `check` finds problems in: `persist::repair` fails (and
//!   check and mount still agree), or leaves an image `check` calls clean
//!   and that mounts and passes the above.
//!
//! Shared with host-tests (by path), which replays the committed corpus.

pub mod base;
pub mod check;
pub mod edit;
pub mod model;
pub mod tree;
pub mod values;

use arbitrary::Arbitrary;

use check::Checker;
use edit::{Mutation, MAX_MUTATIONS};
use model::Model;

/// A whole fuzzed run: the changes, applied in order (raw byte changes
/// after the crafted ones).
#[derive(Arbitrary, Clone, Debug)]
pub struct RecoveryInput {
    /// The changes (at most [`MAX_MUTATIONS`] are used).
    pub mutations: Vec<Mutation>,
}

/// Runs one input as the fuzz target does: panics if the engine does, or
/// if a check fails.
pub fn run(input: &RecoveryInput) {
    let base = base::base();
    let muts = &input.mutations[..input.mutations.len().min(MAX_MUTATIONS)];
    let mut model = Model::new(base);
    edit::apply(&mut model, muts);
    let raw: Vec<_> = muts
        .iter()
        .filter_map(|m| match *m {
            Mutation::Raw(region, offset, op) => Some((region, offset, op)),
            _ => None,
        })
        .collect();
    let dev = base::fresh_device();
    model.write(&dev, &raw);
    Checker::new(&dev, model.offsets()).verify();
}
