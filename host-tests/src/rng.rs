//! The tests' generator: the project's one, [`pollfs_core::rng`]
//! (SplitMix64), so a seed printed by a failing run replays the same run
//! forever.

pub use pollfs_core::rng::SplitMix64 as Rng;
