//! A per-file page index: a lock-free radix tree from page index to cache
//! slot.
//!
//! The first [`HEAD_PAGES`] pages (32 KiB) have entries inside the index
//! itself, so a small file's cached pages cost no node (a node pair is
//! 6 KiB, more than the page it would find). Past them, four levels of
//! 256 entries cover 2^32 pages (16 TiB). The first 2^16 pages (256 MiB)
//! hang off a two-level subtree of their own, so a lookup in a file's
//! first 256 MiB walks two levels, not four. Nodes are created on first
//! use with `spin::Once` and never freed while anyone can reach the file:
//! a lookup is one, two or four dependent atomic loads and takes no lock.
//! Only the holder of the sole reference to the file frees them
//! ([`Radix::drop_nodes`], with `&mut`), once no entry names a cached page.
//!
//! A leaf entry is one `u64`: a generation in the high half, `slot + 1` in
//! the low half (0 means empty). Every change bumps the generation, so a
//! compare-and-swap from an [`Entry`] fails if the entry changed at all since
//! it was read, even if it came back to the same slot (the ABA problem:
//! without it, a slot evicted and refilled with the same page could be
//! orphaned by an insert that decided from an older look). An entry may be
//! stale (its slot was evicted and reused): callers always check the slot's
//! own key, so stale entries read as misses and are replaced on insertion.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicU64, Ordering};

use spin::Once;

use crate::units::PageIndex;

const BITS: u32 = 8;
const FANOUT: usize = 1 << BITS;
const MASK: u64 = (FANOUT - 1) as u64;

/// Pages addressable by the index.
pub const MAX_PAGES: u64 = 1 << (4 * BITS);
const _: () = assert!(MAX_PAGES == crate::units::MAX_FILE_PAGES);

#[derive(Debug)]
struct Leaf {
    slots: [AtomicU64; FANOUT],
}

/// A leaf entry as read, for a later compare-and-swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Entry(u64);

impl Entry {
    /// The slot the entry names, if any.
    pub fn slot(self) -> Option<u32> {
        ((self.0 & 0xffff_ffff) as u32).checked_sub(1)
    }
    fn next(self, slot: Option<u32>) -> Entry {
        let generation = (self.0 >> 32).wrapping_add(1);
        Entry((generation << 32) | u64::from(slot.map_or(0, |s| s + 1)))
    }
}

#[derive(Debug)]
struct Node<T> {
    children: [Once<Box<T>>; FANOUT],
}

impl<T> Node<T> {
    fn new() -> Node<T> {
        Node {
            children: core::array::from_fn(|_| Once::new()),
        }
    }
}

type L1 = Node<Leaf>;
type L2 = Node<L1>;
type L3 = Node<L2>;

/// Pages under [`Radix`]'s `low` subtree.
const LOW_PAGES: u64 = 1 << (2 * BITS);

/// Pages whose entries are inside the [`Radix`]: a file of up to this
/// many pages makes no node.
pub const HEAD_PAGES: usize = 8;

/// The page index of one file.
#[derive(Debug, Default)]
pub struct Radix {
    /// Pages `[0, HEAD_PAGES)`.
    head: [AtomicU64; HEAD_PAGES],
    /// Pages `[HEAD_PAGES, LOW_PAGES)` (its first leaf's first
    /// `HEAD_PAGES` entries are never used).
    low: Once<Box<L1>>,
    /// Pages `[LOW_PAGES, MAX_PAGES)` (its first `L1` is never made).
    root: Once<Box<L3>>,
}

fn digit(index: u64, level: u32) -> usize {
    ((index >> (level * BITS)) & MASK) as usize
}

impl Radix {
    /// An empty index.
    pub const fn new() -> Radix {
        Radix {
            head: [const { AtomicU64::new(0) }; HEAD_PAGES],
            low: Once::new(),
            root: Once::new(),
        }
    }

    /// The word holding `index`'s entry, if its node exists.
    #[inline]
    fn word(&self, index: PageIndex) -> Option<&AtomicU64> {
        if index.0 < HEAD_PAGES as u64 {
            return self.head.get(index.0 as usize);
        }
        self.leaf(index).map(|l| &l.slots[digit(index.0, 0)])
    }

    /// The word holding `index`'s entry, making its nodes if needed.
    fn word_or_create(&self, index: PageIndex) -> Option<&AtomicU64> {
        if index.0 < HEAD_PAGES as u64 {
            return self.head.get(index.0 as usize);
        }
        self.leaf_or_create(index)
            .map(|l| &l.slots[digit(index.0, 0)])
    }

