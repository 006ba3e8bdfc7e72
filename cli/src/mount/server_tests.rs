use std::ffi::OsStr;

use fuser::{Errno, FileType, INodeNo, RenameFlags};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;

use super::*;

const ROOT: INodeNo = INodeNo(1);

fn server() -> Server<RamDevice> {
    let dev = RamDevice::new(64 << 20, 4096, 256).unwrap();
    let cfg = pollfs_core::Config {
        cache_pages: 128,
        ..pollfs_core::hosted::config()
    };
    let fs = Fs::format(dev, cfg, 1).unwrap();
    let owner = Owner {
        uid: 1000,
        gid: 100,
        started: std::time::SystemTime::UNIX_EPOCH,
    };
    Server::new(fs, owner)
}

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn listing(s: &Server<RamDevice>, fh: u64, off: u64, room: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    s.readdir(fh, off, |_, next, _, n| {
        if out.len() == room {
            return true;
        }
        out.push((n.to_string(), next));
        false
    })
    .unwrap();
    out
}

#[test]
fn create_write_read_and_stat_through_handles() {
    let s = server();
    let (attr, fh) = s.create(ROOT, name("a"), libc::O_WRONLY).unwrap();
    assert_eq!(
        (attr.size, attr.perm, attr.uid, attr.gid),
        (0, 0o644, 1000, 100)
    );
    assert_eq!(
        attr.ino,
        INodeNo(2),
        "the first file is pollfs inode 2, after the root"
    );
    assert_eq!(s.write(fh, 4096, b"hello").unwrap(), 5);
    s.fsync(fh, true).unwrap();
    assert_eq!(s.read(fh, 4096, 100).unwrap(), b"hello");
    assert_eq!(s.read(fh, 0, 4).unwrap(), [0; 4], "the gap reads as zeros");
    assert!(s.read(fh, 1 << 20, 10).unwrap().is_empty(), "EOF");
    let looked = s.lookup(ROOT, name("a")).unwrap();
    assert_eq!(
        (looked.ino, looked.size, looked.blocks),
        (attr.ino, 4101, 8)
    );
    assert_eq!(
        s.getattr(FuseIno::ROOT, None).unwrap().kind,
        FileType::Directory
    );
    s.release(fh);
    assert_eq!(s.read(fh, 0, 1), Err(Errno::EBADF));
}

#[test]
fn create_without_excl_opens_an_existing_file_and_o_trunc_empties_it() {
    let s = server();
    let (_, a) = s.create(ROOT, name("f"), 0).unwrap();
    s.write(a, 0, b"data").unwrap();
    let (attr, b) = s.create(ROOT, name("f"), 0).unwrap();
    assert_eq!(attr.size, 4);
    assert_eq!(
        s.create(ROOT, name("f"), libc::O_EXCL).map(|_| ()),
        Err(Errno::EEXIST)
    );
    let (attr, c) = s.create(ROOT, name("f"), libc::O_TRUNC).unwrap();
    assert_eq!(attr.size, 0);
    for fh in [a, b, c] {
        s.release(fh);
    }
}

#[test]
fn a_removed_file_keeps_its_data_until_its_last_handle_closes() {
    let s = server();
    let (attr, fh) = s.create(ROOT, name("gone"), 0).unwrap();
    s.write(fh, 0, &[5u8; 8192]).unwrap();
    let free = s.statfs().free;
    s.unlink(ROOT, name("gone")).unwrap();
    assert_eq!(s.lookup(ROOT, name("gone")), Err(Errno::ENOENT));
    assert_eq!(s.read(fh, 0, 8192).unwrap(), vec![5u8; 8192]);
    assert_eq!(s.getattr(FuseIno::from(attr.ino), None).unwrap().size, 8192);
    s.release(fh);
    assert_eq!(s.getattr(FuseIno::from(attr.ino), None), Err(Errno::ENOENT));
    // The blocks come back (after the commit that makes the removal
    // durable, which a sync forces).
    s.fsyncdir().unwrap();
    assert_eq!(s.statfs().free, free + 2);
}

