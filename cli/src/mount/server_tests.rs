use std::ffi::OsStr;
use std::time::{Duration, SystemTime};

use fuser::{Errno, FileAttr, FileType, RenameFlags, TimeOrNow};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;

use super::*;
use crate::mount::attr::Caller;

const ROOT: FuseIno = FuseIno::ROOT;
const ME: Caller = Caller {
    uid: 1000,
    gid: 100,
    umask: 0,
};

fn server() -> Server<RamDevice> {
    let dev = RamDevice::new(64 << 20, 4096, 256).unwrap();
    let cfg = pollfs_core::Config {
        cache_pages: 128,
        ..pollfs_core::hosted::config()
    };
    Server::new(Fs::format(dev, cfg, 1).unwrap())
}

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn ino(a: &FileAttr) -> FuseIno {
    FuseIno::from(a.ino)
}

/// Makes an empty file `n` in `dir` and closes it.
fn touch(s: &Server<RamDevice>, dir: FuseIno, n: &str) -> FileAttr {
    let (attr, fh) = s.create(dir, name(n), 0o644, 0, ME).unwrap();
    s.release(fh);
    attr
}

fn mkdir(s: &Server<RamDevice>, dir: FuseIno, n: &str) -> FuseIno {
    ino(&s.mkdir(dir, name(n), 0o755, ME).unwrap())
}

/// Names listed from offset `off` while `room` entries fit, with each
/// entry's resume offset.
fn listing(s: &Server<RamDevice>, dir: FuseIno, off: u64, room: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    s.readdir(dir, off, false, |e| {
        if out.len() == room {
            return true;
        }
        out.push((e.name.to_string(), e.next));
        false
    })
    .unwrap();
    out
}

/// Every name in `dir`, read `room` entries per call.
fn all_names(s: &Server<RamDevice>, dir: FuseIno, room: usize) -> Vec<String> {
    let (mut names, mut off) = (Vec::new(), 0);
    loop {
        let got = listing(s, dir, off, room);
        let Some((_, next)) = got.last() else {
            return names;
        };
        off = *next;
        names.extend(got.into_iter().map(|(n, _)| n));
    }
}

#[test]
fn create_write_read_and_stat_through_handles() {
    let s = server();
    let (attr, fh) = s
        .create(ROOT, name("a"), 0o640, libc::O_WRONLY, ME)
        .unwrap();
    assert_eq!(
        (attr.size, attr.perm, attr.uid, attr.gid, attr.nlink),
        (0, 0o640, 1000, 100, 1)
    );
    assert_eq!(attr.kind, FileType::RegularFile);
    assert_eq!(
        attr.ino,
        fuser::INodeNo(2),
        "the first inode after the root"
    );
    assert_eq!(
        s.write(fh, 4096, b"hello", false, false, |_| true).unwrap(),
        (5, false)
    );
    s.fsync(fh, true).unwrap();
    assert_eq!(s.read(fh, 4096, 100).unwrap(), b"hello");
    assert_eq!(s.read(fh, 0, 4).unwrap(), [0; 4], "the gap reads as zeros");
    assert!(s.read(fh, 1 << 20, 10).unwrap().is_empty(), "EOF");
    let looked = s.lookup(ROOT, name("a")).unwrap();
    assert_eq!(
        (looked.ino, looked.size, looked.blocks),
        (attr.ino, 4101, 8)
    );
    assert!(looked.mtime >= attr.mtime);
    let root = s.getattr(ROOT, None).unwrap();
    assert_eq!((root.kind, root.nlink), (FileType::Directory, 2));
    s.release(fh);
    assert_eq!(s.read(fh, 0, 1), Err(Errno::EBADF));
}

#[test]
fn create_without_excl_opens_an_existing_file_and_o_trunc_empties_it() {
    let s = server();
    let (_, a) = s.create(ROOT, name("f"), 0o644, 0, ME).unwrap();
    s.write(a, 0, b"data", false, false, |_| true).unwrap();
    let (attr, b) = s.create(ROOT, name("f"), 0o600, 0, ME).unwrap();
    assert_eq!((attr.size, attr.perm), (4, 0o644), "opened, not made");
    assert_eq!(
        s.create(ROOT, name("f"), 0o644, libc::O_EXCL, ME)
            .map(|_| ()),
        Err(Errno::EEXIST)
    );
    let (attr, c) = s.create(ROOT, name("f"), 0o644, libc::O_TRUNC, ME).unwrap();
    assert_eq!(attr.size, 0);
    for fh in [a, b, c] {
        s.release(fh);
    }
    mkdir(&s, ROOT, "d");
    assert_eq!(
        s.create(ROOT, name("d"), 0o644, 0, ME).map(|_| ()),
        Err(Errno::EISDIR)
    );
}

#[test]
fn a_removed_file_shows_no_link_and_keeps_its_data_until_its_last_close() {
    let s = server();
    let (attr, fh) = s.create(ROOT, name("gone"), 0o644, 0, ME).unwrap();
    s.write(fh, 0, &[5u8; 8192], false, false, |_| true)
        .unwrap();
    let free = s.statfs().free;
    s.unlink(ROOT, name("gone")).unwrap();
    assert_eq!(s.lookup(ROOT, name("gone")), Err(Errno::ENOENT));
    assert_eq!(s.read(fh, 0, 8192).unwrap(), vec![5u8; 8192]);
    let open = s.getattr(ino(&attr), Some(fh)).unwrap();
    assert_eq!((open.size, open.nlink), (8192, 0));
    assert_eq!(s.getattr(ino(&attr), None).unwrap().nlink, 0);
    assert_eq!(s.statfs().free, free, "the blocks stay the file's");
    s.release(fh);
    assert_eq!(s.getattr(ino(&attr), None), Err(Errno::ENOENT));
    assert_eq!(s.statfs().free, free + 2);
}

