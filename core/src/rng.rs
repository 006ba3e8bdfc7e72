//! [`SplitMix64`]: the one pseudo-random generator of the project (tests,
//! the race harness, crash workloads, the bench, perf, the emulated
//! controller's faults). Tiny, seedable, and its sequence is fixed by
//! this file alone, not by a crate or toolchain version, so a seed printed
//! by a failing run replays the same run forever. Not for secrets.

/// Added to the state on every step (2^64 / the golden ratio).
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64 (Steele, Lea and Flood, 2014).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }
    /// Uniform in `[0, n)` (within `n / 2^64`); 0 if `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    /// True with probability `percent`%.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// SplitMix64's output function: a well-spread 64-bit hash of `x` (a
/// bijection, so distinct inputs give distinct outputs).
pub const fn mix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_the_published_one() {
        // The reference outputs for seed 1234567 (from the authors'
        // SplitMix64 reference code): replays depend on them.
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(r.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn below_and_chance_stay_in_range() {
        let mut r = SplitMix64::new(7);
        assert_eq!(r.below(0), 0);
        assert!((0..1000).all(|_| r.below(10) < 10));
        assert!((0..1000).all(|_| !r.chance(0)));
        assert!((0..1000).all(|_| r.chance(100)));
    }
}
