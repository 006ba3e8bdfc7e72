//! A whole-tree check that reads each page once, straight from the
//! device, holding only the path it is on: for fsck, the crash tests and
//! the crafted-image tests. It finds what [`Index`](super::Index) would
//! trip over one page at a time, and what it would not: keys outside the
//! range their parent gives them, empty pages, a block reached twice.

use alloc::collections::BTreeSet;

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
    read: &mut dyn FnMut(u64) -> Result<alloc::vec::Vec<u8>, E>,
    visit: &mut dyn FnMut(Key, &[u8]),
) -> Result<TreeFacts, VerifyError<E>> {
    if usize::from(root.level) >= MAX_LEVELS {
        return Err(VerifyError::Damage {
            block: root.block,
            damage: PageDamage::Header,
        });
    }
    let mut facts = TreeFacts {
        depth: root.level + 1,
        ..TreeFacts::default()
    };
    let mut walk = Walk {
        uuid,
        read,
        visit,
        facts: &mut facts,
    };
    walk.page(root.block, root.generation, root.level, None, None, true)?;
    Ok(facts)
}

struct Walk<'a, E> {
    uuid: u64,
    read: &'a mut dyn FnMut(u64) -> Result<alloc::vec::Vec<u8>, E>,
    visit: &'a mut dyn FnMut(Key, &[u8]),
    facts: &'a mut TreeFacts,
}

impl<E> Walk<'_, E> {
    fn page(
        &mut self,
        block: u64,
        generation: u64,
        level: u8,
        lo: Option<Key>,
        hi: Option<Key>,
        root: bool,
    ) -> Result<(), VerifyError<E>> {
        let damage = |damage| VerifyError::Damage { block, damage };
        if !self.facts.blocks.insert(block) {
            return Err(damage(PageDamage::Shared));
        }
        let bytes = (self.read)(block).map_err(|error| VerifyError::Read { block, error })?;
        let stamp = Stamp {
            uuid: self.uuid,
            generation,
            block,
        };
        let node = decode(&bytes, stamp).map_err(damage)?;
        self.facts.pages += 1;
        if node.level() != level {
            return Err(damage(PageDamage::Level {
                expected: level,
                found: node.level(),
            }));
        }
        if !root && node.is_empty() {
            return Err(damage(PageDamage::Empty));
        }
        let inside = |k: &Key| lo.is_none_or(|lo| *k >= lo) && hi.is_none_or(|hi| *k < hi);
        match node {
            Node::Leaf { keys, vals } => {
                for (k, v) in keys.iter().zip(&vals) {
                    if !inside(k) {
                        return Err(damage(PageDamage::Order));
                    }
                    (self.visit)(*k, v);
                }
                self.facts.entries += keys.len() as u64;
            }
            Node::Branch { seps, kids, .. } => {
                if seps.iter().any(|s| !inside(s)) {
                    return Err(damage(PageDamage::Order));
                }
                for (i, kid) in kids.iter().enumerate() {
                    let Ptr::Disk { block, generation } = *kid else {
                        return Err(damage(PageDamage::Pointer));
                    };
                    let klo = if i == 0 { lo } else { Some(seps[i - 1]) };
                    let khi = seps.get(i).copied().or(hi);
                    self.page(block, generation, level - 1, klo, khi, false)?;
                }
            }
        }
        Ok(())
    }
}
