//! Byte-level access to memory shared with a device, viewed as atomic
//! 64-bit words.
//!
//! Memory that a device (or another thread) may touch at any moment cannot
//! be copied with plain loads and stores without a data race; atomic words
//! make every access well defined. Whole words are loaded with Acquire and
//! stored with Release, so a completion's word holding the status (its
//! second, DW2 and DW3), written last, is seen only after the rest of the
//! entry. An access whose offset and length are whole words is in bounds
//! or refused outright, so the queue's entry accesses inline to plain
//! loads and stores. A write that covers part of a
//! word is a compare-and-swap on that word: callers must not do partial
//! writes to words the device may be writing at the same time (the driver
//! writes whole entries, whole PRP words, and frames it owns).
//!
//! A whole page at a word-aligned offset (a cached read's or overwrite's
//! copy) moves in 32-byte moves where the CPU has AVX2
//! (`pcie::page_copy`, inline assembly, in hosted builds), its loads and
//! stores ordered as the word loop's; a copy that races a writer is never
//! used (`page_copy` says why that holds).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::pcie::hal::DmaError;
#[cfg(feature = "std")]
use crate::pcie::page_copy::{self, PAGE_WORDS};

/// Bytes in a page, the span the whole-page copy takes.
#[cfg(feature = "std")]
const PAGE: usize = PAGE_WORDS * 8;

/// `len` bytes over `words` (`words.len() * 8 >= len`).
#[derive(Clone, Copy, Debug)]
pub struct WordView<'a> {
    words: &'a [AtomicU64],
    len: usize,
}

