//! The namespace as one state machine: entries, link counts, directories'
//! parents and inode kinds, changed only by [`Tree::apply`] of a
//! [`Record`].
//!
//! The mounted filesystem and recovery hold the same [`Tree`] and change it
//! the same way: a live operation asks the tree whether the request may go
//! ahead (`may_*`, the POSIX refusals), builds the record, applies it and
//! logs it; recovery applies the records it reads. So the structural rules
//! (how a link counts, that a directory's `..` follows it, what a rename
//! replaces, that a directory never moves under itself, link limits) live
//! here and nowhere else. fsck checks the same tree ([`Tree::problems`]).
//!
//! Everything else about an inode (owner, times, size, extents, a link's
//! target) is not the tree's: the durable view keeps it in
//! [`InodeMeta`](super::record::InodeMeta), the mounted filesystem in its
//! live inodes, and [`Effects`] says which inodes' link counts and parents
//! a record changed, for the holder to copy.
//!
//! A directory lists its entries in the order of their cookies, each a
//! keyed hash of the name (kept in memory only, never compared between
//! trees): a listing continues after a cookie, and an entry keeps its
//! cookie while it lives, so one that runs alongside creates, removes and
//! renames returns no entry twice and skips none that existed throughout;
//! a name renamed away and back takes its old place again, as in ext4's
//! hash order (xfstests generic/736).
//!
//! A new kind of inode or entry-changing record is one change here: its
//! [`Kind`] decides whether it holds entries ([`Kind::Dir`]) and how a link
//! to it counts ([`Tree::apply`]).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::problems::Problem;
use super::record::{link_len, Kind, Record};
use crate::error::{Damage, NamespaceError, ReplayDamage};
use crate::units::{MAX_LINKS, ROOT_INO};

/// What the tree knows of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// File, directory or symbolic link.
    pub kind: Kind,
    /// Links: entries naming it (a directory: its entry, `.`, and each
    /// subdirectory's `..`).
    pub nlink: u32,
    /// A directory's parent (0 for anything else; the root is its own).
    pub parent: u64,
}

/// One entry of a directory.
#[derive(Clone, Copy, Debug)]
struct Entry {
    ino: u64,
    cookie: u64,
}

/// A directory's entries, by name and by cookie.
#[derive(Clone, Debug, Default)]
struct Dir {
    by_name: BTreeMap<String, Entry>,
    by_cookie: BTreeMap<u64, String>,
}

/// The lowest cookie: 0 starts a listing, 1 and 2 stand for `.` and `..`.
const FIRST_COOKIE: u64 = 3;

/// Cookies stay below 2^63, so each is a positive `off_t` (`telldir`).
const COOKIE_END: u64 = 1 << 63;

/// The keys of the name hash: fixed, so a name has the same place in every
/// tree (any keys would do; cookies are never stored).
const HASH_KEYS: (u64, u64) = (0x706f_6c6c_6673_2d64, 0x6972_2d63_6f6f_6b69);

/// Where `name` wants to sit in a listing: SipHash-2-4 of the name, in
/// `FIRST_COOKIE..COOKIE_END`. `core`'s `SipHasher` is deprecated only
/// in favour of std's unnamed hashers, whose output may change between
/// releases; this one's is SipHash-2-4, fixed.
fn name_hash(name: &str) -> u64 {
    use core::hash::Hasher;
    #[allow(deprecated)]
    let mut h = core::hash::SipHasher::new_with_keys(HASH_KEYS.0, HASH_KEYS.1);
    h.write(name.as_bytes());
    FIRST_COOKIE + h.finish() % (COOKIE_END - FIRST_COOKIE)
}

impl Dir {
    /// The cookie a new entry `name` takes: its hash, or, if another
    /// entry holds that (two names with one hash), the next free one
    /// above it (wrapping). The cookie is the entry's until it goes.
    fn free_cookie(&self, name: &str) -> u64 {
        self.free_from(name_hash(name))
    }

    /// The first cookie from `c` up (wrapping) that no entry holds.
    fn free_from(&self, mut c: u64) -> u64 {
        while self.by_cookie.contains_key(&c) {
            c = if c + 1 == COOKIE_END {
                FIRST_COOKIE
            } else {
                c + 1
            };
        }
        c
    }
}

/// What a record did to the tree, for the holder of the inodes' other
/// state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Inodes whose link count or parent the record may have changed, each
    /// once, with their state after it.
    pub changed: Vec<(u64, Node)>,
    /// The inode the record took the last link of (freed once no handle
    /// has it open).
    pub unlinked: Option<u64>,
}

