//! The namespace operations of a mounted filesystem.
//!
//! The namespace itself is a [`Tree`], the state machine recovery replays
//! too: each operation asks the tree whether the request may go ahead
//! (`Tree::may_*`), builds the record, applies it to the tree, copies the
//! link counts and parents it changed into the live inodes (read without
//! the lock by `stat`), and stages it. The rules of links, parents,
//! emptiness and renames are the tree's; what is here is names, times,
//! space for the next checkpoint, and handles.
//!
//! One lock (the namespace lock, [`Shared::tree`](super::Shared)) guards
//! the tree; each change stages its records while holding it, so the log
//! receives them in the order they were made. It is taken after an
//! inode's own locks, never before them.
//!
//! `read_dir` returns entries in the order of their cookies, after a
//! cookie: a hash of the name, so an entry's place depends on its name
//! alone (see [`Tree::list`]).
//!
//! Callers name inodes by [`InodeId`]; the tree and the records keep the
//! `u64` the format holds, so each call into them passes `.0`.

use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::inode::{Inode, Owner};
use super::posix::Who;
use super::{File, Fs, Shared};
use crate::dev::BlockDevice;
use crate::error::{Error, NameError, NamespaceError, Result, SpaceError, XattrError};
use crate::persist::record::{link_len, xattr_len, InodeMeta, Kind, Record};
use crate::persist::tree::{Effects, Tree};
use crate::persist::xattr::{cost as xattr_cost, INODE_TOTAL_MAX};
use crate::units::{InodeId, MAX_INODE, MAX_NAME_LEN, MAX_SYMLINK_LEN};

/// One entry of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Its name.
    pub name: String,
    /// The inode it names.
    pub ino: InodeId,
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

