//! The requests on directories: lookup, the ones that make, link, remove
//! and rename entries, and listings. Each is one engine call on
//! (directory, name); the kernel resolves paths itself, one lookup at a
//! time, and checks permissions before it asks (`default_permissions`).
//! What a new inode gets (owner, group, bits, ACLs) is the engine's POSIX
//! layer's to decide, under its namespace lock (`pollfs_core::fs::posix`).

use std::ffi::OsStr;

use fuser::{Errno, FileAttr, FileType, RenameFlags};
use pollfs_core::dev::BlockDevice;
use pollfs_core::fs::posix::Creds;
use pollfs_core::Kind;

use super::attr::{self, Caller, FuseIno};
use super::server::{errno, Res, Server};

/// Entries fetched from the engine per step of a listing: enough for a
/// reply buffer of plain entries, few enough that a full buffer wastes
/// little.
const LIST_STEP: usize = 64;

/// The offsets a listing gives "." and "..": each entry's offset is where
/// the next call resumes, and the engine's cookies start above these.
const DOT_OFFSETS: [u64; 2] = [1, 2];

/// A name from the kernel, which the engine takes as UTF-8: others cannot
/// exist here, and cannot be created (EINVAL, as for the engine's other
/// invalid names).
fn utf8(name: &OsStr) -> Res<&str> {
    name.to_str().ok_or(Errno::EINVAL)
}

/// The engine's credentials for the caller of a request that makes an
/// inode. The kernel has applied what needs the caller's supplementary
/// groups and capabilities (`mode_strip_sgid`) before it asks.
fn creds(who: Caller) -> Creds {
    Creds {
        umask: who.umask,
        kernel_checked: true,
        ..Creds::new(who.uid, who.gid)
    }
}

/// The mode bits of a request's mode.
fn perm(mode: u32) -> u16 {
    (mode & 0o7777) as u16
}

/// A name to look up: one that is not UTF-8 names nothing.
fn existing(name: &OsStr) -> Res<&str> {
    name.to_str().ok_or(Errno::ENOENT)
}

/// One entry of a listing, as `readdir` hands it to its sink.
#[derive(Debug)]
pub struct Listed<'a> {
    /// The inode it names.
    pub ino: FuseIno,
    /// The offset the next call resumes from.
    pub next: u64,
    /// Its kind.
    pub kind: FileType,
    /// Its name.
    pub name: &'a str,
    /// Its attributes, for `readdirplus` (None for a plain `readdir`).
    pub attr: Option<FileAttr>,
}

impl<D: BlockDevice> Server<D> {
    /// `lookup`: `name` in directory `parent` (a directory found is one
    /// more reference the kernel holds: [`Server::known`]).
    ///
    /// The kernel resolves "." and ".." of a path itself; it asks for
    /// them only to open a file handle whose node id it no longer caches
    /// (FUSE_EXPORT_SUPPORT: `fuse_get_dentry`, `fuse_get_parent` in
    /// fs/fuse/inode.c). "." answers any inode the engine still has, a
    /// file too, and ".." a directory's parent (the root's is the root);
    /// a node id whose inode is gone is ESTALE, which the kernel passes
    /// on as it is.
    pub fn lookup(&self, parent: FuseIno, name: &OsStr) -> Res<FileAttr> {
        let stale = |e: pollfs_core::Error| match errno(e) {
            Errno::ENOENT => Errno::ESTALE,
            other => other,
        };
        let dir = parent.engine();
        let dot = match name.as_encoded_bytes() {
            b"." => Some(self.fs.attr(dir)),
            b".." => Some(self.fs.parent_of(dir).and_then(|p| self.fs.attr(p))),
            _ => None,
        };
        let attr = match dot {
            Some(m) => attr::attr(&m.map_err(stale)?),
            None => self.attr_of(self.fs.lookup_in(dir, existing(name)?).map_err(errno)?)?,
        };
        self.known(&attr);
        Ok(attr)
    }

