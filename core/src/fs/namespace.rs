//! The namespace: a tree of directories keyed by (directory, name), and
//! every operation that changes it.
//!
//! One lock (the namespace lock, [`Shared::tree`](super::Shared)) guards
//! the tree, link counts and directories' parents; each change stages its
//! records while holding it, so the log receives them in the order they
//! were made. It is taken after an inode's own locks, never before them.
//!
//! Each directory numbers its entries as they are added (cookies, kept in
//! memory only); `read_dir` returns entries in cookie order after a given
//! cookie, so a listing that runs alongside creates and removes returns no
//! entry twice and skips none that existed throughout.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::inode::{Inode, Owner};
use super::{File, Fs, Shared};
use crate::dev::BlockDevice;
use crate::error::{Error, NameError, NamespaceError, Result, SpaceError};
use crate::persist::record::{InodeMeta, Kind, Record};
use crate::units::{InodeId, MAX_INODE, MAX_LINKS, MAX_NAME_LEN, MAX_SYMLINK_LEN, ROOT_INO};

/// One entry of a directory.
#[derive(Clone, Copy, Debug)]
struct Entry {
    ino: u64,
    cookie: u64,
}

/// A directory's entries, by name and in the order they were added.
#[derive(Debug, Default)]
struct Dir {
    by_name: BTreeMap<String, Entry>,
    by_cookie: BTreeMap<u64, String>,
    next_cookie: u64,
}

/// Every directory's entries.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    dirs: BTreeMap<u64, Dir>,
}

impl Tree {
    pub(crate) fn add_dir(&mut self, ino: u64) {
        self.dirs.entry(ino).or_insert_with(|| Dir {
            // Cookies 0..2 stand for `.` and `..` in a listing.
            next_cookie: 3,
            ..Dir::default()
        });
    }
    fn remove_dir(&mut self, ino: u64) {
        self.dirs.remove(&ino);
    }
    fn is_dir(&self, ino: u64) -> bool {
        self.dirs.contains_key(&ino)
    }
    pub(crate) fn get(&self, dir: u64, name: &str) -> Option<u64> {
        self.dirs.get(&dir)?.by_name.get(name).map(|e| e.ino)
    }
    pub(crate) fn insert(&mut self, dir: u64, name: &str, ino: u64) {
        if let Some(d) = self.dirs.get_mut(&dir) {
            let cookie = d.next_cookie;
            d.next_cookie += 1;
            d.by_cookie.insert(cookie, name.to_string());
            d.by_name.insert(name.to_string(), Entry { ino, cookie });
        }
    }
    fn remove(&mut self, dir: u64, name: &str) -> Option<u64> {
        let d = self.dirs.get_mut(&dir)?;
        let e = d.by_name.remove(name)?;
        d.by_cookie.remove(&e.cookie);
        Some(e.ino)
    }
    fn is_empty(&self, dir: u64) -> bool {
        self.dirs.get(&dir).is_none_or(|d| d.by_name.is_empty())
    }
    /// Entries of `dir` with cookies above `after`, at most `max`.
    fn list(&self, dir: u64, after: u64, max: usize) -> Vec<(u64, String, u64)> {
        let Some(d) = self.dirs.get(&dir) else {
            return Vec::new();
        };
        d.by_cookie
            .range(after.saturating_add(1)..)
            .take(max)
            .filter_map(|(&c, n)| d.by_name.get(n).map(|e| (c, n.clone(), e.ino)))
            .collect()
    }
    /// Every entry, as (directory, name, inode).
    pub(crate) fn all(&self) -> impl Iterator<Item = (u64, &str, u64)> + '_ {
        self.dirs
            .iter()
            .flat_map(|(&dir, d)| d.by_name.iter().map(move |(n, e)| (dir, n.as_str(), e.ino)))
    }
}

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Its name.
    pub name: String,
    /// The inode it names.
    pub ino: u64,
    /// What that inode is.
    pub kind: Kind,
    /// Where a listing continues after this entry (see [`Fs::read_dir`]).
    pub cookie: u64,
}

