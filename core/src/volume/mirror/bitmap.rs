//! The write-intent bitmap in memory: which regions of the mirror may
//! differ between legs, which of those marks are on the legs, and how many
//! writes each region has under way.
//!
//! A write enters its regions before it is routed ([`Bitmap::enter`]):
//! it counts itself in each region's `inflight`, then reads `durable`. If
//! every region's mark is on the legs it goes at once; otherwise it sets
//! the regions in `marked` and waits until a header carrying them has been
//! written (`control` writes one header for every mark made since the
//! last, then calls [`Bitmap::made_durable`]). It leaves its regions when
//! it completes.
//!
//! Clearing is lazy and belongs to `control` (`clear.rs`): a region is
//! unmarked only when every leg is in sync, no write has touched it for a
//! whole clearing period, none is under way, and a flush of every leg has
//! finished after its last write. The race between a write entering a
//! region and a clear taking the region's mark away is closed as in
//! `view.rs`, all `SeqCst`: the write adds to `inflight` and then loads
//! `durable`; the clear removes the `durable` bit and then loads
//! `inflight`, putting the bit back if it is not zero. One of the two sees
//! the other.
//!
//! Everything is atomics, one word per 64 regions; the hot path takes no
//! lock.

use alloc::vec::Vec;
use core::sync::atomic::Ordering::SeqCst;
use core::sync::atomic::{AtomicU32, AtomicU64};

use super::super::header::{self, BITMAP_BYTES};

/// The regions of a mirror.
#[derive(Debug)]
pub(crate) struct Bitmap {
    /// Blocks per region, a power of two: `1 << block_shift`.
    block_shift: u32,
    /// A region is `2^shift` pages (as the header records it).
    pub shift: u8,
    /// Regions in the mirror.
    pub regions: u32,
    /// Set: the region may differ between legs (to be or already on the
    /// legs).
    marked: Vec<AtomicU64>,
    /// Set: the mark is in a header on every leg that takes writes.
    durable: Vec<AtomicU64>,
    /// Set: a write entered the region since the last clearing pass.
    touched: Vec<AtomicU64>,
    /// Writes under way per region (counted from `enter` to `leave`).
    inflight: Vec<AtomicU32>,
}

fn word_bit(r: u32) -> (usize, u64) {
    ((r / 64) as usize, 1u64 << (r % 64))
}

