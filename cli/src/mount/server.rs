//! The mount's operations on the engine, one method per FUSE request,
//! each returning the reply's content or an errno. `fuse.rs` only
//! unpacks requests and sends replies, so everything here is tested
//! against a filesystem in memory, with no kernel.
//!
//! This file holds the state and the requests on inodes and open files;
//! [`names`](super::names) the requests that change or read directories.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, TimeOrNow};
use pollfs_core::dev::BlockDevice;
use pollfs_core::fs::posix::without_privs;
use pollfs_core::{Allocate, File, Fs, InodeId, Kind};

use super::attr::{self, FuseIno};
use super::handles::{Files, KnownDirs};

/// The errno for an engine error. Every engine error has one except
/// "end of file" from `read_exact_at`, which the mount never calls.
pub fn errno(e: pollfs_core::Error) -> Errno {
    Errno::from_i32(e.errno().unwrap_or(libc::EIO))
}

pub(super) type Res<T> = Result<T, Errno>;

/// What `setattr` asks to change.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// chmod: the new mode (type bits included, and ignored).
    pub mode: Option<u32>,
    /// chown: the new owner.
    pub uid: Option<u32>,
    /// chown: the new group.
    pub gid: Option<u32>,
    /// truncate: the new size.
    pub size: Option<u64>,
    /// utimensat: the new access time.
    pub atime: Option<TimeOrNow>,
    /// utimensat: the new modification time.
    pub mtime: Option<TimeOrNow>,
}

impl SetAttr {
    /// Whether this change takes set-user-id and set-group-id away from a
    /// non-directory, for a caller with CAP_FSETID (`fsetid`) or without.
    /// With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves that to the server
    /// and flags such a setattr FATTR_KILL_SUIDGID, which fuser does not
    /// pass on, so the flagged ones are told by what they carry (the
    /// kernel drops the mode from each): a chown (owner or group given),
    /// a truncate by a caller without CAP_FSETID, and a setattr with
    /// nothing in it (chown(2) with neither owner nor group, or the kernel
    /// taking the bits away before a write or fallocate by a caller
    /// without CAP_FSETID). An explicit mode is a chmod, which keeps what
    /// it sets.
    fn takes_privs(&self, fsetid: bool) -> bool {
        if self.mode.is_some() {
            return false;
        }
        let chown = self.uid.is_some() || self.gid.is_some();
        let empty = self.size.is_none() && self.atime.is_none() && self.mtime.is_none();
        chown || empty || (self.size.is_some() && !fsetid)
    }
}

/// What the caller of a change that can take set-id bits away may keep.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Privs {
    /// It has CAP_FSETID.
    pub fsetid: bool,
    /// Its groups: the file-system group and the supplementary ones.
    pub groups: Vec<u32>,
}

impl Privs {
    /// Whether it keeps a file's set-group-id bit where the group may not
    /// execute (Linux's `in_group_or_capable`) for a file of group `gid`.
    pub fn keeps_sgid(&self, gid: u32) -> bool {
        self.fsetid || self.groups.contains(&gid)
    }
}

/// What `statfs` reports, in 4 KiB blocks and inodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// Blocks of the data area.
    pub blocks: u64,
    /// Free blocks.
    pub free: u64,
    /// Free blocks file data may take (the rest is held back for
    /// checkpoints); the same for every user.
    pub available: u64,
    /// Live inodes plus the inode numbers not yet used.
    pub files: u64,
    /// Inode numbers not yet used.
    pub files_free: u64,
}

/// The generation of this mount's inodes: drawn once per mount from the
/// clock's nanoseconds and the process id, 32 bits (all the kernel keeps,
/// `i_generation`), never 0 (the root's). Inode numbers repeat only across
/// mounts (docs/design/mount.md, "The namespace through FUSE"), so a file handle
/// made in an earlier mount matches a later inode only if both mounts drew
/// the same value.
fn mount_generation() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mixed = (nanos as u32) ^ ((nanos >> 32) as u32) ^ std::process::id().rotate_left(16);
    u64::from(mixed.max(1))
}

/// The mount's state: the filesystem, its open files and the directories
/// the kernel knows.
#[derive(Debug)]
pub struct Server<D: BlockDevice> {
    pub(super) fs: Fs<D>,
    pub(super) files: Files<D>,
    pub(super) dirs: KnownDirs<D>,
    /// Every inode's generation but the root's ([`Server::generation`]).
    generation: u64,
}

impl<D: BlockDevice> Server<D> {
    /// A server for `fs`.
    pub fn new(fs: Fs<D>) -> Server<D> {
        Server {
            fs,
            files: Files::default(),
            dirs: KnownDirs::default(),
            generation: mount_generation(),
        }
    }