/// Who a new inode belongs to, and its permission bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewInode {
    /// Permission bits (`mode & 0o7777`).
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

impl NewInode {
    /// `perm` for `uid`/`gid`.
    pub fn new(perm: u16, uid: u32, gid: u32) -> NewInode {
        NewInode {
            perm: perm & 0o7777,
            uid,
            gid,
        }
    }
}

/// Attribute changes for [`Fs::set_attr`]; `None` leaves one as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits.
    pub perm: Option<u16>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New access time (nanoseconds since the Unix epoch).
    pub atime: Option<u64>,
    /// New modification time.
    pub mtime: Option<u64>,
}

/// `rename` variants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with [`NamespaceError::Exists`] if the target exists
    /// (`RENAME_NOREPLACE`).
    pub noreplace: bool,
    /// Swap source and target, which must both exist (`RENAME_EXCHANGE`).
    pub exchange: bool,
}

/// Checks one name (not a path).
pub(crate) fn check_name(name: &str) -> core::result::Result<(), NameError> {
    if name.is_empty() {
        Err(NameError::Empty)
    } else if name.len() > MAX_NAME_LEN {
        Err(NameError::TooLong)
    } else if name.bytes().any(|b| b == 0 || b == b'/') {
        Err(NameError::BadByte)
    } else if name == "." || name == ".." {
        Err(NameError::Dots)
    } else {
        Ok(())
    }
}

impl<D: BlockDevice> Shared<D> {
    /// Stages `record` with the journal (the caller holds the namespace
    /// lock, so records arrive in the order of the changes).
    pub(crate) fn stage(&self, record: Record, seq: Option<u64>) -> u64 {
        self.journal.stage(record, seq)
    }

    /// The inode `ino`, which must be a directory present in `tree`.
    fn dir(&self, tree: &Tree, ino: u64) -> Result<Arc<Inode>> {
        let inode = self.inode(InodeId(ino)).ok_or(NamespaceError::NotFound)?;
        if inode.kind != Kind::Dir || !tree.is_dir(ino) {
            return Err(NamespaceError::NotADirectory.into());
        }
        Ok(inode)
    }

    /// Creates an inode of `kind` linked as `name` in `parent`. A file comes
    /// back opened (counted).
    pub(crate) fn make(
        &self,
        parent: u64,
        name: &str,
        kind: Kind,
        who: NewInode,
        target: &str,
    ) -> Result<Arc<Inode>> {
        check_name(name)?;
        let now = (self.config.wall_clock)();
        let mut tree = self.tree.write();
        let dir = self.dir(&tree, parent)?;
        if tree.get(parent, name).is_some() {
            return Err(NamespaceError::Exists.into());
        }
        if kind == Kind::Dir && dir.nlink.load(Ordering::Acquire) >= MAX_LINKS {
            return Err(NamespaceError::TooManyLinks.into());
        }
        let mut meta = InodeMeta::new(kind, who.perm & 0o7777, who.uid, who.gid, now);
        if kind == Kind::Symlink {
            meta.target = target.to_string();
            meta.size = target.len() as u64;
        }
        // A new inode and entry grow the next checkpoint: refuse them, as a
        // full device, if the blocks held back for metadata could not.
        let grows = meta.record_len() + link_len(name);
        if self.space.lock().free_blocks() < self.meta_reserve(grows) {
            return Err(SpaceError::DeviceFull.into());
        }
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        if ino > MAX_INODE {
            return Err(SpaceError::InodeNumbers.into());
        }
        let inode = Arc::new(Inode::from_meta(InodeId(ino), &meta));
        if kind == Kind::File {
            inode.open.fetch_add(1, Ordering::AcqRel);
        }
        self.inodes.write().insert(InodeId(ino), inode.clone());
        self.meta_len_changed(&inode, 0, false);
        self.stage(Record::Inode { ino, meta }, None);
        if kind == Kind::Dir {
            tree.add_dir(ino);
        }
        self.link_entry(&mut tree, &dir, name, &inode, now);
        Ok(inode)
    }