#[test]
fn a_removed_directory_the_kernel_still_knows_shows_no_link_and_lists_nothing() {
    // xfstests generic/035: fstat of a directory removed while open.
    let s = server();
    let d = mkdir(&s, ROOT, "d");
    s.rmdir(ROOT, name("d")).unwrap();
    let a = s.getattr(d, None).unwrap();
    assert_eq!((a.nlink, a.kind), (0, FileType::Directory));
    assert_eq!(s.opendir(d), Ok(0));
    assert!(listing(&s, d, 0, 16).is_empty(), "not even . and ..");
    let mut plus = 0;
    s.readdir(d, 0, true, |_| {
        plus += 1;
        false
    })
    .unwrap();
    assert_eq!(plus, 0);
    assert_eq!(
        s.create(d, name("f"), 0o644, 0, ME).map(|_| ()),
        Err(Errno::ENOENT)
    );
    assert_eq!(
        s.mkdir(d, name("s"), 0o755, ME).map(|_| ()),
        Err(Errno::ENOENT)
    );
    assert_eq!(s.lookup(d, name("f")).map(|_| ()), Err(Errno::ENOENT));
    s.forget(d, 1);
    assert_eq!(s.getattr(d, None).map(|_| ()), Err(Errno::ENOENT));

    // Each lookup and each entry of a readdirplus is a reference the
    // kernel forgets in its own time; the directory stays until the last.
    let e = mkdir(&s, ROOT, "e");
    assert_eq!(ino(&s.lookup(ROOT, name("e")).unwrap()), e);
    let mut seen = 0;
    s.readdir(ROOT, 0, true, |l| {
        seen += usize::from(l.name == "e");
        false
    })
    .unwrap();
    assert_eq!(seen, 1);
    s.rmdir(ROOT, name("e")).unwrap();
    s.forget(e, 2);
    assert_eq!(s.getattr(e, None).unwrap().nlink, 0);
    s.forget(e, 1);
    assert_eq!(s.getattr(e, None).map(|_| ()), Err(Errno::ENOENT));
}

#[test]
fn directories_nest_count_links_and_refuse_what_posix_refuses() {
    let s = server();
    let a = mkdir(&s, ROOT, "a");
    let b = mkdir(&s, a, "b");
    let f = touch(&s, b, "f");
    assert_eq!(s.lookup(b, name("f")).unwrap().ino, f.ino);
    assert_eq!(s.lookup(ROOT, name("f")), Err(Errno::ENOENT));
    assert_eq!(s.getattr(ROOT, None).unwrap().nlink, 3, "root: ., .., a/..");
    let da = s.getattr(a, None).unwrap();
    assert_eq!(
        (da.kind, da.nlink, da.perm),
        (FileType::Directory, 3, 0o755)
    );
    assert_eq!(
        s.mkdir(a, name("b"), 0o755, ME).map(|_| ()),
        Err(Errno::EEXIST)
    );
    assert_eq!(s.rmdir(a, name("b")), Err(Errno::ENOTEMPTY));
    assert_eq!(s.rmdir(b, name("f")), Err(Errno::ENOTDIR));
    assert_eq!(s.unlink(a, name("b")), Err(Errno::EISDIR));
    assert_eq!(s.rmdir(a, name("none")), Err(Errno::ENOENT));
    assert_eq!(s.opendir(ino(&f)), Err(Errno::ENOTDIR));
    assert_eq!(s.open(a), Err(Errno::EISDIR));
    assert_eq!(s.lookup(ino(&f), name("x")), Err(Errno::ENOTDIR));
    s.unlink(b, name("f")).unwrap();
    s.rmdir(a, name("b")).unwrap();
    assert_eq!(s.getattr(a, None).unwrap().nlink, 2);
    s.fsyncdir(a).unwrap();
}

#[test]
fn a_set_group_id_directory_gives_its_group_and_the_bit_to_new_directories() {
    let s = server();
    let d = mkdir(&s, ROOT, "shared");
    let chgrp = SetAttr {
        mode: Some(0o2775),
        gid: Some(50),
        ..SetAttr::default()
    };
    s.setattr(d, None, chgrp, Privs::default).unwrap();
    let f = touch(&s, d, "f");
    assert_eq!((f.uid, f.gid, f.perm), (1000, 50, 0o644));
    let sub = s.getattr(mkdir(&s, d, "sub"), None).unwrap();
    assert_eq!((sub.gid, sub.perm), (50, 0o2755));
    let plain = touch(&s, ROOT, "plain");
    assert_eq!(plain.gid, 100, "the caller's group elsewhere");
}

#[test]
fn symlinks_and_hard_links() {
    let s = server();
    let f = touch(&s, ROOT, "f");
    let l = s
        .symlink(ROOT, name("l"), name("../some/where"), ME)
        .unwrap();
    assert_eq!((l.kind, l.perm, l.size), (FileType::Symlink, 0o777, 13));
    assert_eq!(s.readlink(ino(&l)).unwrap(), "../some/where");
    assert_eq!(s.readlink(ino(&f)), Err(Errno::EINVAL));
    let d = mkdir(&s, ROOT, "d");
    let linked = s.link(ino(&f), d, name("again")).unwrap();
    assert_eq!((linked.ino, linked.nlink), (f.ino, 2));
    assert_eq!(s.link(d, ROOT, name("dirlink")), Err(Errno::EPERM));
    assert_eq!(
        s.link(ino(&f), ROOT, name("l")).map(|_| ()),
        Err(Errno::EEXIST)
    );
    s.unlink(ROOT, name("f")).unwrap();
    assert_eq!(s.lookup(d, name("again")).unwrap().nlink, 1);
    s.link(ino(&l), d, name("l2")).unwrap();
    assert_eq!(s.getattr(ino(&l), None).unwrap().nlink, 2);
}

#[test]
fn rename_moves_replaces_exchanges_and_refuses_as_posix_says() {
    let s = server();
    let (a, b) = (mkdir(&s, ROOT, "a"), mkdir(&s, ROOT, "b"));
    let x = touch(&s, a, "x");
    let y = touch(&s, b, "y");
    let none = RenameFlags::empty();
    let noreplace = RenameFlags::RENAME_NOREPLACE;
    let exchange = RenameFlags::RENAME_EXCHANGE;
    assert_eq!(
        s.rename(a, name("x"), b, name("y"), noreplace),
        Err(Errno::EEXIST)
    );
    s.rename(a, name("x"), b, name("y"), exchange).unwrap();
    assert_eq!(s.lookup(b, name("y")).unwrap().ino, x.ino);
    assert_eq!(s.lookup(a, name("x")).unwrap().ino, y.ino);
    assert_eq!(
        s.rename(a, name("x"), b, name("nothing"), exchange),
        Err(Errno::ENOENT)
    );
    for bad in [
        noreplace | exchange,
        RenameFlags::RENAME_WHITEOUT,
        noreplace | RenameFlags::RENAME_WHITEOUT,
    ] {
        assert_eq!(
            s.rename(a, name("x"), b, name("z"), bad),
            Err(Errno::EINVAL)
        );
    }
    // A file replaces a file; the one replaced is gone.
    s.rename(a, name("x"), b, name("y"), none).unwrap();
    assert_eq!(s.lookup(b, name("y")).unwrap().ino, y.ino);
    assert_eq!(s.getattr(ino(&x), None), Err(Errno::ENOENT));
    // Directories: across directories, never under themselves, never
    // over a directory that has entries or over a file.
    s.rename(ROOT, name("a"), b, name("a"), none).unwrap();
    assert_eq!(s.getattr(b, None).unwrap().nlink, 3);
    assert_eq!(s.getattr(ROOT, None).unwrap().nlink, 3);
    assert_eq!(
        s.rename(ROOT, name("b"), a, name("inside"), none),
        Err(Errno::EINVAL)
    );
    let c = mkdir(&s, ROOT, "c");
    touch(&s, c, "keep");
    assert_eq!(
        s.rename(b, name("a"), ROOT, name("c"), none),
        Err(Errno::ENOTEMPTY)
    );
    assert_eq!(
        s.rename(b, name("a"), b, name("y"), none),
        Err(Errno::ENOTDIR)
    );
    assert_eq!(
        s.rename(b, name("y"), ROOT, name("c"), none),
        Err(Errno::EISDIR)
    );
}

