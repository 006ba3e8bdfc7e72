//! A file's extent map: runs of file blocks and the device blocks that hold
//! them. Unmapped file blocks are holes and read as zeros.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::units::BlockNo;

/// A run of mapped blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// First file block.
    pub file_block: u64,
    /// First device block.
    pub dev: BlockNo,
    /// Number of blocks.
    pub len: u64,
}

/// File block -> device block, as non-overlapping extents.
#[derive(Clone, Debug, Default)]
pub struct ExtentMap {
    /// file_block -> (device block, length)
    map: BTreeMap<u64, (u64, u64)>,
    mapped: u64,
}

impl ExtentMap {
    /// An empty map (all holes).
    pub fn new() -> ExtentMap {
        ExtentMap::default()
    }

    /// Number of extents.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Blocks mapped in total.
    pub fn mapped_blocks(&self) -> u64 {
        self.mapped
    }

    /// The device block for `file_block` and how many following file blocks
    /// are contiguous with it on the device, or `None` for a hole.
    pub fn lookup(&self, file_block: u64) -> Option<(BlockNo, u64)> {
        let (&fs, &(dev, len)) = self.map.range(..=file_block).next_back()?;
        let off = file_block - fs;
        (off < len).then(|| (BlockNo(dev + off), len - off))
    }

    /// Maps `[file_block, file_block + len)` to `dev..`. The range must be a
    /// hole; returns false (and changes nothing) if any block is mapped.
    pub fn insert(&mut self, file_block: u64, dev: BlockNo, len: u64) -> bool {
        let Some(end) = file_block.checked_add(len) else {
            return false;
        };
        if len == 0
            || self.map.range(file_block..end).next().is_some()
            || self.lookup(file_block).is_some()
        {
            return false;
        }
        let (mut start, mut dstart, mut n) = (file_block, dev.0, len);
        if let Some((&ps, &(pd, pl))) = self.map.range(..file_block).next_back() {
            if ps + pl == file_block && pd + pl == dev.0 {
                self.map.remove(&ps);
                (start, dstart, n) = (ps, pd, pl + len);
            }
        }
        if let Some(&(nd, nl)) = self.map.get(&end) {
            if nd == dev.0 + len {
                self.map.remove(&end);
                n += nl;
            }
        }
        self.map.insert(start, (dstart, n));
        self.mapped += len;
        true
    }

    /// Unmaps every block in `[start, end)` and returns the device runs
    /// that were freed, as extents in file order.
    pub fn remove(&mut self, start: u64, end: u64) -> Vec<Extent> {
        let mut freed = Vec::new();
        if start >= end {
            return freed;
        }
        let mut keys: Vec<u64> = self.map.range(start..end).map(|(&k, _)| k).collect();
        if let Some((&ps, &(_, pl))) = self.map.range(..start).next_back() {
            if ps + pl > start {
                keys.insert(0, ps);
            }
        }
        for k in keys {
            let Some((dev, len)) = self.map.remove(&k) else {
                continue;
            };
            let (ext_end, cut_s, cut_e) = (k + len, k.max(start), (k + len).min(end));
            if k < cut_s {
                self.map.insert(k, (dev, cut_s - k));
            }
            if cut_e < ext_end {
                self.map.insert(cut_e, (dev + (cut_e - k), ext_end - cut_e));
            }
            freed.push(Extent {
                file_block: cut_s,
                dev: BlockNo(dev + (cut_s - k)),
                len: cut_e - cut_s,
            });
            self.mapped -= cut_e - cut_s;
        }
        freed
    }

    /// All extents, in file order.
    pub fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        self.map.iter().map(|(&file_block, &(dev, len))| Extent {
            file_block,
            dev: BlockNo(dev),
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merges_and_lookup_reports_runs() {
        let mut m = ExtentMap::new();
        assert!(m.insert(0, BlockNo(100), 4));
        assert!(m.insert(4, BlockNo(104), 4));
        assert_eq!(m.extents().count(), 1);
        assert_eq!(m.lookup(2), Some((BlockNo(102), 6)));
        assert_eq!(m.lookup(8), None);
        assert!(!m.insert(7, BlockNo(500), 2), "overlap must be refused");
        assert!(m.insert(10, BlockNo(200), 1));
        assert_eq!(m.mapped_blocks(), 9);
    }

    #[test]
    fn remove_splits_extents() {
        let mut m = ExtentMap::new();
        m.insert(0, BlockNo(100), 10);
        m.insert(20, BlockNo(300), 5);
        let freed = m.remove(3, 22);
        assert_eq!(
            freed,
            [
                Extent {
                    file_block: 3,
                    dev: BlockNo(103),
                    len: 7
                },
                Extent {
                    file_block: 20,
                    dev: BlockNo(300),
                    len: 2
                }
            ]
        );
        assert_eq!(m.lookup(2), Some((BlockNo(102), 1)));
        assert_eq!(m.lookup(3), None);
        assert_eq!(m.lookup(22), Some((BlockNo(302), 3)));
        assert_eq!(m.mapped_blocks(), 6);
    }
}
