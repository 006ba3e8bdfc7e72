//! The `fuser::Filesystem` face of [`Server`]: unpacks each request,
//! calls the server, sends the reply. Requests arrive on several threads
//! at once (fuser's multi-threaded session, one `/dev/fuse` descriptor per
//! thread, or one thread per io_uring queue: [`super::ring`]); each thread
//! runs its engine calls in its own lent session.
//!
//! The cache mode ([`CacheMode`]) decides how files are opened and what
//! the kernel is asked for at init: in kernel mode the kernel's page
//! cache keeps file data (`FOPEN_KEEP_CACHE`: pollfs is the only writer,
//! so what the kernel cached stays true across opens) and gathers writes
//! (`FUSE_WRITEBACK_CACHE`); in direct mode every read and write is a
//! request.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, SetxattrFlags, TimeOrNow, WriteFlags,
};
use pollfs_core::dev::BlockDevice;

use super::attr::{self, Caller, FuseIno, KERNEL_TTL, TTL};
use super::latency::{self, Latencies};
use super::options::CacheMode;
use super::ring;
use super::server::{Privs, Res, Server, SetAttr};
use super::xattrs::Sized;

/// How files are opened in direct mode: every read and write goes to
/// pollfs (no kernel page cache), and writes inside EOF run in parallel
/// (pollfs takes byte-range locks). See docs/design/mount.md, "Cache modes".
const DIRECT_OPEN: FopenFlags =
    FopenFlags::FOPEN_DIRECT_IO.union(FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES);

/// How files are opened in kernel mode: the pages the kernel holds stay
/// valid across opens (nothing but this mount writes the filesystem).
const KERNEL_OPEN: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE;

/// The largest read or write one request carries.
pub(super) const MAX_IO: u32 = 1 << 20;

/// A pollfs filesystem served over FUSE.
#[derive(Debug)]
pub struct PollFs<D: BlockDevice> {
    server: Server<D>,
    mode: CacheMode,
    /// How long the kernel keeps names and attributes.
    ttl: Duration,
    /// Tells the kernel to drop what it holds of an inode; set once the
    /// session exists.
    notifier: Arc<OnceLock<Notifier>>,
    /// Whether to ask for FUSE over io_uring at init, and the answer.
    ring: Arc<ring::Init>,
    /// How long reads, writes and fsyncs take (`pollfs stat`).
    latency: Arc<Latencies>,
}

impl<D: BlockDevice> PollFs<D> {
    /// Serves `server` in cache mode `mode`; `notifier` is filled in once
    /// the session exists.
    pub fn new(server: Server<D>, mode: CacheMode, notifier: Arc<OnceLock<Notifier>>) -> PollFs<D> {
        let ttl = match mode {
            CacheMode::Kernel => KERNEL_TTL,
            CacheMode::Direct => TTL,
        };
        PollFs {
            server,
            mode,
            ttl,
            notifier,
            ring: Arc::new(ring::Init::new(false)),
            latency: Arc::default(),
        }
    }

    /// Records how long reads, writes and fsyncs take in `latency`.
    pub fn with_latency(mut self, latency: Arc<Latencies>) -> PollFs<D> {
        self.latency = latency;
        self
    }

    /// Asks for FUSE over io_uring at init, and records the answer in
    /// `ring`.
    pub fn with_ring(mut self, ring: Arc<ring::Init>) -> PollFs<D> {
        self.ring = ring;
        self
    }

    /// How a file with permission bits `perm` is opened. In kernel mode
    /// a set-user-id or set-group-id file is opened direct all the same:
    /// its writes then reach pollfs flagged with whether the writer may
    /// keep those bits, and pollfs applies Linux's rule in full (the
    /// kernel's own, for cached writes, keeps set-group-id without group
    /// execute even for a writer outside the group).
    fn open_flags(&self, perm: u16) -> FopenFlags {
        match self.mode {
            CacheMode::Kernel if perm & 0o6000 == 0 => KERNEL_OPEN,
            CacheMode::Kernel | CacheMode::Direct => DIRECT_OPEN,
        }
    }