    /// True if any node past the head exists (it holds memory).
    pub fn has_nodes(&self) -> bool {
        self.low.get().is_some() || self.root.get().is_some()
    }

    /// Frees every node past the head, emptying their entries. The caller
    /// holds the only reference to the file, and none of those entries
    /// names a page still cached for it (its stale entries read as misses
    /// anyway, so a page read again later makes the nodes anew).
    pub fn drop_nodes(&mut self) {
        self.low = Once::new();
        self.root = Once::new();
    }

    #[inline]
    fn leaf(&self, index: PageIndex) -> Option<&Leaf> {
        let i = index.0;
        if i < LOW_PAGES {
            return self.low.get()?.children[digit(i, 1)].get().map(|b| &**b);
        }
        if i >= MAX_PAGES {
            return None;
        }
        let l2 = self.root.get()?.children[digit(i, 3)].get()?;
        let l1 = l2.children[digit(i, 2)].get()?;
        l1.children[digit(i, 1)].get().map(|b| &**b)
    }

    fn leaf_or_create(&self, index: PageIndex) -> Option<&Leaf> {
        let i = index.0;
        if i >= MAX_PAGES {
            return None;
        }
        let l1 = if i < LOW_PAGES {
            self.low.call_once(|| Box::new(Node::new()))
        } else {
            let l3 = self.root.call_once(|| Box::new(Node::new()));
            let l2 = l3.children[digit(i, 3)].call_once(|| Box::new(Node::new()));
            l2.children[digit(i, 2)].call_once(|| Box::new(Node::new()))
        };
        let leaf = l1.children[digit(i, 1)].call_once(|| {
            Box::new(Leaf {
                slots: core::array::from_fn(|_| AtomicU64::new(0)),
            })
        });
        Some(leaf)
    }

    /// The entry for `index` (empty if never set or out of range).
    #[inline]
    pub fn entry(&self, index: PageIndex) -> Entry {
        self.word(index)
            .map_or(Entry(0), |w| Entry(w.load(Ordering::Acquire)))
    }

    /// The slot recorded for `index`, possibly stale.
    #[inline]
    pub fn get(&self, index: PageIndex) -> Option<u32> {
        self.entry(index).slot()
    }