impl<'a> WordView<'a> {
    /// A view of the first `len` bytes of `words` (clipped to their size).
    #[inline]
    pub fn new(words: &'a [AtomicU64], len: usize) -> WordView<'a> {
        // A slice spans at most `isize::MAX` bytes, so its length in
        // bytes cannot overflow.
        WordView {
            words,
            len: len.min(core::mem::size_of_val(words)),
        }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    #[inline]
    fn check(&self, offset: usize, n: usize) -> Result<(), DmaError> {
        crate::pcie::hal::check_span(offset, n, self.len)
    }
    /// The words covering `offset..offset + n` when both ends fall on word
    /// boundaries: queue entries and page-sized transfers always do, and
    /// then whole words move without per-byte bookkeeping (the hot path).
    #[inline]
    fn aligned(&self, offset: usize, n: usize) -> Option<&'a [AtomicU64]> {
        if offset % 8 != 0 || n % 8 != 0 {
            return None;
        }
        self.words.get(offset / 8..offset.checked_add(n)? / 8)
    }
    #[inline]
    fn word(&self, index: usize) -> Result<&'a AtomicU64, DmaError> {
        self.words.get(index).ok_or(DmaError::OutOfBounds)
    }
    /// Reads the little-endian `u32` at a 4-byte aligned `offset` with one
    /// load (a completion's phase-tag dword, polled constantly).
    #[inline]
    pub fn read_u32(&self, offset: usize) -> Result<u32, DmaError> {
        if offset % 4 != 0 {
            let mut b = [0u8; 4];
            self.read_slow(offset, &mut b)?;
            return Ok(u32::from_le_bytes(b));
        }
        self.check(offset, 4)?;
        let v = self.word(offset / 8)?.load(Ordering::Acquire) >> ((offset % 8) * 8);
        Ok(v as u32)
    }
    /// Copies bytes out. Whole aligned words (queue entries, frames) are
    /// loaded inline; anything else takes the byte path out of line.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        if offset % 8 != 0 || dst.len() % 8 != 0 {
            return self.read_slow(offset, dst);
        }
        // Whole words are in bounds or not at all, so a caller whose span
        // is known to be word aligned (a queue entry's word) never reaches
        // the byte path.
        match self.aligned(offset, dst.len()) {
            Some(words) if offset + dst.len() <= self.len => {
                #[cfg(feature = "std")]
                if let (Ok(d), Ok(w)) = (
                    <&mut [u8; PAGE]>::try_from(&mut *dst),
                    <&[AtomicU64; PAGE_WORDS]>::try_from(words),
                ) {
                    if page_copy::from_words(d, w) {
                        return Ok(());
                    }
                }
                for (w, d) in words.iter().zip(dst.chunks_exact_mut(8)) {
                    d.copy_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
                }
                Ok(())
            }
            _ => Err(DmaError::OutOfBounds),
        }
    }
    #[inline(never)]
    fn read_slow(&self, offset: usize, dst: &mut [u8]) -> Result<(), DmaError> {
        self.check(offset, dst.len())?;
        let mut done = 0;
        // Partial first word, then whole words in one bounds-checked slice
        // (a tight loop of plain loads), then the partial last word.
        while done < dst.len() && (offset + done) % 8 != 0 {
            done += self.read_part(offset + done, &mut dst[done..])?;
        }
        let whole = (dst.len() - done) / 8;
        let first = (offset + done) / 8;
        let words = self
            .words
            .get(first..first + whole)
            .ok_or(DmaError::OutOfBounds)?;
        for (w, d) in words
            .iter()
            .zip(dst[done..done + whole * 8].chunks_exact_mut(8))
        {
            d.copy_from_slice(&w.load(Ordering::Acquire).to_le_bytes());
        }
        done += whole * 8;
        while done < dst.len() {
            done += self.read_part(offset + done, &mut dst[done..])?;
        }
        Ok(())
    }
    /// Copies out the bytes of one word from `pos`; returns how many.
    fn read_part(&self, pos: usize, dst: &mut [u8]) -> Result<usize, DmaError> {
        let (w, b) = (pos / 8, pos % 8);
        let n = (8 - b).min(dst.len());
        let bytes = self.word(w)?.load(Ordering::Acquire).to_le_bytes();
        dst[..n].copy_from_slice(&bytes[b..b + n]);
        Ok(n)
    }
    /// Copies bytes in; as [`read`](Self::read), whole aligned words
    /// inline.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        if offset % 8 != 0 || src.len() % 8 != 0 {
            return self.write_slow(offset, src);
        }
        match self.aligned(offset, src.len()) {
            Some(words) if offset + src.len() <= self.len => {
                #[cfg(feature = "std")]
                if let (Ok(w), Ok(s)) = (
                    <&[AtomicU64; PAGE_WORDS]>::try_from(words),
                    <&[u8; PAGE]>::try_from(src),
                ) {
                    if page_copy::to_words(w, s) {
                        return Ok(());
                    }
                }
                for (w, c) in words.iter().zip(src.chunks_exact(8)) {
                    let mut v = [0u8; 8];
                    v.copy_from_slice(c);
                    w.store(u64::from_le_bytes(v), Ordering::Release);
                }
                Ok(())
            }
            _ => Err(DmaError::OutOfBounds),
        }
    }
    /// Writes `src` as consecutive little-endian `u32`s: pairs of dwords
    /// as whole words when `offset` is word aligned and the count even (a
    /// queue entry), else through the byte path.
    // Always inlined: a queue entry's fixed size then makes it eight
    // stores (out of line, for any length, it counted 65 instructions).
    #[inline(always)]
    pub fn write_u32s(&self, offset: usize, src: &[u32]) -> Result<(), DmaError> {
        let n = src.len().saturating_mul(4);
        match self.aligned(offset, n) {
            Some(words) if src.len() % 2 == 0 && offset + n <= self.len => {
                for (w, pair) in words.iter().zip(src.chunks_exact(2)) {
                    let v = u64::from(pair[0]) | (u64::from(pair[1]) << 32);
                    w.store(v, Ordering::Release);
                }
                Ok(())
            }
            Some(_) if src.len() % 2 == 0 => Err(DmaError::OutOfBounds),
            _ => {
                self.check(offset, n)?;
                for (i, &v) in src.iter().enumerate() {
                    self.write_slow(offset + i * 4, &v.to_le_bytes())?;
                }
                Ok(())
            }
        }
    }
    #[inline(never)]
    fn write_slow(&self, offset: usize, src: &[u8]) -> Result<(), DmaError> {
        self.check(offset, src.len())?;
        let mut done = 0;
        while done < src.len() && (offset + done) % 8 != 0 {
            done += self.write_part(offset + done, &src[done..])?;
        }
        let whole = (src.len() - done) / 8;
        let first = (offset + done) / 8;
        let words = self
            .words
            .get(first..first + whole)
            .ok_or(DmaError::OutOfBounds)?;
        for (w, s) in words
            .iter()
            .zip(src[done..done + whole * 8].chunks_exact(8))
        {
            let mut v = [0u8; 8];
            v.copy_from_slice(s);
            w.store(u64::from_le_bytes(v), Ordering::Release);
        }
        done += whole * 8;
        while done < src.len() {
            done += self.write_part(offset + done, &src[done..])?;
        }
        Ok(())
    }
    /// Copies in the bytes of one word from `pos` (a compare-and-swap, so
    /// the word's other bytes are kept); returns how many.
    fn write_part(&self, pos: usize, src: &[u8]) -> Result<usize, DmaError> {
        let (w, b) = (pos / 8, pos % 8);
        let n = (8 - b).min(src.len());
        let part = &src[..n];
        let _ = self
            .word(w)?
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                let mut bytes = old.to_le_bytes();
                bytes[b..b + n].copy_from_slice(part);
                Some(u64::from_le_bytes(bytes))
            });
        Ok(n)
    }
    /// Sets a run of bytes.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), DmaError> {
        self.check(offset, len)?;
        let chunk = [byte; 256];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len());
            self.write(offset + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn bytes_round_trip_at_any_alignment() {
        let words: Vec<AtomicU64> = (0..13).map(|_| AtomicU64::new(0)).collect();
        let m = WordView::new(&words, 100);
        assert_eq!(m.len(), 100);
        let src: Vec<u8> = (0..37).collect();
        m.write(5, &src).unwrap();
        let mut dst = vec![0u8; 37];
        m.read(5, &mut dst).unwrap();
        assert_eq!(dst, src);
        let mut one = [0u8; 1];
        m.read(4, &mut one).unwrap();
        assert_eq!(one, [0]);
        assert_eq!(m.read(90, &mut dst), Err(DmaError::OutOfBounds));
        assert_eq!(m.write(usize::MAX, &src), Err(DmaError::OutOfBounds));
        m.fill(0, 100, 0xee).unwrap();
        m.read(60, &mut dst).unwrap();
        assert!(dst.iter().all(|&b| b == 0xee));
        assert_eq!(
            WordView::new(&words, 1000).len(),
            104,
            "clipped to the words"
        );
    }

    #[test]
    fn dwords_land_as_their_little_endian_bytes() {
        let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let m = WordView::new(&words, 30);
        let dws = [0x0403_0201u32, 0x0807_0605, 0x0c0b_0a09, 0x100f_0e0d];
        for off in [0, 4, 12] {
            m.fill(0, 30, 0).unwrap();
            m.write_u32s(16, &dws[2..]).unwrap();
            m.write_u32s(off, &dws[..3]).unwrap();
            let mut b = [0u8; 12];
            m.read(off, &mut b).unwrap();
            assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], "offset {off}");
        }
        assert_eq!(m.write_u32s(24, &dws[..2]), Err(DmaError::OutOfBounds));
        assert_eq!(m.write_u32s(28, &dws[..1]), Err(DmaError::OutOfBounds));
    }

    #[test]
    fn word_fast_paths_agree_with_the_byte_path() {
        let words: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
        let m = WordView::new(&words, 60);
        let src: Vec<u8> = (1..=48).collect();
        m.write(8, &src).unwrap();
        let mut dst = vec![0u8; 48];
        m.read(8, &mut dst).unwrap();
        assert_eq!(dst, src);
        for off in [8, 12, 16, 20, 52] {
            let mut dword = [0u8; 4];
            m.read(off, &mut dword).unwrap();
            let mut bytes = [0u8; 4];
            for (i, b) in bytes.iter_mut().enumerate() {
                let mut one = [0u8; 1];
                m.read(off + i, &mut one).unwrap();
                *b = one[0];
            }
            assert_eq!(dword, bytes, "offset {off}");
        }
        let mut dword = [0u8; 4];
        assert_eq!(m.read(60, &mut dword), Err(DmaError::OutOfBounds));
        assert_eq!(m.write(56, &src[..8]), Err(DmaError::OutOfBounds));
    }

    /// A page pattern that differs at every byte and with `seed`.
    fn pattern(seed: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251 + seed) as u8).collect()
    }

    #[test]
    fn whole_pages_round_trip_at_every_offset_and_buffer_alignment() {
        const PAGE: usize = 4096;
        // Two pages and a word, so a page fits at every word offset.
        let words: Vec<AtomicU64> = (0..2 * PAGE / 8 + 1).map(|_| AtomicU64::new(0)).collect();
        let m = WordView::new(&words, 2 * PAGE + 8);
        let mut backing = vec![0u8; PAGE + 64];
        // Every word offset (under Miri, which interprets every word
        // access, every 64th), then offsets the byte path takes.
        let step = if cfg!(miri) { 512 } else { 8 };
        for (n, offset) in (0..=PAGE + 8)
            .step_by(step)
            .chain([8, 1, 3, 4, 4093])
            .enumerate()
        {
            let skew = n % 33;
            let src = pattern(n, PAGE);
            m.fill(0, m.len(), 0x5a).unwrap();
            m.write(offset, &src).unwrap();
            let dst = &mut backing[skew..skew + PAGE];
            dst.fill(0);
            m.read(offset, dst).unwrap();
            assert_eq!(dst, &src[..], "offset {offset}, buffer skew {skew}");
            // The bytes around the page are untouched, and the word path
            // reads what the page copy wrote.
            let mut around = [0u8; 1];
            if offset > 0 {
                m.read(offset - 1, &mut around).unwrap();
                assert_eq!(around, [0x5a], "before offset {offset}");
            }
            if offset + PAGE < m.len() {
                m.read(offset + PAGE, &mut around).unwrap();
                assert_eq!(around, [0x5a], "after offset {offset}");
            }
            let mut word = [0u8; 8];
            m.read(offset + PAGE - 8, &mut word).unwrap();
            assert_eq!(word, src[PAGE - 8..], "last word at offset {offset}");
        }
        // A page past the view's length is refused even where the words
        // behind the view would hold it.
        let short = WordView::new(&words, PAGE + 12);
        let mut page = vec![0u8; PAGE];
        assert_eq!(short.read(16, &mut page), Err(DmaError::OutOfBounds));
        assert_eq!(short.write(16, &page), Err(DmaError::OutOfBounds));
        assert_eq!(short.read(8, &mut page), Ok(()));
    }

    #[test]
    fn a_page_copied_while_it_is_rewritten_holds_every_word_whole() {
        // One thread rewrites a page with one byte value after another
        // for as long as another copies it out: a copy may mix writes,
        // but each word must come from one of them (its eight bytes
        // equal), as when each word is loaded atomically. The word loop
        // promises it; the 32-byte moves keep it on x86 CPUs as built
        // (a move is split, if at all, at a cache-line boundary), which
        // this checks on the machine at hand.
        const PAGE: usize = 4096;
        // Miri interprets every word access: a few copies there.
        const COPIES: usize = if cfg!(miri) { 4 } else { 5000 };
        let words: Vec<AtomicU64> = (0..PAGE / 8).map(|_| AtomicU64::new(0)).collect();
        let m = WordView::new(&words, PAGE);
        let done = core::sync::atomic::AtomicBool::new(false);
        let mixed = std::thread::scope(|s| {
            s.spawn(|| {
                let mut k = 0u8;
                while !done.load(Ordering::Acquire) {
                    k = k.wrapping_add(1);
                    m.write(0, &[k; PAGE]).unwrap();
                }
            });
            let mut page = vec![0u8; PAGE];
            let mut mixed = 0;
            for _ in 0..COPIES {
                m.read(0, &mut page).unwrap();
                for word in page.chunks_exact(8) {
                    assert!(word.iter().all(|&b| b == word[0]), "torn word {word:?}");
                }
                mixed += usize::from(page.iter().any(|&b| b != page[0]));
            }
            done.store(true, Ordering::Release);
            mixed
        });
        // How often a copy mixed two writes depends on the scheduler; it
        // is not asserted, only reported.
        std::println!("copies that mixed writes: {mixed} of {COPIES}");
    }
}