    /// Answers a `create` or `tmpfile`: the new file's attributes and its
    /// open handle, opened as [`Self::open_flags`] says.
    fn reply_created(&self, made: Res<(FileAttr, u64)>, reply: ReplyCreate) {
        match made {
            Ok((attr, fh)) => {
                let flags = self.open_flags(attr.perm);
                let generation = self.generation(&attr);
                reply.created(&self.ttl, &attr, generation, FileHandle(fh), flags)
            }
            Err(e) => reply.error(e),
        }
    }

    /// The generation an entry for `attr` carries (see
    /// [`Server::generation`]).
    fn generation(&self, attr: &FileAttr) -> Generation {
        Generation(self.server.generation(attr.ino.into()))
    }

    /// Answers a request that gives the kernel an entry.
    fn entry(&self, reply: ReplyEntry, r: Result<FileAttr, Errno>) {
        match r {
            Ok(attr) => reply.entry(&self.ttl, &attr, self.generation(&attr)),
            Err(e) => reply.error(e),
        }
    }
}

/// The caller of a request; `umask` is what a request that makes an inode
/// carries (0 for the others).
fn caller(req: &Request, umask: u32) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        umask: (umask & 0o777) as u16,
    }
}

/// CAP_FSETID's bit in a capability set.
const CAP_FSETID: u64 = 1 << 4;

/// What the caller of `req` may keep of a file's set-id bits: its groups
/// (the kernel sends only a request's fs uid and gid) and whether it has
/// CAP_FSETID, from /proc; if the process has gone, its fs group only, and
/// CAP_FSETID if it is root.
fn privs_of(req: &Request) -> Privs {
    let status = std::fs::read_to_string(format!("/proc/{}/status", req.pid())).ok();
    let field = |name: &str| {
        status
            .as_deref()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix(name)))
    };
    let mut groups: Vec<u32> = field("Groups:")
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    groups.push(req.gid());
    let fsetid = match field("CapEff:").map(|c| u64::from_str_radix(c.trim(), 16)) {
        Some(Ok(caps)) => caps & CAP_FSETID != 0,
        _ => req.uid() == 0,
    };
    Privs { fsetid, groups }
}