    /// `create`: makes the regular file `name` and opens it. Without
    /// O_EXCL an existing file is opened instead (another opener may have
    /// made it since the kernel's lookup), and emptied if O_TRUNC asks.
    pub fn create(
        &self,
        parent: FuseIno,
        name: &OsStr,
        mode: u32,
        flags: i32,
        who: Caller,
    ) -> Res<(FileAttr, u64)> {
        let (dir, name) = (parent.engine(), utf8(name)?);
        let exclusive = flags & libc::O_EXCL != 0;
        let (f, _) = self
            .fs
            .create_or_open_by(dir, name, perm(mode), &creds(who), exclusive)
            .map_err(errno)?;
        self.keep_open(f, flags)
    }

    /// `tmpfile` (`open(2)` with O_TMPFILE): an unnamed regular file in
    /// `parent`, opened, with what `create` would give it (the umask or the
    /// directory's default ACL, a set-group-ID directory's group). It shows
    /// nlink 0 and goes at its last close, unless a `link` names it first,
    /// which O_EXCL in `flags` forbids (the kernel refuses that link
    /// itself; the engine does too).
    pub fn tmpfile(
        &self,
        parent: FuseIno,
        mode: u32,
        flags: i32,
        who: Caller,
    ) -> Res<(FileAttr, u64)> {
        let linkable = flags & libc::O_EXCL == 0;
        let f = self
            .fs
            .create_unnamed_by(parent.engine(), perm(mode), &creds(who), linkable)
            .map_err(errno)?;
        self.keep_open(f, 0)
    }

