//! Where every decision of a run comes from: fuzzer bytes first, then a
//! generator seeded from them, so a run never stops for lack of input and the
//! same input always makes the same run.

use crate::rng::Rng;

/// A source of decisions.
#[derive(Clone, Debug)]
pub struct Choices {
    bytes: Vec<u8>,
    at: usize,
    rng: Rng,
}

impl Choices {
    /// Decisions from a seed alone.
    pub fn from_seed(seed: u64) -> Choices {
        Choices {
            bytes: Vec::new(),
            at: 0,
            rng: Rng::new(seed),
        }
    }

    /// Decisions read from `bytes`; once they run out, from a generator
    /// seeded with a hash of them.
    pub fn from_bytes(bytes: &[u8]) -> Choices {
        let seed = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Choices {
            bytes: bytes.to_vec(),
            at: 0,
            rng: Rng::new(seed),
        }
    }

    fn next_byte(&mut self) -> u64 {
        match self.bytes.get(self.at) {
            Some(&b) => {
                self.at += 1;
                u64::from(b)
            }
            None => self.rng.next_u64(),
        }
    }

    /// Uniform-ish in `[0, n)`; 0 if `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n <= 1 {
            return 0;
        }
        let mut v = self.next_byte();
        if n > 256 {
            v = (v << 8) | self.next_byte();
        }
        v % n
    }

    /// True with probability about `percent`%.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