impl Bitmap {
    /// Regions of `2^shift` pages over `capacity` blocks of which
    /// `blocks_per_page` make a page.
    pub fn new(shift: u8, capacity: u64, blocks_per_page: u64) -> Bitmap {
        let block_shift = u32::from(shift) + blocks_per_page.trailing_zeros();
        let regions = capacity.div_ceil(1 << block_shift) as u32;
        let words = regions.div_ceil(64) as usize;
        let zeros = |n| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        Bitmap {
            block_shift,
            shift,
            regions,
            marked: zeros(words),
            durable: zeros(words),
            touched: zeros(words),
            inflight: (0..regions).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Blocks per region.
    pub fn region_blocks(&self) -> u64 {
        1 << self.block_shift
    }

    /// The regions blocks `[lba, lba + blocks)` touch.
    pub fn span(&self, lba: u64, blocks: u64) -> core::ops::Range<u32> {
        let last = lba.saturating_add(blocks.max(1)) - 1;
        let first = (lba >> self.block_shift) as u32;
        let end = ((last >> self.block_shift) as u32 + 1).min(self.regions);
        first.min(end)..end
    }

    /// A write of blocks `[lba, lba + blocks)` is under way from now on;
    /// true if it may go to the legs at once. If not, its regions are
    /// marked and it must wait until [`ready`](Self::ready).
    pub fn enter(&self, lba: u64, blocks: u64) -> bool {
        let span = self.span(lba, blocks);
        for r in span.clone() {
            self.inflight[r as usize].fetch_add(1, SeqCst);
            let (w, bit) = word_bit(r);
            if self.touched[w].load(SeqCst) & bit == 0 {
                self.touched[w].fetch_or(bit, SeqCst);
            }
        }
        #[cfg(pollfs_mutants)]
        if crate::mutants::active(crate::mutants::Mutant::BitmapSkipsMark) {
            return true;
        }
        self.ready(lba, blocks)
    }

    /// True if every region of the write is marked on the legs; marks
    /// those that are not.
    pub fn ready(&self, lba: u64, blocks: u64) -> bool {
        let mut ready = true;
        for r in self.span(lba, blocks) {
            let (w, bit) = word_bit(r);
            if self.durable[w].load(SeqCst) & bit == 0 {
                self.marked[w].fetch_or(bit, SeqCst);
                ready = false;
            }
        }
        ready
    }

    /// A write that entered is no longer under way.
    pub fn leave(&self, lba: u64, blocks: u64) {
        for r in self.span(lba, blocks) {
            self.inflight[r as usize].fetch_sub(1, SeqCst);
        }
    }

    /// True if a mark waits to be written, leaving out the regions of a
    /// clearing pass (`clearing`): their marks are still on the legs, and
    /// the pass decides whether they stay.
    pub fn pending(&self, clearing: &[u64]) -> bool {
        self.marked
            .iter()
            .zip(&self.durable)
            .enumerate()
            .any(|(i, (m, d))| {
                let skip = clearing.get(i).copied().unwrap_or(0);
                m.load(SeqCst) & !d.load(SeqCst) & !skip != 0
            })
    }

    /// Regions marked.
    pub fn count(&self) -> u32 {
        self.marked
            .iter()
            .map(|w| w.load(SeqCst).count_ones())
            .sum()
    }

    /// True if region `r` is marked.
    pub fn is_marked(&self, r: u32) -> bool {
        let (w, bit) = word_bit(r);
        self.marked
            .get(w)
            .is_some_and(|m| m.load(SeqCst) & bit != 0)
    }

    /// The marked regions, as words, to write in a header.
    pub fn snapshot(&self) -> Vec<u64> {
        self.marked.iter().map(|w| w.load(SeqCst)).collect()
    }

    /// The header bytes of `words` (a snapshot).
    pub fn bits(words: &[u64]) -> [u8; BITMAP_BYTES] {
        let mut b = [0u8; BITMAP_BYTES];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = words.get(i / 8).map_or(0, |w| (w >> (8 * (i % 8))) as u8);
        }
        b
    }

    /// Marks every region set in a header's bitmap `h` (of this shift)
    /// as on the legs: the union of the legs' bitmaps at open.
    pub fn load(&self, h: &header::Bitmap) {
        for (i, &byte) in h.bits.iter().enumerate() {
            let (w, shift) = (i / 8, 8 * (i % 8));
            if let (Some(m), Some(d)) = (self.marked.get(w), self.durable.get(w)) {
                m.fetch_or(u64::from(byte) << shift, SeqCst);
                d.fetch_or(u64::from(byte) << shift, SeqCst);
            }
        }
    }

    /// A header holding snapshot `words` is on every leg that takes
    /// writes: those marks are durable, except for regions in `except`
    /// (being cleared).
    pub fn made_durable(&self, words: &[u64], except: &[u64]) {
        for (i, (&w, d)) in words.iter().zip(&self.durable).enumerate() {
            let keep_off = except.get(i).copied().unwrap_or(0);
            d.fetch_or(w & !keep_off, SeqCst);
        }
    }

    /// Starts a clearing pass: the marked regions that are on the legs,
    /// were not touched since the last pass and have no write under way
    /// lose their durable bit (writes that enter them from now on wait)
    /// and are returned; the touched bits start over.
    pub fn begin_clear(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.marked.len());
        for w in 0..self.marked.len() {
            let touched = self.touched[w].swap(0, SeqCst);
            let mut cand = self.marked[w].load(SeqCst) & self.durable[w].load(SeqCst) & !touched;
            let mut bits = cand;
            while bits != 0 {
                let bit = bits & bits.wrapping_neg();
                bits &= bits - 1;
                let r = w as u32 * 64 + bit.trailing_zeros();
                if self.inflight[r as usize].load(SeqCst) != 0 {
                    cand &= !bit;
                    continue;
                }
                self.durable[w].fetch_and(!bit, SeqCst);
                if self.inflight[r as usize].load(SeqCst) != 0 {
                    // A write entered before it could see the bit go.
                    self.durable[w].fetch_or(bit, SeqCst);
                    cand &= !bit;
                }
            }
            out.push(cand);
        }
        out
    }

