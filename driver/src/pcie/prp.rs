//! Physical Region Page entries (NVMe 1.4, 4.3 "Physical Region Page Entry
//! and List").
//!
//! A transfer is described by the bus address of every memory page it
//! touches. PRP1 points at the first byte (which may sit anywhere in its
//! page, dword aligned); PRP2 is either the second page (two-page
//! transfers) or the address of a PRP list. A list page holds
//! `page_size / 8` entries; when more are needed the last entry of a list
//! page points at the next list page instead of at data.
//!
//! The builder is pure: it is told where the list pages live and hands each
//! list entry to a sink, so it is tested without any DMA memory.

use alloc::vec::Vec;

/// Why a PRP description was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PrpError {
    /// Zero-length transfer.
    Empty,
    /// First offset not dword aligned or not inside the first page.
    BadOffset,
    /// A page address is not page aligned.
    Unaligned,
    /// The number of page addresses does not match offset + length.
    PageCount,
    /// Not enough list pages to describe the transfer.
    ListTooSmall,
}

impl core::fmt::Display for PrpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PrpError::Empty => write!(f, "zero-length transfer"),
            PrpError::BadOffset => write!(f, "first offset is unaligned or outside its page"),
            PrpError::Unaligned => write!(f, "a page address is not page aligned"),
            PrpError::PageCount => write!(f, "page count does not match the transfer"),
            PrpError::ListTooSmall => write!(f, "not enough PRP list pages"),
        }
    }
}

impl core::error::Error for PrpError {}

/// The two PRP fields of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prps {
    /// PRP Entry 1.
    pub prp1: u64,
    /// PRP Entry 2 (0 when unused).
    pub prp2: u64,
}

/// Number of memory pages a transfer of `len` bytes starting `offset`
/// bytes into its first page touches.
pub fn pages_spanned(offset: usize, len: usize, page_size: usize) -> usize {
    offset.saturating_add(len).div_ceil(page_size.max(1))
}

/// Number of list pages needed for a transfer touching `pages` pages.
pub fn list_pages_needed(pages: usize, page_size: usize) -> usize {
    let per = page_size / 8;
    if pages <= 2 || per < 2 {
        return 0;
    }
    // Entries after the first page; every list page but the last gives one
    // slot up to the chain pointer.
    let entries = pages - 1;
    if entries <= per {
        1
    } else {
        (entries - 1).div_ceil(per - 1)
    }
}

/// Builds PRPs for a transfer of `len` bytes that starts `offset` bytes
/// into `pages[0]` and continues through `pages[1..]` in order.
///
/// `list_pages` are the bus addresses of the pages the list may occupy;
/// `sink(list_page_index, entry_index, value)` stores each list entry.
pub fn build(
    offset: usize,
    len: usize,
    pages: &[u64],
    page_size: usize,
    list_pages: &[u64],
    sink: &mut dyn FnMut(usize, usize, u64),
) -> Result<Prps, PrpError> {
    if len == 0 {
        return Err(PrpError::Empty);
    }
    if offset >= page_size || offset % 4 != 0 {
        return Err(PrpError::BadOffset);
    }
    let mask = page_size as u64 - 1;
    if pages.iter().any(|p| p & mask != 0) {
        return Err(PrpError::Unaligned);
    }
    if pages.len() != pages_spanned(offset, len, page_size) {
        return Err(PrpError::PageCount);
    }
    let [first, rest @ ..] = pages else {
        return Err(PrpError::PageCount);
    };
    let prp1 = first | offset as u64;
    match rest {
        [] => Ok(Prps { prp1, prp2: 0 }),
        [second] => Ok(Prps {
            prp1,
            prp2: *second,
        }),
        _ => {
            let needed = list_pages_needed(pages.len(), page_size);
            if list_pages.len() < needed || list_pages.iter().any(|p| p & mask != 0) {
                return Err(PrpError::ListTooSmall);
            }
            let per = page_size / 8;
            let mut page = 0;
            let mut slot = 0;
            for (i, &addr) in rest.iter().enumerate() {
                let remaining = rest.len() - i;
                if slot == per - 1 && remaining > 1 {
                    // Chain to the next list page.
                    let next = list_pages
                        .get(page + 1)
                        .copied()
                        .ok_or(PrpError::ListTooSmall)?;
                    sink(page, slot, next);
                    page += 1;
                    slot = 0;
                }
                sink(page, slot, addr);
                slot += 1;
            }
            let prp2 = list_pages.first().copied().ok_or(PrpError::ListTooSmall)?;
            Ok(Prps { prp1, prp2 })
        }
    }
}