    /// `mknod`: a regular file, FIFO, socket, or character or block device
    /// node with device number `rdev` (the kernel's 32-bit encoding, which
    /// is `makedev(3)`'s for every number the kernel has). Any other type
    /// is EINVAL, as mknod(2) gives it.
    pub fn mknod(
        &self,
        parent: FuseIno,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        who: Caller,
    ) -> Res<FileAttr> {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev,
            libc::S_IFBLK => Kind::BlockDev,
            _ => return Err(Errno::EINVAL),
        };
        let (dir, name) = (parent.engine(), utf8(name)?);
        let ino = self
            .fs
            .mknod_by(dir, name, kind, u64::from(rdev), perm(mode), &creds(who))
            .map_err(errno)?;
        self.attr_of(ino)
    }

    /// `mkdir`.
    pub fn mkdir(&self, parent: FuseIno, name: &OsStr, mode: u32, who: Caller) -> Res<FileAttr> {
        let (dir, name) = (parent.engine(), utf8(name)?);
        let ino = self
            .fs
            .mkdir_by(dir, name, perm(mode), &creds(who))
            .map_err(errno)?;
        let attr = self.attr_of(ino)?;
        self.known(&attr);
        Ok(attr)
    }

    /// `symlink`: `name` in `parent` pointing at `target` (UTF-8, as
    /// names are), permission bits 0777 as on Linux (no umask, no ACL).
    pub fn symlink(
        &self,
        parent: FuseIno,
        name: &OsStr,
        target: &OsStr,
        who: Caller,
    ) -> Res<FileAttr> {
        let ino = self
            .fs
            .symlink_by(parent.engine(), utf8(name)?, utf8(target)?, &creds(who))
            .map_err(errno)?;
        self.attr_of(ino)
    }

    /// `link`: a new name for `ino` (not a directory: EPERM).
    pub fn link(&self, ino: FuseIno, parent: FuseIno, name: &OsStr) -> Res<FileAttr> {
        self.fs
            .link_in(ino.engine(), parent.engine(), utf8(name)?)
            .map_err(errno)?;
        self.attr_of(ino.engine())
    }

    /// `unlink`: open handles keep the file until they close.
    pub fn unlink(&self, parent: FuseIno, name: &OsStr) -> Res<()> {
        self.fs
            .unlink_in(parent.engine(), existing(name)?)
            .map_err(errno)
    }

    /// `rmdir`.
    pub fn rmdir(&self, parent: FuseIno, name: &OsStr) -> Res<()> {
        self.fs
            .rmdir_in(parent.engine(), existing(name)?)
            .map_err(errno)
    }

    /// `rename` and `renameat2` with RENAME_NOREPLACE or RENAME_EXCHANGE
    /// (both at once, or RENAME_WHITEOUT, is EINVAL, as from Linux).
    pub fn rename(
        &self,
        parent: FuseIno,
        name: &OsStr,
        newparent: FuseIno,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Res<()> {
        let flags = if flags.is_empty() {
            pollfs_core::RenameFlags::default()
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            pollfs_core::RenameFlags {
                noreplace: true,
                exchange: false,
            }
        } else if flags == RenameFlags::RENAME_EXCHANGE {
            pollfs_core::RenameFlags {
                noreplace: false,
                exchange: true,
            }
        } else {
            return Err(Errno::EINVAL);
        };
        self.fs
            .rename_in(
                parent.engine(),
                existing(name)?,
                newparent.engine(),
                utf8(newname)?,
                flags,
            )
            .map_err(errno)
    }

    /// `readdir` and `readdirplus` of directory `dir` from offset `off`:
    /// hands each entry to `add` until it returns true (the reply is
    /// full). Offsets 1 and 2 follow "." and ".."; every other offset is
    /// the engine's cookie of the entry it follows (a hash of its name),
    /// so a listing resumes where it stopped whatever was made, removed or
    /// renamed meanwhile, and each
    /// call copies only the entries it returns (and at most one step of
    /// entries that did not fit). With `plus`, each entry carries its
    /// attributes.
    ///
    /// "." carries the directory's number and ".." its parent's, as
    /// `Fs::parent_of` says at the start of the listing. A removed
    /// directory the kernel still knows lists nothing at all, as Linux
    /// lists a dead directory. Each directory a `readdirplus` entry
    /// names is one more reference the kernel holds ([`Server::known`];
    /// not "." and "..", which the kernel does not count).
    pub fn readdir(
        &self,
        dir: FuseIno,
        off: u64,
        plus: bool,
        mut add: impl FnMut(Listed<'_>) -> bool,
    ) -> Res<()> {
        let ino = dir.engine();
        let parent = match self.fs.parent_of(ino) {
            Ok(p) => p,
            Err(e) => {
                return match self.fs.attr(ino) {
                    Ok(m) if m.kind == Kind::Dir && m.nlink == 0 => Ok(()),
                    _ => Err(errno(e)),
                };
            }
        };
        for (i, (dot, of)) in [(".", ino), ("..", parent)].into_iter().enumerate() {
            if off < DOT_OFFSETS[i] {
                let attr = if plus { Some(self.attr_of(of)?) } else { None };
                let entry = Listed {
                    ino: FuseIno::from(of),
                    next: DOT_OFFSETS[i],
                    kind: FileType::Directory,
                    name: dot,
                    attr,
                };
                if add(entry) {
                    return Ok(());
                }
            }
        }
        let mut after = off.max(DOT_OFFSETS[1]);
        loop {
            let step = self.fs.read_dir(ino, after, LIST_STEP).map_err(errno)?;
            for e in &step {
                let attr = if plus {
                    match self.fs.attr(e.ino) {
                        Ok(m) => Some(attr::attr(&m)),
                        // Removed since the step was read: not listed.
                        Err(_) => continue,
                    }
                } else {
                    None
                };
                let entry = Listed {
                    ino: FuseIno::from(e.ino),
                    next: e.cookie,
                    kind: attr::file_type(e.kind),
                    name: &e.name,
                    attr,
                };
                if add(entry) {
                    return Ok(());
                }
                if let Some(a) = &attr {
                    self.known(a);
                }
            }
            match step.last() {
                Some(last) if step.len() == LIST_STEP => after = last.cookie,
                _ => return Ok(()),
            }
        }
    }
}