    /// Adds the entry `name` in `dir` for `inode`, counting its links, and
    /// stages the record.
    fn link_entry(&self, tree: &mut Tree, dir: &Inode, name: &str, inode: &Inode, now: u64) {
        tree.insert(dir.id.0, name, inode.id.0);
        if inode.kind == Kind::Dir {
            inode.nlink.fetch_add(2, Ordering::AcqRel);
            inode.parent.store(dir.id.0, Ordering::Release);
            dir.nlink.fetch_add(1, Ordering::AcqRel);
        } else {
            inode.nlink.fetch_add(1, Ordering::AcqRel);
        }
        inode.ctime.store(now, Ordering::Relaxed);
        dir.touch(now);
        self.meta_bytes.fetch_add(link_len(name), Ordering::AcqRel);
        self.stage(
            Record::Link {
                parent: dir.id.0,
                name: name.to_string(),
                ino: inode.id.0,
            },
            None,
        );
    }

    /// Counts the entry of `dir` for `inode` gone (the caller removed it
    /// from the tree and stages the record). Returns the inode if it has
    /// no link left, for the caller to release after the lock.
    fn unlinked(
        &self,
        tree: &mut Tree,
        dir: &Inode,
        name: &str,
        inode: &Arc<Inode>,
        now: u64,
    ) -> Option<Arc<Inode>> {
        if inode.kind == Kind::Dir {
            inode.nlink.store(0, Ordering::Release);
            dir.nlink.fetch_sub(1, Ordering::AcqRel);
            tree.remove_dir(inode.id.0);
        } else {
            inode.nlink.fetch_sub(1, Ordering::AcqRel);
        }
        inode.ctime.store(now, Ordering::Relaxed);
        dir.touch(now);
        self.meta_bytes.fetch_sub(link_len(name), Ordering::AcqRel);
        (inode.nlink.load(Ordering::Acquire) == 0).then(|| inode.clone())
    }

    /// Lets an inode with no link left go: now if no handle has it open,
    /// else when the last one closes.
    fn release(&self, inode: Arc<Inode>) {
        inode.unlinked.store(true, Ordering::Release);
        // Take and drop a reference: reclaims now if nobody has it open.
        inode.open.fetch_add(1, Ordering::AcqRel);
        self.close(&inode);
    }

    /// True if directory `ino` is `ancestor` or lies under it.
    fn under(&self, mut ino: u64, ancestor: u64) -> bool {
        // Bounded: a tree has no cycles, but never loop on a broken one.
        for _ in 0..=self.inodes.read().len() {
            if ino == ancestor {
                return true;
            }
            if ino == ROOT_INO {
                return false;
            }
            match self.inode(InodeId(ino)) {
                Some(i) => ino = i.parent.load(Ordering::Acquire),
                None => return false,
            }
        }
        false
    }
}

fn link_len(name: &str) -> u64 {
    // An entry's record in a checkpoint image: tag, parent, inode, name.
    1 + 8 + 8 + 2 + name.len() as u64
}

impl<D: BlockDevice> Fs<D> {
    /// The directory that holds directory `dir`: what its `..` names (the
    /// root is its own parent).
    pub fn parent_of(&self, dir: u64) -> Result<u64> {
        let tree = self.shared.tree.read();
        Ok(self.shared.dir(&tree, dir)?.parent.load(Ordering::Acquire))
    }

    /// The inode number of `name` in directory `parent`.
    pub fn lookup_in(&self, parent: u64, name: &str) -> Result<u64> {
        check_name(name)?;
        let tree = self.shared.tree.read();
        self.shared.dir(&tree, parent)?;
        tree.get(parent, name)
            .ok_or(NamespaceError::NotFound.into())
    }