/// Whether [`Fs::create_or_open_in`] made the file or found it there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// This call made it, with the owner and mode it was given.
    Made,
    /// It was there (perhaps made by another caller an instant before):
    /// owner and mode are as they were.
    Found,
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
    /// New access time (nanoseconds since the Unix epoch, two's complement:
    /// see [`Metadata::atime`](crate::Metadata::atime)).
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

    /// The inode `ino`, which must be a directory still linked in `tree`.
    fn dir(&self, tree: &Tree, ino: InodeId) -> Result<Arc<Inode>> {
        tree.may_hold_entries(ino.0)?;
        Ok(self.inode(ino).ok_or(NamespaceError::NotFound)?)
    }

    /// Applies `record` to the tree (the caller checked the request with
    /// the tree's `may_*` under the same lock), copies the link counts and
    /// parents it changed into the live inodes, counts the entries' share
    /// of the next checkpoint, and stages it.
    pub(crate) fn change(&self, tree: &mut Tree, record: Record) -> Result<Effects> {
        let effects = self.apply(tree, &record)?;
        self.stage(record, None);
        Ok(effects)
    }

    /// [`Shared::change`] for records that belong together (a new inode,
    /// its attributes and its entry): each applied in order, then all
    /// staged as one group, which one commit makes durable or not at all.
    fn change_all(&self, tree: &mut Tree, records: Vec<Record>) -> Result<()> {
        for record in &records {
            self.apply(tree, record)?;
        }
        self.journal
            .stage_all(records.into_iter().map(|r| (r, None)));
        Ok(())
    }

    /// The first half of [`Shared::change`]: the tree and the live inodes
    /// take `record`.
    fn apply(&self, tree: &mut Tree, record: &Record) -> Result<Effects> {
        let before = tree.entry_bytes();
        // The checks passed, so the tree takes the record; should it not,
        // nothing is staged and the caller reports the damage.
        let effects = tree
            .apply(record)
            .map_err(|damage| Error::Corrupt { block: 0, damage })?;
        let after = tree.entry_bytes();
        if after >= before {
            self.meta_bytes.fetch_add(after - before, Ordering::AcqRel);
        } else {
            self.meta_bytes.fetch_sub(before - after, Ordering::AcqRel);
        }
        {
            // Built if not in memory: an inode whose link count or parent
            // differs from the durable view's must be in memory (see
            // `Shared::inode`).
            for (ino, node) in &effects.changed {
                if let Some(inode) = self.inode(InodeId(*ino)) {
                    inode.nlink.store(node.nlink, Ordering::Release);
                    inode.parent.store(node.parent, Ordering::Release);
                }
            }
        }
        Ok(effects)
    }

    /// Creates an inode of `kind` linked as `name` in `parent` (a symbolic
    /// link's `target`, a device node's `rdev`). A file comes back opened
    /// (counted). The inode, the attributes `who` gives it and its entry
    /// are staged as one group, the entry last.
    pub(crate) fn make(
        &self,
        parent: InodeId,
        name: &str,
        kind: Kind,
        who: &Who<'_>,
        target: &str,
        rdev: u64,
    ) -> Result<Arc<Inode>> {
        check_name(name)?;
        let now = (self.config.wall_clock)();
        // The directory's attributes are locked before the namespace, as
        // `Fs::set_xattr` locks them: its default ACL cannot change
        // between the policy's reading and the create.
        let dir = self.inode(parent).ok_or(NamespaceError::NotFound)?;
        let dir_xattrs = who.reads_parent().then(|| dir.xattrs.lock());
        let mut tree = self.tree.write();
        let dir = self.dir(&tree, parent)?;
        tree.may_create(parent.0, name, kind)?;
        let born = who.born(&dir, dir_xattrs.as_deref(), kind)?;
        let mut meta = InodeMeta::new(kind, born.perm, born.uid, born.gid, now);
        if kind == Kind::Symlink {
            meta.target = target.to_string();
            meta.size = target.len() as u64;
        }
        if kind.is_device() {
            meta.rdev = rdev;
        }
        let (inode, mut records) = self.new_inode(meta, born.xattrs, link_len(name.len()))?;
        records.push(Record::Link {
            parent: parent.0,
            name: name.to_string(),
            ino: inode.id.0,
        });
        self.change_all(&mut tree, records)?;
        inode.ctime.store(now, Ordering::Relaxed);
        dir.touch(now);
        Ok(inode)
    }

    /// Creates a regular file with no name in directory `parent`, opened
    /// (counted): freed at its last close unless a link names it first,
    /// which only a `linkable` one may take (see [`Fs::create_unnamed`]).
    pub(crate) fn make_unnamed(
        &self,
        parent: InodeId,
        who: &Who<'_>,
        linkable: bool,
    ) -> Result<Arc<Inode>> {
        let now = (self.config.wall_clock)();
        let dir = self.inode(parent).ok_or(NamespaceError::NotFound)?;
        let dir_xattrs = who.reads_parent().then(|| dir.xattrs.lock());
        let mut tree = self.tree.write();
        let dir = self.dir(&tree, parent)?;
        let born = who.born(&dir, dir_xattrs.as_deref(), Kind::File)?;
        let meta = InodeMeta::new(Kind::File, born.perm, born.uid, born.gid, now);
        let (inode, records) = self.new_inode(meta, born.xattrs, 0)?;
        // Nobody knows its number yet: these hold before anyone can open
        // or name it.
        inode.unlinked.store(true, Ordering::Release);
        inode.linkable.store(linkable, Ordering::Release);
        self.change_all(&mut tree, records)?;
        Ok(inode)
    }

    /// Makes the inode `meta` describes with the attributes `xattrs`, and
    /// no link (a file opened and counted); returns it and the records
    /// that make it, for the caller (which holds the namespace lock and
    /// checked the request) to stage. `entry` is what its entry, if it
    /// gets one, adds to the next checkpoint: a new inode and entry grow
    /// it, so they are refused, as a full device, if the blocks held back
    /// for metadata could not take them.
    fn new_inode(
        &self,
        meta: InodeMeta,
        xattrs: Vec<(String, Vec<u8>)>,
        entry: u64,
    ) -> Result<(Arc<Inode>, Vec<Record>)> {
        let attrs: u64 = xattrs.iter().map(|(n, v)| xattr_len(n, Some(v))).sum();
        let cost: usize = xattrs.iter().map(|(n, v)| xattr_cost(n, v)).sum();
        if cost > INODE_TOTAL_MAX {
            return Err(XattrError::Full.into());
        }
        let grows = meta.record_len() + entry + attrs;
        if self.space.lock().free_blocks() < self.meta_reserve(grows) {
            return Err(SpaceError::DeviceFull.into());
        }
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        if ino > MAX_INODE {
            return Err(SpaceError::InodeNumbers.into());
        }
        let inode = Arc::new(Inode::from_meta(InodeId(ino), &meta));
        // Before anyone can find it: its attributes' lock is taken before
        // the namespace lock elsewhere, and the caller holds that one.
        inode.load_xattrs(xattrs.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
        if meta.kind == Kind::File {
            inode.open.fetch_add(1, Ordering::AcqRel);
        }
        self.inodes.write().insert(InodeId(ino), inode.clone());
        self.inode_count.fetch_add(1, Ordering::AcqRel);
        self.meta_len_changed(&inode, 0, false);
        let mut records = Vec::with_capacity(2 + xattrs.len());
        records.push(Record::Inode { ino, meta });
        records.extend(xattrs.into_iter().map(|(name, value)| Record::Xattr {
            ino,
            name,
            value: Some(value),
        }));
        Ok((inode, records))
    }

    /// Adds the entry `name` in `dir` for `inode` (the caller checked the
    /// request) and stages the record.
    fn link_entry(
        &self,
        tree: &mut Tree,
        dir: &Inode,
        name: &str,
        inode: &Inode,
        now: u64,
    ) -> Result<()> {
        self.change(
            tree,
            Record::Link {
                parent: dir.id.0,
                name: name.to_string(),
                ino: inode.id.0,
            },
        )?;
        inode.ctime.store(now, Ordering::Relaxed);
        dir.touch(now);
        Ok(())
    }

    /// Lets an inode with no link left go: now if no handle has it open,
    /// else when the last one closes.
    fn release(&self, inode: Arc<Inode>) {
        inode.unlinked.store(true, Ordering::Release);
        // Take and drop a reference: reclaims now if nobody has it open.
        inode.open.fetch_add(1, Ordering::AcqRel);
        self.close(&inode);
    }
}

