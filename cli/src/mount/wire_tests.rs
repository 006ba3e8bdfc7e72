//! The requests the vendored FUSE library decodes for pollfs (the
//! extended setxattr, FUSE_TMPFILE), from the bytes the kernel sends to
//! the server's answer, with no kernel: a session over one end of a
//! socket pair is handed FUSE_INIT as the kernel offers it, and requests
//! go through the session's `Dispatcher`, as FUSE over io_uring hands
//! them over.

use std::io::{IoSlice, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use fuser::{Dispatcher, ReplySink, Session, SessionACL};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::{Fs, InodeId, NewInode};

use super::*;

const FUSE_INIT: u32 = 26;
const FUSE_SETXATTR: u32 = 21;
const FUSE_DESTROY: u32 = 38;
const FUSE_TMPFILE: u32 = 51;
/// FUSE_DONT_MASK, FUSE_POSIX_ACL, FUSE_SETXATTR_EXT, FUSE_INIT_EXT.
const OFFERED: u32 = (1 << 6) | (1 << 20) | (1 << 29) | (1 << 30);

/// A request as the kernel lays it out: `fuse_in_header`, then `args`.
fn request(opcode: u32, unique: u64, nodeid: u64, args: &[u8]) -> Vec<u8> {
    let len = u32::try_from(40 + args.len()).unwrap();
    let mut b = Vec::new();
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&opcode.to_le_bytes());
    b.extend_from_slice(&unique.to_le_bytes());
    b.extend_from_slice(&nodeid.to_le_bytes());
    // uid 1000, gid 100, pid 0 (none: the caller's groups are its gid).
    for v in [1000u32, 100, 0, 0] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(args);
    b
}