    /// Creates the regular file `name` in directory `parent`, which must not
    /// have it, and opens it.
    pub fn create_in(&self, parent: u64, name: &str, who: NewInode) -> Result<File<D>> {
        let inode = self.make(parent, name, Kind::File, who, "")?;
        Ok(File::new(self.clone(), inode))
    }

    /// Makes an inode and its entry; if the device is full while blocks
    /// freed by remove, truncate or punch-hole wait for a commit, commits
    /// and tries again (as writes do).
    fn make(
        &self,
        parent: u64,
        name: &str,
        kind: Kind,
        who: NewInode,
        target: &str,
    ) -> Result<Arc<Inode>> {
        let made = self.shared.make(parent, name, kind, who, target);
        if !self.shared.full_until_commit(&made) {
            return made;
        }
        self.sync()?;
        self.shared.make(parent, name, kind, who, target)
    }

    /// Creates the directory `name` in `parent`; returns its inode number.
    pub fn mkdir_in(&self, parent: u64, name: &str, who: NewInode) -> Result<u64> {
        Ok(self.make(parent, name, Kind::Dir, who, "")?.id.0)
    }

    /// Creates the symbolic link `name` in `parent`, pointing at `target`
    /// (stored as given, up to 4095 bytes, never followed by pollfs);
    /// returns its inode number.
    pub fn symlink_in(&self, parent: u64, name: &str, target: &str, who: NewInode) -> Result<u64> {
        if target.is_empty() || target.bytes().any(|b| b == 0) {
            return Err(NameError::BadByte.into());
        }
        if target.len() > MAX_SYMLINK_LEN {
            return Err(NameError::TooLong.into());
        }
        Ok(self.make(parent, name, Kind::Symlink, who, target)?.id.0)
    }

    /// A symbolic link's target.
    pub fn readlink(&self, ino: u64) -> Result<String> {
        let inode = self
            .shared
            .inode(InodeId(ino))
            .ok_or(NamespaceError::NotFound)?;
        if inode.kind != Kind::Symlink {
            return Err(NamespaceError::NotASymlink.into());
        }
        Ok(inode.target.clone())
    }

    /// Adds a hard link `name` in `parent` to the file or symbolic link
    /// `ino` (not to a directory).
    pub fn link_in(&self, ino: u64, parent: u64, name: &str) -> Result<()> {
        check_name(name)?;
        let shared = &self.shared;
        let now = (shared.config.wall_clock)();
        let mut tree = shared.tree.write();
        let dir = shared.dir(&tree, parent)?;
        let inode = shared.inode(InodeId(ino)).ok_or(NamespaceError::NotFound)?;
        if inode.kind == Kind::Dir {
            return Err(NamespaceError::NotPermitted.into());
        }
        let links = inode.nlink.load(Ordering::Acquire);
        if links == 0 {
            return Err(NamespaceError::NotFound.into());
        }
        if links >= MAX_LINKS {
            return Err(NamespaceError::TooManyLinks.into());
        }
        if tree.get(parent, name).is_some() {
            return Err(NamespaceError::Exists.into());
        }
        shared.link_entry(&mut tree, &dir, name, &inode, now);
        Ok(())
    }

    /// Removes the entry `name` of `parent`, which must not be a directory.
    /// Open handles keep working; the data goes when the last link and the
    /// last handle are gone.
    pub fn unlink_in(&self, parent: u64, name: &str) -> Result<()> {
        self.remove_entry(parent, name, false)
    }

    /// Removes the empty directory `name` of `parent`.
    pub fn rmdir_in(&self, parent: u64, name: &str) -> Result<()> {
        self.remove_entry(parent, name, true)
    }