#[test]
fn readdir_resumes_by_cookie_whatever_changed_meanwhile() {
    let s = server();
    let d = mkdir(&s, ROOT, "d");
    for n in ["h", "b", "f", "d"] {
        touch(&s, d, n);
    }
    // In the order of the names' hashes: a place that depends on the name
    // alone (see `Tree::list`).
    let order: Vec<String> = listing(&s, d, 0, 10).into_iter().map(|(n, _)| n).collect();
    assert_eq!(order.len(), 6);
    let first = listing(&s, d, 0, 4);
    assert_eq!(first[3].0, order[3]);
    // The last listed and one not yet listed go, "a" comes, before the
    // next call.
    s.unlink(d, name(&order[3])).unwrap();
    s.unlink(d, name(&order[4])).unwrap();
    touch(&s, d, "a");
    let rest: Vec<String> = listing(&s, d, first[3].1, 10)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(rest.contains(&order[5]), "nothing skipped: {rest:?}");
    assert!(
        rest.iter().all(|n| *n == order[5] || n == "a"),
        "nothing twice: {rest:?}"
    );
    // An offset handed out earlier still works (seekdir).
    assert_eq!(
        listing(&s, d, first[1].1, 1)[0].0,
        listing(&s, d, 0, 3)[2].0
    );
    assert_eq!(
        s.readdir(ino(&touch(&s, ROOT, "file")), 0, false, |_| false),
        Err(Errno::ENOTDIR)
    );
}

#[test]
fn a_long_listing_in_small_replies_returns_every_name_once() {
    let s = server();
    let d = mkdir(&s, ROOT, "many");
    let made: Vec<String> = (0..300).map(|i| format!("n{i:03}")).collect();
    for n in &made {
        touch(&s, d, n);
    }
    let whole = all_names(&s, d, 1000);
    let mut sorted = whole[2..].to_vec();
    sorted.sort();
    assert_eq!(sorted, made);
    for room in [1, 7, 64, 65] {
        assert_eq!(all_names(&s, d, room), whole, "{room} entries per reply");
    }
}

#[test]
fn a_listing_ends_when_each_entry_is_renamed_away_and_back_as_it_is_read() {
    // xfstests generic/736: `for e in os.scandir(d): rename(e, T);
    // rename(T, e)` must see each of 3,000 names once, as on ext4.
    let s = server();
    let d = mkdir(&s, ROOT, "d");
    for i in 0..3000 {
        touch(&s, d, &format!("file-{i}"));
    }
    let none = RenameFlags::empty();
    let (mut seen, mut off) = (Vec::new(), 0);
    'listing: loop {
        // Replies of 50 entries, each entry renamed as it is read.
        let got = listing(&s, d, off, 50);
        let Some((_, next)) = got.last() else {
            break;
        };
        off = *next;
        for (n, _) in got {
            if n == "." || n == ".." {
                continue;
            }
            s.rename(d, name(&n), d, name("T"), none).unwrap();
            s.rename(d, name("T"), d, name(&n), none).unwrap();
            seen.push(n);
            if seen.len() > 9000 {
                break 'listing;
            }
        }
    }
    assert_eq!(seen.len(), 3000, "each name once");
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3000);
}

#[test]
fn entries_present_throughout_a_listing_are_returned_once_whatever_comes_and_goes() {
    let s = server();
    let d = mkdir(&s, ROOT, "d");
    let kept: Vec<String> = (0..500).map(|i| format!("kept-{i}")).collect();
    for n in &kept {
        touch(&s, d, n);
    }
    let mut rng = pollfs_core::rng::SplitMix64::new(0x736);
    let (mut seen, mut off, mut made) = (Vec::new(), 0, 0);
    loop {
        let got = listing(&s, d, off, 7);
        let Some((_, next)) = got.last() else {
            break;
        };
        off = *next;
        seen.extend(got.into_iter().map(|(n, _)| n));
        // Between calls: new names come, and some of them go again.
        for _ in 0..5 {
            if made < 2000 {
                touch(&s, d, &format!("new-{made}"));
                made += 1;
            }
        }
        for _ in 0..3 {
            let n = format!("new-{}", rng.below(made));
            let _ = s.unlink(d, name(&n));
        }
    }
    for n in &kept {
        assert_eq!(seen.iter().filter(|s| *s == n).count(), 1, "{n}");
    }
    let mut names = seen.clone();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), seen.len(), "no name twice");
}

#[test]
fn readdirplus_carries_each_entrys_attributes() {
    let s = server();
    let d = mkdir(&s, ROOT, "d");
    let (_, fh) = s.create(d, name("f"), 0o600, 0, ME).unwrap();
    s.write(fh, 0, &[1; 5000], false, false, |_| true).unwrap();
    s.symlink(d, name("l"), name("f"), ME).unwrap();
    let mut seen = Vec::new();
    s.readdir(d, 0, true, |e| {
        let a = e.attr.unwrap();
        assert_eq!(a.ino, e.ino.into());
        seen.push((e.name.to_string(), a.kind, a.size, a.perm));
        false
    })
    .unwrap();
    assert_eq!(
        seen[2..],
        [
            ("f".to_string(), FileType::RegularFile, 5000, 0o600),
            ("l".to_string(), FileType::Symlink, 1, 0o777)
        ]
    );
    assert_eq!(seen[0].1, FileType::Directory);
    s.release(fh);
}