    /// The generation an entry for `ino` carries, which a file handle
    /// keeps beside the number and the kernel checks when it opens one:
    /// 0 for the root (the kernel expects it), this mount's for every
    /// other inode. Numbers are not reused while mounted, so within a
    /// mount (number, generation) names one inode; across mounts the
    /// generation changes, so a handle from an earlier mount is stale
    /// (ESTALE), never another file that took its number.
    pub fn generation(&self, ino: FuseIno) -> u64 {
        if ino == FuseIno::ROOT {
            0
        } else {
            self.generation
        }
    }

    fn file(&self, fh: u64) -> Res<Arc<File<D>>> {
        self.files.get(fh).ok_or(Errno::EBADF)
    }

    /// The attributes of inode `ino`.
    pub(super) fn attr_of(&self, ino: InodeId) -> Res<FileAttr> {
        self.fs.attr(ino).map(|m| attr::attr(&m)).map_err(errno)
    }

    /// `getattr`: through the handle if the kernel sent one (a removed
    /// file still open shows nlink 0), else by number.
    pub fn getattr(&self, ino: FuseIno, fh: Option<u64>) -> Res<FileAttr> {
        match fh.and_then(|fh| self.files.get(fh)) {
            Some(f) => Ok(attr::attr(&f.metadata())),
            None => self.attr_of(ino.engine()),
        }
    }