    fn remove_entry(&self, parent: u64, name: &str, want_dir: bool) -> Result<()> {
        check_name(name)?;
        let shared = &self.shared;
        let now = (shared.config.wall_clock)();
        let gone = {
            let mut tree = shared.tree.write();
            let dir = shared.dir(&tree, parent)?;
            let ino = tree.get(parent, name).ok_or(NamespaceError::NotFound)?;
            let inode = shared.inode(InodeId(ino)).ok_or(NamespaceError::NotFound)?;
            match (inode.kind == Kind::Dir, want_dir) {
                (true, false) => return Err(NamespaceError::IsADirectory.into()),
                (false, true) => return Err(NamespaceError::NotADirectory.into()),
                (true, true) if !tree.is_empty(ino) => return Err(NamespaceError::NotEmpty.into()),
                _ => {}
            }
            tree.remove(parent, name);
            let gone = shared.unlinked(&mut tree, &dir, name, &inode, now);
            shared.stage(
                Record::Unlink {
                    parent,
                    name: name.to_string(),
                },
                None,
            );
            gone
        };
        if let Some(inode) = gone {
            shared.release(inode);
        }
        Ok(())
    }

    /// Renames the entry `from_name` of `from` to `to_name` in `to`,
    /// atomically: as POSIX says, an existing target is replaced if it is
    /// of the same sort (a directory only by a directory, and only if
    /// empty); a directory is never moved under itself. See
    /// [`RenameFlags`] for `RENAME_NOREPLACE` and `RENAME_EXCHANGE`.
    pub fn rename_in(
        &self,
        from: u64,
        from_name: &str,
        to: u64,
        to_name: &str,
        flags: RenameFlags,
    ) -> Result<()> {
        check_name(from_name)?;
        check_name(to_name)?;
        let shared = &self.shared;
        let now = (shared.config.wall_clock)();
        let gone = {
            let mut tree = shared.tree.write();
            let from_dir = shared.dir(&tree, from)?;
            let to_dir = shared.dir(&tree, to)?;
            let src_ino = tree.get(from, from_name).ok_or(NamespaceError::NotFound)?;
            let src = shared
                .inode(InodeId(src_ino))
                .ok_or(NamespaceError::NotFound)?;
            let dst = match tree.get(to, to_name) {
                Some(i) => Some(shared.inode(InodeId(i)).ok_or(NamespaceError::NotFound)?),
                None => None,
            };
            if flags.noreplace && dst.is_some() {
                return Err(NamespaceError::Exists.into());
            }
            if from == to && from_name == to_name {
                return Ok(());
            }
            if src.kind == Kind::Dir && shared.under(to, src_ino) {
                return Err(NamespaceError::InvalidMove.into());
            }
            let gone = if flags.exchange {
                let dst = dst.ok_or(NamespaceError::NotFound)?;
                if dst.kind == Kind::Dir && shared.under(from, dst.id.0) {
                    return Err(NamespaceError::InvalidMove.into());
                }
                tree.remove(from, from_name);
                tree.remove(to, to_name);
                tree.insert(from, from_name, dst.id.0);
                tree.insert(to, to_name, src_ino);
                moved(&src, &from_dir, &to_dir);
                moved(&dst, &to_dir, &from_dir);
                dst.ctime.store(now, Ordering::Relaxed);
                None
            } else {
                let mut gone = None;
                if let Some(dst) = &dst {
                    if dst.id.0 == src_ino {
                        // Two links to one inode: POSIX says do nothing.
                        return Ok(());
                    }
                    match (src.kind == Kind::Dir, dst.kind == Kind::Dir) {
                        (true, false) => return Err(NamespaceError::NotADirectory.into()),
                        (false, true) => return Err(NamespaceError::IsADirectory.into()),
                        (true, true) if !tree.is_empty(dst.id.0) => {
                            return Err(NamespaceError::NotEmpty.into())
                        }
                        _ => {}
                    }
                    tree.remove(to, to_name);
                    gone = shared.unlinked(&mut tree, &to_dir, to_name, dst, now);
                }
                tree.remove(from, from_name);
                tree.insert(to, to_name, src_ino);
                shared
                    .meta_bytes
                    .fetch_add(link_len(to_name), Ordering::AcqRel);
                shared
                    .meta_bytes
                    .fetch_sub(link_len(from_name), Ordering::AcqRel);
                moved(&src, &from_dir, &to_dir);
                gone
            };
            src.ctime.store(now, Ordering::Relaxed);
            from_dir.touch(now);
            to_dir.touch(now);
            shared.stage(
                Record::Rename {
                    from,
                    from_name: from_name.to_string(),
                    to,
                    to_name: to_name.to_string(),
                    exchange: flags.exchange,
                },
                None,
            );
            gone
        };
        if let Some(inode) = gone {
            shared.release(inode);
        }
        Ok(())
    }