#[test]
fn chown_truncate_and_an_empty_setattr_take_set_id_bits_as_linux_does() {
    let s = server();
    let (attr, fh) = s.create(ROOT, name("t"), 0o644, 0, ME).unwrap();
    let i = ino(&attr);
    s.release(fh);
    let root = || Privs {
        fsetid: true,
        groups: vec![0],
    };
    // Not in the file's group (100).
    let user = || Privs {
        fsetid: false,
        groups: vec![5],
    };
    let chmod = |m| SetAttr {
        mode: Some(m),
        ..SetAttr::default()
    };
    let perm = |set, who: fn() -> Privs| s.setattr(i, None, set, who).unwrap().perm;
    let chown = SetAttr {
        uid: Some(7),
        ..SetAttr::default()
    };
    let truncate = SetAttr {
        size: Some(1),
        ..SetAttr::default()
    };
    // A chown takes set-user-id away even from root, and set-group-id
    // only where the group may execute (root is "in every group").
    assert_eq!(
        perm(chmod(0o6755), root),
        0o6755,
        "a chmod keeps what it sets"
    );
    assert_eq!(perm(chown, root), 0o755);
    assert_eq!(perm(chmod(0o2745), root), 0o2745);
    assert_eq!(perm(chown, root), 0o2745);
    // chown(2) with neither owner nor group, or the kernel before a write
    // by a user without CAP_FSETID: an empty setattr.
    assert_eq!(perm(chmod(0o6755), root), 0o6755);
    assert_eq!(perm(SetAttr::default(), root), 0o755);
    // A truncate: by root nothing, by another user what a write takes
    // (set-group-id without group execute too, outside the group).
    assert_eq!(perm(chmod(0o6745), root), 0o6745);
    assert_eq!(perm(truncate, root), 0o6745);
    assert_eq!(perm(truncate, user), 0o745);
    // Times alone take nothing; a directory keeps its bits.
    assert_eq!(perm(chmod(0o4755), root), 0o4755);
    let times = SetAttr {
        mtime: Some(TimeOrNow::Now),
        ..SetAttr::default()
    };
    assert_eq!(perm(times, user), 0o4755);
    let d = mkdir(&s, ROOT, "d");
    s.setattr(d, None, chmod(0o3775), root).unwrap();
    assert_eq!(s.setattr(d, None, chown, user).unwrap().perm, 0o3775);
}

#[test]
fn setattr_changes_size_mode_owner_and_times() {
    let s = server();
    let (attr, fh) = s.create(ROOT, name("t"), 0o644, 0, ME).unwrap();
    let i = ino(&attr);
    s.write(fh, 0, &[1u8; 10_000], false, false, |_| true)
        .unwrap();
    let size = |n| SetAttr {
        size: Some(n),
        ..SetAttr::default()
    };
    assert_eq!(
        s.setattr(i, Some(fh), size(100), Privs::default)
            .unwrap()
            .size,
        100
    );
    assert_eq!(
        s.setattr(i, None, size(5000), Privs::default).unwrap().size,
        5000
    );
    assert_eq!(s.read(fh, 0, 5000).unwrap()[99..101], [1, 0]);
    let before = s.getattr(i, None).unwrap().ctime;
    let change = SetAttr {
        mode: Some(0o104750),
        uid: Some(7),
        gid: Some(8),
        ..SetAttr::default()
    };
    let a = s.setattr(i, None, change, Privs::default).unwrap();
    assert_eq!((a.perm, a.uid, a.gid), (0o4750, 7, 8));
    assert!(a.ctime >= before);
    let then = SystemTime::UNIX_EPOCH + Duration::new(1_000_000_000, 5);
    let times = SetAttr {
        atime: Some(TimeOrNow::SpecificTime(then)),
        mtime: Some(TimeOrNow::Now),
        ..SetAttr::default()
    };
    let start = SystemTime::now();
    let a = s.setattr(i, None, times, Privs::default).unwrap();
    assert_eq!(a.atime, then, "to the nanosecond");
    assert!(a.mtime >= start && a.mtime <= SystemTime::now());
    assert_eq!(s.lookup(ROOT, name("t")).unwrap().atime, then);
    assert_eq!(
        s.setattr(ROOT, None, size(0), Privs::default),
        Err(Errno::EISDIR)
    );
    // A write flagged to kill privileges takes set-user-id away; one not
    // flagged (the writer has CAP_FSETID) leaves it.
    assert_eq!(
        s.write(fh, 0, b"x", false, false, |_| true).unwrap(),
        (1, false)
    );
    assert_eq!(s.getattr(i, None).unwrap().perm, 0o4750);
    assert_eq!(
        s.write(fh, 0, b"x", false, true, |_| true).unwrap(),
        (1, true)
    );
    assert_eq!(s.getattr(i, None).unwrap().perm, 0o750);
    assert_eq!(
        s.write(fh, 0, b"x", false, true, |_| true).unwrap(),
        (1, false)
    );
    s.release(fh);
}

#[test]
fn times_before_the_epoch_are_kept() {
    // xfstests generic/258: `touch -a -d @-1000` must read back as -1000.
    let s = server();
    let i = ino(&touch(&s, ROOT, "t"));
    let before = SystemTime::UNIX_EPOCH - Duration::new(1000, 250);
    let long_ago = SystemTime::UNIX_EPOCH - Duration::from_secs(2_208_988_800);
    let times = SetAttr {
        atime: Some(TimeOrNow::SpecificTime(before)),
        mtime: Some(TimeOrNow::SpecificTime(long_ago)),
        ..SetAttr::default()
    };
    let a = s.setattr(i, None, times, Privs::default).unwrap();
    assert_eq!((a.atime, a.mtime), (before, long_ago));
    let a = s.lookup(ROOT, name("t")).unwrap();
    assert_eq!((a.atime, a.mtime), (before, long_ago));
}