/// The device side: expands PRPs into the `(bus address, length)` segments
/// of a transfer of `len` bytes, reading list entries with `read_entry`
/// (which fails on unmapped addresses). Used by the emulated controller and
/// by tests that check what [`build`] produced.
pub fn walk(
    prp1: u64,
    prp2: u64,
    len: usize,
    page_size: usize,
    read_entry: &mut dyn FnMut(u64) -> Option<u64>,
) -> Result<Vec<(u64, usize)>, PrpError> {
    if len == 0 {
        return Err(PrpError::Empty);
    }
    let mask = page_size as u64 - 1;
    let offset = (prp1 & mask) as usize;
    if offset % 4 != 0 {
        return Err(PrpError::BadOffset);
    }
    let mut segs = Vec::new();
    let first = (page_size - offset).min(len);
    segs.push((prp1, first));
    let mut left = len - first;
    if left == 0 {
        return Ok(segs);
    }
    if left <= page_size {
        if prp2 & mask != 0 {
            return Err(PrpError::Unaligned);
        }
        segs.push((prp2, left));
        return Ok(segs);
    }
    if prp2 & 7 != 0 {
        return Err(PrpError::Unaligned);
    }
    let mut entry_addr = prp2;
    // A hostile list could chain to itself; every honest step either moves
    // data or follows one chain pointer before moving data.
    let mut steps = 2 * (left / page_size + 2);
    while left > 0 {
        steps = steps.checked_sub(1).ok_or(PrpError::ListTooSmall)?;
        let entry = read_entry(entry_addr).ok_or(PrpError::ListTooSmall)?;
        let last_in_page = entry_addr & mask == mask - 7;
        if last_in_page && left > page_size {
            // Chain pointer to the next list page.
            if entry & 7 != 0 {
                return Err(PrpError::Unaligned);
            }
            entry_addr = entry;
            continue;
        }
        if entry & mask != 0 {
            return Err(PrpError::Unaligned);
        }
        let n = left.min(page_size);
        segs.push((entry, n));
        left -= n;
        entry_addr = entry_addr.checked_add(8).ok_or(PrpError::ListTooSmall)?;
    }
    Ok(segs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::vec;

    const PS: usize = 4096;

    /// Builds into a map standing in for memory, walks it back, and checks
    /// the walk reproduces exactly the pages and lengths given.
    fn round_trip(offset: usize, len: usize) -> (Prps, usize) {
        let n = pages_spanned(offset, len, PS);
        let pages: Vec<u64> = (0..n as u64).map(|i| 0x10_0000 + i * 0x3000).collect();
        let lists: Vec<u64> = (0..8u64).map(|i| 0x900_0000 + i * 0x1_0000).collect();
        let mut mem = BTreeMap::new();
        let prps = build(offset, len, &pages, PS, &lists, &mut |p, s, v| {
            mem.insert(lists[p] + 8 * s as u64, v);
        })
        .unwrap();
        let segs = walk(prps.prp1, prps.prp2, len, PS, &mut |a| mem.get(&a).copied()).unwrap();
        assert_eq!(segs.len(), n);
        assert_eq!(segs[0].0, pages[0] + offset as u64);
        let total: usize = segs.iter().map(|s| s.1).sum();
        assert_eq!(total, len);
        for (seg, page) in segs.iter().skip(1).zip(pages.iter().skip(1)) {
            assert_eq!(seg.0, *page);
        }
        (prps, mem.len())
    }

    #[test]
    fn one_and_two_pages_need_no_list() {
        assert_eq!(round_trip(0, 4096).0.prp2, 0);
        assert_eq!(round_trip(0, 512).0.prp2, 0);
        let (p, entries) = round_trip(0, 8192);
        assert_eq!(p.prp2, 0x10_3000);
        assert_eq!(entries, 0);
        // Unaligned start spilling into a second page.
        let (p, _) = round_trip(4000, 200);
        assert_eq!(p.prp1, 0x10_0000 + 4000);
        assert_eq!(p.prp2, 0x10_3000);
    }

    #[test]
    fn lists_cover_unaligned_and_multi_page_transfers() {
        let (p, entries) = round_trip(0, 3 * PS);
        assert_eq!(p.prp2, 0x900_0000);
        assert_eq!(entries, 2);
        let (_, entries) = round_trip(512, 3 * PS);
        assert_eq!(entries, 3);
        // 513 pages: 512 entries fit exactly in one list page.
        let (_, entries) = round_trip(0, 513 * PS);
        assert_eq!(entries, 512);
        // 514 pages need a chained second list page.
        let (_, entries) = round_trip(0, 514 * PS);
        assert_eq!(entries, 514);
        let (_, entries) = round_trip(100 * 4, 1500 * PS);
        assert!(entries > 1500);
        assert_eq!(list_pages_needed(2, PS), 0);
        assert_eq!(list_pages_needed(513, PS), 1);
        assert_eq!(list_pages_needed(514, PS), 2);
        assert_eq!(list_pages_needed(1 + 511 + 512, PS), 2);
        assert_eq!(list_pages_needed(1 + 511 + 513, PS), 3);
    }

    #[test]
    fn bad_descriptions_are_refused() {
        let sink = &mut |_: usize, _: usize, _: u64| {};
        assert_eq!(build(0, 0, &[0], PS, &[], sink), Err(PrpError::Empty));
        assert_eq!(build(3, 8, &[0], PS, &[], sink), Err(PrpError::BadOffset));
        assert_eq!(
            build(4096, 8, &[0], PS, &[], sink),
            Err(PrpError::BadOffset)
        );
        assert_eq!(build(0, 8, &[5], PS, &[], sink), Err(PrpError::Unaligned));
        assert_eq!(
            build(0, 8192, &[0], PS, &[], sink),
            Err(PrpError::PageCount)
        );
        let pages = vec![0u64; 3];
        assert_eq!(
            build(0, 3 * PS, &pages, PS, &[], sink),
            Err(PrpError::ListTooSmall)
        );
        let pages = vec![0u64; 600];
        assert_eq!(
            build(0, 600 * PS, &pages, PS, &[0x1000], sink),
            Err(PrpError::ListTooSmall)
        );
        // A walk over a list the device cannot read fails cleanly.
        assert!(walk(0, 0x1000, 3 * PS, PS, &mut |_| None).is_err());
        assert_eq!(walk(2, 0, 8, PS, &mut |_| None), Err(PrpError::BadOffset));
        // A list whose chain pointer points at itself terminates.
        let looped = walk(0, 0x1ff8, 1000 * PS, PS, &mut |_| Some(0x1ff8));
        assert_eq!(looped, Err(PrpError::ListTooSmall));
    }
}
