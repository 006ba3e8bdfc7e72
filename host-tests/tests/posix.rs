//! The POSIX layer through the engine API the mount and libpollfs use
//! (`pollfs_core::fs::posix`): set-group-id and default-ACL inheritance,
//! chmod and chown by whom, set-id bits taken by chown and writes, access
//! checks, two threads creating one name, and a new inode's ACLs durable
//! with it (staged in one group with its entry).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::error::{NamespaceError, PosixError};
use pollfs_core::fs::posix::{Acl, Creds, Want, ACL_ACCESS, ACL_DEFAULT, NO_ID};
use pollfs_core::{Created, Error, Fs, InodeId, XattrMode};
use pollfs_host_tests::setup::config;

const BYTES: u64 = 32 << 20;

fn device() -> RamDevice {
    RamDevice::new(BYTES, 4096, 96).unwrap()
}

fn fs_on(dev: &RamDevice) -> Fs<RamDevice> {
    Fs::format(dev.clone(), config(64), 1).unwrap()
}

/// The device as a crash now would leave it.
fn crash_copy(dev: &RamDevice) -> RamDevice {
    let copy = device();
    let mut buf = vec![0; 1 << 20];
    for off in (0..BYTES).step_by(buf.len()) {
        dev.read_raw(off, &mut buf);
        copy.write_raw(off, &buf);
    }
    copy
}