#[test]
fn a_write_or_truncate_takes_security_capability_away() {
    // xfstests generic/093: Linux's file_remove_privs drops file
    // capabilities on every write, CAP_FSETID or not; in direct mode the
    // write reaches only the server.
    let s = server();
    let caps = name("security.capability");
    let (attr, fh) = s.create(ROOT, name("f"), 0o755, 0, ME).unwrap();
    let i = ino(&attr);
    let set = |s: &Server<RamDevice>| {
        s.setxattr(i, caps, b"\x01\x00\x00\x02", 0, false).unwrap();
        s.setxattr(i, name("user.k"), b"v", 0, false).unwrap();
    };
    set(&s);
    assert_eq!(s.write(fh, 0, b"x", false, false, |_| true).unwrap().0, 1);
    assert_eq!(xattr(&s, i, "security.capability"), Err(Errno::ENODATA));
    assert_eq!(xattr(&s, i, "user.k"), Ok(b"v".to_vec()), "others stay");
    set(&s);
    let size = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    s.setattr(i, Some(fh), size, Privs::default).unwrap();
    assert_eq!(xattr(&s, i, "security.capability"), Err(Errno::ENODATA));
    // Nothing to take: a write is a write.
    assert_eq!(
        s.write(fh, 0, b"y", false, false, |_| true).unwrap(),
        (1, false)
    );
    s.release(fh);
}

#[test]
fn mknod_makes_every_node_kind() {
    let s = server();
    let kinds = [
        (libc::S_IFIFO, FileType::NamedPipe, 0),
        (libc::S_IFCHR, FileType::CharDevice, (1 << 8) | 3),
        (libc::S_IFBLK, FileType::BlockDevice, (8 << 8) | 1),
        (libc::S_IFSOCK, FileType::Socket, 0),
    ];
    for (i, (mode, kind, rdev)) in kinds.into_iter().enumerate() {
        let n = format!("node{i}");
        let a = s.mknod(ROOT, name(&n), mode | 0o640, rdev, ME).unwrap();
        assert_eq!((a.kind, a.rdev, a.perm, a.size), (kind, rdev, 0o640, 0));
        assert_eq!(s.lookup(ROOT, name(&n)).unwrap().kind, kind);
    }
    let reg = s
        .mknod(ROOT, name("reg"), libc::S_IFREG | 0o604, 0, ME)
        .unwrap();
    assert_eq!((reg.size, reg.perm, reg.uid), (0, 0o604, 1000));
    assert_eq!(
        s.mknod(ROOT, name("dir"), libc::S_IFDIR | 0o755, 0, ME),
        Err(Errno::EINVAL)
    );
}

#[test]
fn names_the_engine_refuses_get_its_errno() {
    let s = server();
    let long = "n".repeat(256);
    assert_eq!(
        s.create(ROOT, name(&long), 0o644, 0, ME).map(|_| ()),
        Err(Errno::ENAMETOOLONG)
    );
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"\xff");
    assert_eq!(
        s.create(ROOT, bad, 0o644, 0, ME).map(|_| ()),
        Err(Errno::EINVAL)
    );
    assert_eq!(s.mkdir(ROOT, bad, 0o755, ME), Err(Errno::EINVAL));
    assert_eq!(s.lookup(ROOT, bad), Err(Errno::ENOENT));
    assert_eq!(s.open(FuseIno(99)), Err(Errno::ENOENT));
}

#[test]
fn fallocate_goes_to_the_engine_and_reports_its_errno() {
    let s = server();
    let (_, fh) = s.create(ROOT, name("f"), 0o644, 0, ME).unwrap();
    s.fallocate(fh, 0, 1 << 20, 0).unwrap();
    let attr = s.lookup(ROOT, name("f")).unwrap();
    assert_eq!((attr.size, attr.blocks), (1 << 20, 2048));
    // The old EOF inside the range's last page: the size still grows.
    let (_, g) = s.create(ROOT, name("g"), 0o644, 0, ME).unwrap();
    s.write(g, 0, &[5; 100], false, false, |_| true).unwrap();
    s.fallocate(g, 0, 4096, 0).unwrap();
    assert_eq!(s.lookup(ROOT, name("g")).unwrap().size, 4096);
    // Collapse, insert range, unshare, and punch without keep-size.
    for mode in [0x08, 0x20, 0x40, libc::FALLOC_FL_PUNCH_HOLE, -1] {
        assert_eq!(s.fallocate(fh, 0, 4096, mode), Err(Errno::EOPNOTSUPP));
    }
    assert_eq!(s.fallocate(fh, 0, 0, 0), Err(Errno::EINVAL));
    // More than the device holds.
    assert_eq!(s.fallocate(fh, 0, 1 << 30, 0), Err(Errno::ENOSPC));
}

#[test]
fn statfs_counts_the_data_area_and_inodes() {
    let s = server();
    let before = s.statfs();
    assert!(
        before.blocks < (64 << 20) / 4096,
        "superblocks and log are not data"
    );
    assert!(before.available < before.free);
    let (_, fh) = s.create(ROOT, name("a"), 0o644, 0, ME).unwrap();
    s.write(fh, 0, &[1; 4096], false, false, |_| true).unwrap();
    mkdir(&s, ROOT, "d");
    let after = s.statfs();
    assert_eq!(after.free, before.free - 1);
    assert_eq!(after.files_free, before.files_free - 2);
    assert_eq!(after.files, before.files);
}