impl<D: BlockDevice> Fs<D> {
    /// The directory that holds directory `dir`: what its `..` names (the
    /// root is its own parent).
    pub fn parent_of(&self, dir: InodeId) -> Result<InodeId> {
        let tree = self.shared.tree.read();
        let parent = self.shared.dir(&tree, dir)?.parent.load(Ordering::Acquire);
        Ok(InodeId(parent))
    }

    /// The inode number of `name` in directory `parent`.
    pub fn lookup_in(&self, parent: InodeId, name: &str) -> Result<InodeId> {
        check_name(name)?;
        let tree = self.shared.tree.read();
        self.shared.dir(&tree, parent)?;
        tree.get(parent.0, name)
            .map(InodeId)
            .ok_or(NamespaceError::NotFound.into())
    }

    /// Creates the regular file `name` in directory `parent`, which must not
    /// have it, and opens it.
    pub fn create_in(&self, parent: InodeId, name: &str, who: NewInode) -> Result<File<D>> {
        let inode = self.make(parent, name, Kind::File, &Who::Given(who), "", 0)?;
        Ok(File::new(self.clone(), inode))
    }

    /// Creates the regular file `name` in directory `parent` with `who`'s
    /// owner and mode, or, unless `exclusive` (`O_EXCL`), opens the one
    /// already there: `open(2)` with `O_CREAT`. The new inode is staged
    /// with its owner and mode in one change, so no sync can make it
    /// durable with other ones. Two callers making one name both succeed
    /// with the same file: the one that finds it made opens it, and if it
    /// is removed between the two steps, tries again (a bounded number of
    /// times, then [`NamespaceError::NotFound`]). Returns the file and
    /// whether this call made it (the caller may have more to give a new
    /// file, as the FUSE adapter's inherited ACLs). Something else at the
    /// name fails as [`Fs::open_ino`] says (a directory:
    /// [`NamespaceError::IsADirectory`]).
    pub fn create_or_open_in(
        &self,
        parent: InodeId,
        name: &str,
        who: NewInode,
        exclusive: bool,
    ) -> Result<(File<D>, Created)> {
        self.create_or_open_with(parent, name, &Who::Given(who), exclusive)
    }

    /// [`Fs::create_or_open_in`] at `path`.
    pub fn create_or_open(
        &self,
        path: &str,
        who: NewInode,
        exclusive: bool,
    ) -> Result<(File<D>, Created)> {
        let (dir, name) = self.split(path)?;
        self.create_or_open_in(dir, name, who, exclusive)
    }

