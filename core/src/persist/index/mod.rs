//! The metadata index: a copy-on-write B+tree of 4 KiB pages on the
//! device, the home that inodes, directory entries, extents, extended
//! attributes and live data move to from the checkpoint image
//! (docs/design/format.md, "The metadata index").
//!
//! One key space, ordered by (inode, kind, offset) as in btrfs: an inode's
//! attributes, its extents by file block, a directory's entries by name
//! hash and its extended attributes sit side by side, so what a lookup or
//! a sync touches of one inode is a few neighbouring leaves.
//!
//! Copy on write: a changed page is never written over. Changing a key
//! copies its leaf and every branch above it into memory ([`Ptr::Mem`]);
//! [`Index::commit`] writes the copies to fresh blocks, children before
//! parents, and names the new root, which the caller makes durable with a
//! flush and a superblock write. Until that lands the old root and every
//! page under it are intact (the blocks the copies replaced are only
//! handed back, in [`Commit::freed`], for the caller to free once the new
//! root is durable). So a checkpoint writes what changed since the last
//! one, about the tree's depth in pages per changed leaf, whatever the
//! number of files.
//!
//! No I/O happens here: an operation that needs a page that is not in
//! memory returns [`IndexError::Miss`] naming it, the caller reads it and
//! hands it to [`Index::load`], which checks it ([`page::decode`]), and
//! runs the operation again. Operations check first that every page they
//! will touch is in memory and change nothing until then, so a retried
//! operation never half-happens. The same code serves a commit on a
//! session's queue, mount's polled queue and fsck.
//!
//! Memory: pages read from the device are a cache that [`Index::trim`]
//! shrinks to a budget, least recently used first; pages changed since the
//! last commit stay until it (the checkpoint cadence bounds them).

pub mod image;
pub mod items;
pub mod page;
#[cfg(test)]
mod tests;
pub mod verify;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::cell::Cell;

pub use page::Stamp;
pub use verify::{verify, TreeFacts, VerifyError};

/// Bytes of an encoded key: inode u64, kind u8, offset u64.
pub const KEY_LEN: usize = 17;
/// Largest value a key holds, in bytes: small enough that any leaf that
/// overflows by one entry splits into two that fit.
pub const MAX_VALUE: usize = 1024;
/// Most levels a tree has: with at least two children per branch a tree
/// of 16 levels holds more keys than any device has blocks.
pub const MAX_LEVELS: usize = 16;

/// A key: the inode, the kind of item, and an offset whose meaning the
/// kind gives (a file block, a name's hash, zero for the inode itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The inode the item belongs to.
    pub ino: u64,
    /// What the item is.
    pub kind: u8,
    /// Where it is among the inode's items of that kind.
    pub off: u64,
}

impl Key {
    /// The smallest key.
    pub const MIN: Key = Key {
        ino: 0,
        kind: 0,
        off: 0,
    };

    /// A key.
    pub const fn new(ino: u64, kind: u8, off: u64) -> Key {
        Key { ino, kind, off }
    }

    /// The next key in order, or `None` after the largest.
    pub fn successor(self) -> Option<Key> {
        if let Some(off) = self.off.checked_add(1) {
            return Some(Key { off, ..self });
        }
        if let Some(kind) = self.kind.checked_add(1) {
            return Some(Key {
                kind,
                off: 0,
                ..self
            });
        }
        Some(Key {
            ino: self.ino.checked_add(1)?,
            kind: 0,
            off: 0,
        })
    }
}

/// Where a child page is: on the device, written by checkpoint
/// `generation`, or in memory, changed since the last commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ptr {
    /// A page on the device.
    Disk {
        /// Its block.
        block: u64,
        /// The checkpoint that wrote it.
        generation: u64,
    },
    /// A page changed in memory: its slot.
    Mem(usize),
}