#[test]
fn readdir_resumes_after_the_last_name_whatever_changed_meanwhile() {
    let s = server();
    for n in ["b", "d", "f", "h"] {
        let (_, fh) = s.create(ROOT, name(n), 0).unwrap();
        s.release(fh);
    }
    let dir = s.opendir(FuseIno::ROOT).unwrap();
    let first = listing(&s, dir, 0, 4);
    let names: Vec<&str> = first.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, [".", "..", "b", "d"]);
    // "d" goes, "c" and "e" come, before the next call.
    s.unlink(ROOT, name("d")).unwrap();
    for n in ["c", "e"] {
        let (_, fh) = s.create(ROOT, name(n), 0).unwrap();
        s.release(fh);
    }
    let rest = listing(&s, dir, first[3].1, 10);
    let names: Vec<&str> = rest.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["e", "f", "h"],
        "after d: nothing twice, nothing skipped"
    );
    // An offset handed out earlier still works (seekdir).
    let again = listing(&s, dir, first[2].1, 1);
    assert_eq!(again[0].0, "c");
    assert_eq!(s.readdir(dir, 999, |_, _, _, _| false), Err(Errno::EINVAL));
    s.releasedir(dir);
    assert_eq!(s.readdir(dir, 0, |_, _, _, _| false), Err(Errno::EBADF));
    assert_eq!(s.opendir(FuseIno(2)), Err(Errno::ENOTDIR));
}

#[test]
fn rename_replaces_refuses_with_noreplace_and_never_exchanges() {
    let s = server();
    for n in ["x", "y"] {
        let (_, fh) = s.create(ROOT, name(n), 0).unwrap();
        s.write(fh, 0, n.as_bytes()).unwrap();
        s.release(fh);
    }
    let noreplace = RenameFlags::RENAME_NOREPLACE;
    assert_eq!(
        s.rename(ROOT, name("x"), ROOT, name("y"), noreplace),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        s.rename(
            ROOT,
            name("x"),
            ROOT,
            name("y"),
            RenameFlags::RENAME_EXCHANGE
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        s.rename(
            ROOT,
            name("x"),
            ROOT,
            name("y"),
            RenameFlags::RENAME_WHITEOUT
        ),
        Err(Errno::EINVAL)
    );
    s.rename(ROOT, name("x"), ROOT, name("z"), noreplace)
        .unwrap();
    s.rename(ROOT, name("z"), ROOT, name("y"), RenameFlags::empty())
        .unwrap();
    let attr = s.lookup(ROOT, name("y")).unwrap();
    let fh = s.open(FuseIno::from(attr.ino)).unwrap();
    assert_eq!(s.read(fh, 0, 10).unwrap(), b"x");
    assert_eq!(
        s.rename(ROOT, name("nope"), ROOT, name("q"), RenameFlags::empty()),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        s.rename(
            ROOT,
            name("y"),
            FuseIno(2).into(),
            name("q"),
            RenameFlags::empty()
        ),
        Err(Errno::ENOTDIR)
    );
}

#[test]
fn setattr_truncates_and_refuses_what_it_cannot_keep() {
    let s = server();
    let (attr, fh) = s.create(ROOT, name("t"), 0).unwrap();
    let ino = FuseIno::from(attr.ino);
    s.write(fh, 0, &[1u8; 10_000]).unwrap();
    let size = |n| SetAttr {
        size: Some(n),
        ..SetAttr::default()
    };
    assert_eq!(s.setattr(ino, Some(fh), size(100)).unwrap().size, 100);
    assert_eq!(s.setattr(ino, None, size(5000)).unwrap().size, 5000);
    assert_eq!(s.read(fh, 0, 5000).unwrap()[99..101], [1, 0]);
    let chmod = |m| SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    };
    assert_eq!(s.setattr(ino, None, chmod(0o100600)), Err(Errno::EPERM));
    assert!(s.setattr(ino, None, chmod(0o100644)).is_ok());
    let chown = SetAttr {
        uid: Some(0),
        ..SetAttr::default()
    };
    assert_eq!(s.setattr(ino, None, chown), Err(Errno::EPERM));
    assert_eq!(s.setattr(FuseIno::ROOT, None, size(0)), Err(Errno::EISDIR));
    assert!(s.setattr(FuseIno::ROOT, None, chmod(0o40755)).is_ok());
    assert_eq!(
        s.setattr(FuseIno::ROOT, None, chmod(0o40700)),
        Err(Errno::EPERM)
    );
}

