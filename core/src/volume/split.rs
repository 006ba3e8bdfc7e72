//! Striping arithmetic: where a volume block lives, and how a request
//! splits into per-chunk pieces.
//!
//! Volume chunk `c` is chunk `c / legs` of leg `c % legs`. A request's
//! pieces on one leg are therefore adjacent on that leg (chunks `c` and
//! `c + legs` are rows `r` and `r + 1` of the same leg), so every leg gets
//! one contiguous range per request, which the stripe sends as one command
//! (or several, if it is longer than the leg's largest transfer).

use crate::units::Lba;

use super::VolumeError;

/// How a stripe deals its blocks to its legs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StripeMap {
    legs: u64,
    /// Blocks per chunk.
    chunk: u64,
    /// Chunks used on each leg.
    rows: u64,
}

/// One chunk's worth of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The leg, by position.
    pub leg: usize,
    /// Where the piece starts on the leg.
    pub leg_lba: Lba,
    /// Where the piece starts in the request, in blocks.
    pub offset: u64,
    /// Its length in blocks.
    pub blocks: u64,
}

impl StripeMap {
    /// `legs` legs of at least `leg_blocks` blocks each, dealt in chunks of
    /// `chunk_blocks` blocks.
    pub fn new(legs: usize, chunk_blocks: u64, leg_blocks: u64) -> Result<StripeMap, VolumeError> {
        if legs == 0 {
            return Err(VolumeError::NoLegs);
        }
        if chunk_blocks == 0 {
            return Err(VolumeError::ChunkSize);
        }
        let rows = leg_blocks / chunk_blocks;
        let map = StripeMap {
            legs: legs as u64,
            chunk: chunk_blocks,
            rows,
        };
        if rows == 0 || map.legs.checked_mul(rows * chunk_blocks).is_none() {
            return Err(VolumeError::TooSmall);
        }
        Ok(map)
    }
    /// Capacity of the volume in blocks.
    pub fn capacity(&self) -> u64 {
        self.legs * self.rows * self.chunk
    }
    /// Blocks per chunk.
    pub fn chunk_blocks(&self) -> u64 {
        self.chunk
    }
    /// Where volume block `lba` lives: the leg and the block on it.
    pub fn locate(&self, lba: u64) -> (usize, Lba) {
        let chunk = lba / self.chunk;
        let leg = (chunk % self.legs) as usize;
        let row = chunk / self.legs;
        (leg, Lba(row * self.chunk + lba % self.chunk))
    }
    /// The pieces of blocks `[lba, lba + blocks)`, in volume order, one per
    /// chunk the range touches. The caller has checked the range against
    /// [`capacity`](Self::capacity).
    pub fn pieces(&self, lba: u64, blocks: u64) -> Pieces {
        Pieces {
            map: *self,
            lba,
            offset: 0,
            blocks,
        }
    }
}

/// Iterator over a request's pieces ([`StripeMap::pieces`]).
#[derive(Clone, Debug)]
pub struct Pieces {
    map: StripeMap,
    lba: u64,
    offset: u64,
    blocks: u64,
}

