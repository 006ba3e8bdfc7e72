//! A whole-tree check that reads each page once, straight from the
//! device, holding only the path it is on: for fsck, the crash tests and
//! the crafted-image tests. It finds what [`Index`](super::Index) would
//! trip over one page at a time, and what it would not: keys outside the
//! range their parent gives them, empty pages, a block reached twice.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use super::page::{decode, Stamp};
use super::{Key, Node, PageDamage, Ptr, Root, MAX_LEVELS};

/// What a sound tree holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeFacts {
    /// Keys.
    pub entries: u64,
    /// Pages, leaves and branches.
    pub pages: u64,
    /// Levels (1: the root is a leaf).
    pub depth: u8,
    /// Every block a page of it is in.
    pub blocks: BTreeSet<u64>,
}

/// Why a tree is not sound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerifyError<E> {
    /// A page could not be read.
    Read {
        /// Its block.
        block: u64,
        /// The reader's error.
        error: E,
    },
    /// A page is damaged, or does not fit where its parent puts it.
    Damage {
        /// Its block.
        block: u64,
        /// What is wrong.
        damage: PageDamage,
    },
}

/// Checks the tree of filesystem `uuid` under `root`, reading each page
/// with `read` and handing every key and value, in key order, to `visit`.
pub fn verify<E>(
    uuid: u64,
    root: Root,
    read: &mut dyn FnMut(u64) -> Result<Vec<u8>, E>,
    visit: &mut dyn FnMut(Key, &[u8]),
) -> Result<TreeFacts, VerifyError<E>> {
    let mut walk =
        Walk::new(uuid, root).map_err(|(block, damage)| VerifyError::Damage { block, damage })?;
    while let Some(block) = walk.next_block() {
        let bytes = read(block).map_err(|error| VerifyError::Read { block, error })?;
        walk.feed(&bytes, visit)
            .map_err(|(block, damage)| VerifyError::Damage { block, damage })?;
    }
    Ok(walk.facts())
}

/// A page the walk has yet to read, and what its parent says of it.
#[derive(Debug)]
struct Pending {
    block: u64,
    generation: u64,
    level: u8,
    lo: Option<Key>,
    hi: Option<Key>,
    root: bool,
}

/// [`verify`] with no I/O inside: it says which block it needs next
/// ([`Walk::next_block`]) and is handed its bytes ([`Walk::feed`]), so an
/// async reader (mount's, on a polled queue) drives it as well as a
/// blocking one. Depth first, holding the path's unread siblings only.
#[derive(Debug)]
pub struct Walk {
    uuid: u64,
    stack: Vec<Pending>,
    facts: TreeFacts,
}

impl Walk {
    /// A walk of the tree under `root`; a root deeper than a tree can be
    /// is refused.
    pub fn new(uuid: u64, root: Root) -> Result<Walk, (u64, PageDamage)> {
        if usize::from(root.level) >= MAX_LEVELS {
            return Err((root.block, PageDamage::Header));
        }
        Ok(Walk {
            uuid,
            stack: alloc::vec![Pending {
                block: root.block,
                generation: root.generation,
                level: root.level,
                lo: None,
                hi: None,
                root: true,
            }],
            facts: TreeFacts {
                depth: root.level + 1,
                ..TreeFacts::default()
            },
        })
    }

    /// The block whose bytes [`Walk::feed`] wants next; `None` when the
    /// walk is over.
    pub fn next_block(&self) -> Option<u64> {
        self.stack.last().map(|p| p.block)
    }

    /// Checks the page read from [`Walk::next_block`], hands its items to
    /// `visit` and queues its children; a damaged page is its block and
    /// the damage.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        visit: &mut dyn FnMut(Key, &[u8]),
    ) -> Result<(), (u64, PageDamage)> {
        let Some(p) = self.stack.pop() else {
            return Ok(());
        };
        let block = p.block;
        let damage = |d| (block, d);
        if !self.facts.blocks.insert(block) {
            return Err(damage(PageDamage::Shared));
        }
        let stamp = Stamp {
            uuid: self.uuid,
            generation: p.generation,
            block,
        };
        let node = decode(bytes, stamp).map_err(damage)?;
        self.facts.pages += 1;
        if node.level() != p.level {
            return Err(damage(PageDamage::Level {
                expected: p.level,
                found: node.level(),
            }));
        }
        if !p.root && node.is_empty() {
            return Err(damage(PageDamage::Empty));
        }
        let (lo, hi) = (p.lo, p.hi);
        let inside = |k: &Key| lo.is_none_or(|lo| *k >= lo) && hi.is_none_or(|hi| *k < hi);
        match node {
            Node::Leaf { keys, vals } => {
                for (k, v) in keys.iter().zip(&vals) {
                    if !inside(k) {
                        return Err(damage(PageDamage::Order));
                    }
                    visit(*k, v);
                }
                self.facts.entries += keys.len() as u64;
            }
            Node::Branch { seps, kids, .. } => {
                if seps.iter().any(|s| !inside(s)) {
                    return Err(damage(PageDamage::Order));
                }
                let Some(kid_level) = p.level.checked_sub(1) else {
                    return Err(damage(PageDamage::Header));
                };
                // Pushed last child first: popped in key order.
                for (i, kid) in kids.iter().enumerate().rev() {
                    let Ptr::Disk { block, generation } = *kid else {
                        return Err(damage(PageDamage::Pointer));
                    };
                    self.stack.push(Pending {
                        block,
                        generation,
                        level: kid_level,
                        lo: if i == 0 { lo } else { Some(seps[i - 1]) },
                        hi: seps.get(i).copied().or(hi),
                        root: false,
                    });
                }
            }
        }
        Ok(())
    }

    /// What the walk found (complete once [`Walk::next_block`] is `None`).
    pub fn facts(self) -> TreeFacts {
        self.facts
    }
}