    /// Sets the entry for `index` to `new` if it is still exactly `seen`.
    /// Returns false if it changed or the index is out of range.
    pub fn replace(&self, index: PageIndex, seen: Entry, new: Option<u32>) -> bool {
        let Some(word) = self.word_or_create(index) else {
            return false;
        };
        word.compare_exchange(
            seen.0,
            seen.next(new).0,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
    }

    /// Empties the entry for `index` if it names `slot`.
    pub fn remove(&self, index: PageIndex, slot: u32) -> bool {
        let seen = self.entry(index);
        seen.slot() == Some(slot) && self.replace(index, seen, None)
    }

    /// Calls `f(index, slot)` for every non-empty entry in `[start, end)`, in
    /// index order, skipping subtrees that were never created.
    pub fn scan(&self, start: PageIndex, end: PageIndex, mut f: impl FnMut(PageIndex, u32)) {
        let end = end.0.min(MAX_PAGES);
        for i in start.0..end.min(HEAD_PAGES as u64) {
            let raw = Entry(self.head[i as usize].load(Ordering::Acquire));
            if let Some(s) = raw.slot() {
                f(PageIndex(i), s);
            }
        }
        let start = PageIndex(start.0.max(HEAD_PAGES as u64));
        let mut each_leaf = |base: u64, leaf: &Leaf| {
            let lo = start.0.max(base) - base;
            let hi = (end - base).min(FANOUT as u64);
            for j in lo..hi {
                let raw = Entry(leaf.slots[j as usize].load(Ordering::Acquire));
                if let Some(s) = raw.slot() {
                    f(PageIndex(base + j), s);
                }
            }
        };
        if let Some(l1) = self.low.get() {
            l1.scan(0, 1, start.0, end.min(LOW_PAGES), &mut each_leaf);
        }
        if let Some(l3) = self.root.get() {
            l3.scan(0, 3, start.0.max(LOW_PAGES), end, &mut each_leaf);
        }
    }
}

/// Walks the leaves under a node that overlap `[start, end)`.
trait Walk {
    /// `base`: first page index under this node; `level`: its height (leaf = 0).
    fn scan(&self, base: u64, level: u32, start: u64, end: u64, f: &mut dyn FnMut(u64, &Leaf));
}

impl Walk for Leaf {
    fn scan(&self, base: u64, _level: u32, _start: u64, _end: u64, f: &mut dyn FnMut(u64, &Leaf)) {
        f(base, self)
    }
}

impl<T: Walk> Walk for Node<T> {
    fn scan(&self, base: u64, level: u32, start: u64, end: u64, f: &mut dyn FnMut(u64, &Leaf)) {
        let span = 1u64 << (level * BITS);
        for (i, child) in self.children.iter().enumerate() {
            let child_base = base + i as u64 * span;
            if child_base >= end {
                break;
            }
            if child_base + span <= start {
                continue;
            }
            if let Some(c) = child.get() {
                c.scan(child_base, level - 1, start, end, f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn insert_lookup_replace_scan() {
        let r = Radix::new();
        assert_eq!(r.get(PageIndex(5)), None);
        let empty = r.entry(PageIndex(5));
        assert!(r.replace(PageIndex(5), empty, Some(0)));
        assert!(!r.replace(PageIndex(5), empty, Some(1)));
        assert_eq!(r.get(PageIndex(5)), Some(0));
        assert!(r.replace(PageIndex(LOW_PAGES - 1), Entry::default(), Some(2)));
        assert!(r.replace(PageIndex(LOW_PAGES), Entry::default(), Some(3)));
        assert!(r.replace(PageIndex(1 << 20), Entry::default(), Some(7)));
        assert!(r.replace(PageIndex(MAX_PAGES - 1), Entry::default(), Some(9)));
        assert!(!r.replace(PageIndex(MAX_PAGES), Entry::default(), Some(9)));
        let mut seen = Vec::new();
        r.scan(PageIndex(0), PageIndex(u64::MAX), |i, s| {
            seen.push((i.0, s))
        });
        assert_eq!(
            seen,
            [
                (5, 0),
                (LOW_PAGES - 1, 2),
                (LOW_PAGES, 3),
                (1 << 20, 7),
                (MAX_PAGES - 1, 9)
            ]
        );
        assert_eq!(r.get(PageIndex(LOW_PAGES - 1)), Some(2));
        assert_eq!(r.get(PageIndex(LOW_PAGES)), Some(3));
        let mut high = Vec::new();
        r.scan(
            PageIndex(LOW_PAGES - 1),
            PageIndex(LOW_PAGES + 1),
            |i, s| high.push((i.0, s)),
        );
        assert_eq!(
            high,
            [(LOW_PAGES - 1, 2), (LOW_PAGES, 3)],
            "across the seam"
        );
        assert!(r.remove(PageIndex(5), 0));
        assert_eq!(r.get(PageIndex(5)), None);
    }

    #[test]
    fn a_small_file_makes_no_node_and_dropped_nodes_read_as_misses() {
        let mut r = Radix::new();
        for i in 0..HEAD_PAGES as u64 {
            assert!(r.replace(PageIndex(i), Entry::default(), Some(i as u32)));
        }
        assert!(!r.has_nodes(), "the head holds a small file's pages");
        assert!(r.replace(PageIndex(HEAD_PAGES as u64), Entry::default(), Some(99)));
        assert!(r.replace(PageIndex(LOW_PAGES + 5), Entry::default(), Some(98)));
        assert!(r.has_nodes());
        let mut seen = Vec::new();
        r.scan(
            PageIndex(HEAD_PAGES as u64 - 1),
            PageIndex(u64::MAX),
            |i, s| seen.push((i.0, s)),
        );
        assert_eq!(
            seen,
            [
                (HEAD_PAGES as u64 - 1, HEAD_PAGES as u32 - 1),
                (HEAD_PAGES as u64, 99),
                (LOW_PAGES + 5, 98)
            ]
        );
        r.drop_nodes();
        assert!(!r.has_nodes());
        assert_eq!(r.get(PageIndex(HEAD_PAGES as u64)), None);
        assert_eq!(r.get(PageIndex(LOW_PAGES + 5)), None);
        assert_eq!(r.get(PageIndex(3)), Some(3), "the head stays");
        assert!(r.replace(PageIndex(LOW_PAGES + 5), Entry::default(), Some(7)));
        assert_eq!(r.get(PageIndex(LOW_PAGES + 5)), Some(7));
    }

    #[test]
    fn a_replace_from_an_old_look_fails_even_if_the_slot_came_back() {
        let r = Radix::new();
        let i = PageIndex(3);
        assert!(r.replace(i, r.entry(i), Some(4)));
        let old_look = r.entry(i);
        assert!(r.replace(i, r.entry(i), Some(6)));
        assert!(r.replace(i, r.entry(i), Some(4)));
        assert_eq!(r.get(i), Some(4));
        assert!(!r.replace(i, old_look, Some(9)), "ABA must be detected");
    }
}