    /// Entries of directory `dir` after the one whose cookie is `after`
    /// (0 for the start), at most `max`, in the order they were added.
    /// `.` and `..` are not included.
    pub fn read_dir(&self, dir: u64, after: u64, max: usize) -> Result<Vec<DirEntry>> {
        let tree = self.shared.tree.read();
        self.shared.dir(&tree, dir)?;
        Ok(tree
            .list(dir, after, max)
            .into_iter()
            .filter_map(|(cookie, name, ino)| {
                let kind = self.shared.inode(InodeId(ino))?.kind;
                Some(DirEntry {
                    name,
                    ino,
                    kind,
                    cookie,
                })
            })
            .collect())
    }

    /// The attributes of inode `ino`.
    pub fn attr(&self, ino: u64) -> Result<super::Metadata> {
        let inode = self
            .shared
            .inode(InodeId(ino))
            .ok_or(NamespaceError::NotFound)?;
        Ok(super::Metadata::of(&inode))
    }

    /// Changes permission bits, owner and times of `ino` (the size changes
    /// through [`File::set_len`]). The change is logged with the inode's
    /// next record (its next sync, or [`Fs::sync`]).
    pub fn set_attr(&self, ino: u64, change: SetAttr) -> Result<super::Metadata> {
        let inode = self
            .shared
            .inode(InodeId(ino))
            .ok_or(NamespaceError::NotFound)?;
        let now = (self.shared.config.wall_clock)();
        {
            let mut o = inode.owner.lock();
            *o = Owner {
                perm: change.perm.map_or(o.perm, |p| p & 0o7777),
                uid: change.uid.unwrap_or(o.uid),
                gid: change.gid.unwrap_or(o.gid),
            };
        }
        if let Some(t) = change.atime {
            inode.atime.store(t, Ordering::Relaxed);
        }
        if let Some(t) = change.mtime {
            inode.mtime.store(t, Ordering::Relaxed);
        }
        inode.ctime.store(now, Ordering::Relaxed);
        inode.meta_changed();
        Ok(super::Metadata::of(&inode))
    }

