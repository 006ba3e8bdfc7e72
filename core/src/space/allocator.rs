//! The block allocator: free space as a map of free extents.

use alloc::collections::BTreeMap;

use crate::units::BlockNo;

/// Allocator invariant violations, reported instead of corrupting state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// A freed range overlaps free space or lies outside the managed area.
    BadFree,
}

/// Hands out device blocks, preferring the block after the caller's hint so
/// that files written in order are laid out in order.
#[derive(Clone, Debug)]
pub struct Allocator {
    /// Free extents: start -> length, non-overlapping and never adjacent.
    free: BTreeMap<u64, u64>,
    start: u64,
    end: u64,
    free_blocks: u64,
}

impl Allocator {
    /// Manages blocks `[start, end)`, all free.
    pub fn new(start: BlockNo, end: BlockNo) -> Allocator {
        let mut free = BTreeMap::new();
        let len = end.0.saturating_sub(start.0);
        if len > 0 {
            free.insert(start.0, len);
        }
        Allocator {
            free,
            start: start.0,
            end: end.0,
            free_blocks: len,
        }
    }

    /// Free blocks left.
    pub fn free_blocks(&self) -> u64 {
        self.free_blocks
    }

    /// Blocks managed.
    pub fn total_blocks(&self) -> u64 {
        self.end - self.start
    }

    /// Allocates up to `max` contiguous blocks: at `hint` if it is free,
    /// else from the first free extent after it, else the first anywhere.
    pub fn alloc(&mut self, hint: BlockNo, max: u64) -> Option<(BlockNo, u64)> {
        if max == 0 {
            return None;
        }
        let containing = self
            .free
            .range(..=hint.0)
            .next_back()
            .filter(|(&s, &l)| hint.0 < s + l)
            .map(|(&s, &l)| (s, l));
        let (ext_start, ext_len, at) = match containing {
            Some((s, l)) => (s, l, hint.0),
            None => {
                let (&s, &l) = self
                    .free
                    .range(hint.0..)
                    .next()
                    .or_else(|| self.free.iter().next())?;
                (s, l, s)
            }
        };
        let ext_end = ext_start + ext_len;
        let n = max.min(ext_end - at);
        self.free.remove(&ext_start);
        if at > ext_start {
            self.free.insert(ext_start, at - ext_start);
        }
        if at + n < ext_end {
            self.free.insert(at + n, ext_end - at - n);
        }
        self.free_blocks -= n;
        Some((BlockNo(at), n))
    }

    /// Marks `[start, start + len)` as used (rebuilding allocation state
    /// from extent maps). Fails if any block is not free.
    pub fn reserve(&mut self, start: BlockNo, len: u64) -> Result<(), AllocError> {
        let end = start.0.checked_add(len).ok_or(AllocError::BadFree)?;
        let (&fs, &fl) = self
            .free
            .range(..=start.0)
            .next_back()
            .ok_or(AllocError::BadFree)?;
        if len == 0 || fs + fl < end {
            return Err(AllocError::BadFree);
        }
        self.free.remove(&fs);
        if fs < start.0 {
            self.free.insert(fs, start.0 - fs);
        }
        if end < fs + fl {
            self.free.insert(end, fs + fl - end);
        }
        self.free_blocks -= len;
        Ok(())
    }

    /// Returns `[start, start + len)` to free space.
    pub fn free(&mut self, start: BlockNo, len: u64) -> Result<(), AllocError> {
        let (mut s, mut e) = (
            start.0,
            start.0.checked_add(len).ok_or(AllocError::BadFree)?,
        );
        if len == 0 {
            return Ok(());
        }
        if s < self.start || e > self.end {
            return Err(AllocError::BadFree);
        }
        if let Some((&ps, &pl)) = self.free.range(..=s).next_back() {
            if ps + pl > s {
                return Err(AllocError::BadFree);
            }
            if ps + pl == s {
                self.free.remove(&ps);
                s = ps;
            }
        }
        if let Some((&ns, &nl)) = self.free.range(start.0..).next() {
            if ns < e {
                if s != start.0 {
                    // Undo the merge with the previous extent before failing.
                    self.free.insert(s, start.0 - s);
                }
                return Err(AllocError::BadFree);
            }
            if ns == e {
                self.free.remove(&ns);
                e = ns + nl;
            }
        }
        self.free.insert(s, e - s);
        self.free_blocks += len;
        Ok(())
    }

    /// True if block `b` is free.
    pub fn is_free(&self, b: BlockNo) -> bool {
        self.free
            .range(..=b.0)
            .next_back()
            .is_some_and(|(&s, &l)| b.0 < s + l)
    }

    /// The free extents, in order.
    pub fn free_extents(&self) -> impl Iterator<Item = (BlockNo, u64)> + '_ {
        self.free.iter().map(|(&s, &l)| (BlockNo(s), l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_prefers_hint_then_merges_on_free() {
        let mut a = Allocator::new(BlockNo(10), BlockNo(110));
        assert_eq!(a.alloc(BlockNo(50), 10), Some((BlockNo(50), 10)));
        assert_eq!(a.alloc(BlockNo(50), 5), Some((BlockNo(60), 5)));
        assert_eq!(a.alloc(BlockNo(0), 100), Some((BlockNo(10), 40)));
        assert_eq!(a.free_blocks(), 45);
        assert!(!a.is_free(BlockNo(55)));
        a.free(BlockNo(50), 15).unwrap();
        a.free(BlockNo(10), 40).unwrap();
        assert_eq!(
            a.free_extents().collect::<alloc::vec::Vec<_>>(),
            [(BlockNo(10), 100)]
        );
    }

    #[test]
    fn double_and_out_of_range_frees_are_errors() {
        let mut a = Allocator::new(BlockNo(0), BlockNo(100));
        let (b, n) = a.alloc(BlockNo(0), 10).unwrap();
        a.free(b, n).unwrap();
        assert_eq!(a.free(b, 1), Err(AllocError::BadFree));
        assert_eq!(a.free(BlockNo(99), 2), Err(AllocError::BadFree));
        assert_eq!(a.free(BlockNo(u64::MAX), 2), Err(AllocError::BadFree));
        assert_eq!(a.free_blocks(), 100);
    }

    #[test]
    fn exhaustion_returns_none() {
        let mut a = Allocator::new(BlockNo(0), BlockNo(4));
        assert_eq!(a.alloc(BlockNo(2), 10), Some((BlockNo(2), 2)));
        assert_eq!(a.alloc(BlockNo(2), 10), Some((BlockNo(0), 2)));
        assert_eq!(a.alloc(BlockNo(0), 1), None);
    }
}