    /// Ends a clearing pass whose flush finished on every leg, every leg
    /// still in sync: the regions of `clearing` no write entered since are
    /// unmarked; the others keep their mark (still on the legs).
    pub fn finish_clear(&self, clearing: &[u64]) {
        self.cancel_or_clear(clearing, true);
    }

    /// Abandons a clearing pass (a leg left, the flush failed): every
    /// region keeps its mark.
    pub fn cancel_clear(&self, clearing: &[u64]) {
        self.cancel_or_clear(clearing, false);
    }

    fn cancel_or_clear(&self, clearing: &[u64], clear: bool) {
        for (w, &cand) in clearing.iter().enumerate() {
            let mut bits = cand;
            while bits != 0 {
                let bit = bits & bits.wrapping_neg();
                bits &= bits - 1;
                let r = w as u32 * 64 + bit.trailing_zeros();
                if clear && self.inflight[r as usize].load(SeqCst) == 0 {
                    self.marked[w].fetch_and(!bit, SeqCst);
                    // A write that entered since marks it again (`ready`)
                    // and waits for the next header.
                } else {
                    self.durable[w].fetch_or(bit, SeqCst);
                }
            }
        }
    }

    /// Unmarks every region (a clean close with every leg in sync and no
    /// write under way).
    pub fn clear_all(&self) {
        for (m, d) in self.marked.iter().zip(&self.durable) {
            m.store(0, SeqCst);
            d.store(0, SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_waits_for_its_mark_and_a_clear_never_takes_a_busy_region() {
        // 3 regions of 256 pages of 8 blocks.
        let b = Bitmap::new(8, 3 * 2048 - 8, 8);
        assert_eq!(b.regions, 3);
        assert_eq!(b.span(2047, 2), 0..2);
        assert_eq!(b.span(5000, 1_000_000), 2..3);
        assert!(!b.enter(2047, 2), "clean regions: mark first");
        assert!(b.pending(&[]));
        assert!(!b.pending(&[0b11]));
        let s = b.snapshot();
        assert_eq!(s, [0b11]);
        b.made_durable(&s, &[0]);
        assert!(!b.pending(&[]));
        assert!(b.ready(2047, 2));
        // Under way: no pass takes it; touched since the last pass: not
        // taken; idle for a whole period: taken.
        assert_eq!(b.begin_clear(), [0]);
        b.leave(2047, 2);
        assert!(b.enter(4000, 1));
        b.leave(4000, 1);
        assert_eq!(b.begin_clear(), [0b01], "region 1 was touched");
        b.cancel_clear(&[0b01]);
        let c = b.begin_clear();
        assert_eq!(c, [0b11]);
        // A write that enters now waits, and keeps its region marked.
        assert!(!b.enter(0, 1));
        b.finish_clear(&c);
        assert_eq!(b.snapshot(), [0b01]);
        assert!(b.ready(0, 1), "kept: its mark never left the legs");
        b.leave(0, 1);
        // A cancelled pass gives every mark back.
        b.begin_clear();
        let c = b.begin_clear();
        assert_eq!(c, [0b01]);
        b.cancel_clear(&c);
        assert!(b.ready(0, 1));
        assert_eq!(Bitmap::bits(&[0x0102])[..3], [2, 1, 0]);
    }
}
