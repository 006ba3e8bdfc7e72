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
#![allow(unsafe_code)]

/// Bytes in a page.
const PAGE: usize = 4096;

/// Copies `src` into `dst`; the lengths must match (as for
/// `copy_from_slice`, which panics otherwise: callers pass equal spans).
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
#[cfg(target_arch = "x86_64")]
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