/// `fuse_init_in` of ABI 7.40 offering `OFFERED`.
fn init_args() -> Vec<u8> {
    let mut a = Vec::new();
    for v in [7u32, 40, 1 << 20, OFFERED, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    a.resize(64, 0);
    a
}

/// The replies the session sent, whole.
#[derive(Debug, Default)]
struct Replies(Mutex<Vec<Vec<u8>>>);

impl ReplySink for Replies {
    fn send(&self, reply: &[IoSlice<'_>]) -> std::io::Result<()> {
        let whole = reply.iter().flat_map(|s| s.iter().copied()).collect();
        self.0.lock().unwrap().push(whole);
        Ok(())
    }
}

/// Serves `req` and returns the reply's error (0 or a negated errno) and
/// its arguments.
fn serve<FS: fuser::Filesystem>(d: &Dispatcher<FS>, req: &[u8]) -> (i32, Vec<u8>) {
    // Dispatch wants the request 8-byte aligned, as /dev/fuse reads are.
    let mut buf = vec![0u8; req.len() + 8];
    let at = buf.as_ptr().align_offset(8);
    buf[at..at + req.len()].copy_from_slice(req);
    let sink = Arc::new(Replies::default());
    d.dispatch(&buf[at..at + req.len()], sink.clone()).unwrap();
    let replies = sink.0.lock().unwrap();
    assert_eq!(replies.len(), 1, "one reply");
    let r = &replies[0];
    let error = i32::from_le_bytes(r[4..8].try_into().unwrap());
    (error, r[16..].to_vec())
}

/// A setxattr's arguments with the extended header.
fn setxattr_ext(flags: u32, name: &str, value: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    let size = u32::try_from(value.len()).unwrap();
    for v in [size, 0, flags, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    a.extend_from_slice(name.as_bytes());
    a.push(0);
    a.extend_from_slice(value);
    a
}

/// `fuse_create_in` and the name "/", as the kernel sends FUSE_TMPFILE.
fn tmpfile_args(flags: i32) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&flags.to_le_bytes());
    for v in [libc::S_IFREG | 0o640, 0o022, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    a.extend_from_slice(b"/\0");
    a
}

/// A small formatted filesystem in memory.
fn small_fs() -> Fs<RamDevice> {
    let dev = RamDevice::new(16 << 20, 4096, 64).unwrap();
    let cfg = pollfs_core::Config {
        cache_pages: 32,
        ..pollfs_core::hosted::config()
    };
    Fs::format(dev, cfg, 1).unwrap()
}

/// A one-thread session serving `server` in direct mode over a socket
/// pair whose other end (returned, kept open) has sent FUSE_INIT.
fn session(server: Server<RamDevice>) -> (Session<PollFs<RamDevice>>, UnixStream) {
    let pollfs = PollFs::new(server, CacheMode::Direct, Arc::new(OnceLock::new()));
    let (ours, mut kernel) = UnixStream::pair().unwrap();
    kernel
        .write_all(&request(FUSE_INIT, 1, 0, &init_args()))
        .unwrap();
    let mut config = fuser::Config::default();
    config.n_threads = Some(1);
    let session = Session::from_fd(pollfs, OwnedFd::from(ours), SessionACL::All, config).unwrap();
    (session, kernel)
}

#[test]
fn setxattr_ext_and_tmpfile_are_decoded_and_served() {
    let fs = small_fs();
    // Owned by the caller, in a group it is not in.
    let f = fs
        .create_in(InodeId::ROOT, "f", NewInode::new(0o2775, 1000, 55))
        .unwrap()
        .ino();
    let node = FuseIno::from(f).0;
    let (session, mut kernel) = session(Server::new(fs.clone()));
    let served = session.run_with(|d| {
        // An access ACL flagged FUSE_SETXATTR_ACL_KILL_SGID, in the
        // extended header the session asked for: set-group-id goes.
        let mut acl = 2u32.to_le_bytes().to_vec();
        for (tag, perm) in [(1u16, 7u16), (4, 5), (0x20, 5)] {
            acl.extend_from_slice(&tag.to_le_bytes());
            acl.extend_from_slice(&perm.to_le_bytes());
            acl.extend_from_slice(&u32::MAX.to_le_bytes());
        }
        let unflagged = setxattr_ext(0, "system.posix_acl_access", &acl);
        assert_eq!(serve(&d, &request(FUSE_SETXATTR, 2, node, &unflagged)).0, 0);
        assert_eq!(fs.attr(f).unwrap().perm, 0o2755);
        let set = setxattr_ext(1, "system.posix_acl_access", &acl);
        assert_eq!(serve(&d, &request(FUSE_SETXATTR, 2, node, &set)).0, 0);
        assert_eq!(fs.attr(f).unwrap().perm, 0o755);
        // Too short for the extended header: an error, not a panic.
        let short = request(FUSE_SETXATTR, 3, node, &set[..12]);
        assert_eq!(serve(&d, &short).0, -libc::EIO);
        // An unnamed file: create's reply, nlink 0; with O_EXCL it may
        // never be named.
        for (unique, flags) in [(4, libc::O_RDWR), (5, libc::O_RDWR | libc::O_EXCL)] {
            let (error, reply) = serve(
                &d,
                &request(FUSE_TMPFILE, unique, FuseIno::ROOT.0, &tmpfile_args(flags)),
            );
            assert_eq!(error, 0);
            let ino = FuseIno(u64::from_le_bytes(reply[..8].try_into().unwrap())).engine();
            let m = fs.attr(ino).unwrap();
            assert_eq!((m.nlink, m.perm, m.uid), (0, 0o640, 1000));
            let named = fs.link_in(ino, InodeId::ROOT, &format!("t{unique}"));
            assert_eq!(named.is_ok(), flags & libc::O_EXCL == 0);
        }
        // The session's /dev/fuse thread, started after this, reads it
        // and ends.
        kernel.write_all(&request(FUSE_DESTROY, 6, 0, &[])).unwrap();
        Ok(Vec::new())
    });
    served.unwrap();
}

#[test]
fn a_lookup_of_dot_answers_the_node_id_with_its_generation() {
    // What the kernel sends to open a file handle whose node id it no
    // longer caches (FUSE_EXPORT_SUPPORT).
    const FUSE_LOOKUP: u32 = 1;
    let fs = small_fs();
    let f = FuseIno::from(
        fs.create_in(InodeId::ROOT, "f", NewInode::new(0o644, 1000, 100))
            .unwrap()
            .ino(),
    );
    let server = Server::new(fs.clone());
    let generation = server.generation(f);
    let (session, mut kernel) = session(server);
    let served = session.run_with(|d| {
        // fuse_entry_out: node id, then generation.
        let entry = |reply: &[u8]| {
            let word = |at: usize| u64::from_le_bytes(reply[at..at + 8].try_into().unwrap());
            (word(0), word(8))
        };
        let (error, reply) = serve(&d, &request(FUSE_LOOKUP, 2, f.0, b".\0"));
        assert_eq!((error, entry(&reply)), (0, (f.0, generation)));
        let root = FuseIno::ROOT.0;
        let (error, reply) = serve(&d, &request(FUSE_LOOKUP, 3, root, b"..\0"));
        assert_eq!((error, entry(&reply)), (0, (root, 0)));
        fs.unlink_in(InodeId::ROOT, "f").unwrap();
        let (error, _) = serve(&d, &request(FUSE_LOOKUP, 4, f.0, b".\0"));
        assert_eq!(error, -libc::ESTALE);
        kernel.write_all(&request(FUSE_DESTROY, 5, 0, &[])).unwrap();
        Ok(Vec::new())
    });
    served.unwrap();
}