/// The namespace: every inode's [`Node`] and every directory's entries.
#[derive(Clone, Debug, Default)]
pub struct Tree {
    nodes: BTreeMap<u64, Node>,
    dirs: BTreeMap<u64, Dir>,
    /// Bytes the entries take in a checkpoint image.
    entry_bytes: u64,
}

/// Equal trees have the same nodes and entries (cookies are not state).
impl PartialEq for Tree {
    fn eq(&self, other: &Tree) -> bool {
        self.nodes == other.nodes && self.entries().eq(other.entries())
    }
}

impl Eq for Tree {}

/// Why a record does not apply.
fn replay(what: ReplayDamage) -> Damage {
    Damage::Replay(what)
}

impl Tree {
    /// An empty filesystem's tree: the root directory alone.
    pub fn with_root() -> Tree {
        let mut t = Tree::default();
        t.put_node(ROOT_INO, Node::root());
        t
    }

    // ----- reading -----

    /// The node of `ino`.
    pub fn node(&self, ino: u64) -> Option<Node> {
        self.nodes.get(&ino).copied()
    }

    /// Every node, by inode number.
    pub fn nodes(&self) -> impl Iterator<Item = (u64, Node)> + '_ {
        self.nodes.iter().map(|(&i, &n)| (i, n))
    }

    /// True if `ino` is a directory.
    pub fn is_dir(&self, ino: u64) -> bool {
        self.node(ino).is_some_and(|n| n.kind == Kind::Dir)
    }

    /// The inode the entry `name` of `dir` names.
    pub fn get(&self, dir: u64, name: &str) -> Option<u64> {
        self.dirs.get(&dir)?.by_name.get(name).map(|e| e.ino)
    }

    /// True if `dir` has no entry.
    pub fn is_empty(&self, dir: u64) -> bool {
        self.dirs.get(&dir).is_none_or(|d| d.by_name.is_empty())
    }

    /// Every entry, as (directory, name, inode), in directory and name
    /// order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &str, u64)> + '_ {
        self.dirs
            .iter()
            .flat_map(|(&dir, d)| d.by_name.iter().map(move |(n, e)| (dir, n.as_str(), e.ino)))
    }

    /// The entries of `dir`, in name order.
    pub fn entries_of(&self, dir: u64) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.dirs
            .get(&dir)
            .into_iter()
            .flat_map(|d| d.by_name.iter().map(|(n, e)| (n.as_str(), e.ino)))
    }

    /// How many entries there are.
    pub fn entry_count(&self) -> usize {
        self.dirs.values().map(|d| d.by_name.len()).sum()
    }

    /// Entries of `dir` with cookies above `after`, at most `max`, as
    /// (cookie, name, inode) in cookie order.
    pub fn list(&self, dir: u64, after: u64, max: usize) -> Vec<(u64, String, u64)> {
        let Some(d) = self.dirs.get(&dir) else {
            return Vec::new();
        };
        d.by_cookie
            .range(after.saturating_add(1)..)
            .take(max)
            .filter_map(|(&c, n)| d.by_name.get(n).map(|e| (c, n.clone(), e.ino)))
            .collect()
    }

    /// Bytes the entries take in a checkpoint image.
    pub fn entry_bytes(&self) -> u64 {
        self.entry_bytes
    }

    /// True if directory `ino` is `ancestor` or lies under it.
    pub fn under(&self, mut ino: u64, ancestor: u64) -> bool {
        // Bounded: a tree has no cycles, but never loop on a broken one.
        for _ in 0..=self.nodes.len() {
            if ino == ancestor {
                return true;
            }
            if ino == ROOT_INO {
                return false;
            }
            match self.node(ino) {
                Some(n) => ino = n.parent,
                None => return false,
            }
        }
        false
    }

    // ----- the rules of requests -----

    /// `ino` is a directory still linked into the tree (one removed while
    /// a handle had it takes no entries: NotFound, as Linux answers for a
    /// dead directory).
    pub fn may_hold_entries(&self, ino: u64) -> Result<Node, NamespaceError> {
        let n = self.node(ino).ok_or(NamespaceError::NotFound)?;
        if n.kind != Kind::Dir {
            return Err(NamespaceError::NotADirectory);
        }
        if n.nlink == 0 {
            return Err(NamespaceError::NotFound);
        }
        Ok(n)
    }

    /// A new inode of `kind` may be linked as `name` in `parent`.
    pub fn may_create(&self, parent: u64, name: &str, kind: Kind) -> Result<(), NamespaceError> {
        let dir = self.may_hold_entries(parent)?;
        if self.get(parent, name).is_some() {
            return Err(NamespaceError::Exists);
        }
        if kind == Kind::Dir && dir.nlink >= MAX_LINKS {
            return Err(NamespaceError::TooManyLinks);
        }
        Ok(())
    }

    /// Inode `ino` may get the hard link `name` in `parent`.
    pub fn may_link(&self, ino: u64, parent: u64, name: &str) -> Result<(), NamespaceError> {
        self.may_name(ino, parent, name, false)
    }

    /// As [`Tree::may_link`], and if `linkable`, `ino` may have no link
    /// yet: a file made unnamed to be named later and still open (Linux's
    /// `I_LINKABLE`, which only the live filesystem knows; replay applies
    /// the link as any other).
    pub fn may_name(
        &self,
        ino: u64,
        parent: u64,
        name: &str,
        linkable: bool,
    ) -> Result<(), NamespaceError> {
        self.may_hold_entries(parent)?;
        let n = self.node(ino).ok_or(NamespaceError::NotFound)?;
        if n.kind == Kind::Dir {
            return Err(NamespaceError::NotPermitted);
        }
        if n.nlink == 0 && !linkable {
            return Err(NamespaceError::NotFound);
        }
        if n.nlink >= MAX_LINKS {
            return Err(NamespaceError::TooManyLinks);
        }
        if self.get(parent, name).is_some() {
            return Err(NamespaceError::Exists);
        }
        Ok(())
    }

    /// The entry `name` of `parent` may be removed by `unlink` (`dir`
    /// false) or `rmdir` (`dir` true).
    pub fn may_remove(&self, parent: u64, name: &str, dir: bool) -> Result<(), NamespaceError> {
        self.may_hold_entries(parent)?;
        let ino = self.get(parent, name).ok_or(NamespaceError::NotFound)?;
        let n = self.node(ino).ok_or(NamespaceError::NotFound)?;
        match (n.kind == Kind::Dir, dir) {
            (true, false) => Err(NamespaceError::IsADirectory),
            (false, true) => Err(NamespaceError::NotADirectory),
            (true, true) if !self.is_empty(ino) => Err(NamespaceError::NotEmpty),
            _ => Ok(()),
        }
    }

    /// The rename may go ahead; false if it would change nothing (a name
    /// onto itself, or onto another link of the same inode, which POSIX
    /// says to leave alone).
    pub fn may_rename(
        &self,
        from: u64,
        from_name: &str,
        to: u64,
        to_name: &str,
        noreplace: bool,
        exchange: bool,
    ) -> Result<bool, NamespaceError> {
        self.may_hold_entries(from)?;
        self.may_hold_entries(to)?;
        let src_ino = self.get(from, from_name).ok_or(NamespaceError::NotFound)?;
        let src = self.node(src_ino).ok_or(NamespaceError::NotFound)?;
        let dst = match self.get(to, to_name) {
            Some(i) => Some((i, self.node(i).ok_or(NamespaceError::NotFound)?)),
            None => None,
        };
        if noreplace && dst.is_some() {
            return Err(NamespaceError::Exists);
        }
        if from == to && from_name == to_name {
            return Ok(false);
        }
        if src.kind == Kind::Dir && self.under(to, src_ino) {
            return Err(NamespaceError::InvalidMove);
        }
        if exchange {
            let (dst_ino, dst) = dst.ok_or(NamespaceError::NotFound)?;
            if dst.kind == Kind::Dir && self.under(from, dst_ino) {
                return Err(NamespaceError::InvalidMove);
            }
            return Ok(true);
        }
        let Some((dst_ino, dst)) = dst else {
            return Ok(true);
        };
        if dst_ino == src_ino {
            return Ok(false);
        }
        match (src.kind == Kind::Dir, dst.kind == Kind::Dir) {
            (true, false) => Err(NamespaceError::NotADirectory),
            (false, true) => Err(NamespaceError::IsADirectory),
            (true, true) if !self.is_empty(dst_ino) => Err(NamespaceError::NotEmpty),
            _ => Ok(true),
        }
    }

    // ----- applying records -----

    /// Applies one record, as the engine did when it made the change: link
    /// counts and directories' parents follow. A record that makes no sense
    /// against the tree (a link over an existing entry, a rename of no
    /// entry, a free of a linked inode) is an error: the image is corrupt.
    /// Records that carry no namespace change (data) change nothing here.
    pub fn apply(&mut self, r: &Record) -> Result<Effects, Damage> {
        let mut touched = Touched::default();
        match r {
            Record::Inode { ino, meta } => {
                self.put_node(
                    *ino,
                    Node {
                        kind: meta.kind,
                        nlink: meta.nlink,
                        parent: meta.parent,
                    },
                );
                touched.add(*ino);
            }
            Record::Link { parent, name, ino } => {
                if !self.is_dir(*parent) || self.get(*parent, name).is_some() {
                    return Err(replay(ReplayDamage::LinkInto {
                        parent: *parent,
                        ino: *ino,
                    }));
                }
                self.node(*ino).ok_or(replay(ReplayDamage::NoInode(*ino)))?;
                self.link(*parent, name, *ino, &mut touched);
            }
            Record::Unlink { parent, name } => {
                let ino = self
                    .take_entry(*parent, name)
                    .ok_or(replay(ReplayDamage::NoEntry { dir: *parent }))?;
                self.unlinked(*parent, ino, &mut touched)?;
            }
            Record::Rename {
                from,
                from_name,
                to,
                to_name,
                exchange,
            } => self.rename(*from, from_name, *to, to_name, *exchange, &mut touched)?,
            Record::Free { ino } => {
                let nlink = self.node(*ino).map_or(0, |n| n.nlink);
                if *ino == ROOT_INO || nlink != 0 {
                    return Err(replay(ReplayDamage::FreeLinked { ino: *ino, nlink }));
                }
                self.nodes.remove(ino);
            }
            Record::ImageEnd => return Err(replay(ReplayDamage::ImageEnd)),
            Record::Data { .. } | Record::Home { .. } | Record::Xattr { .. } => {}
        }
        Ok(self.effects(touched))
    }

    /// Loads one record of a checkpoint image: taken as it is, with no
    /// link counting (the image's inode records carry their counts).
    pub fn load(&mut self, r: &Record) -> Result<(), Damage> {
        match r {
            Record::Inode { ino, meta } => self.put_node(
                *ino,
                Node {
                    kind: meta.kind,
                    nlink: meta.nlink,
                    parent: meta.parent,
                },
            ),
            Record::Link { parent, name, ino } => {
                if self.get(*parent, name).is_some() {
                    return Err(replay(ReplayDamage::ImageEntryTwice { parent: *parent }));
                }
                self.put_entry(*parent, name, *ino);
            }
            // An image carries every inode's extended attributes; the
            // tree holds none.
            Record::Xattr { .. } => {}
            _ => return Err(replay(ReplayDamage::ImageRecord)),
        }
        Ok(())
    }

    fn effects(&self, touched: Touched) -> Effects {
        Effects {
            changed: touched
                .inos
                .iter()
                .filter_map(|&i| self.node(i).map(|n| (i, n)))
                .collect(),
            unlinked: touched.unlinked,
        }
    }

    /// Counts a new entry for `ino` in `parent`.
    fn link(&mut self, parent: u64, name: &str, ino: u64, touched: &mut Touched) {
        self.put_entry(parent, name, ino);
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        touched.add(ino);
        if n.kind == Kind::Dir {
            // Its entry and its own `.`; the parent gains a `..`.
            n.nlink = n.nlink.saturating_add(2);
            n.parent = parent;
            self.add_links(parent, 1, touched);
        } else {
            n.nlink = n.nlink.saturating_add(1);
        }
    }

    /// Counts an entry of `parent` for `ino` gone.
    fn unlinked(&mut self, parent: u64, ino: u64, touched: &mut Touched) -> Result<(), Damage> {
        let kind = self
            .node(ino)
            .ok_or(replay(ReplayDamage::NoInode(ino)))?
            .kind;
        if kind == Kind::Dir && self.node(parent).is_none() {
            return Err(replay(ReplayDamage::NoInode(parent)));
        }
        touched.add(ino);
        let Some(n) = self.nodes.get_mut(&ino) else {
            return Err(replay(ReplayDamage::NoInode(ino)));
        };
        if kind == Kind::Dir {
            n.nlink = 0;
            if self.is_empty(ino) {
                self.dirs.remove(&ino);
            }
            self.add_links(parent, -1, touched);
        } else {
            n.nlink = n.nlink.saturating_sub(1);
        }
        if self.node(ino).is_some_and(|n| n.nlink == 0) {
            touched.unlinked = Some(ino);
        }
        Ok(())
    }

    fn rename(
        &mut self,
        from: u64,
        from_name: &str,
        to: u64,
        to_name: &str,
        exchange: bool,
        touched: &mut Touched,
    ) -> Result<(), Damage> {
        if !self.is_dir(from) || !self.is_dir(to) {
            return Err(replay(ReplayDamage::RenameNotDir { from, to }));
        }
        let src = self
            .get(from, from_name)
            .ok_or(replay(ReplayDamage::NoEntry { dir: from }))?;
        if from == to && from_name == to_name {
            return Ok(());
        }
        let dst = self.get(to, to_name);
        if exchange {
            let dst = dst.ok_or(replay(ReplayDamage::NoEntry { dir: to }))?;
            self.put_entry(from, from_name, dst);
            self.put_entry(to, to_name, src);
            self.moved(src, from, to, touched);
            self.moved(dst, to, from, touched);
            return Ok(());
        }
        if let Some(old) = dst {
            self.take_entry(to, to_name);
            self.unlinked(to, old, touched)?;
        }
        self.take_entry(from, from_name);
        self.put_entry(to, to_name, src);
        self.moved(src, from, to, touched);
        Ok(())
    }

    /// A directory's `..` moves with it from `from` to `to`.
    fn moved(&mut self, ino: u64, from: u64, to: u64, touched: &mut Touched) {
        if from == to || !self.is_dir(ino) {
            return;
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = to;
            touched.add(ino);
        }
        self.add_links(from, -1, touched);
        self.add_links(to, 1, touched);
    }

    fn add_links(&mut self, ino: u64, by: i32, touched: &mut Touched) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.nlink = n.nlink.saturating_add_signed(by);
            touched.add(ino);
        }
    }

    // ----- raw changes (loading, repair) -----

    /// Sets `ino`'s node as it is, counting nothing.
    pub fn put_node(&mut self, ino: u64, node: Node) {
        self.nodes.insert(ino, node);
    }

    /// Drops `ino`'s node (an orphan reclaimed), counting nothing.
    pub fn drop_node(&mut self, ino: u64) {
        self.nodes.remove(&ino);
    }

    /// Sets `ino`'s link count, counting nothing (repair).
    pub fn set_nlink(&mut self, ino: u64, nlink: u32) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.nlink = nlink;
        }
    }

    /// Sets `ino`'s parent, counting nothing (repair).
    pub fn set_parent(&mut self, ino: u64, parent: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = parent;
        }
    }

    /// Sets the entry `name` of `dir` to `ino`, counting nothing.
    pub fn put_entry(&mut self, dir: u64, name: &str, ino: u64) {
        let d = self.dirs.entry(dir).or_default();
        if let Some(e) = d.by_name.get_mut(name) {
            e.ino = ino;
            return;
        }
        let cookie = d.free_cookie(name);
        d.by_cookie.insert(cookie, name.to_string());
        d.by_name.insert(name.to_string(), Entry { ino, cookie });
        self.entry_bytes += link_len(name.len());
    }

    /// Removes the entry `name` of `dir`, counting nothing; returns the
    /// inode it named.
    pub fn take_entry(&mut self, dir: u64, name: &str) -> Option<u64> {
        let d = self.dirs.get_mut(&dir)?;
        let e = d.by_name.remove(name)?;
        d.by_cookie.remove(&e.cookie);
        self.entry_bytes -= link_len(name.len());
        Some(e.ino)
    }

    // ----- checks -----

    /// Every broken invariant of the tree: a root; every entry names an
    /// inode in a directory; one entry per directory, matching its `..`;
    /// everything linked reachable from the root, with no cycle; link
    /// counts equal to the links counted.
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        if !self.is_dir(ROOT_INO) {
            out.push(Problem::NoRoot);
            return out;
        }
        let mut links: BTreeMap<u64, u32> = BTreeMap::new();
        let mut dir_entries: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (parent, name, ino) in self.entries() {
            if !self.is_dir(parent) || self.node(ino).is_none() || ino == ROOT_INO {
                out.push(Problem::DanglingEntry {
                    parent,
                    name: String::from(name),
                });
                continue;
            }
            if self.is_dir(ino) {
                dir_entries.entry(ino).or_default().push(parent);
                *links.entry(ino).or_default() += 2;
                *links.entry(parent).or_default() += 1;
            } else {
                *links.entry(ino).or_default() += 1;
            }
        }
        *links.entry(ROOT_INO).or_default() += 2;
        for (ino, n) in self.nodes() {
            if n.kind != Kind::Dir || ino == ROOT_INO {
                continue;
            }
            match dir_entries.get(&ino).map(Vec::as_slice) {
                None | Some([]) => {}
                Some([p]) if *p == n.parent => {}
                Some(_) => out.push(Problem::BadDirLinks { ino }),
            }
        }
        if self.node(ROOT_INO).is_some_and(|r| r.parent != ROOT_INO) {
            out.push(Problem::BadDirLinks { ino: ROOT_INO });
        }
        // Everything linked must be reachable from the root; a directory
        // cycle is unreachable by construction.
        let reachable: BTreeSet<u64> = {
            let mut seen = BTreeSet::new();
            let mut todo = alloc::vec![ROOT_INO];
            while let Some(dir) = todo.pop() {
                if !seen.insert(dir) {
                    continue;
                }
                for (_, ino) in self.entries_of(dir) {
                    if self.is_dir(ino) {
                        todo.push(ino);
                    } else {
                        seen.insert(ino);
                    }
                }
            }
            seen
        };
        for (ino, n) in self.nodes() {
            let counted = links.get(&ino).copied().unwrap_or(0);
            // A directory that no entry names but that holds entries is
            // lost too: mount would reclaim it and leave them dangling.
            let holds = n.kind == Kind::Dir && !self.is_empty(ino);
            if (counted > 0 || holds) && !reachable.contains(&ino) {
                out.push(Problem::Unreachable { ino });
            }
            if n.nlink != counted {
                out.push(Problem::LinkCount {
                    ino,
                    recorded: n.nlink,
                    counted,
                });
            }
        }
        out
    }
}

