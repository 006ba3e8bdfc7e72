//! The mount's operations on the engine, one method per FUSE request,
//! each returning the reply's content or an errno. `fuse.rs` only
//! unpacks requests and sends replies, so everything here is tested
//! against a filesystem in memory, with no kernel.
//!
//! The namespace is flat: the root (FUSE inode 1) holds every file.

use std::ffi::OsStr;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use fuser::{Errno, FileAttr, FileType, RenameFlags};
use pollfs_core::dev::BlockDevice;
use pollfs_core::{File, Fs};

use super::attr::{FuseIno, Owner, FILE_PERM, ROOT_PERM};
use super::handles::{Dirs, Files, Resume, DOT_OFFSETS};
use super::space::{self, Fallocate};

/// The errno for an engine error. Every engine error has one except
/// "end of file" from `read_exact_at`, which the mount never calls.
pub fn errno(e: pollfs_core::Error) -> Errno {
    Errno::from_i32(e.errno().unwrap_or(libc::EIO))
}

type Res<T> = Result<T, Errno>;

/// Gates between writes and the few operations that must not see a write
/// land part-way through them (fallocate reads a range, then writes zeros
/// where it found zeros; a truncate must not race it). Writes take their
/// file's gate shared, those operations exclusive. Striped by inode: a
/// file shares its stripe with few others, which only ever wait for a
/// fallocate or a truncate.
#[derive(Debug)]
pub struct Gates([RwLock<()>; 64]);

impl Default for Gates {
    fn default() -> Self {
        Gates(std::array::from_fn(|_| RwLock::new(())))
    }
}

impl Gates {
    fn stripe(&self, ino: u64) -> &RwLock<()> {
        &self.0[(ino % 64) as usize]
    }
    fn shared(&self, ino: u64) -> RwLockReadGuard<'_, ()> {
        self.stripe(ino)
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }
    fn exclusive(&self, ino: u64) -> RwLockWriteGuard<'_, ()> {
        self.stripe(ino)
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// What `setattr` asks to change.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// chmod: the new mode (type bits included).
    pub mode: Option<u32>,
    /// chown: the new owner.
    pub uid: Option<u32>,
    /// chown: the new group.
    pub gid: Option<u32>,
    /// truncate: the new size.
    pub size: Option<u64>,
}

/// What `statfs` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// Device blocks of 4 KiB.
    pub blocks: u64,
    /// Free blocks (all available to any user).
    pub free: u64,
    /// Files, plus the inode numbers not yet used.
    pub files: u64,
    /// Inode numbers not yet used.
    pub files_free: u64,
}

/// The mount's state: the filesystem, open files and directories.
#[derive(Debug)]
pub struct Server<D: BlockDevice> {
    fs: Fs<D>,
    files: Files<D>,
    dirs: Dirs,
    gates: Gates,
    owner: Owner,
}

/// A name from the kernel, which the engine takes as UTF-8: others cannot
/// exist here, and cannot be created (EINVAL, as for the engine's other
/// invalid names).
fn utf8(name: &OsStr) -> Option<&str> {
    name.to_str()
}

fn in_root(parent: fuser::INodeNo) -> Res<()> {
    if FuseIno::from(parent) == FuseIno::ROOT {
        Ok(())
    } else {
        Err(Errno::ENOTDIR)
    }
}

impl<D: BlockDevice> Server<D> {
    /// A server for `fs`, answering for `owner`.
    pub fn new(fs: Fs<D>, owner: Owner) -> Server<D> {
        Server {
            fs,
            files: Files::default(),
            dirs: Dirs::default(),
            gates: Gates::default(),
            owner,
        }
    }

    fn file(&self, fh: u64) -> Res<std::sync::Arc<File<D>>> {
        self.files.get(fh).ok_or(Errno::EBADF)
    }

    /// The file `ino` names, through its handle if the kernel sent one.
    fn by_ino(&self, ino: FuseIno, fh: Option<u64>) -> Res<std::sync::Arc<File<D>>> {
        if let Some(f) = fh.and_then(|fh| self.files.get(fh)) {
            return Ok(f);
        }
        let n = ino.engine().ok_or(Errno::ENOENT)?;
        self.fs.open_ino(n).map(std::sync::Arc::new).map_err(errno)
    }