#[test]
fn node_kinds_a_flat_filesystem_lacks_are_refused() {
    let s = server();
    assert_eq!(
        s.mknod(ROOT, name("fifo"), libc::S_IFIFO | 0o644),
        Err(Errno::EPERM)
    );
    assert_eq!(
        s.mknod(ROOT, name("dev"), libc::S_IFCHR | 0o644),
        Err(Errno::EPERM)
    );
    assert_eq!(
        s.mknod(ROOT, name("reg"), libc::S_IFREG | 0o644)
            .unwrap()
            .size,
        0
    );
    assert_eq!(s.rmdir(ROOT, name("reg")), Err(Errno::ENOTDIR));
    assert_eq!(s.rmdir(ROOT, name("none")), Err(Errno::ENOENT));
}

#[test]
fn names_the_engine_refuses_get_its_errno() {
    let s = server();
    let long = "n".repeat(256);
    assert_eq!(
        s.create(ROOT, name(&long), 0).map(|_| ()),
        Err(Errno::ENAMETOOLONG)
    );
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"\xff");
    assert_eq!(s.create(ROOT, bad, 0).map(|_| ()), Err(Errno::EINVAL));
    assert_eq!(s.lookup(ROOT, bad), Err(Errno::ENOENT));
    assert_eq!(s.lookup(INodeNo(2), name("x")), Err(Errno::ENOTDIR));
    assert_eq!(s.open(FuseIno::ROOT), Err(Errno::EISDIR));
    assert_eq!(s.open(FuseIno(99)), Err(Errno::ENOENT));
}

#[test]
fn fallocate_goes_through_the_gate_and_reports_its_errno() {
    let s = server();
    let (_, fh) = s.create(ROOT, name("f"), 0).unwrap();
    s.fallocate(fh, 0, 1 << 20, 0).unwrap();
    let attr = s.lookup(ROOT, name("f")).unwrap();
    assert_eq!((attr.size, attr.blocks), (1 << 20, 2048));
    // Collapse and insert range are not supported.
    assert_eq!(s.fallocate(fh, 0, 4096, 0x08), Err(Errno::EOPNOTSUPP));
    assert_eq!(s.fallocate(fh, 0, 4096, 0x20), Err(Errno::EOPNOTSUPP));
    // More than the device holds.
    assert_eq!(s.fallocate(fh, 0, 1 << 30, 0), Err(Errno::ENOSPC));
}

#[test]
fn statfs_counts_blocks_and_files() {
    let s = server();
    let before = s.statfs();
    assert_eq!(before.blocks, (64 << 20) / 4096);
    let (_, fh) = s.create(ROOT, name("a"), 0).unwrap();
    s.write(fh, 0, &[1; 4096]).unwrap();
    let after = s.statfs();
    assert_eq!(after.free, before.free - 1);
    assert_eq!(after.files_free, before.files_free - 1);
}

#[test]
fn handles_serve_many_threads_at_once() {
    let s = std::sync::Arc::new(server());
    let (_, fh) = s.create(ROOT, name("shared"), 0).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let s = s.clone();
            scope.spawn(move || {
                for i in 0..64u64 {
                    let off = (i * 4 + u64::from(t)) * 4096;
                    assert_eq!(s.write(fh, off, &[t + 1; 4096]).unwrap(), 4096);
                    if i % 16 == 0 {
                        s.fsync(fh, i % 32 == 0).unwrap();
                    }
                }
            });
        }
    });
    for i in 0..256u64 {
        let page = s.read(fh, i * 4096, 4096).unwrap();
        assert_eq!(page, vec![(i % 4) as u8 + 1; 4096], "page {i}");
    }
}