    /// Creates the directory at `path` with `who`'s owner and mode, staged
    /// as one change; returns its inode number.
    pub fn mkdir_as(&self, path: &str, who: NewInode) -> Result<InodeId> {
        let (dir, name) = self.split(path)?;
        self.mkdir_in(dir, name, who)
    }

    /// Makes an inode and its entry (see [`Fs::with_room`]).
    pub(crate) fn make(
        &self,
        parent: InodeId,
        name: &str,
        kind: Kind,
        who: &Who<'_>,
        target: &str,
        rdev: u64,
    ) -> Result<Arc<Inode>> {
        self.with_room(|| self.shared.make(parent, name, kind, who, target, rdev))
    }

    /// Runs `make` (which makes an inode); if the device is full while
    /// blocks freed by remove, truncate or punch-hole wait for a commit,
    /// commits and runs it once more (as writes do).
    pub(crate) fn with_room<T>(&self, make: impl Fn() -> Result<T>) -> Result<T> {
        let made = make();
        if !self.shared.full_until_commit(&made) {
            return made;
        }
        self.sync()?;
        make()
    }

    /// Creates a regular file with no name in directory `parent` and
    /// opens it (`open(2)` with O_TMPFILE): it shows nlink 0 and is freed
    /// when its last handle closes, or, after a crash, by recovery (its
    /// record has no link: an orphan, as a removed file still open is). If
    /// `linkable` (no O_EXCL), [`Fs::link_in`] may name it while it is
    /// open; from then on it is a file like any other.
    pub fn create_unnamed(
        &self,
        parent: InodeId,
        who: NewInode,
        linkable: bool,
    ) -> Result<File<D>> {
        let who = Who::Given(who);
        let inode = self.with_room(|| self.shared.make_unnamed(parent, &who, linkable))?;
        Ok(File::new(self.clone(), inode))
    }

    /// Creates the directory `name` in `parent`; returns its inode number.
    pub fn mkdir_in(&self, parent: InodeId, name: &str, who: NewInode) -> Result<InodeId> {
        Ok(self
            .make(parent, name, Kind::Dir, &Who::Given(who), "", 0)?
            .id)
    }

    /// Creates the symbolic link `name` in `parent`, pointing at `target`
    /// (stored as given, up to 4095 bytes, never followed by pollfs);
    /// returns its inode number.
    pub fn symlink_in(
        &self,
        parent: InodeId,
        name: &str,
        target: &str,
        who: NewInode,
    ) -> Result<InodeId> {
        self.make_symlink(parent, name, target, &Who::Given(who))
    }

    pub(crate) fn make_symlink(
        &self,
        parent: InodeId,
        name: &str,
        target: &str,
        who: &Who<'_>,
    ) -> Result<InodeId> {
        if target.is_empty() || target.bytes().any(|b| b == 0) {
            return Err(NameError::BadByte.into());
        }
        if target.len() > MAX_SYMLINK_LEN {
            return Err(NameError::TooLong.into());
        }
        Ok(self.make(parent, name, Kind::Symlink, who, target, 0)?.id)
    }

    /// Creates `name` in `parent` as `mknod(2)` does: a FIFO, socket, or
    /// character or block device node (with device number `rdev`; ignored
    /// for the others), or an empty regular file (left closed). Returns its
    /// inode number. The engine keeps the node, not what it stands for:
    /// opening one through the engine is refused, and a mount lets the
    /// kernel serve FIFOs and sockets and (`nodev`) open no device.
    pub fn mknod_in(
        &self,
        parent: InodeId,
        name: &str,
        kind: Kind,
        rdev: u64,
        who: NewInode,
    ) -> Result<InodeId> {
        self.make_node(parent, name, kind, rdev, &Who::Given(who))
    }

    pub(crate) fn make_node(
        &self,
        parent: InodeId,
        name: &str,
        kind: Kind,
        rdev: u64,
        who: &Who<'_>,
    ) -> Result<InodeId> {
        match kind {
            Kind::Dir | Kind::Symlink => Err(NamespaceError::BadKind.into()),
            // A file made this way is left closed (its handle dropped).
            Kind::File => {
                let inode = self.make(parent, name, kind, who, "", 0)?;
                Ok(File::new(self.clone(), inode).ino())
            }
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => {
                Ok(self.make(parent, name, kind, who, "", rdev)?.id)
            }
        }
    }