fn sized(reply: ReplyXattr, r: Result<Sized, Errno>) {
    match r {
        Ok(Sized::Len(len)) => reply.size(len),
        Ok(Sized::Bytes(bytes)) => reply.data(&bytes),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl<D: BlockDevice + Send + Sync + 'static> fuser::Filesystem for PollFs<D> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // readdirplus answers a listing's lookups with it (`ls -l`, `find`);
        // AUTO lets the kernel use it only when lookups follow a listing.
        // Lookups and creates in one directory run in parallel.
        // FUSE_HANDLE_KILLPRIV_V2: the server takes set-id bits away on
        // write, truncate and chown (`Server::setattr`, `Server::write`),
        // and the kernel marks the superblock SB_NOSEC, so once a file is
        // seen to have no set-id bits and no security.capability it stops
        // asking for that attribute (a GETXATTR) before every write(2).
        let mut wanted = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        // FUSE_EXPORT_SUPPORT: a file handle (open_by_handle_at, NFS) still
        // opens its inode once the kernel has forgotten the node id: the
        // kernel then looks up "." (and a directory's "..") in it
        // (`Server::lookup`), and checks the generation.
        wanted |= InitFlags::FUSE_EXPORT_SUPPORT;
        // POSIX ACLs: the kernel checks them (default_permissions is
        // always on) and leaves the umask to the server, which applies it
        // only where no default ACL does (see `acl`). FUSE_SETXATTR_EXT:
        // the kernel says when setting an access ACL takes set-group-id
        // away (FUSE_SETXATTR_ACL_KILL_SGID), which only it can tell.
        wanted |=
            InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK | InitFlags::FUSE_SETXATTR_EXT;
        wanted |= match self.mode {
            // Buffered writes stay in the kernel's cache until writeback,
            // fsync or close; symbolic links are read once.
            CacheMode::Kernel => InitFlags::FUSE_WRITEBACK_CACHE | InitFlags::FUSE_CACHE_SYMLINKS,
            // Shared mmap of a direct-I/O file goes through the kernel's
            // page cache for that file only while it is mapped (kernels
            // from 6.6); older kernels refuse it (ENODEV).
            CacheMode::Direct => InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
        };
        if self.ring.wanted() {
            wanted |= InitFlags::FUSE_OVER_IO_URING;
        }
        let _ = config.add_capabilities(wanted & config.capabilities());
        if self.ring.wanted()
            && config
                .capabilities()
                .contains(InitFlags::FUSE_OVER_IO_URING)
        {
            self.ring.grant();
        }
        // 1 MiB a request (256 pages, the kernel's default max_pages
        // limit), and as much readahead as the kernel offers.
        let _ = config.set_max_write(MAX_IO);
        if let Err(most) = config.set_max_readahead(MAX_IO) {
            let _ = config.set_max_readahead(most);
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.server.close_all();
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.server.lookup(parent.into(), name) {
            Ok(attr) => reply.entry(&self.ttl, &attr, self.generation(&attr)),
            Err(Errno::ENOENT) => reply.entry(&self.ttl, &attr::absent(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.server.forget(ino.into(), nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.server.getattr(ino.into(), fh.map(|f| f.0)) {
            Ok(attr) => reply.attr(&self.ttl, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // ctime is sent only with writeback_cache (kernel mode, when it
        // writes back the times a write set): every change sets it to now
        // anyway. crtime, chgtime, bkuptime and flags are macOS's.
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        match self
            .server
            .setattr(ino.into(), fh.map(|f| f.0), set, || privs_of(req))
        {
            Ok(attr) => reply.attr(&self.ttl, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.server.readlink(ino.into()) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        setxattr_flags: SetxattrFlags,
        reply: ReplyEmpty,
    ) {
        let kill_sgid = setxattr_flags.contains(SetxattrFlags::FUSE_SETXATTR_ACL_KILL_SGID);
        empty(
            reply,
            self.server
                .setxattr(ino.into(), name, value, flags, kill_sgid),
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        sized(reply, self.server.getxattr(ino.into(), name, size));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        sized(reply, self.server.listxattr(ino.into(), size));
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.server.removexattr(ino.into(), name));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.entry(
            reply,
            self.server
                .mknod(parent.into(), name, mode, rdev, caller(req, umask)),
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.entry(
            reply,
            self.server
                .mkdir(parent.into(), name, mode, caller(req, umask)),
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.server.unlink(parent.into(), name));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.server.rmdir(parent.into(), name));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let made =
            self.server
                .symlink(parent.into(), link_name, target.as_os_str(), caller(req, 0));
        self.entry(reply, made);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        empty(
            reply,
            self.server
                .rename(parent.into(), name, newparent.into(), newname, flags),
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.entry(
            reply,
            self.server.link(ino.into(), newparent.into(), newname),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let opened = self.server.open(ino.into()).and_then(|fh| {
            let attr = self.server.getattr(ino.into(), Some(fh))?;
            Ok((fh, attr.perm))
        });
        match opened {
            Ok((fh, perm)) => reply.opened(FileHandle(fh), self.open_flags(perm)),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let started = Instant::now();
        let read = self.server.read(fh.0, offset, size.min(MAX_IO));
        self.latency.record(latency::Op::Read, started.elapsed());
        match read {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The kernel leaves taking away set-user-id and set-group-id on a
        // write to the server (FUSE_HANDLE_KILLPRIV_V2), and flags the
        // writes that must: those by a writer without CAP_FSETID.
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let in_group = |gid| privs_of(req).keeps_sgid(gid);
        let from_cache = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let started = Instant::now();
        let written = self
            .server
            .write(fh.0, offset, data, from_cache, kill, in_group);
        self.latency.record(latency::Op::Write, started.elapsed());
        match written {
            Ok((n, privs_taken)) => {
                if privs_taken {
                    // The kernel keeps the mode it had; have it ask again.
                    if let Some(n) = self.notifier.get() {
                        let _ = n.inval_inode(ino, -1, 0);
                    }
                }
                reply.written(n)
            }
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() does not sync, as on local filesystems: in kernel mode
        // the kernel has sent its dirty pages before this, and pollfs's
        // cache is synced by fsync. So there is nothing to do, and ENOSYS
        // says so: the kernel then sends no flush again (one request less
        // per close; it still writes its dirty pages back first).
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.server.release(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let started = Instant::now();
        let synced = self.server.fsync(fh.0, datasync);
        self.latency.record(latency::Op::Sync, started.elapsed());
        empty(reply, synced);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.mode {
            // Kernel mode wants a directory opened with FOPEN_KEEP_CACHE and
            // FOPEN_CACHE_DIR (the kernel keeps a listing in its cache and
            // drops it when the directory changes through the mount), which
            // is what the kernel takes for a server without opendir; and a
            // listing needs no handle. So ENOSYS, once: the kernel then
            // sends no OPENDIR or RELEASEDIR again (two requests less per
            // directory opened: `find`, `git status`).
            CacheMode::Kernel => reply.error(Errno::ENOSYS),
            CacheMode::Direct => match self.server.opendir(FuseIno::from(ino)) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(e),
            },
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.server.readdir(ino.into(), offset, false, |e| {
            reply.add(e.ino.into(), e.next, e.kind, e.name)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ttl = self.ttl;
        let r = self
            .server
            .readdir(ino.into(), offset, true, |e| match &e.attr {
                Some(attr) => {
                    let generation = Generation(self.server.generation(e.ino));
                    reply.add(e.ino.into(), e.next, e.name, &ttl, attr, generation)
                }
                None => false,
            });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.server.fsyncdir(ino.into()));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.server.statfs();
        let page = pollfs_core::units::PAGE_SIZE as u32;
        let name_max = pollfs_core::MAX_NAME_LEN as u32;
        reply.statfs(
            s.blocks,
            s.free,
            s.available,
            s.files,
            s.files_free,
            page,
            name_max,
            page,
        );
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        // `mode` comes unmasked (FUSE_DONT_MASK): the server applies the
        // umask or the directory's default ACL.
        let made = self
            .server
            .create(parent.into(), name, mode, flags, caller(req, umask));
        self.reply_created(made, reply);
    }

    fn tmpfile(
        &self,
        req: &Request,
        parent: INodeNo,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let made = self
            .server
            .tmpfile(parent.into(), mode, flags, caller(req, umask));
        self.reply_created(made, reply);
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.server.fallocate(fh.0, offset, length, mode));
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod wire_tests;

#[cfg(test)]
mod tests {
    use pollfs_core::dev::ram::RamDevice;
    use pollfs_core::Fs;

    use super::*;

    fn pollfs(mode: CacheMode) -> PollFs<RamDevice> {
        let dev = RamDevice::new(16 << 20, 4096, 64).unwrap();
        let cfg = pollfs_core::Config {
            cache_pages: 32,
            ..pollfs_core::hosted::config()
        };
        let fs = Fs::format(dev, cfg, 1).unwrap();
        PollFs::new(Server::new(fs), mode, Arc::new(OnceLock::new()))
    }

    #[test]
    fn kernel_mode_keeps_the_page_cache_but_for_set_id_files() {
        let k = pollfs(CacheMode::Kernel);
        assert_eq!(k.open_flags(0o644), KERNEL_OPEN);
        assert_eq!(k.open_flags(0o4755), DIRECT_OPEN);
        assert_eq!(k.open_flags(0o2644), DIRECT_OPEN);
        assert_eq!(k.ttl, KERNEL_TTL);
        let d = pollfs(CacheMode::Direct);
        assert_eq!(d.open_flags(0o644), DIRECT_OPEN);
        assert_eq!(d.ttl, TTL);
    }

    #[test]
    fn a_missing_name_is_inode_0() {
        assert_eq!(attr::absent().ino, INodeNo(0));
    }
}
