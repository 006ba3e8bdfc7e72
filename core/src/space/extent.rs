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

/// A run: file block -> (device block, length).
type Run = (u64, (u64, u64));

/// File block -> device block, as non-overlapping extents.
///
/// Most files are one run, and a map's first node costs 280 bytes: a
/// lone run is kept inline (`one`), and the tree holds two or more.
#[derive(Clone, Debug, Default)]
pub struct ExtentMap {
    /// The only run, while there is exactly one (`map` is empty then).
    one: Option<Run>,
    /// file_block -> (device block, length), while there are two or more.
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
        usize::from(self.one.is_some()) + self.map.len()
    }

    /// True if nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.one.is_none() && self.map.is_empty()
    }

    /// Moves a lone run into the tree, for a change the tree's code makes.
    fn spread(&mut self) {
        if let Some((k, v)) = self.one.take() {
            self.map.insert(k, v);
        }
    }

    /// Keeps a lone run inline again (and frees the tree's node).
    fn settle(&mut self) {
        if self.map.len() == 1 {
            self.one = core::mem::take(&mut self.map).into_iter().next();
        }
    }

    /// Blocks mapped in total.
    pub fn mapped_blocks(&self) -> u64 {
        self.mapped
    }

    /// The device block for `file_block` and how many following file blocks
    /// are contiguous with it on the device, or `None` for a hole.
    pub fn lookup(&self, file_block: u64) -> Option<(BlockNo, u64)> {
        let (fs, (dev, len)) = match self.one {
            Some(run) => run,
            None => self
                .map
                .range(..=file_block)
                .next_back()
                .map(|(&k, &v)| (k, v))?,
        };
        let off = file_block.checked_sub(fs)?;
        (off < len).then(|| (BlockNo(dev + off), len - off))
    }

    /// Maps `[file_block, file_block + len)` to `dev..`. The range must be a
    /// hole; returns false (and changes nothing) if any block is mapped.
    pub fn insert(&mut self, file_block: u64, dev: BlockNo, len: u64) -> bool {
        let Some(end) = file_block.checked_add(len) else {
            return false;
        };
        if len == 0 {
            return false;
        }
        if let Some((fs, (d, l))) = self.one {
            if file_block < fs + l && fs < end {
                return false;
            }
            if fs + l == file_block && d + l == dev.0 {
                self.one = Some((fs, (d, l + len)));
                self.mapped += len;
                return true;
            }
            self.spread();
        } else if self.map.is_empty() {
            self.one = Some((file_block, (dev.0, len)));
            self.mapped += len;
            return true;
        }
        if self.map.range(file_block..end).next().is_some() || self.lookup(file_block).is_some() {
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
        self.settle();
        true
    }

    /// Unmaps every block in `[start, end)` and returns the device runs
    /// that were freed, as extents in file order.
    pub fn remove(&mut self, start: u64, end: u64) -> Vec<Extent> {
        let mut freed = Vec::new();
        if start >= end {
            return freed;
        }
        self.spread();
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
        self.settle();
        freed
    }

    /// All extents, in file order.
    pub fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        self.one
            .iter()
            .copied()
            .chain(self.map.iter().map(|(&k, &v)| (k, v)))
            .map(|(file_block, (dev, len))| Extent {
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

    /// A lone run stays inline through merges, splits and removal, and
    /// the map answers the same as one that always uses its tree.
    #[test]
    fn a_lone_run_is_inline_and_answers_as_the_tree_would() {
        let mut m = ExtentMap::new();
        assert!(m.insert(4, BlockNo(100), 2));
        assert!(m.map.is_empty() && m.one.is_some());
        assert!(!m.insert(5, BlockNo(9), 1), "overlap");
        assert!(!m.insert(0, BlockNo(9), 5), "overlap from below");
        assert_eq!(m.lookup(3), None);
        assert!(m.insert(6, BlockNo(102), 3), "appended");
        assert_eq!((m.len(), m.mapped_blocks()), (1, 5));
        assert!(m.insert(0, BlockNo(96), 4), "prepended and merged");
        assert_eq!(m.len(), 1);
        assert!(m.map.is_empty());
        assert_eq!(m.lookup(0), Some((BlockNo(96), 9)));
        assert!(m.insert(20, BlockNo(500), 1));
        assert_eq!(m.len(), 2);
        let freed = m.remove(2, 30);
        assert_eq!(freed.len(), 2);
        assert_eq!(m.len(), 1);
        assert!(m.map.is_empty(), "back inline after a split leaves one run");
        assert_eq!(m.lookup(1), Some((BlockNo(97), 1)));
        assert_eq!(m.remove(0, 2).len(), 1);
        assert!(m.is_empty() && m.mapped_blocks() == 0);
        // Against a plain tree: random inserts and removes.
        let mut rng = crate::rng::SplitMix64::new(5);
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut m = ExtentMap::new();
        for _ in 0..2000 {
            let at = rng.next_u64() % 64;
            let len = 1 + rng.next_u64() % 4;
            if rng.next_u64() % 3 == 0 {
                let freed: u64 = m.remove(at, at + len).iter().map(|x| x.len).sum();
                let before = model.len();
                model.retain(|&k, _| k < at || k >= at + len);
                assert_eq!(freed, (before - model.len()) as u64);
            } else {
                let dev = 1000 + at;
                let free = (at..at + len).all(|b| !model.contains_key(&b));
                assert_eq!(m.insert(at, BlockNo(dev), len), free);
                if free {
                    (at..at + len).for_each(|b| {
                        model.insert(b, 1000 + b);
                    });
                }
            }
            for b in 0..70 {
                assert_eq!(m.lookup(b).map(|x| x.0 .0), model.get(&b).copied());
            }
            assert_eq!(m.mapped_blocks(), model.len() as u64);
            assert!(m.one.is_none() || m.map.is_empty());
            assert!(m.map.len() != 1, "a lone run is kept inline");
        }
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