    /// `lookup`: a name in the root.
    pub fn lookup(&self, parent: fuser::INodeNo, name: &OsStr) -> Res<FileAttr> {
        in_root(parent)?;
        let name = utf8(name).ok_or(Errno::ENOENT)?;
        let ino = self.fs.lookup(name).map_err(errno)?;
        let f = self.fs.open_ino(ino).map_err(errno)?;
        Ok(self.owner.file(&f.metadata()))
    }

    /// `getattr`.
    pub fn getattr(&self, ino: FuseIno, fh: Option<u64>) -> Res<FileAttr> {
        if ino == FuseIno::ROOT {
            return Ok(self.owner.root());
        }
        Ok(self.owner.file(&self.by_ino(ino, fh)?.metadata()))
    }

    /// `setattr`: a new size; chmod and chown only to what `stat` already
    /// shows (anything else is EPERM: pollfs cannot keep it). Times are
    /// accepted and not kept (see docs/design.md, "FUSE"); the caller
    /// drops them before this.
    pub fn setattr(&self, ino: FuseIno, fh: Option<u64>, set: SetAttr) -> Res<FileAttr> {
        let perm = if ino == FuseIno::ROOT {
            ROOT_PERM
        } else {
            FILE_PERM
        };
        if !self.owner.unchanged(perm, set.mode, set.uid, set.gid) {
            return Err(Errno::EPERM);
        }
        if ino == FuseIno::ROOT {
            return match set.size {
                Some(_) => Err(Errno::EISDIR),
                None => Ok(self.owner.root()),
            };
        }
        let f = self.by_ino(ino, fh)?;
        if let Some(size) = set.size {
            let _gate = self.gates.exclusive(f.ino());
            f.set_len(size).map_err(errno)?;
        }
        Ok(self.owner.file(&f.metadata()))
    }

    /// `open`: a new handle on file `ino`.
    pub fn open(&self, ino: FuseIno) -> Res<u64> {
        if ino == FuseIno::ROOT {
            return Err(Errno::EISDIR);
        }
        let n = ino.engine().ok_or(Errno::ENOENT)?;
        let f = self.fs.open_ino(n).map_err(errno)?;
        Ok(self.files.insert(f))
    }

    /// `create`: creates `name` and opens it. Without O_EXCL an existing
    /// file is opened instead (another opener may have created it since
    /// the kernel's lookup), and truncated if O_TRUNC asks.
    pub fn create(&self, parent: fuser::INodeNo, name: &OsStr, flags: i32) -> Res<(FileAttr, u64)> {
        in_root(parent)?;
        let name = utf8(name).ok_or(Errno::EINVAL)?;
        let f = if flags & libc::O_EXCL != 0 {
            self.fs.create(name)
        } else {
            self.fs.open_or_create(name)
        }
        .map_err(errno)?;
        if flags & libc::O_TRUNC != 0 && !f.is_empty() {
            let _gate = self.gates.exclusive(f.ino());
            f.set_len(0).map_err(errno)?;
        }
        let attr = self.owner.file(&f.metadata());
        Ok((attr, self.files.insert(f)))
    }