    /// `setattr`: the size through the file, then mode,
    /// owner and times through `Fs::set_attr`. The kernel has already
    /// checked that the caller may (`default_permissions`), and sends no
    /// ctime: every change sets it to now. A chown, truncate or empty
    /// change of a set-id file takes the bits away as Linux does
    /// ([`without_privs`]; see `SetAttr::takes_privs`); `who` is the
    /// caller, asked only then.
    pub fn setattr(
        &self,
        ino: FuseIno,
        fh: Option<u64>,
        set: SetAttr,
        who: impl FnOnce() -> Privs,
    ) -> Res<FileAttr> {
        let ino = ino.engine();
        if let Some(size) = set.size {
            let f = match fh.and_then(|fh| self.files.get(fh)) {
                Some(f) => f,
                None => Arc::new(self.fs.open_ino(ino).map_err(errno)?),
            };
            self.kill_caps(&f)?;
            f.set_len(size).map_err(errno)?;
        }
        let when = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => attr::nanos(t),
            TimeOrNow::Now => attr::nanos(SystemTime::now()),
        };
        let mut perm = set.mode.map(|m| (m & 0o7777) as u16);
        if perm.is_none() {
            let m = self.fs.attr(ino).map_err(errno)?;
            if m.kind != Kind::Dir && m.perm & 0o6000 != 0 {
                let who = who();
                if set.takes_privs(who.fsetid) {
                    perm = without_privs(m.perm, || who.keeps_sgid(m.gid));
                }
            }
        }
        let change = pollfs_core::SetAttr {
            perm,
            uid: set.uid,
            gid: set.gid,
            atime: set.atime.map(when),
            mtime: set.mtime.map(when),
        };
        if change == pollfs_core::SetAttr::default() {
            return self.attr_of(ino);
        }
        if let Some(perm) = change.perm {
            // The access ACL first: see `Fs::chmod_acl`.
            self.fs.chmod_acl(ino, perm).map_err(errno)?;
        }
        self.fs
            .set_attr(ino, change)
            .map(|m| attr::attr(&m))
            .map_err(errno)
    }

    /// `readlink`.
    pub fn readlink(&self, ino: FuseIno) -> Res<String> {
        self.fs.readlink(ino.engine()).map_err(errno)
    }

    /// `open`: a new handle on file `ino`.
    pub fn open(&self, ino: FuseIno) -> Res<u64> {
        let f = self.fs.open_ino(ino.engine()).map_err(errno)?;
        Ok(self.files.insert(f))
    }

    /// Keeps `f` open under a new handle, emptied first if `flags` has
    /// O_TRUNC (for `create` of a name that exists).
    pub(super) fn keep_open(&self, f: File<D>, flags: i32) -> Res<(FileAttr, u64)> {
        if flags & libc::O_TRUNC != 0 && !f.is_empty() {
            self.kill_caps(&f)?;
            f.set_len(0).map_err(errno)?;
        }
        let attr = attr::attr(&f.metadata());
        Ok((attr, self.files.insert(f)))
    }

    /// `read`: up to `size` bytes at `off` (fewer only at EOF, or if the
    /// device fails part-way).
    pub fn read(&self, fh: u64, off: u64, size: u32) -> Res<Vec<u8>> {
        let f = self.file(fh)?;
        let mut buf = vec![0u8; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match f.read_at(&mut buf[got..], off + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if got == 0 => return Err(errno(e)),
                Err(_) => break,
            }
        }
        buf.truncate(got);
        Ok(buf)
    }

    /// Takes `security.capability` away from `f` before a write or
    /// truncate, whoever the writer is (`Fs::remove_caps`). In kernel mode
    /// the kernel has already asked for that with a `removexattr`; in
    /// direct mode a write reaches only the server. True if there was one.
    fn kill_caps(&self, f: &File<D>) -> Res<bool> {
        self.fs.remove_caps(f).map_err(errno)
    }

    /// `write`: all of `data` at `off`, or as much as the device took
    /// before it filled up or failed (an error only if nothing was
    /// written). A write from the kernel's page cache (`from_cache`,
    /// FUSE_WRITE_CACHE: writeback in kernel cache mode) is all or an
    /// error: the kernel takes a short reply to writeback as done and
    /// drops the rest of the pages clean, so the error must reach it to be
    /// reported by the next fsync or close. `security.capability` goes
    /// first ([`Server::kill_caps`]).
    /// With `kill_suid` (the kernel's FUSE_WRITE_KILL_SUIDGID:
    /// the writer lacks CAP_FSETID) the set-user-id and set-group-id bits
    /// go too, as [`without_privs`] says (`in_group`: whether the writer
    /// is in a group); the reply says whether anything went (the kernel's
    /// copy of the mode and ctime is stale then).
    pub fn write(
        &self,
        fh: u64,
        off: u64,
        data: &[u8],
        from_cache: bool,
        kill_suid: bool,
        in_group: impl FnOnce(u32) -> bool,
    ) -> Res<(u32, bool)> {
        let f = self.file(fh)?;
        let mut privs_taken = self.kill_caps(&f)?;
        if kill_suid && self.fs.kill_setid(f.ino(), in_group).map_err(errno)? {
            privs_taken = true;
        }
        let mut done = 0;
        while done < data.len() {
            match f.write_at(&data[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if done == 0 || from_cache => return Err(errno(e)),
                Err(_) => break,
            }
        }
        // FUSE writes are at most max_write (1 MiB) long.
        let done = u32::try_from(done).map_err(|_| Errno::EIO)?;
        Ok((done, privs_taken))
    }

    /// `fsync`/`fdatasync`: returns once the file's data and the metadata
    /// needed to read it (and any pending name change) are in the log.
    pub fn fsync(&self, fh: u64, datasync: bool) -> Res<()> {
        let f = self.file(fh)?;
        if datasync {
            f.sync_data()
        } else {
            f.sync_all()
        }
        .map_err(errno)
    }

    /// `release`: the kernel's last reference to a handle is gone.
    pub fn release(&self, fh: u64) {
        self.files.remove(fh);
    }

    /// `fallocate`: the engine's [`File::allocate`], which holds the
    /// locks and keeps fallocate(2)'s size rules. A mode it does not
    /// support (collapse, insert, unshare, punch without keep-size) is
    /// EOPNOTSUPP.
    pub fn fallocate(&self, fh: u64, off: u64, len: u64, mode: i32) -> Res<()> {
        let what = u32::try_from(mode)
            .ok()
            .and_then(Allocate::from_linux)
            .ok_or(Errno::EOPNOTSUPP)?;
        let f = self.file(fh)?;
        f.allocate(off, len, what).map_err(errno)
    }

    /// `opendir`: directories only. Listings need no state of their own
    /// (they resume from the engine's cookies), so the handle is 0.
    pub fn opendir(&self, ino: FuseIno) -> Res<u64> {
        let m = self.fs.attr(ino.engine()).map_err(errno)?;
        if m.kind == Kind::Dir {
            Ok(0)
        } else {
            Err(Errno::ENOTDIR)
        }
    }

    /// `fsyncdir`: the directory's entries (every namespace change made
    /// so far, in one commit).
    pub fn fsyncdir(&self, ino: FuseIno) -> Res<()> {
        self.fs.sync_dir(ino.engine()).map_err(errno)
    }

    /// `statfs`.
    pub fn statfs(&self) -> StatFs {
        let s = self.fs.statfs();
        StatFs {
            blocks: s.blocks,
            free: s.free,
            available: s.available,
            files: s.inodes + s.inodes_free,
            files_free: s.inodes_free,
        }
    }

    /// `forget`: the kernel drops `n` of its references to `ino` (only
    /// directories are counted: see [`KnownDirs`]).
    pub fn forget(&self, ino: FuseIno, n: u64) {
        self.dirs.forget(ino.engine(), n);
    }

    /// Counts a reference the kernel takes to what `attr` describes, if it
    /// is a directory (a reply to `lookup` or `mkdir`, or an entry of
    /// `readdirplus`).
    pub(super) fn known(&self, attr: &FileAttr) {
        if attr.kind == fuser::FileType::Directory {
            self.dirs
                .looked_up(&self.fs, FuseIno::from(attr.ino).engine());
        }
    }

    /// Closes every handle (the mount is ending).
    pub fn close_all(&self) {
        self.files.clear();
        self.dirs.clear();
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