    /// A symbolic link's target.
    pub fn readlink(&self, ino: InodeId) -> Result<String> {
        let inode = self.shared.inode(ino).ok_or(NamespaceError::NotFound)?;
        if inode.kind != Kind::Symlink {
            return Err(NamespaceError::NotASymlink.into());
        }
        Ok(inode.target.clone())
    }

    /// Adds a hard link `name` in `parent` to the file or symbolic link
    /// `ino` (not to a directory). An inode with no link takes one only
    /// if it was made linkable by [`Fs::create_unnamed`] and is open.
    pub fn link_in(&self, ino: InodeId, parent: InodeId, name: &str) -> Result<()> {
        check_name(name)?;
        let shared = &self.shared;
        let inode = shared.inode(ino);
        // An unnamed file is held open across the link, so that its last
        // close cannot free it meanwhile.
        let held = inode
            .as_ref()
            .filter(|i| i.linkable.load(Ordering::Acquire) && i.try_open());
        let linked = self.link_held(ino, inode.as_deref(), parent, name, held.is_some());
        if let Some(i) = held {
            // After the namespace lock is let go: a close may free.
            shared.close(i);
        }
        linked
    }

    fn link_held(
        &self,
        ino: InodeId,
        inode: Option<&Inode>,
        parent: InodeId,
        name: &str,
        linkable: bool,
    ) -> Result<()> {
        let shared = &self.shared;
        let now = (shared.config.wall_clock)();
        let mut tree = shared.tree.write();
        let dir = shared.dir(&tree, parent)?;
        tree.may_name(ino.0, parent.0, name, linkable)?;
        let inode = inode.ok_or(NamespaceError::NotFound)?;
        let unnamed = tree.node(ino.0).is_some_and(|n| n.nlink == 0);
        shared.link_entry(&mut tree, &dir, name, inode, now)?;
        if unnamed {
            // Named: kept at its last close, and, as on Linux, never named
            // again once its names are gone.
            inode.unlinked.store(false, Ordering::Release);
            inode.linkable.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Removes the entry `name` of `parent`, which must not be a directory.
    /// Open handles keep working; the data goes when the last link and the
    /// last handle are gone.
    pub fn unlink_in(&self, parent: InodeId, name: &str) -> Result<()> {
        self.remove_entry(parent, name, false)
    }

    /// Removes the empty directory `name` of `parent`.
    pub fn rmdir_in(&self, parent: InodeId, name: &str) -> Result<()> {
        self.remove_entry(parent, name, true)
    }

    fn remove_entry(&self, parent: InodeId, name: &str, want_dir: bool) -> Result<()> {
        check_name(name)?;
        let shared = &self.shared;
        let now = (shared.config.wall_clock)();
        let gone = {
            let mut tree = shared.tree.write();
            let dir = shared.dir(&tree, parent)?;
            tree.may_remove(parent.0, name, want_dir)?;
            let ino = tree.get(parent.0, name).ok_or(NamespaceError::NotFound)?;
            let inode = shared.inode(InodeId(ino)).ok_or(NamespaceError::NotFound)?;
            let effects = shared.change(
                &mut tree,
                Record::Unlink {
                    parent: parent.0,
                    name: name.to_string(),
                },
            )?;
            inode.ctime.store(now, Ordering::Relaxed);
            dir.touch(now);
            effects.unlinked.map(|_| inode)
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
        from: InodeId,
        from_name: &str,
        to: InodeId,
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
            if !tree.may_rename(
                from.0,
                from_name,
                to.0,
                to_name,
                flags.noreplace,
                flags.exchange,
            )? {
                return Ok(());
            }
            let src = tree
                .get(from.0, from_name)
                .ok_or(NamespaceError::NotFound)?;
            let src = shared.inode(InodeId(src)).ok_or(NamespaceError::NotFound)?;
            let dst = match tree.get(to.0, to_name) {
                Some(i) => Some(shared.inode(InodeId(i)).ok_or(NamespaceError::NotFound)?),
                None => None,
            };
            let effects = shared.change(
                &mut tree,
                Record::Rename {
                    from: from.0,
                    from_name: from_name.to_string(),
                    to: to.0,
                    to_name: to_name.to_string(),
                    exchange: flags.exchange,
                },
            )?;
            if let Some(dst) = &dst {
                dst.ctime.store(now, Ordering::Relaxed);
            }
            src.ctime.store(now, Ordering::Relaxed);
            from_dir.touch(now);
            to_dir.touch(now);
            effects.unlinked.and(dst)
        };
        if let Some(inode) = gone {
            shared.release(inode);
        }
        Ok(())
    }

    /// Entries of directory `dir` after the one whose cookie is `after`
    /// (0 for the start), at most `max`, in cookie order (a hash of the
    /// name: an entry keeps its place while it lives, and a name renamed
    /// away and back takes the same place again).
    /// `.` and `..` are not included. A removed directory still held
    /// ([`Fs::hold_dir`]) lists nothing.
    pub fn read_dir(&self, dir: InodeId, after: u64, max: usize) -> Result<Vec<DirEntry>> {
        let tree = self.shared.tree.read();
        if tree
            .node(dir.0)
            .is_some_and(|n| n.kind == Kind::Dir && n.nlink == 0)
        {
            return Ok(Vec::new());
        }
        self.shared.dir(&tree, dir)?;
        Ok(tree
            .list(dir.0, after, max)
            .into_iter()
            .filter_map(|(cookie, name, ino)| {
                let kind = tree.node(ino)?.kind;
                Some(DirEntry {
                    name,
                    ino: InodeId(ino),
                    kind,
                    cookie,
                })
            })
            .collect())
    }

    /// The attributes of inode `ino`.
    pub fn attr(&self, ino: InodeId) -> Result<super::Metadata> {
        let inode = self.shared.inode(ino).ok_or(NamespaceError::NotFound)?;
        Ok(super::Metadata::of(&inode))
    }

    /// Changes permission bits, owner and times of `ino` (the size changes
    /// through [`File::set_len`]). The change is logged with the inode's
    /// next record (its next sync, or [`Fs::sync`]).
    pub fn set_attr(&self, ino: InodeId, change: SetAttr) -> Result<super::Metadata> {
        let inode = self.shared.inode(ino).ok_or(NamespaceError::NotFound)?;
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
    fn split<'p>(&self, path: &'p str) -> Result<(InodeId, &'p str)> {
        let mut parts = path.split('/').filter(|c| !c.is_empty()).peekable();
        let mut dir = InodeId::ROOT;
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                return Ok((dir, part));
            }
            dir = self.lookup_in(dir, part)?;
            let kind = self.shared.inode(dir).map(|i| i.kind);
            match kind {
                Some(Kind::Dir) => {}
                Some(Kind::Symlink) => return Err(NamespaceError::IsASymlink.into()),
                _ => return Err(NamespaceError::NotADirectory.into()),
            }
        }
        Err(NameError::Empty.into())
    }

