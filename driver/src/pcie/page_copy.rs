//! Copying a whole 4 KiB page between DMA memory and a caller's buffer:
//! the one leaf module of hosted DMA memory with unsafe code (the AVX2
//! loads and stores).
//!
//! Every cached 4 KiB read and every 4 KiB overwrite of the page cache
//! copies one page, and glibc's `memcpy` spends a size dispatch and a
//! loop of 128 bytes a round on it (412 instructions a page under
//! callgrind). A page's length is known here, so the copy is a fixed loop
//! of eight 32-byte moves a round, with no dispatch, when the CPU has
//! AVX2 (one cached flag test); without it, and for any other length,
//! `copy_from_slice` as before.
//!
//! Memory shared with a device as atomic words (VFIO memory, through
//! [`WordView`](crate::pcie::words::WordView)) cannot be copied with Rust
//! loads and stores: the device, or a page-cache writer under the cache's
//! seqlock, may write it during the copy, and a plain access would be a
//! data race. Word by word with atomics it costs about 1,400 instructions
//! a page, which LLVM cannot vectorize. [`from_words`] and [`to_words`]
//! copy a whole page in inline assembly instead (`vmovdqu`, 32 bytes a
//! move, `vzeroupper` after): the assembly is opaque to the compiler and
//! forms no Rust reference to the shared bytes, so a racing writer is a
//! race at the hardware level only, where x86 orders the moves' loads and
//! stores as the atomics' Acquire loads and Release stores are ordered
//! (plain moves under x86-TSO). A copy that raced a page-cache writer
//! fails the seqlock's version re-check and is discarded, and a frame the
//! device writes is read only after its completion, so no copy that raced
//! is used (whether a 32-byte move keeps each aligned word whole, which
//! the CPU does not promise, does not matter). Under Miri, which cannot
//! run assembly, and without AVX2 they copy nothing and the caller copies
//! word by word.
#![allow(unsafe_code)]

use core::sync::atomic::AtomicU64;

/// Bytes in a page.
const PAGE: usize = 4096;
/// 64-bit words in a page.
pub const PAGE_WORDS: usize = PAGE / 8;

/// Copies a page of shared words into `dst`, as if by Acquire loads of
/// each word; returns false, having copied nothing, where the assembly
/// copy cannot run (the caller then copies word by word).
#[inline(always)]
pub fn from_words(dst: &mut [u8; PAGE], src: &[AtomicU64; PAGE_WORDS]) -> bool {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (tested just above). `dst` is a
        // borrowed 4096-byte buffer no one else can touch; `src` is 512
        // words borrowed for the call (so the memory, VFIO's mapping
        // included, outlives it), and a pointer from the whole array is
        // valid for reads of all 4096 bytes, which others may write at the same
        // time: only the assembly reads them, and no Rust reference to
        // their bytes is formed.
        unsafe { page_asm(dst.as_mut_ptr(), src.as_ptr().cast::<u8>()) };
        return true;
    }
    let _ = (dst, src);
    false
}

/// Copies `src` into a page of shared words, as if by Release stores of
/// each word; returns false, having copied nothing, where the assembly
/// copy cannot run (the caller then copies word by word).
#[inline(always)]
pub fn to_words(dst: &[AtomicU64; PAGE_WORDS], src: &[u8; PAGE]) -> bool {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (tested just above). `dst` is 512
        // words borrowed for the call (the memory outlives it), and a
        // pointer from the whole array is valid for writes of all 4096
        // bytes through a shared reference (atomic words are interior
        // mutable); others may read or write them at the same time: only
        // the assembly writes them, and no Rust reference to their bytes
        // is formed. `src` is a borrowed 4096-byte buffer, which cannot
        // overlap words (a `&[u8]` cannot alias an `UnsafeCell`).
        unsafe { page_asm(dst.as_ptr().cast::<u8>().cast_mut(), src.as_ptr()) };
        return true;
    }
    let _ = (dst, src);
    false
}

/// Copies 4096 bytes from `src` to `dst` in 32-byte `vmovdqu` moves,
/// eight loads then eight stores a round, in address order, then
/// `vzeroupper`.
///
/// # Safety
///
/// The CPU must have AVX2; `src` must be valid for reads and `dst` for
/// writes of 4096 bytes for the whole call, and they must not overlap.
/// Either may be written by others during the call (that is the point:
/// the race is the hardware's, not Rust's).
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx2")]
unsafe fn page_asm(dst: *mut u8, src: *const u8) {
    // SAFETY: the caller passes pointers valid for 4096 bytes each, not
    // overlapping, and a CPU with AVX2. The loop reads `src + i` and
    // writes `dst + i` for `i` in `[0, 4096)` only (`end` counts up from
    // -4096 to 0 by 256, each round moving bytes `end .. end + 256`
    // before the pointers' ends); it touches no stack, and clobbers the
    // eight ymm registers it names, `end` and the flags.
    unsafe {
        core::arch::asm!(
            "2:",
            "vmovdqu ymm0, [{s} + {i}]",
            "vmovdqu ymm1, [{s} + {i} + 32]",
            "vmovdqu ymm2, [{s} + {i} + 64]",
            "vmovdqu ymm3, [{s} + {i} + 96]",
            "vmovdqu ymm4, [{s} + {i} + 128]",
            "vmovdqu ymm5, [{s} + {i} + 160]",
            "vmovdqu ymm6, [{s} + {i} + 192]",
            "vmovdqu ymm7, [{s} + {i} + 224]",
            "vmovdqu [{d} + {i}], ymm0",
            "vmovdqu [{d} + {i} + 32], ymm1",
            "vmovdqu [{d} + {i} + 64], ymm2",
            "vmovdqu [{d} + {i} + 96], ymm3",
            "vmovdqu [{d} + {i} + 128], ymm4",
            "vmovdqu [{d} + {i} + 160], ymm5",
            "vmovdqu [{d} + {i} + 192], ymm6",
            "vmovdqu [{d} + {i} + 224], ymm7",
            "add {i}, 256",
            "jnz 2b",
            "vzeroupper",
            s = in(reg) src.wrapping_add(PAGE),
            d = in(reg) dst.wrapping_add(PAGE),
            i = inout(reg) -(PAGE as isize) => _,
            out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
            out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
            options(nostack),
        );
    }
}