    /// `mknod`: a regular file is created; devices, FIFOs and sockets are
    /// EPERM, as the kernel answers for a filesystem without them.
    pub fn mknod(&self, parent: fuser::INodeNo, name: &OsStr, mode: u32) -> Res<FileAttr> {
        in_root(parent)?;
        if mode & libc::S_IFMT != libc::S_IFREG {
            return Err(Errno::EPERM);
        }
        let name = utf8(name).ok_or(Errno::EINVAL)?;
        let f = self.fs.create(name).map_err(errno)?;
        Ok(self.owner.file(&f.metadata()))
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

    /// `write`: all of `data` at `off`, or as much as the device took
    /// before it filled up or failed (an error only if nothing was
    /// written).
    pub fn write(&self, fh: u64, off: u64, data: &[u8]) -> Res<u32> {
        let f = self.file(fh)?;
        let _gate = self.gates.shared(f.ino());
        let mut done = 0;
        while done < data.len() {
            match f.write_at(&data[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if done == 0 => return Err(errno(e)),
                Err(_) => break,
            }
        }
        // FUSE writes are at most max_write (1 MiB) long.
        u32::try_from(done).map_err(|_| Errno::EIO)
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

    /// `fallocate` (see [`space`]).
    pub fn fallocate(&self, fh: u64, off: u64, len: u64, mode: i32) -> Res<()> {
        let what = Fallocate::from_mode(mode)?;
        let f = self.file(fh)?;
        let _gate = self.gates.exclusive(f.ino());
        space::fallocate(&f, what, off, len, self.fs.free_blocks())
    }

    /// `unlink`: open handles keep the file until they close.
    pub fn unlink(&self, parent: fuser::INodeNo, name: &OsStr) -> Res<()> {
        in_root(parent)?;
        let name = utf8(name).ok_or(Errno::ENOENT)?;
        self.fs.remove(name).map_err(errno)
    }

    /// `rmdir`: there are no directories to remove (a file is ENOTDIR).
    pub fn rmdir(&self, parent: fuser::INodeNo, name: &OsStr) -> Res<()> {
        in_root(parent)?;
        match utf8(name) {
            Some(n) if self.fs.exists(n) => Err(Errno::ENOTDIR),
            _ => Err(Errno::ENOENT),
        }
    }

    /// `rename`, and `renameat2` with RENAME_NOREPLACE. RENAME_EXCHANGE
    /// (and RENAME_WHITEOUT) are EINVAL, as Linux filesystems without them
    /// answer.
    pub fn rename(
        &self,
        parent: fuser::INodeNo,
        name: &OsStr,
        newparent: fuser::INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Res<()> {
        in_root(parent)?;
        in_root(newparent)?;
        let from = utf8(name).ok_or(Errno::ENOENT)?;
        let to = utf8(newname).ok_or(Errno::EINVAL)?;
        if flags.is_empty() {
            self.fs.rename(from, to)
        } else if flags == RenameFlags::RENAME_NOREPLACE {
            self.fs.rename_noreplace(from, to)
        } else {
            return Err(Errno::EINVAL);
        }
        .map_err(errno)
    }

    /// `opendir`: only the root is a directory.
    pub fn opendir(&self, ino: FuseIno) -> Res<u64> {
        if ino == FuseIno::ROOT {
            Ok(self.dirs.open())
        } else {
            Err(Errno::ENOTDIR)
        }
    }

    /// `readdir` from offset `off`: calls `add(ino, next offset, kind,
    /// name)` for each entry until it returns true (the reply is full).
    pub fn readdir(
        &self,
        fh: u64,
        off: u64,
        mut add: impl FnMut(FuseIno, u64, FileType, &str) -> bool,
    ) -> Res<()> {
        let cursor = self.dirs.get(fh).ok_or(Errno::EBADF)?;
        let mut cursor = cursor.lock().unwrap_or_else(PoisonError::into_inner);
        let after = match cursor.resume(off) {
            Resume::Start(n) => {
                for (i, dot) in [".", ".."].into_iter().enumerate().skip(n as usize) {
                    if add(FuseIno::ROOT, DOT_OFFSETS[i], FileType::Directory, dot) {
                        return Ok(());
                    }
                }
                None
            }
            Resume::After(name) => Some(name.to_string()),
            Resume::Invalid => return Err(Errno::EINVAL),
        };
        let entries = self.fs.entries();
        let from = match &after {
            None => 0,
            Some(last) => entries.partition_point(|(n, _)| n.as_str() <= last.as_str()),
        };
        for (name, ino) in &entries[from..] {
            let next = cursor.offset_after(name);
            if add(
                FuseIno::from_engine(*ino),
                next,
                FileType::RegularFile,
                name,
            ) {
                break;
            }
        }
        Ok(())
    }

    /// `releasedir`.
    pub fn releasedir(&self, fh: u64) {
        self.dirs.close(fh);
    }

    /// `fsyncdir`: makes every name change durable (the engine commits
    /// names together with files' data: `Fs::sync`).
    pub fn fsyncdir(&self) -> Res<()> {
        self.fs.sync().map_err(errno)
    }

    /// `statfs`.
    pub fn statfs(&self) -> StatFs {
        let used = self.fs.entries().len() as u64;
        let files_free = pollfs_core::units::MAX_INODE.saturating_sub(used);
        StatFs {
            blocks: self.fs.geometry().capacity_pages(),
            free: self.fs.free_blocks(),
            files: used + files_free,
            files_free,
        }
    }

    /// Closes every handle (the mount is ending).
    pub fn close_all(&self) {
        self.files.clear();
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