impl Node {
    /// The root of an empty filesystem: `.` and its own `..`.
    pub fn root() -> Node {
        Node {
            kind: Kind::Dir,
            nlink: 2,
            parent: ROOT_INO,
        }
    }
}

/// Inodes a record changed, in the order first changed.
#[derive(Default)]
struct Touched {
    inos: Vec<u64>,
    unlinked: Option<u64>,
}

impl Touched {
    fn add(&mut self, ino: u64) {
        if !self.inos.contains(&ino) {
            self.inos.push(ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persist::record::tests::{inode, link, rename};
    use crate::persist::record::InodeMeta;

    /// `tree` with a new inode of `kind` linked as `name` in `dir`.
    fn make(t: &mut Tree, ino: u64, dir: u64, name: &str, kind: Kind) -> Effects {
        t.may_create(dir, name, kind).unwrap();
        t.apply(&Record::Inode {
            ino,
            meta: inode(kind),
        })
        .unwrap();
        t.apply(&link(dir, name, ino)).unwrap()
    }

    fn nlink(t: &Tree, ino: u64) -> u32 {
        t.node(ino).unwrap().nlink
    }

    /// /a (dir 2), /a/f (file 3), /b (dir 4).
    fn small() -> Tree {
        let mut t = Tree::with_root();
        make(&mut t, 2, ROOT_INO, "a", Kind::Dir);
        make(&mut t, 3, 2, "f", Kind::File);
        make(&mut t, 4, ROOT_INO, "b", Kind::Dir);
        t
    }

    #[test]
    fn a_name_keeps_its_place_in_a_listing_and_a_taken_place_passes_on() {
        let mut t = Tree::with_root();
        for (i, n) in ["m", "a", "z", "q"].iter().enumerate() {
            make(&mut t, 2 + i as u64, ROOT_INO, n, Kind::File);
        }
        let listed = |t: &Tree| t.list(ROOT_INO, 0, usize::MAX);
        let before = listed(&t);
        let mut cookies: Vec<u64> = before.iter().map(|e| e.0).collect();
        cookies.sort_unstable();
        assert_eq!(cookies, before.iter().map(|e| e.0).collect::<Vec<_>>());
        assert!(cookies[0] >= FIRST_COOKIE && cookies[3] < COOKIE_END);
        let rename = |t: &mut Tree, a: &str, b: &str| {
            t.apply(&Record::Rename {
                from: ROOT_INO,
                from_name: a.into(),
                to: ROOT_INO,
                to_name: b.into(),
                exchange: false,
            })
            .unwrap();
        };
        // Away and back: the same place, whatever came and went meanwhile.
        rename(&mut t, "m", "T");
        make(&mut t, 9, ROOT_INO, "new", Kind::File);
        rename(&mut t, "T", "m");
        let after: Vec<_> = listed(&t).into_iter().filter(|e| e.1 != "new").collect();
        assert_eq!(after, before);
        // Two names with one hash: the second takes the next free cookie,
        // wrapping below 2^63.
        let mut d = Dir::default();
        let h = name_hash("x");
        d.by_cookie.insert(h, "y".into());
        assert_eq!(d.free_cookie("x"), h + 1);
        d.by_cookie.insert(COOKIE_END - 1, "w".into());
        assert_eq!(d.free_from(COOKIE_END - 1), FIRST_COOKIE);
    }

    #[test]
    fn links_count_and_effects_name_what_changed() {
        let mut t = Tree::with_root();
        let e = make(&mut t, 2, ROOT_INO, "d", Kind::Dir);
        let root = Node {
            nlink: 3,
            ..Node::root()
        };
        let d = Node {
            kind: Kind::Dir,
            nlink: 2,
            parent: ROOT_INO,
        };
        assert_eq!(e.changed, [(2, d), (ROOT_INO, root)]);
        assert_eq!(e.unlinked, None);
        let e = make(&mut t, 3, 2, "f", Kind::File);
        assert_eq!(e.changed.len(), 1, "a file's link changes only the file");
        t.may_link(3, ROOT_INO, "g").unwrap();
        t.apply(&link(ROOT_INO, "g", 3)).unwrap();
        assert_eq!((nlink(&t, 3), nlink(&t, 2), nlink(&t, ROOT_INO)), (2, 2, 3));
        let e = t
            .apply(&Record::Unlink {
                parent: 2,
                name: "f".into(),
            })
            .unwrap();
        assert_eq!(e.unlinked, None, "one link is left");
        let e = t
            .apply(&Record::Unlink {
                parent: ROOT_INO,
                name: "g".into(),
            })
            .unwrap();
        assert_eq!(e.unlinked, Some(3));
        t.apply(&Record::Free { ino: 3 }).unwrap();
        assert_eq!(t.node(3), None);
        assert_eq!(t.problems(), []);
    }

    #[test]
    fn a_moved_directory_takes_its_dotdot_along() {
        let mut t = small();
        assert!(t.may_rename(ROOT_INO, "a", 4, "a", false, false).unwrap());
        t.apply(&rename(ROOT_INO, "a", 4, "a", false)).unwrap();
        assert_eq!(t.node(2).unwrap().parent, 4);
        assert_eq!((nlink(&t, ROOT_INO), nlink(&t, 4)), (3, 3));
        assert_eq!(t.problems(), []);
        // Exchange swaps two entries: a directory's `..` follows it.
        assert_eq!(
            t.may_rename(4, "a", ROOT_INO, "b", false, true),
            Err(NamespaceError::InvalidMove)
        );
        make(&mut t, 5, ROOT_INO, "c", Kind::File);
        t.may_rename(4, "a", ROOT_INO, "c", false, true).unwrap();
        t.apply(&rename(4, "a", ROOT_INO, "c", true)).unwrap();
        assert_eq!(t.get(ROOT_INO, "c"), Some(2));
        assert_eq!(t.get(4, "a"), Some(5));
        assert_eq!(t.node(2).unwrap().parent, ROOT_INO);
        assert_eq!(t.problems(), []);
    }

    #[test]
    fn requests_posix_refuses_are_refused() {
        let t = small();
        use NamespaceError as E;
        assert_eq!(t.may_create(ROOT_INO, "a", Kind::File), Err(E::Exists));
        assert_eq!(t.may_create(3, "x", Kind::File), Err(E::NotADirectory));
        assert_eq!(t.may_create(99, "x", Kind::File), Err(E::NotFound));
        assert_eq!(t.may_link(2, ROOT_INO, "x"), Err(E::NotPermitted));
        assert_eq!(t.may_remove(ROOT_INO, "a", false), Err(E::IsADirectory));
        assert_eq!(t.may_remove(2, "f", true), Err(E::NotADirectory));
        assert_eq!(t.may_remove(ROOT_INO, "a", true), Err(E::NotEmpty));
        assert_eq!(t.may_remove(ROOT_INO, "b", true), Ok(()));
        // A directory never moves under itself, directly or deeper.
        assert_eq!(
            t.may_rename(ROOT_INO, "a", 2, "x", false, false),
            Err(E::InvalidMove)
        );
        // Replacing: a directory only by a directory, and only if empty.
        assert_eq!(
            t.may_rename(2, "f", ROOT_INO, "b", false, false),
            Err(E::IsADirectory)
        );
        assert_eq!(
            t.may_rename(ROOT_INO, "b", 2, "f", false, false),
            Err(E::NotADirectory)
        );
        assert_eq!(
            t.may_rename(ROOT_INO, "b", ROOT_INO, "a", false, false),
            Err(E::NotEmpty)
        );
        assert_eq!(
            t.may_rename(ROOT_INO, "b", ROOT_INO, "a", true, false),
            Err(E::Exists)
        );
        assert_eq!(
            t.may_rename(ROOT_INO, "a", ROOT_INO, "a", false, false),
            Ok(false)
        );
        assert_eq!(
            t.may_rename(ROOT_INO, "b", ROOT_INO, "x", false, true),
            Err(E::NotFound)
        );
    }

    #[test]
    fn link_limits_hold() {
        let mut t = small();
        t.set_nlink(3, MAX_LINKS);
        assert_eq!(
            t.may_link(3, ROOT_INO, "x"),
            Err(NamespaceError::TooManyLinks)
        );
        t.set_nlink(ROOT_INO, MAX_LINKS);
        assert_eq!(
            t.may_create(ROOT_INO, "x", Kind::Dir),
            Err(NamespaceError::TooManyLinks)
        );
        assert_eq!(t.may_create(ROOT_INO, "x", Kind::File), Ok(()));
        // A removed directory takes no entries, and an unlinked file no
        // new name.
        let mut t = small();
        t.apply(&Record::Unlink {
            parent: ROOT_INO,
            name: "b".into(),
        })
        .unwrap();
        assert_eq!(
            t.may_create(4, "x", Kind::File),
            Err(NamespaceError::NotFound)
        );
        t.apply(&Record::Unlink {
            parent: 2,
            name: "f".into(),
        })
        .unwrap();
        assert_eq!(t.may_link(3, ROOT_INO, "x"), Err(NamespaceError::NotFound));
        // Unless the live filesystem says it may be named (O_TMPFILE).
        assert_eq!(t.may_name(3, ROOT_INO, "x", true), Ok(()));
        assert_eq!(
            t.may_name(3, ROOT_INO, "f", true),
            Ok(()),
            "its old name is free again"
        );
    }

    #[test]
    fn entry_bytes_and_listing_order_follow_the_entries() {
        let mut t = small();
        let sum = |t: &Tree| t.entries().map(|(_, n, _)| link_len(n.len())).sum::<u64>();
        assert_eq!(t.entry_bytes(), sum(&t));
        t.apply(&rename(2, "f", ROOT_INO, "a-much-longer-name", false))
            .unwrap();
        assert_eq!(t.entry_bytes(), sum(&t));
        make(&mut t, 5, ROOT_INO, "0", Kind::File);
        // Listed in the order of the names' hashes, whatever the order
        // they came in.
        let mut names: Vec<(u64, String)> = t
            .list(ROOT_INO, 0, 10)
            .into_iter()
            .map(|(c, n, _)| (c, n))
            .collect();
        let mut by_hash: Vec<(u64, String)> = ["a", "b", "a-much-longer-name", "0"]
            .iter()
            .map(|n| (name_hash(n), n.to_string()))
            .collect();
        by_hash.sort();
        assert_eq!(names, by_hash);
        names.sort_by(|x, y| x.1.cmp(&y.1));
        assert_ne!(names, by_hash, "not in name order (for these names)");
        let after = t.list(ROOT_INO, 0, 2)[1].0;
        assert_eq!(t.list(ROOT_INO, after, 10).len(), 2);
    }

    #[test]
    fn a_loaded_image_equals_the_tree_it_was_taken_from() {
        let t = small();
        let mut loaded = Tree::default();
        for (ino, n) in t.nodes() {
            let mut meta = InodeMeta::new(n.kind, 0, 0, 0, 0);
            meta.nlink = n.nlink;
            meta.parent = n.parent;
            loaded.load(&Record::Inode { ino, meta }).unwrap();
        }
        for (p, name, ino) in t.entries() {
            loaded.load(&link(p, name, ino)).unwrap();
        }
        assert!(loaded == t);
        assert!(loaded.load(&link(ROOT_INO, "a", 3)).is_err(), "twice");
        assert!(loaded.load(&Record::Free { ino: 3 }).is_err());
    }
}