impl Iterator for Pieces {
    type Item = Piece;
    fn next(&mut self) -> Option<Piece> {
        if self.offset >= self.blocks {
            return None;
        }
        let at = self.lba + self.offset;
        let room = self.map.chunk - at % self.map.chunk;
        let n = room.min(self.blocks - self.offset);
        let (leg, leg_lba) = self.map.locate(at);
        let piece = Piece {
            leg,
            leg_lba,
            offset: self.offset,
            blocks: n,
        };
        self.offset += n;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// Every block of the request, located one by one.
    fn blockwise(map: &StripeMap, lba: u64, blocks: u64) -> Vec<(usize, u64)> {
        (lba..lba + blocks)
            .map(|b| {
                let (leg, at) = map.locate(b);
                (leg, at.0)
            })
            .collect()
    }

    /// The pieces, expanded to blocks, must be exactly the blockwise map;
    /// every piece but the first and last is a whole chunk; and each leg's
    /// pieces are adjacent on the leg.
    fn check(map: &StripeMap, lba: u64, blocks: u64) {
        let pieces: Vec<Piece> = map.pieces(lba, blocks).collect();
        let mut expanded = Vec::new();
        for (i, p) in pieces.iter().enumerate() {
            assert_eq!(p.offset, expanded.len() as u64, "pieces are in order");
            if i > 0 && i + 1 < pieces.len() {
                assert_eq!(
                    p.blocks,
                    map.chunk_blocks(),
                    "inner pieces are whole chunks"
                );
            }
            expanded.extend((0..p.blocks).map(|k| (p.leg, p.leg_lba.0 + k)));
        }
        assert_eq!(expanded, blockwise(map, lba, blocks), "lba {lba} +{blocks}");
        for leg in 0..map.legs as usize {
            let on_leg: Vec<&Piece> = pieces.iter().filter(|p| p.leg == leg).collect();
            for w in on_leg.windows(2) {
                assert_eq!(
                    w[0].leg_lba.0 + w[0].blocks,
                    w[1].leg_lba.0,
                    "leg {leg}'s share of lba {lba} +{blocks} is contiguous"
                );
            }
        }
    }

    #[test]
    fn blocks_are_dealt_round_robin_by_chunk() {
        let map = StripeMap::new(3, 16, 100).unwrap();
        assert_eq!(
            map.capacity(),
            3 * 6 * 16,
            "each leg rounded down to 6 chunks"
        );
        assert_eq!(map.locate(0), (0, Lba(0)));
        assert_eq!(map.locate(15), (0, Lba(15)));
        assert_eq!(map.locate(16), (1, Lba(0)));
        assert_eq!(map.locate(47), (2, Lba(15)));
        assert_eq!(map.locate(48), (0, Lba(16)));
        assert_eq!(map.locate(map.capacity() - 1), (2, Lba(6 * 16 - 1)));
    }

    #[test]
    fn requests_split_at_chunk_boundaries() {
        let map = StripeMap::new(2, 8, 64).unwrap();
        let p: Vec<Piece> = map.pieces(6, 12).collect();
        assert_eq!(
            p,
            [
                Piece {
                    leg: 0,
                    leg_lba: Lba(6),
                    offset: 0,
                    blocks: 2
                },
                Piece {
                    leg: 1,
                    leg_lba: Lba(0),
                    offset: 2,
                    blocks: 8
                },
                Piece {
                    leg: 0,
                    leg_lba: Lba(8),
                    offset: 10,
                    blocks: 2
                },
            ]
        );
        // Inside one chunk: one piece.
        assert_eq!(map.pieces(9, 3).count(), 1);
        // Exactly one chunk, aligned: one piece.
        assert_eq!(map.pieces(16, 8).count(), 1);
    }

    #[test]
    fn edge_chunks_long_requests_and_unaligned_ends_match_the_blockwise_map() {
        for legs in 1..=4 {
            for chunk in [1u64, 8, 16, 128] {
                let map = StripeMap::new(legs, chunk, chunk * 5 + 3).unwrap();
                let cap = map.capacity();
                let mut cases = Vec::new();
                // The first and last chunk of the volume, whole and in part.
                cases.extend([(0, chunk), (0, 1), (cap - chunk, chunk), (cap - 1, 1)]);
                // Across many chunks, from and to odd places, and all of it.
                cases.extend([(1, cap - 2), (chunk - 1, chunk + 2), (0, cap)]);
                cases.extend([
                    (chunk / 2, chunk * 3 * legs as u64),
                    (3 % cap, cap - 3 % cap),
                ]);
                for (lba, blocks) in cases {
                    if blocks > 0 && lba + blocks <= cap {
                        check(&map, lba, blocks);
                    }
                }
            }
        }
    }

    #[test]
    fn shapes_that_cannot_stripe_are_refused() {
        assert_eq!(StripeMap::new(0, 8, 64), Err(VolumeError::NoLegs));
        assert_eq!(StripeMap::new(2, 0, 64), Err(VolumeError::ChunkSize));
        assert_eq!(StripeMap::new(2, 128, 64), Err(VolumeError::TooSmall));
        assert_eq!(
            StripeMap::new(8, 1 << 62, u64::MAX),
            Err(VolumeError::TooSmall)
        );
    }
}