#[test]
fn handles_serve_many_threads_at_once() {
    let s = std::sync::Arc::new(server());
    let (_, fh) = s.create(ROOT, name("shared"), 0o644, 0, ME).unwrap();
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let s = s.clone();
            scope.spawn(move || {
                for i in 0..64u64 {
                    let off = (i * 4 + u64::from(t)) * 4096;
                    assert_eq!(
                        s.write(fh, off, &[t + 1; 4096], false, false, |_| true)
                            .unwrap()
                            .0,
                        4096
                    );
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

#[test]
fn dot_entries_name_the_directory_and_its_parent() {
    let s = server();
    let a = mkdir(&s, ROOT, "a");
    let b = mkdir(&s, a, "b");
    let c = mkdir(&s, ROOT, "c");
    let dots = |dir: FuseIno, plus: bool| {
        let mut out = Vec::new();
        s.readdir(dir, 0, plus, |e| {
            if plus {
                assert_eq!(FuseIno::from(e.attr.unwrap().ino), e.ino, "{}", e.name);
            }
            out.push(e.ino);
            out.len() == 2
        })
        .unwrap();
        (out[0], out[1])
    };
    for plus in [false, true] {
        assert_eq!(dots(ROOT, plus), (ROOT, ROOT), "the root is its own parent");
        assert_eq!(dots(a, plus), (a, ROOT));
        assert_eq!(dots(b, plus), (b, a));
    }
    // A move changes what ".." names.
    s.rename(a, name("b"), c, name("b"), RenameFlags::empty())
        .unwrap();
    assert_eq!(dots(b, false), (b, c));
}

#[test]
fn extended_attributes_answer_as_linux_does() {
    use crate::mount::xattrs::Sized;
    let s = server();
    let f = s
        .mknod(ROOT, name("f"), libc::S_IFREG | 0o644, 0, ME)
        .unwrap();
    let i = FuseIno::from(f.ino);
    assert_eq!(
        s.setxattr(i, name("user.k"), b"v1", libc::XATTR_REPLACE, false),
        Err(Errno::ENODATA)
    );
    s.setxattr(i, name("user.k"), b"v1", libc::XATTR_CREATE, false)
        .unwrap();
    assert_eq!(
        s.setxattr(i, name("user.k"), b"v2", libc::XATTR_CREATE, false),
        Err(Errno::EEXIST)
    );
    assert_eq!(
        s.setxattr(i, name("user.k"), b"v2", 3, false),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        s.setxattr(i, name("other.k"), b"", 0, false),
        Err(Errno::EOPNOTSUPP)
    );
    s.setxattr(i, name("trusted.t"), b"", 0, false).unwrap();
    assert_eq!(s.getxattr(i, name("user.k"), 0), Ok(Sized::Len(2)));
    assert_eq!(s.getxattr(i, name("user.k"), 1), Err(Errno::ERANGE));
    assert_eq!(
        s.getxattr(i, name("user.k"), 2),
        Ok(Sized::Bytes(b"v1".to_vec()))
    );
    assert_eq!(s.getxattr(i, name("user.none"), 9), Err(Errno::ENODATA));
    assert_eq!(s.listxattr(i, 0), Ok(Sized::Len(17)));
    assert_eq!(s.listxattr(i, 16), Err(Errno::ERANGE));
    assert_eq!(
        s.listxattr(i, 17),
        Ok(Sized::Bytes(b"trusted.t\0user.k\0".to_vec()))
    );
    s.removexattr(i, name("user.k")).unwrap();
    assert_eq!(s.removexattr(i, name("user.k")), Err(Errno::ENODATA));
}

/// An ACL's value from (tag, perm, id) triples (tags as acl(5) numbers
/// them: 1 owner, 2 user, 4 owning group, 8 group, 0x10 mask, 0x20 other).
fn acl_value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(t, p, id) in entries {
        v.extend_from_slice(&t.to_le_bytes());
        v.extend_from_slice(&p.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

const NONE: u32 = u32::MAX;

fn xattr(s: &Server<RamDevice>, i: FuseIno, n: &str) -> Result<Vec<u8>, Errno> {
    use crate::mount::xattrs::Sized;
    match s.getxattr(i, name(n), 1 << 16)? {
        Sized::Bytes(b) => Ok(b),
        Sized::Len(_) => Err(Errno::EIO),
    }
}

#[test]
fn new_inodes_take_the_umask_without_a_default_acl() {
    let s = server();
    let who = Caller { umask: 0o027, ..ME };
    let (f, fh) = s.create(ROOT, name("f"), 0o666, 0, who).unwrap();
    s.release(fh);
    assert_eq!(f.perm, 0o640);
    let d = s.mkdir(ROOT, name("d"), 0o777, who).unwrap();
    assert_eq!(d.perm, 0o750);
    let n = s
        .mknod(ROOT, name("p"), libc::S_IFIFO | 0o666, 0, who)
        .unwrap();
    assert_eq!(n.perm, 0o640);
    let l = s.symlink(ROOT, name("l"), name("f"), who).unwrap();
    assert_eq!(l.perm, 0o777, "symbolic links take no umask");
    assert_eq!(
        xattr(&s, ino(&f), "system.posix_acl_access"),
        Err(Errno::ENODATA)
    );
}

#[test]
fn a_default_acl_is_inherited_instead_of_the_umask() {
    let s = server();
    let d = mkdir(&s, ROOT, "d");
    // u::rwx, u:1001:rwx, g::r-x, m::rwx, o::r-x
    let default = acl_value(&[
        (1, 7, NONE),
        (2, 7, 1001),
        (4, 5, NONE),
        (0x10, 7, NONE),
        (0x20, 5, NONE),
    ]);
    s.setxattr(d, name("system.posix_acl_default"), &default, 0, false)
        .unwrap();
    let who = Caller { umask: 0o077, ..ME };
    let (f, fh) = s.create(d, name("f"), 0o666, 0, who).unwrap();
    s.release(fh);
    assert_eq!(f.perm, 0o664, "the mask's bits as the group's, no umask");
    let access = acl_value(&[
        (1, 6, NONE),
        (2, 7, 1001),
        (4, 5, NONE),
        (0x10, 6, NONE),
        (0x20, 4, NONE),
    ]);
    assert_eq!(xattr(&s, ino(&f), "system.posix_acl_access"), Ok(access));
    assert_eq!(
        xattr(&s, ino(&f), "system.posix_acl_default"),
        Err(Errno::ENODATA)
    );
    let sub = s.mkdir(d, name("sub"), 0o777, who).unwrap();
    assert_eq!(sub.perm, 0o775);
    assert_eq!(
        xattr(&s, ino(&sub), "system.posix_acl_default"),
        Ok(default.clone())
    );
    // Two levels down, by way of the inherited default.
    let (g, fh) = s.create(ino(&sub), name("g"), 0o600, 0, who).unwrap();
    s.release(fh);
    assert_eq!(g.perm, 0o600);
    // A minimal default ACL gives bits and no access ACL.
    let e = mkdir(&s, ROOT, "e");
    let minimal = acl_value(&[(1, 7, NONE), (4, 0, NONE), (0x20, 0, NONE)]);
    s.setxattr(e, name("system.posix_acl_default"), &minimal, 0, false)
        .unwrap();
    let h = s.mknod(e, name("h"), libc::S_IFREG | 0o666, 0, ME).unwrap();
    assert_eq!(h.perm, 0o600);
    assert_eq!(
        xattr(&s, ino(&h), "system.posix_acl_access"),
        Err(Errno::ENODATA)
    );
}

#[test]
fn an_access_acl_sets_the_bits_and_chmod_sets_the_acl() {
    let s = server();
    let f = ino(&touch(&s, ROOT, "f"));
    let a = acl_value(&[
        (1, 6, NONE),
        (2, 7, 1001),
        (4, 4, NONE),
        (0x10, 5, NONE),
        (0x20, 0, NONE),
    ]);
    s.setxattr(f, name("system.posix_acl_access"), &a, 0, false)
        .unwrap();
    assert_eq!(s.getattr(f, None).unwrap().perm, 0o650);
    let set = SetAttr {
        mode: Some(0o604),
        ..Default::default()
    };
    assert_eq!(s.setattr(f, None, set, Privs::default).unwrap().perm, 0o604);
    let chmodded = acl_value(&[
        (1, 6, NONE),
        (2, 7, 1001),
        (4, 4, NONE),
        (0x10, 0, NONE),
        (0x20, 4, NONE),
    ]);
    assert_eq!(xattr(&s, f, "system.posix_acl_access"), Ok(chmodded));
    // An ACL the bits say in full is kept as the bits alone.
    let minimal = acl_value(&[(1, 7, NONE), (4, 5, NONE), (0x20, 1, NONE)]);
    s.setxattr(f, name("system.posix_acl_access"), &minimal, 0, false)
        .unwrap();
    assert_eq!(s.getattr(f, None).unwrap().perm, 0o751);
    assert_eq!(xattr(&s, f, "system.posix_acl_access"), Err(Errno::ENODATA));
    // Removing an ACL that is not there is no error.
    s.removexattr(f, name("system.posix_acl_access")).unwrap();
}

#[test]
fn malformed_or_misplaced_acls_are_refused() {
    let s = server();
    let f = ino(&touch(&s, ROOT, "f"));
    let l = ino(&s.symlink(ROOT, name("l"), name("f"), ME).unwrap());
    let ok = acl_value(&[(1, 6, NONE), (4, 4, NONE), (0x20, 4, NONE)]);
    let no_mask = acl_value(&[(1, 6, NONE), (2, 6, 7), (4, 4, NONE), (0x20, 4, NONE)]);
    let access = name("system.posix_acl_access");
    assert_eq!(
        s.setxattr(f, access, &no_mask, 0, false),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        s.setxattr(f, access, &ok[..10], 0, false),
        Err(Errno::EINVAL)
    );
    assert_eq!(s.setxattr(f, access, &ok, 0, false).map(|_| ()), Ok(()));
    assert_eq!(s.setxattr(l, access, &ok, 0, false), Err(Errno::EOPNOTSUPP));
    assert_eq!(
        xattr(&s, l, "system.posix_acl_access"),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(
        s.setxattr(f, name("system.posix_acl_default"), &ok, 0, false),
        Err(Errno::EACCES)
    );
    assert_eq!(s.removexattr(f, name("system.posix_acl_default")), Ok(()));
    assert_eq!(
        s.removexattr(l, name("system.posix_acl_access")),
        Err(Errno::EOPNOTSUPP)
    );
}

#[test]
fn an_access_acl_takes_set_group_id_away_when_the_kernel_says_so() {
    let s = server();
    let access = name("system.posix_acl_access");
    let sgid = |f| {
        let set = SetAttr {
            mode: Some(0o2755),
            ..Default::default()
        };
        s.setattr(f, None, set, Privs::default).unwrap();
    };
    let named = acl_value(&[
        (1, 7, NONE),
        (2, 7, 1001),
        (4, 5, NONE),
        (0x10, 5, NONE),
        (0x20, 5, NONE),
    ]);
    let minimal = acl_value(&[(1, 7, NONE), (4, 5, NONE), (0x20, 1, NONE)]);
    // A setter in the group (or with CAP_FSETID): the kernel does not flag
    // it, and the bit stays.
    let kept = ino(&touch(&s, ROOT, "kept"));
    sgid(kept);
    s.setxattr(kept, access, &named, 0, false).unwrap();
    assert_eq!(s.getattr(kept, None).unwrap().perm, 0o2755);
    // Flagged: an ACL with named entries, and a minimal one (bits alone).
    for (n, acl, perm) in [("named", &named, 0o755), ("minimal", &minimal, 0o751)] {
        let f = ino(&touch(&s, ROOT, n));
        sgid(f);
        s.setxattr(f, access, acl, 0, true).unwrap();
        assert_eq!(s.getattr(f, None).unwrap().perm, perm, "{n}");
    }
    // A default ACL changes no bits, flagged or not.
    let d = mkdir(&s, ROOT, "d");
    sgid(d);
    s.setxattr(d, name("system.posix_acl_default"), &named, 0, true)
        .unwrap();
    assert_eq!(s.getattr(d, None).unwrap().perm, 0o2755);
    // Flagged on a set-group-id directory's access ACL: it goes there too.
    s.setxattr(d, access, &named, 0, true).unwrap();
    assert_eq!(s.getattr(d, None).unwrap().perm, 0o755);
}

#[test]
fn a_tmpfile_has_no_name_until_linked_and_goes_at_its_last_close_if_never() {
    let s = server();
    let who = Caller { umask: 0o022, ..ME };
    // Written unnamed, then named: the name shows the data.
    let (attr, fh) = s.tmpfile(ROOT, 0o666, libc::O_RDWR, who).unwrap();
    assert_eq!((attr.nlink, attr.perm, attr.uid), (0, 0o644, 1000));
    assert_eq!(
        s.write(fh, 0, b"tmp", false, false, |_| true),
        Ok((3, false))
    );
    assert_eq!(all_names(&s, ROOT, 8), [".", ".."]);
    let linked = s.link(ino(&attr), ROOT, name("kept")).unwrap();
    assert_eq!(linked.nlink, 1);
    s.release(fh);
    let kept = s.lookup(ROOT, name("kept")).unwrap();
    assert_eq!((kept.ino, kept.nlink, kept.size), (attr.ino, 1, 3));
    // Closed unnamed: gone.
    let (lost, fh) = s.tmpfile(ROOT, 0o600, libc::O_RDWR, who).unwrap();
    s.release(fh);
    assert_eq!(s.getattr(ino(&lost), None), Err(Errno::ENOENT));
    assert_eq!(s.link(ino(&lost), ROOT, name("lost")), Err(Errno::ENOENT));
    // O_EXCL: never named.
    let (excl, fh) = s
        .tmpfile(ROOT, 0o600, libc::O_RDWR | libc::O_EXCL, who)
        .unwrap();
    assert_eq!(s.link(ino(&excl), ROOT, name("excl")), Err(Errno::ENOENT));
    s.release(fh);
    assert_eq!(all_names(&s, ROOT, 8), [".", "..", "kept"]);
    // In a set-group-ID directory with a default ACL: what create gives.
    let d = mkdir(&s, ROOT, "d");
    let set = SetAttr {
        mode: Some(0o2777),
        gid: Some(55),
        ..Default::default()
    };
    s.setattr(d, None, set, Privs::default).unwrap();
    let default = acl_value(&[(1, 7, NONE), (4, 0, NONE), (0x20, 0, NONE)]);
    s.setxattr(d, name("system.posix_acl_default"), &default, 0, false)
        .unwrap();
    let (t, fh) = s.tmpfile(d, 0o666, libc::O_RDWR, who).unwrap();
    assert_eq!((t.perm, t.gid), (0o600, 55));
    s.release(fh);
}

#[test]
fn dot_and_dotdot_answer_node_ids_the_kernel_forgot() {
    // open_by_handle_at of a handle whose node id the kernel no longer
    // caches: LOOKUP(nodeid, ".") and, for a directory, (nodeid, "..").
    let s = server();
    let a = mkdir(&s, ROOT, "a");
    let b = mkdir(&s, a, "b");
    let f = ino(&touch(&s, b, "f"));
    s.forget(a, 1);
    s.forget(b, 1);
    let found = |dir: FuseIno, n: &str| s.lookup(dir, name(n)).map(|a| ino(&a));
    assert_eq!(found(f, "."), Ok(f));
    assert_eq!(found(b, "."), Ok(b));
    assert_eq!(found(b, ".."), Ok(a));
    assert_eq!(found(a, ".."), Ok(ROOT));
    assert_eq!(found(ROOT, "."), Ok(ROOT));
    assert_eq!(found(ROOT, ".."), Ok(ROOT));
    assert_eq!(found(f, ".."), Err(Errno::ENOTDIR));
    let dot = s.lookup(f, name(".")).unwrap();
    assert_eq!((dot.kind, dot.nlink), (FileType::RegularFile, 1));

    // Each answer is a reference the kernel counts: b was looked up once
    // as "." and a once as ".."; removed, each stays until forgotten.
    s.unlink(b, name("f")).unwrap();
    s.rmdir(a, name("b")).unwrap();
    s.rmdir(ROOT, name("a")).unwrap();
    assert_eq!(s.getattr(b, None).unwrap().nlink, 0);
    assert_eq!(s.getattr(a, None).unwrap().nlink, 0);
    s.forget(b, 1);
    s.forget(a, 1);
    assert_eq!(s.getattr(b, None).map(|_| ()), Err(Errno::ENOENT));
    assert_eq!(s.getattr(a, None).map(|_| ()), Err(Errno::ENOENT));
}

#[test]
fn dot_and_dotdot_of_a_freed_inode_are_stale() {
    let s = server();
    let d = mkdir(&s, ROOT, "d");
    let f = ino(&touch(&s, d, "f"));
    let (g, fh) = s.create(d, name("g"), 0o644, 0, ME).unwrap();
    let g = ino(&g);
    s.unlink(d, name("f")).unwrap();
    s.unlink(d, name("g")).unwrap();
    s.rmdir(ROOT, name("d")).unwrap();
    s.forget(d, 1);
    for (n, dots) in [(f, "."), (d, "."), (d, "..")] {
        assert_eq!(
            s.lookup(n, name(dots)).map(|_| ()),
            Err(Errno::ESTALE),
            "{n:?} {dots}"
        );
    }
    // Removed but still open: still the inode, with no link.
    assert_eq!(s.lookup(g, name(".")).unwrap().nlink, 0);
    s.release(fh);
    assert_eq!(s.lookup(g, name(".")).map(|_| ()), Err(Errno::ESTALE));
    // An ordinary name that is missing stays ENOENT (a negative entry).
    assert_eq!(s.lookup(ROOT, name("d")).map(|_| ()), Err(Errno::ENOENT));
}

#[test]
fn a_number_reused_after_a_remount_gets_another_generation() {
    let dev = RamDevice::new(64 << 20, 4096, 256).unwrap();
    let cfg = || pollfs_core::Config {
        cache_pages: 128,
        ..pollfs_core::hosted::config()
    };
    let s = Server::new(Fs::format(dev.clone(), cfg(), 1).unwrap());
    touch(&s, ROOT, "kept");
    let gone = ino(&touch(&s, ROOT, "gone"));
    let before = s.generation(gone);
    assert_eq!(
        s.generation(ROOT),
        0,
        "the kernel expects the root's to be 0"
    );
    assert_ne!(before, 0);
    assert!(before <= u64::from(u32::MAX), "the kernel keeps 32 bits");
    s.unlink(ROOT, name("gone")).unwrap();
    let fs = s.fs.clone();
    s.close_all();
    drop(s);
    fs.unmount().unwrap();

    // The next number after a mount is one past the highest in use, so
    // the freed number comes back: the handle (number, generation) does not.
    let s = Server::new(Fs::mount(dev, cfg()).unwrap());
    let again = ino(&touch(&s, ROOT, "new"));
    assert_eq!(again, gone);
    assert_ne!(s.generation(again), before);
    assert_eq!(s.generation(ROOT), 0);
}

/// A server whose device has room for about half a MiB of data more, and
/// a file handle to write it with.
fn nearly_full() -> (Server<RamDevice>, u64, u64) {
    let s = server();
    let (_, spare) = s.create(ROOT, name("spare"), 0o644, 0, ME).unwrap();
    s.write(spare, 0, &[1u8; 512 << 10], false, false, |_| true)
        .unwrap();
    let (_, fh) = s.create(ROOT, name("fill"), 0o644, 0, ME).unwrap();
    let mut off = 0u64;
    loop {
        match s.write(fh, off, &[2u8; 1 << 20], false, false, |_| true) {
            Ok((n, _)) if n as usize == 1 << 20 => off += 1 << 20,
            Ok((n, _)) => {
                off += u64::from(n);
                break;
            }
            Err(e) => {
                assert_eq!(e, Errno::ENOSPC);
                break;
            }
        }
    }
    s.release(spare);
    s.unlink(ROOT, name("spare")).unwrap();
    (s, fh, off)
}

#[test]
fn a_write_from_the_page_cache_that_does_not_fit_whole_is_an_error() {
    // Writeback in kernel cache mode: the kernel would take a short reply
    // as done and drop the rest of the pages, so the error must reach it.
    let (s, fh, off) = nearly_full();
    assert_eq!(
        s.write(fh, off, &[3u8; 1 << 20], true, false, |_| true),
        Err(Errno::ENOSPC)
    );
    // A program's own write (direct mode) gets the part that fitted.
    let (s, fh, off) = nearly_full();
    let (n, _) = s
        .write(fh, off, &[3u8; 1 << 20], false, false, |_| true)
        .unwrap();
    assert!(n > 0 && (n as usize) < 1 << 20, "a short write, not {n}");
}