/// A page, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// Keys and their values, in key order.
    Leaf {
        /// The keys.
        keys: Vec<Key>,
        /// Their values.
        vals: Vec<Vec<u8>>,
    },
    /// Children and the separators between them: every key under
    /// `kids[i]` is at least `seps[i - 1]` and below `seps[i]`.
    Branch {
        /// Its level (1 above leaves).
        level: u8,
        /// One fewer than the children.
        seps: Vec<Key>,
        /// The children.
        kids: Vec<Ptr>,
    },
}

impl Node {
    /// Its level: 0 for a leaf.
    pub fn level(&self) -> u8 {
        match self {
            Node::Leaf { .. } => 0,
            Node::Branch { level, .. } => *level,
        }
    }

    /// Entries: a leaf's keys or a branch's children.
    pub fn len(&self) -> usize {
        match self {
            Node::Leaf { keys, .. } => keys.len(),
            Node::Branch { kids, .. } => kids.len(),
        }
    }

    /// True if it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Payload bytes its page needs.
    pub fn bytes(&self) -> usize {
        match self {
            Node::Leaf { vals, .. } => vals.iter().map(|v| page::LEAF_OVERHEAD + v.len()).sum(),
            Node::Branch { kids, .. } => {
                page::BRANCH_FIRST + kids.len().saturating_sub(1) * page::BRANCH_ENTRY
            }
        }
    }

    /// True if a page of it is less than a quarter full, or it is a
    /// branch with one child: it takes from or joins a sibling.
    fn underfull(&self) -> bool {
        self.bytes() < page::PAYLOAD / 4
            || matches!(self, Node::Branch { kids, .. } if kids.len() < 2)
            || self.is_empty()
    }

    /// Splits an overfull node in two that each fit, at about half its
    /// bytes: the separator and the right half.
    fn split(&mut self) -> (Key, Node) {
        let at = match self {
            Node::Leaf { vals, .. } => {
                let total = self_bytes_leaf(vals);
                let mut at = 0;
                let mut left = 0;
                while at + 1 < vals.len() && left < total / 2 {
                    left += page::LEAF_OVERHEAD + vals[at].len();
                    at += 1;
                }
                at.max(1)
            }
            Node::Branch { kids, .. } => kids.len() / 2,
        };
        self.split_at(at)
    }

    /// Splits an overfull node whose last entry is new: the right node
    /// takes only that (a branch: its last two children, as a branch
    /// needs two), the left stays as full as it was.
    fn split_end(&mut self) -> (Key, Node) {
        match self {
            Node::Leaf { keys, .. } if keys.len() >= 2 => {
                let at = keys.len() - 1;
                self.split_at(at)
            }
            Node::Branch { kids, .. } if kids.len() >= 4 => {
                let at = kids.len() - 2;
                self.split_at(at)
            }
            _ => self.split(),
        }
    }

    /// Moves entries `at..` (a leaf's keys, a branch's children; `at` at
    /// least 1 and below the count) to a new right node: the separator
    /// and that node.
    fn split_at(&mut self, at: usize) -> (Key, Node) {
        match self {
            Node::Leaf { keys, vals } => {
                let rk = keys.split_off(at);
                let rv = vals.split_off(at);
                (rk[0], Node::Leaf { keys: rk, vals: rv })
            }
            Node::Branch { level, seps, kids } => {
                let rkids = kids.split_off(at);
                let mut rseps = seps.split_off(at - 1);
                let sep = rseps.remove(0);
                (
                    sep,
                    Node::Branch {
                        level: *level,
                        seps: rseps,
                        kids: rkids,
                    },
                )
            }
        }
    }

    /// Joins `right`, whose separator from this node is `sep`.
    fn join(&mut self, sep: Key, right: Node) {
        match (self, right) {
            (Node::Leaf { keys, vals }, Node::Leaf { keys: rk, vals: rv }) => {
                keys.extend(rk);
                vals.extend(rv);
            }
            (
                Node::Branch { seps, kids, .. },
                Node::Branch {
                    seps: rs, kids: rk, ..
                },
            ) => {
                seps.push(sep);
                seps.extend(rs);
                kids.extend(rk);
            }
            // Siblings are always at one level; `rebalance` checks it.
            _ => {}
        }
    }
}