/// An ACL's value from (tag, perm, id) triples, tags as acl(5) numbers.
fn acl_value(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(t, p, id) in entries {
        v.extend_from_slice(&t.to_le_bytes());
        v.extend_from_slice(&p.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// u::rwx, u:1000:rwx, g::r-x, m::rwx, o::r-x
fn rich_default() -> Vec<u8> {
    acl_value(&[
        (0x01, 7, NO_ID),
        (0x02, 7, 1000),
        (0x04, 5, NO_ID),
        (0x10, 7, NO_ID),
        (0x20, 5, NO_ID),
    ])
}

fn user(uid: u32, gid: u32) -> Creds {
    Creds {
        umask: 0o022,
        ..Creds::new(uid, gid)
    }
}

fn posix(e: PosixError) -> Error {
    Error::Posix(e)
}

#[test]
fn a_set_group_id_directory_gives_its_group_and_subdirectories_the_bit() {
    let fs = fs_on(&device());
    let _s = fs.session().unwrap();
    let root = Creds::root();
    let d = fs.mkdir_by(InodeId::ROOT, "shared", 0o2775, &root).unwrap();
    assert_eq!(fs.attr(d).unwrap().perm, 0o775, "mkdir(2) takes no set-id");
    fs.chown_by(d, None, Some(50), &root).unwrap();
    fs.chmod_by(d, 0o2775, &root).unwrap();
    let me = user(1000, 100);
    let (f, made) = fs.create_or_open_by(d, "f", 0o666, &me, true).unwrap();
    assert_eq!(made, Created::Made);
    let m = f.metadata();
    assert_eq!((m.uid, m.gid, m.perm), (1000, 50, 0o644));
    let sub = fs.attr(fs.mkdir_by(d, "sub", 0o777, &me).unwrap()).unwrap();
    assert_eq!((sub.gid, sub.perm), (50, 0o2755));
    let l = fs.attr(fs.symlink_by(d, "l", "f", &me).unwrap()).unwrap();
    assert_eq!((l.uid, l.gid, l.perm), (1000, 50, 0o777));
    let plain = fs.mkdir_by(InodeId::ROOT, "plain", 0o777, &me).unwrap();
    let g = fs
        .create_or_open_by(plain, "g", 0o666, &me, true)
        .unwrap()
        .0;
    assert_eq!(g.metadata().gid, 100, "the caller's group elsewhere");
}

#[test]
fn a_default_acl_is_inherited_in_the_create_and_durable_with_it() {
    let dev = device();
    let fs = fs_on(&dev);
    let _s = fs.session().unwrap();
    let root = Creds::root();
    let d = fs.mkdir_by(InodeId::ROOT, "d", 0o777, &root).unwrap();
    fs.posix_setxattr(d, ACL_DEFAULT, &rich_default(), XattrMode::Any, false)
        .unwrap();
    let me = Creds {
        umask: 0o077,
        ..Creds::new(1000, 100)
    };
    let (f, _) = fs.create_or_open_by(d, "f", 0o666, &me, true).unwrap();
    // The mask takes the group's bits; the umask is not applied.
    assert_eq!(f.metadata().perm, 0o664);
    let access = acl_value(&[
        (0x01, 6, NO_ID),
        (0x02, 7, 1000),
        (0x04, 5, NO_ID),
        (0x10, 6, NO_ID),
        (0x20, 4, NO_ID),
    ]);
    assert_eq!(fs.get_xattr(f.ino(), ACL_ACCESS).unwrap(), access);
    let sub = fs.mkdir_by(d, "sub", 0o777, &me).unwrap();
    assert_eq!(fs.get_xattr(sub, ACL_DEFAULT).unwrap(), rich_default());
    let sub_ino = sub;
    let file_ino = f.ino();
    // Another file's sync commits what is staged; a crash follows.
    let other = fs.create("other").unwrap();
    other.sync_all().unwrap();
    let after = Fs::mount(crash_copy(&dev), config(64)).unwrap();
    let _s2 = after.session().unwrap();
    assert_eq!(after.attr(file_ino).unwrap().perm, 0o664);
    assert_eq!(after.get_xattr(file_ino, ACL_ACCESS).unwrap(), access);
    assert_eq!(
        after.get_xattr(sub_ino, ACL_DEFAULT).unwrap(),
        rich_default()
    );
}

#[test]
fn chmod_by_anyone_but_the_owner_or_root_is_refused() {
    let fs = fs_on(&device());
    let _s = fs.session().unwrap();
    let owner = user(1000, 100);
    let (f, _) = fs
        .create_or_open_by(InodeId::ROOT, "f", 0o644, &owner, true)
        .unwrap();
    let other = user(2000, 100);
    assert_eq!(
        fs.chmod_by(f.ino(), 0o777, &other).err(),
        Some(posix(PosixError::NotOwner))
    );
    assert_eq!(fs.attr(f.ino()).unwrap().perm, 0o644);
    fs.chmod_by(f.ino(), 0o600, &owner).unwrap();
    fs.chmod_by(f.ino(), 0o640, &Creds::root()).unwrap();
    assert_eq!(fs.attr(f.ino()).unwrap().perm, 0o640);
    // An owner outside the file's group cannot set set-group-id.
    fs.chown_by(f.ino(), None, Some(7), &Creds::root()).unwrap();
    fs.chmod_by(f.ino(), 0o2750, &owner).unwrap();
    assert_eq!(fs.attr(f.ino()).unwrap().perm, 0o750);
}

#[test]
fn chown_takes_set_id_bits_and_only_root_gives_files_away() {
    let fs = fs_on(&device());
    let _s = fs.session().unwrap();
    let root = Creds::root();
    let owner = Creds {
        groups: vec![200],
        ..user(1000, 100)
    };
    let (f, _) = fs
        .create_or_open_by(InodeId::ROOT, "f", 0o644, &owner, true)
        .unwrap();
    let ino = f.ino();
    fs.chmod_by(ino, 0o6755, &root).unwrap();
    // The owner may change the group to one of its own, not the owner.
    assert_eq!(
        fs.chown_by(ino, Some(2000), None, &owner).err(),
        Some(posix(PosixError::NotOwner))
    );
    assert_eq!(
        fs.chown_by(ino, None, Some(300), &owner).err(),
        Some(posix(PosixError::NotOwner))
    );
    let m = fs.chown_by(ino, None, Some(200), &owner).unwrap();
    assert_eq!((m.gid, m.perm), (200, 0o755), "group-executable: both go");
    // Even root's chown takes set-user-id.
    fs.chmod_by(ino, 0o4644, &root).unwrap();
    let m = fs.chown_by(ino, Some(3000), None, &root).unwrap();
    assert_eq!((m.uid, m.perm), (3000, 0o644));
    // A directory keeps its bits.
    let d = fs.mkdir_by(InodeId::ROOT, "d", 0o775, &root).unwrap();
    fs.chmod_by(d, 0o2775, &root).unwrap();
    assert_eq!(fs.chown_by(d, Some(5), None, &root).unwrap().perm, 0o2775);
}

#[test]
fn a_write_by_a_non_member_takes_set_id_bits() {
    let fs = fs_on(&device());
    let _s = fs.session().unwrap();
    let root = Creds::root();
    let (f, _) = fs
        .create_or_open_by(InodeId::ROOT, "f", 0o6745, &root, true)
        .unwrap();
    let writer = user(2000, 300);
    assert!(fs.kill_setid(f.ino(), |g| writer.keeps_sgid(g)).unwrap());
    assert_eq!(f.metadata().perm, 0o745, "not in the group: both go");
    assert!(!fs.kill_setid(f.ino(), |g| writer.keeps_sgid(g)).unwrap());
}

#[test]
fn access_checks_read_the_bits_and_the_access_acl() {
    let fs = fs_on(&device());
    let _s = fs.session().unwrap();
    let root = Creds::root();
    let (f, _) = fs
        .create_or_open_by(InodeId::ROOT, "f", 0o640, &root, true)
        .unwrap();
    let ino = f.ino();
    let stranger = user(1000, 100);
    let denied = Some(posix(PosixError::AccessDenied));
    assert_eq!(fs.check_access(ino, &stranger, Want::READ).err(), denied);
    // u:1000:rw- with mask r--: reading only.
    let a = acl_value(&[
        (0x01, 6, NO_ID),
        (0x02, 6, 1000),
        (0x04, 4, NO_ID),
        (0x10, 4, NO_ID),
        (0x20, 0, NO_ID),
    ]);
    assert!(Acl::parse(&a).unwrap().is_some());
    fs.posix_setxattr(ino, ACL_ACCESS, &a, XattrMode::Any, false)
        .unwrap();
    fs.check_access(ino, &stranger, Want::READ).unwrap();
    assert_eq!(fs.check_access(ino, &stranger, Want::WRITE).err(), denied);
    assert_eq!(
        fs.check_xattr_by(ino, "trusted.x", false, &stranger).err(),
        Some(posix(PosixError::NotOwner))
    );
}

#[test]
fn in_a_sticky_directory_only_owners_remove_entries() {
    let fs = fs_on(&device());
    let _s = fs.session().unwrap();
    let root = Creds::root();
    let d = fs.mkdir_by(InodeId::ROOT, "tmp", 0o777, &root).unwrap();
    fs.chmod_by(d, 0o1777, &root).unwrap();
    let owner = user(1000, 100);
    fs.create_or_open_by(d, "a", 0o666, &owner, true).unwrap();
    let other = user(2000, 100);
    assert_eq!(
        fs.check_remove_by(d, "a", &other).err(),
        Some(posix(PosixError::NotOwner))
    );
    fs.check_remove_by(d, "a", &owner).unwrap();
    fs.check_remove_by(d, "a", &root).unwrap();
    // Without the bit, write permission on the directory is enough.
    fs.chmod_by(d, 0o777, &root).unwrap();
    fs.check_remove_by(d, "a", &other).unwrap();
    let closed = fs.mkdir_by(InodeId::ROOT, "closed", 0o755, &root).unwrap();
    assert_eq!(
        fs.check_remove_by(closed, "x", &other).err(),
        Some(posix(PosixError::AccessDenied))
    );
}

/// Runs `create_or_open_by` of one name from two threads at once.
fn race(fs: &Fs<RamDevice>, name: &str, exclusive: bool) -> Vec<Result<(InodeId, Created), Error>> {
    let go = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2u32)
        .map(|i| {
            let (fs, go, name) = (fs.clone(), go.clone(), name.to_string());
            std::thread::spawn(move || {
                let _s = fs.session().unwrap();
                let me = user(1000 + i, 100);
                go.wait();
                fs.create_or_open_by(InodeId::ROOT, &name, 0o600, &me, exclusive)
                    .map(|(f, c)| (f.ino(), c))
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn two_threads_creating_one_name_one_makes_it() {
    let fs = fs_on(&device());
    let _s = fs.session().unwrap();
    for round in 0..100 {
        let name = format!("x{round}");
        let got = race(&fs, &name, true);
        let made = got
            .iter()
            .filter(|r| matches!(r, Ok((_, Created::Made))))
            .count();
        let exist = got
            .iter()
            .filter(|r| matches!(r, Err(Error::Namespace(NamespaceError::Exists))))
            .count();
        assert_eq!((made, exist), (1, 1), "round {round}: {got:?}");
        let name = format!("o{round}");
        let got = race(&fs, &name, false);
        let ino = fs.lookup_in(InodeId::ROOT, &name).unwrap();
        let made = got
            .iter()
            .filter(|r| matches!(r, Ok((_, Created::Made))))
            .count();
        assert_eq!(made, 1, "round {round}: {got:?}");
        assert!(
            got.iter().all(|r| matches!(r, Ok((i, _)) if *i == ino)),
            "round {round}: {got:?}"
        );
        assert_eq!(fs.attr(ino).unwrap().perm, 0o600);
    }
}