/// Copies `src` into `dst`; the lengths must match (as for
/// `copy_from_slice`, which panics otherwise: callers pass equal spans).
#[cfg(feature = "emu")]
#[inline(always)]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if let (Ok(d), Ok(s)) = (
        <&mut [u8; PAGE]>::try_from(&mut *dst),
        <&[u8; PAGE]>::try_from(src),
    ) {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (tested just above), which is all
            // `page_avx2` asks of its caller.
            unsafe { page_avx2(d, s) };
            return;
        }
    }
    dst.copy_from_slice(src);
}

/// Copies one page in 32-byte moves, eight loads then eight stores a
/// round, the stores aligned as glibc aligns them (a store across two
/// cache lines costs two): the first 32 bytes, then rounds from the
/// first aligned destination byte while a whole round fits, then the
/// page's last round, which overlaps bytes already copied.
///
/// # Safety
///
/// The CPU must have AVX2.
#[cfg(all(feature = "emu", target_arch = "x86_64"))]
#[target_feature(enable = "avx2")]
unsafe fn page_avx2(dst: &mut [u8; PAGE], src: &[u8; PAGE]) {
    use core::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_storeu_si256};
    const LANE: usize = 32;
    const ROUND: usize = 8 * LANE;
    let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
    // Eight lanes from byte `$at` of both pages.
    macro_rules! round {
        ($at:expr) => {{
            let (d, s) = (d.add($at).cast::<__m256i>(), s.add($at).cast::<__m256i>());
            let v0 = _mm256_loadu_si256(s);
            let v1 = _mm256_loadu_si256(s.add(1));
            let v2 = _mm256_loadu_si256(s.add(2));
            let v3 = _mm256_loadu_si256(s.add(3));
            let v4 = _mm256_loadu_si256(s.add(4));
            let v5 = _mm256_loadu_si256(s.add(5));
            let v6 = _mm256_loadu_si256(s.add(6));
            let v7 = _mm256_loadu_si256(s.add(7));
            _mm256_storeu_si256(d, v0);
            _mm256_storeu_si256(d.add(1), v1);
            _mm256_storeu_si256(d.add(2), v2);
            _mm256_storeu_si256(d.add(3), v3);
            _mm256_storeu_si256(d.add(4), v4);
            _mm256_storeu_si256(d.add(5), v5);
            _mm256_storeu_si256(d.add(6), v6);
            _mm256_storeu_si256(d.add(7), v7);
        }};
    }
    // 1 to 32: the first lane past byte 0 that starts on an aligned
    // destination byte.
    let first = LANE - d.addr() % LANE;
    // SAFETY: every move is 32 bytes at a byte offset in `[0, PAGE -
    // 32]` of `src` and `dst`, both `PAGE` bytes: the first lane at 0,
    // the rounds at `at` with `at + ROUND <= PAGE`, the last at `PAGE -
    // ROUND`. The moves need no alignment; `dst` is borrowed mutably and
    // `src` shared, so they do not overlap.
    unsafe {
        _mm256_storeu_si256(d.cast::<__m256i>(), _mm256_loadu_si256(s.cast::<__m256i>()));
        let mut at = first;
        while at + ROUND <= PAGE {
            round!(at);
            at += ROUND;
        }
        round!(PAGE - ROUND);
    }
}

#[cfg(test)]
mod tests {
    use super::{copy, PAGE};

    #[test]
    fn a_page_and_other_lengths_copy_exactly_at_any_alignment() {
        let src: Vec<u8> = (0..PAGE + 64).map(|i| (i * 7 + i / 251) as u8).collect();
        for skew in [0, 1, 17, 32, 63] {
            let mut dst = vec![0u8; PAGE + 128];
            copy(&mut dst[skew..skew + PAGE], &src[skew..skew + PAGE]);
            assert_eq!(&dst[skew..skew + PAGE], &src[skew..skew + PAGE]);
            assert!(dst[..skew].iter().all(|&b| b == 0), "nothing before");
            assert!(dst[skew + PAGE..].iter().all(|&b| b == 0), "nothing after");
        }
        for len in [0, 1, 64, PAGE - 1, PAGE + 1] {
            let mut dst = vec![0u8; len];
            copy(&mut dst, &src[..len]);
            assert_eq!(dst, src[..len]);
        }
    }
}