fn self_bytes_leaf(vals: &[Vec<u8>]) -> usize {
    vals.iter().map(|v| page::LEAF_OVERHEAD + v.len()).sum()
}

/// The child of a branch whose range holds `key`.
fn child_index(seps: &[Key], key: &Key) -> usize {
    seps.partition_point(|s| s <= key)
}

/// What is wrong with a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PageDamage {
    /// A page or a field in it is cut short, or has bytes left over.
    Length,
    /// Not an index page.
    Magic,
    /// The checksum does not match.
    Checksum,
    /// Written by another filesystem.
    Uuid,
    /// A good page written for another block.
    Misplaced {
        /// The block it was written for.
        written_for: u64,
    },
    /// A good page from another checkpoint than its parent names: a
    /// write that was lost, reordered, or never made.
    Stale {
        /// The generation it carries.
        found: u64,
    },
    /// Header fields out of range.
    Header,
    /// A value longer than [`MAX_VALUE`].
    ValueTooLarge,
    /// Keys out of order, or outside the range its parent gives it.
    Order,
    /// A child pointer to block 0 or to a newer checkpoint than the page.
    Pointer,
    /// A page at another level than its parent puts it.
    Level {
        /// The level it should have.
        expected: u8,
        /// The level it has.
        found: u8,
    },
    /// A page that is not the root with nothing in it.
    Empty,
    /// A block reached twice in one tree.
    Shared,
}

/// Why an index operation did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexError {
    /// It needs this page, which is not in memory: read it, hand it to
    /// [`Index::load`], and run the operation again.
    Miss {
        /// The page's block.
        block: u64,
        /// The checkpoint its parent says wrote it.
        generation: u64,
    },
    /// A page is damaged.
    Damage {
        /// Its block.
        block: u64,
        /// What is wrong.
        damage: PageDamage,
    },
    /// A value longer than [`MAX_VALUE`].
    ValueTooLarge,
    /// A commit was given the wrong number of blocks, or a generation not
    /// above the tree's.
    BadCommit,
}

/// Where a tree's root is: what a superblock names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root {
    /// The root page's block.
    pub block: u64,
    /// The checkpoint that wrote it.
    pub generation: u64,
    /// Its level (0: the root is a leaf).
    pub level: u8,
}

/// A commit's work: the pages to write (children before parents), the
/// new root, and the blocks the old copies held.
#[derive(Debug)]
pub struct Commit {
    /// (block, page) to write, each page a child before its parent.
    pub writes: Vec<(u64, Vec<u8>)>,
    /// The new root (the same as before if nothing changed).
    pub root: Root,
    /// Blocks that pages of the previous root held and the new root no
    /// longer reaches: free them once the new root is durable, not before.
    pub freed: Vec<u64>,
}

/// Counts of an index's work, for the bench and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// Pages read in ([`Index::load`]).
    pub loads: u64,
    /// Pages written by commits.
    pub pages_written: u64,
    /// Pages dropped from memory by [`Index::trim`].
    pub evictions: u64,
}

/// A split node's separator and the slot of its new right half.
type Split = Option<(Key, usize)>;

#[derive(Debug)]
struct Cached {
    generation: u64,
    node: Node,
    used: Cell<u64>,
}

/// A copy-on-write B+tree over pages the caller reads and writes.
#[derive(Debug)]
pub struct Index {
    uuid: u64,
    root: Ptr,
    root_level: u8,
    /// The newest generation any page of the tree carries.
    generation: u64,
    /// Pages changed since the last commit, by slot.
    mem: Vec<Option<Node>>,
    free_slots: Vec<usize>,
    /// Pages read from the device, by block.
    clean: BTreeMap<u64, Cached>,
    tick: Cell<u64>,
    capacity: usize,
    freed: Vec<u64>,
    stats: IndexStats,
}