    /// The inode `path` names (`/` or `""` is the root).
    pub fn lookup(&self, path: &str) -> Result<InodeId> {
        if path.split('/').all(str::is_empty) {
            return Ok(InodeId::ROOT);
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
    pub fn open_ino(&self, ino: InodeId) -> Result<File<D>> {
        let inode = self.shared.inode(ino).ok_or(NamespaceError::NotFound)?;
        match inode.kind {
            Kind::File => {}
            Kind::Dir => return Err(NamespaceError::IsADirectory.into()),
            Kind::Symlink => return Err(NamespaceError::IsASymlink.into()),
            Kind::Fifo | Kind::Socket | Kind::CharDev | Kind::BlockDev => {
                return Err(NamespaceError::Special.into())
            }
        }
        if !inode.try_open() {
            return Err(NamespaceError::NotFound.into());
        }
        Ok(File::new(self.clone(), inode))
    }

    /// Creates the directory at `path` (mode 0755, owned by root).
    pub fn mkdir(&self, path: &str) -> Result<InodeId> {
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
    pub fn entries(&self) -> Vec<(String, InodeId)> {
        let tree = self.shared.tree.read();
        tree.entries_of(InodeId::ROOT.0)
            .map(|(n, ino)| (n.to_string(), InodeId(ino)))
            .collect()
    }
}