    /// Resolves `path` (components separated by `/`, from the root; `.`,
    /// `..` and symbolic links are not followed) to its directory and last
    /// name. The root itself has no last name.
    fn split<'p>(&self, path: &'p str) -> Result<(u64, &'p str)> {
        let mut parts = path.split('/').filter(|c| !c.is_empty()).peekable();
        let mut dir = ROOT_INO;
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                return Ok((dir, part));
            }
            dir = self.lookup_in(dir, part)?;
            let kind = self.shared.inode(InodeId(dir)).map(|i| i.kind);
            match kind {
                Some(Kind::Dir) => {}
                Some(Kind::Symlink) => return Err(NamespaceError::NotASymlink.into()),
                _ => return Err(NamespaceError::NotADirectory.into()),
            }
        }
        Err(NameError::Empty.into())
    }

    /// The inode `path` names (`/` or `""` is the root).
    pub fn lookup(&self, path: &str) -> Result<u64> {
        if path.split('/').all(str::is_empty) {
            return Ok(ROOT_INO);
        }
        let (dir, name) = self.split(path)?;
        self.lookup_in(dir, name)
    }

    /// True if `path` names something.
    pub fn exists(&self, path: &str) -> bool {
        self.lookup(path).is_ok()
    }

    /// Creates the regular file at `path` (mode 0644, owned by root), which
    /// must not exist, and opens it.
    pub fn create(&self, path: &str) -> Result<File<D>> {
        let (dir, name) = self.split(path)?;
        self.create_in(dir, name, NewInode::new(0o644, 0, 0))
    }

    /// Opens the existing regular file at `path`.
    pub fn open(&self, path: &str) -> Result<File<D>> {
        self.open_ino(self.lookup(path)?)
    }

    /// Opens the regular file at `path`, creating it if it does not exist.
    pub fn open_or_create(&self, path: &str) -> Result<File<D>> {
        match self.open(path) {
            Err(Error::Namespace(NamespaceError::NotFound)) => self.create(path),
            other => other,
        }
    }

    /// Opens the regular file with inode number `ino`, linked or not (an
    /// unlinked file still open elsewhere can be opened again by number).
    pub fn open_ino(&self, ino: u64) -> Result<File<D>> {
        let inode = self
            .shared
            .inode(InodeId(ino))
            .ok_or(NamespaceError::NotFound)?;
        match inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(NamespaceError::IsADirectory.into()),
            Kind::Symlink => return Err(NamespaceError::NotASymlink.into()),
        }
        if !inode.try_open() {
            return Err(NamespaceError::NotFound.into());
        }
        Ok(File::new(self.clone(), inode))
    }

    /// Creates the directory at `path` (mode 0755, owned by root).
    pub fn mkdir(&self, path: &str) -> Result<u64> {
        let (dir, name) = self.split(path)?;
        self.mkdir_in(dir, name, NewInode::new(0o755, 0, 0))
    }

    /// Removes the file or symbolic link at `path` (not a directory).
    pub fn remove(&self, path: &str) -> Result<()> {
        let (dir, name) = self.split(path)?;
        self.unlink_in(dir, name)
    }

    /// Removes the empty directory at `path`.
    pub fn rmdir(&self, path: &str) -> Result<()> {
        let (dir, name) = self.split(path)?;
        self.rmdir_in(dir, name)
    }

    /// Renames `from` to `to` atomically, replacing what `to` names as
    /// POSIX says.
    pub fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.rename_paths(from, to, RenameFlags::default())
    }

    /// Renames `from` to `to` atomically, failing with
    /// [`NamespaceError::Exists`] if `to` exists (`RENAME_NOREPLACE`).
    pub fn rename_noreplace(&self, from: &str, to: &str) -> Result<()> {
        self.rename_paths(
            from,
            to,
            RenameFlags {
                noreplace: true,
                ..RenameFlags::default()
            },
        )
    }

    fn rename_paths(&self, from: &str, to: &str, flags: RenameFlags) -> Result<()> {
        let (fd, fname) = self.split(from)?;
        let (td, tname) = self.split(to)?;
        self.rename_in(fd, fname, td, tname, flags)
    }

    /// Names in the root directory, sorted.
    pub fn list(&self) -> Vec<String> {
        self.entries().into_iter().map(|(n, _)| n).collect()
    }

    /// Entries of the root directory with their inode numbers, sorted by
    /// name.
    pub fn entries(&self) -> Vec<(String, u64)> {
        let tree = self.shared.tree.read();
        tree.dirs
            .get(&ROOT_INO)
            .map(|d| d.by_name.iter().map(|(n, e)| (n.clone(), e.ino)).collect())
            .unwrap_or_default()
    }
}

/// A directory's `..` moves with it from `from` to `to` (the caller holds
/// the namespace lock).
fn moved(inode: &Inode, from: &Inode, to: &Inode) {
    if inode.kind != Kind::Dir || from.id == to.id {
        return;
    }
    inode.parent.store(to.id.0, Ordering::Release);
    from.nlink.fetch_sub(1, Ordering::AcqRel);
    to.nlink.fetch_add(1, Ordering::AcqRel);
}