impl Index {
    /// An empty tree of filesystem `uuid` (nothing on the device yet),
    /// keeping at most `capacity` pages read from the device after a trim.
    pub fn new(uuid: u64, capacity: usize) -> Index {
        let empty = Node::Leaf {
            keys: Vec::new(),
            vals: Vec::new(),
        };
        Index::with_root(uuid, capacity, Ptr::Mem(0), 0, 0, alloc::vec![Some(empty)])
    }

    /// The tree whose root a superblock names; its pages are read as
    /// operations need them.
    pub fn open(uuid: u64, root: Root, capacity: usize) -> Index {
        let ptr = Ptr::Disk {
            block: root.block,
            generation: root.generation,
        };
        Index::with_root(uuid, capacity, ptr, root.level, root.generation, Vec::new())
    }

    fn with_root(
        uuid: u64,
        capacity: usize,
        root: Ptr,
        root_level: u8,
        generation: u64,
        mem: Vec<Option<Node>>,
    ) -> Index {
        Index {
            uuid,
            root,
            root_level,
            generation,
            mem,
            free_slots: Vec::new(),
            clean: BTreeMap::new(),
            tick: Cell::new(0),
            capacity,
            freed: Vec::new(),
            stats: IndexStats::default(),
        }
    }

    /// Counts of its work so far.
    pub fn stats(&self) -> IndexStats {
        self.stats
    }

    /// Pages changed since the last commit: the blocks the next commit
    /// needs.
    pub fn dirty_pages(&self) -> usize {
        self.mem.iter().filter(|n| n.is_some()).count()
    }

    /// Pages read from the device and kept.
    pub fn cached_pages(&self) -> usize {
        self.clean.len()
    }

    /// Checks the page read from `block`, which the tree expects written
    /// by checkpoint `generation`, and keeps it.
    pub fn load(&mut self, block: u64, generation: u64, bytes: &[u8]) -> Result<(), IndexError> {
        let stamp = Stamp {
            uuid: self.uuid,
            generation,
            block,
        };
        let node =
            page::decode(bytes, stamp).map_err(|damage| IndexError::Damage { block, damage })?;
        self.stats.loads += 1;
        self.keep(block, generation, node);
        Ok(())
    }

    /// Keeps `node`, the page at `block` of checkpoint `generation`.
    fn keep(&mut self, block: u64, generation: u64, node: Node) {
        let used = Cell::new(self.next_tick());
        self.clean.insert(
            block,
            Cached {
                generation,
                node,
                used,
            },
        );
    }

    fn next_tick(&self) -> u64 {
        let t = self.tick.get() + 1;
        self.tick.set(t);
        t
    }

    /// Drops the least recently used pages read from the device until at
    /// most the capacity are kept. Changed pages are not dropped.
    pub fn trim(&mut self) {
        if self.clean.len() <= self.capacity {
            return;
        }
        // Down to three quarters, so a trim after every operation sorts
        // once per quarter of the capacity, not every time.
        let keep = self.capacity - self.capacity / 4;
        let mut by_use: Vec<(u64, u64)> =
            self.clean.iter().map(|(&b, c)| (c.used.get(), b)).collect();
        by_use.sort_unstable();
        let drop = self.clean.len() - keep;
        for &(_, b) in &by_use[..drop] {
            self.clean.remove(&b);
        }
        self.stats.evictions += drop as u64;
    }

    /// The node `p` points to, which should be at `level`.
    fn node(&self, p: Ptr, level: u8) -> Result<&Node, IndexError> {
        let (node, block) = match p {
            Ptr::Mem(i) => match self.mem.get(i).and_then(Option::as_ref) {
                Some(n) => (n, 0),
                // A slot is filled whenever a pointer names it.
                None => {
                    return Err(IndexError::Damage {
                        block: 0,
                        damage: PageDamage::Pointer,
                    })
                }
            },
            Ptr::Disk { block, generation } => match self.clean.get(&block) {
                Some(c) if c.generation == generation => {
                    c.used.set(self.next_tick());
                    (&c.node, block)
                }
                _ => return Err(IndexError::Miss { block, generation }),
            },
        };
        if node.level() != level {
            return Err(IndexError::Damage {
                block,
                damage: PageDamage::Level {
                    expected: level,
                    found: node.level(),
                },
            });
        }
        if let Node::Branch { level: 0, .. } = node {
            return Err(IndexError::Damage {
                block,
                damage: PageDamage::Header,
            });
        }
        Ok(node)
    }

