//! Crash consistency of creates as a caller (`Fs::create_or_open_by`,
//! `Fs::mkdir_by`, what the mount and libpollfs use): in a set-group-id
//! directory with a default ACL, files and directories are made while
//! another thread syncs over and over, so commits fall anywhere among
//! the creates. At every write boundary of the recorded run, every crash
//! image is recovered and:
//!
//! - fsck is clean and the engine's invariants hold;
//! - every name there is an inode with the owner, group, bits and ACLs
//!   its create gave it, never the inode without them (they are staged
//!   as one group with its entry);
//! - every name whose directory's sync had finished is there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pollfs_core::fs::posix::{Creds, ACL_ACCESS, ACL_DEFAULT, NO_ID};
use pollfs_core::{Fs, InodeId, Kind, XattrMode};
use pollfs_host_tests::crash::{
    assert_fsck_clean, crash_images, device_from, mount_checked, RecordingDevice,
};
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::config;

const DEV_BYTES: u64 = 8 << 20;
const FRAMES: u32 = 96;
const CACHE: u32 = 48;
const NAMES: usize = 24;

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

#[test]
fn a_created_name_has_its_owner_bits_and_acls_at_every_crash_point() {
    let ram = pollfs_core::dev::ram::RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    drop(Fs::format(ram.clone(), config(CACHE), 0x9051).unwrap());
    let mut base = vec![0u8; DEV_BYTES as usize];
    ram.read_raw(0, &mut base);
    let dev = RecordingDevice::new(ram);
    let fs = Fs::mount(dev.clone(), config(CACHE)).unwrap();
    let root = Creds::root();
    // u::rwx, u:1000:rwx, g::r-x, m::rwx, o::r-x
    let default = acl_value(&[
        (0x01, 7, NO_ID),
        (0x02, 7, 1000),
        (0x04, 5, NO_ID),
        (0x10, 7, NO_ID),
        (0x20, 5, NO_ID),
    ]);
    let d = fs.mkdir_by(InodeId::ROOT, "d", 0o777, &root).unwrap();
    fs.chown_by(d, None, Some(50), &root).unwrap();
    fs.chmod_by(d, 0o2777, &root).unwrap();
    fs.posix_setxattr(d, ACL_DEFAULT, &default, XattrMode::Any, false)
        .unwrap();
    fs.sync().unwrap();
    let setup_at = dev.len();

    // A file asked for 0666 and a directory for 0777 by uid 1000 with
    // umask 077: the mask's bits, not the umask's.
    let file_access = acl_value(&[
        (0x01, 6, NO_ID),
        (0x02, 7, 1000),
        (0x04, 5, NO_ID),
        (0x10, 6, NO_ID),
        (0x20, 4, NO_ID),
    ]);
    let me = Creds {
        umask: 0o077,
        ..Creds::new(1000, 100)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (fs, stop) = (fs.clone(), stop.clone());
        std::thread::spawn(move || {
            let _s = fs.session().unwrap();
            while !stop.load(Ordering::Acquire) {
                fs.sync().unwrap();
            }
        })
    };
    // The event count once each name's directory sync returned.
    let mut synced_at = Vec::new();
    for i in 0..NAMES {
        let name = format!("n{i}");
        if i % 3 == 2 {
            fs.mkdir_by(d, &name, 0o777, &me).unwrap();
        } else {
            fs.create_or_open_by(d, &name, 0o666, &me, true).unwrap();
        }
        // Most names synced here; the rest only by the other thread.
        if i % 4 != 3 {
            fs.sync_dir(d).unwrap();
            synced_at.push((dev.len(), i));
        }
    }
    stop.store(true, Ordering::Release);
    syncer.join().unwrap();
    fs.sync().unwrap();
    let events = dev.events();
    drop(fs);

    let mut rng = Rng::new(0x9051);
    let mut checked = 0;
    let mut named_seen = 0;
    for at in 0..=events.len() {
        for (desc, image) in crash_images(&base, &events, at, &mut rng) {
            let ctx = format!("at {at}: {desc}");
            let dev = device_from(&image, FRAMES);
            assert_fsck_clean(&dev, &format!("{ctx}: fsck"));
            let fs = mount_checked(dev, config(CACHE), &ctx);
            let Ok(d) = fs.lookup_in(InodeId::ROOT, "d") else {
                assert!(at < setup_at, "{ctx}: the synced directory is gone");
                continue;
            };
            for i in 0..NAMES {
                let name = format!("n{i}");
                let Ok(ino) = fs.lookup_in(d, &name) else {
                    let must = synced_at.iter().any(|&(e, j)| j >= i && e <= at);
                    assert!(!must, "{ctx}: {name} was synced and is gone");
                    continue;
                };
                named_seen += 1;
                let m = fs.attr(ino).unwrap();
                assert_eq!((m.uid, m.gid), (1000, 50), "{ctx}: {name}'s owner");
                // A directory asked for 0777 keeps the default ACL whole
                // as its access ACL too.
                let access = if m.kind == Kind::Dir {
                    &default
                } else {
                    &file_access
                };
                assert_eq!(
                    fs.get_xattr(ino, ACL_ACCESS).ok().as_ref(),
                    Some(access),
                    "{ctx}: {name}'s access ACL"
                );
                if m.kind == Kind::Dir {
                    assert_eq!(m.perm, 0o2775, "{ctx}: {name}'s bits");
                    assert_eq!(
                        fs.get_xattr(ino, ACL_DEFAULT).unwrap(),
                        default,
                        "{ctx}: {name}'s default ACL"
                    );
                } else {
                    assert_eq!(m.perm, 0o664, "{ctx}: {name}'s bits");
                }
            }
            checked += 1;
        }
    }
    eprintln!(
        "{} events, {checked} crash images, {named_seen} names seen",
        events.len()
    );
    assert!(checked > 20, "only {checked} crash images checked");
    assert!(
        named_seen > NAMES,
        "names were seen in only {named_seen} images"
    );
}