    /// Checks that every page an operation on `key` touches is in memory:
    /// the path to its leaf and, for a removal (`siblings`), each page's
    /// neighbours under the same parent.
    fn ensure(&self, key: &Key, siblings: bool) -> Result<(), IndexError> {
        let (mut p, mut level) = (self.root, self.root_level);
        loop {
            match self.node(p, level)? {
                Node::Leaf { .. } => return Ok(()),
                Node::Branch { seps, kids, .. } => {
                    let i = child_index(seps, key);
                    if siblings {
                        if i > 0 {
                            self.node(kids[i - 1], level - 1)?;
                        }
                        if let Some(&k) = kids.get(i + 1) {
                            self.node(k, level - 1)?;
                        }
                    }
                    p = kids[i];
                    level -= 1;
                }
            }
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &Key) -> Result<Option<&[u8]>, IndexError> {
        let (mut p, mut level) = (self.root, self.root_level);
        loop {
            match self.node(p, level)? {
                Node::Leaf { keys, vals } => {
                    return Ok(keys.binary_search(key).ok().map(|i| vals[i].as_slice()))
                }
                Node::Branch { seps, kids, .. } => {
                    p = kids[child_index(seps, key)];
                    level -= 1;
                }
            }
        }
    }

    /// The first key at or after `from`, and its value.
    pub fn next(&self, from: &Key) -> Result<Option<(Key, &[u8])>, IndexError> {
        self.next_in(self.root, self.root_level, from)
    }

    fn next_in(&self, p: Ptr, level: u8, from: &Key) -> Result<Option<(Key, &[u8])>, IndexError> {
        match self.node(p, level)? {
            Node::Leaf { keys, vals } => {
                let i = keys.partition_point(|k| k < from);
                Ok(keys.get(i).map(|k| (*k, vals[i].as_slice())))
            }
            Node::Branch { seps, kids, .. } => {
                for &kid in &kids[child_index(seps, from)..] {
                    if let Some(found) = self.next_in(kid, level - 1, from)? {
                        return Ok(Some(found));
                    }
                }
                Ok(None)
            }
        }
    }

    fn put_mem(&mut self, node: Node) -> usize {
        match self.free_slots.pop() {
            Some(i) => {
                self.mem[i] = Some(node);
                i
            }
            None => {
                self.mem.push(Some(node));
                self.mem.len() - 1
            }
        }
    }

    fn take_mem(&mut self, i: usize) -> Node {
        // Every slot taken is put back or released by the caller.
        self.mem[i].take().unwrap_or(Node::Leaf {
            keys: Vec::new(),
            vals: Vec::new(),
        })
    }

    fn release_mem(&mut self, i: usize) {
        self.mem[i] = None;
        self.free_slots.push(i);
    }

    /// The slot of a changeable copy of the page `p` points to: itself if
    /// it is changed already, else a copy of the page read in, whose
    /// block the next commit hands back.
    fn make_mut(&mut self, p: Ptr, level: u8) -> Result<usize, IndexError> {
        self.node(p, level)?;
        match p {
            Ptr::Mem(i) => Ok(i),
            Ptr::Disk { block, generation } => {
                let node = match self.clean.remove(&block) {
                    Some(c) => c.node,
                    None => return Err(IndexError::Miss { block, generation }),
                };
                self.freed.push(block);
                Ok(self.put_mem(node))
            }
        }
    }

    /// Sets `key` to `value`; the value it had.
    pub fn insert(&mut self, key: Key, value: &[u8]) -> Result<Option<Vec<u8>>, IndexError> {
        if value.len() > MAX_VALUE {
            return Err(IndexError::ValueTooLarge);
        }
        self.ensure(&key, false)?;
        let root = self.make_mut(self.root, self.root_level)?;
        self.root = Ptr::Mem(root);
        let (old, split) = self.insert_at(root, key, value)?;
        if let Some((sep, right)) = split {
            self.root_level += 1;
            let top = self.put_mem(Node::Branch {
                level: self.root_level,
                seps: alloc::vec![sep],
                kids: alloc::vec![Ptr::Mem(root), Ptr::Mem(right)],
            });
            self.root = Ptr::Mem(top);
        }
        Ok(old)
    }

    fn insert_at(
        &mut self,
        at: usize,
        key: Key,
        value: &[u8],
    ) -> Result<(Option<Vec<u8>>, Split), IndexError> {
        let mut node = self.take_mem(at);
        let old = self.insert_into(&mut node, key, value);
        let result = old.map(|(old, last)| {
            let split = (node.bytes() > page::PAYLOAD).then(|| {
                if last {
                    node.split_end()
                } else {
                    node.split()
                }
            });
            (old, split)
        });
        self.mem[at] = Some(node);
        let (old, split) = result?;
        Ok((old, split.map(|(sep, right)| (sep, self.put_mem(right)))))
    }

    /// Inserts into `node`: the old value, and whether the change went at
    /// its end (then, if it must split, it splits there: keys made in
    /// increasing order, as inode numbers and file blocks are, fill whole
    /// pages instead of half pages).
    fn insert_into(
        &mut self,
        node: &mut Node,
        key: Key,
        value: &[u8],
    ) -> Result<(Option<Vec<u8>>, bool), IndexError> {
        match node {
            Node::Leaf { keys, vals } => Ok(match keys.binary_search(&key) {
                Ok(i) => (
                    Some(core::mem::replace(&mut vals[i], value.to_vec())),
                    false,
                ),
                Err(i) => {
                    keys.insert(i, key);
                    vals.insert(i, value.to_vec());
                    (None, i + 1 == keys.len())
                }
            }),
            Node::Branch { level, seps, kids } => {
                let i = child_index(seps, &key);
                let c = self.make_mut(kids[i], *level - 1)?;
                kids[i] = Ptr::Mem(c);
                let (old, split) = self.insert_at(c, key, value)?;
                let last = i + 1 == kids.len();
                if let Some((sep, right)) = split {
                    seps.insert(i, sep);
                    kids.insert(i + 1, Ptr::Mem(right));
                }
                Ok((old, last))
            }
        }
    }

    /// Removes `key`; the value it had.
    pub fn remove(&mut self, key: &Key) -> Result<Option<Vec<u8>>, IndexError> {
        self.ensure(key, true)?;
        if self.get(key)?.is_none() {
            return Ok(None);
        }
        let root = self.make_mut(self.root, self.root_level)?;
        self.root = Ptr::Mem(root);
        let old = self.remove_at(root, key)?;
        // A root branch left with one child gives way to it.
        while let Ptr::Mem(r) = self.root {
            let only = match &self.mem[r] {
                Some(Node::Branch { kids, .. }) if kids.len() == 1 => kids[0],
                _ => break,
            };
            self.release_mem(r);
            self.root = only;
            self.root_level -= 1;
        }
        Ok(old)
    }

    fn remove_at(&mut self, at: usize, key: &Key) -> Result<Option<Vec<u8>>, IndexError> {
        let mut node = self.take_mem(at);
        let result = self.remove_from(&mut node, key);
        self.mem[at] = Some(node);
        result
    }

    fn remove_from(&mut self, node: &mut Node, key: &Key) -> Result<Option<Vec<u8>>, IndexError> {
        match node {
            Node::Leaf { keys, vals } => Ok(keys.binary_search(key).ok().map(|i| {
                keys.remove(i);
                vals.remove(i)
            })),
            Node::Branch { level, seps, kids } => {
                let level = *level;
                let i = child_index(seps, key);
                let c = self.make_mut(kids[i], level - 1)?;
                kids[i] = Ptr::Mem(c);
                let old = self.remove_at(c, key)?;
                let weak = self.mem[c].as_ref().is_some_and(Node::underfull);
                if weak && kids.len() > 1 {
                    self.rebalance(seps, kids, level, i)?;
                }
                Ok(old)
            }
        }
    }

    /// Joins child `i` of a branch at `level` with a neighbour, or shares
    /// the two's entries evenly if together they do not fit one page.
    fn rebalance(
        &mut self,
        seps: &mut Vec<Key>,
        kids: &mut Vec<Ptr>,
        level: u8,
        i: usize,
    ) -> Result<(), IndexError> {
        let (l, r) = if i + 1 < kids.len() {
            (i, i + 1)
        } else {
            (i - 1, i)
        };
        let lm = self.make_mut(kids[l], level - 1)?;
        kids[l] = Ptr::Mem(lm);
        let rm = self.make_mut(kids[r], level - 1)?;
        kids[r] = Ptr::Mem(rm);
        let mut left = self.take_mem(lm);
        let right = self.take_mem(rm);
        left.join(seps[l], right);
        if left.bytes() <= page::PAYLOAD {
            self.mem[lm] = Some(left);
            self.release_mem(rm);
            kids.remove(r);
            seps.remove(l);
        } else {
            let (sep, right) = left.split();
            self.mem[lm] = Some(left);
            self.mem[rm] = Some(right);
            seps[l] = sep;
        }
        Ok(())
    }

    /// Writes the changed pages to `blocks` (exactly [`Index::dirty_pages`]
    /// of them, all free and not among the pages the durable root reaches)
    /// as checkpoint `generation`, above every generation in the tree.
    /// After this the tree points at the new pages; the caller writes
    /// [`Commit::writes`], flushes, makes [`Commit::root`] durable, and
    /// only then frees [`Commit::freed`]. If a write fails, writing the
    /// same pages again is the retry: their blocks stay theirs.
    pub fn commit(&mut self, generation: u64, blocks: &[u64]) -> Result<Commit, IndexError> {
        if blocks.len() != self.dirty_pages() || generation <= self.generation {
            return Err(IndexError::BadCommit);
        }
        let mut writes = Vec::with_capacity(blocks.len());
        if let Ptr::Mem(r) = self.root {
            let block = self.write_out(r, generation, blocks, &mut writes);
            self.root = Ptr::Disk { block, generation };
            self.generation = generation;
        }
        self.stats.pages_written += writes.len() as u64;
        let Ptr::Disk { block, generation } = self.root else {
            return Err(IndexError::BadCommit);
        };
        Ok(Commit {
            writes,
            root: Root {
                block,
                generation,
                level: self.root_level,
            },
            freed: core::mem::take(&mut self.freed),
        })
    }

    /// Writes the page in slot `at` and every changed page under it,
    /// children first; its block.
    fn write_out(
        &mut self,
        at: usize,
        generation: u64,
        blocks: &[u64],
        writes: &mut Vec<(u64, Vec<u8>)>,
    ) -> u64 {
        let mut node = self.take_mem(at);
        self.release_mem(at);
        if let Node::Branch { kids, .. } = &mut node {
            for kid in kids.iter_mut() {
                if let Ptr::Mem(c) = *kid {
                    let block = self.write_out(c, generation, blocks, writes);
                    *kid = Ptr::Disk { block, generation };
                }
            }
        }
        // One block per changed page, handed out in write order.
        let block = blocks[writes.len()];
        let stamp = Stamp {
            uuid: self.uuid,
            generation,
            block,
        };
        writes.push((block, page::encode(&node, stamp)));
        self.keep(block, generation, node);
        block
    }
}
