//! Crash consistency of files made unnamed (`Fs::create_unnamed`, what
//! `open(2)` with O_TMPFILE does on the mount): one written, synced and
//! then named; one written, synced and closed unnamed; one that may not be
//! named (O_EXCL); one named and unlinked again while open. At every write
//! boundary of the recorded run, every crash image is recovered and:
//!
//! - fsck is clean and the engine's invariants hold;
//! - the directory holds nothing or the named file, and the named file
//!   once its directory's sync finished; when it is there, its bytes are
//!   whole (they were synced before it was named);
//! - no unnamed inode survives recovery: each is an orphan, freed as a
//!   removed file still open is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::error::NamespaceError;
use pollfs_core::{Error, Fs, NewInode};
use pollfs_host_tests::crash::{
    assert_fsck_clean, crash_images, device_from, mount_checked, RecordingDevice,
};
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::rng::Rng;
use pollfs_host_tests::setup::config;

const DEV_BYTES: u64 = 8 << 20;
const FRAMES: u32 = 96;
const CACHE: u32 = 48;
const LEN: usize = 20_000;

fn not_found<T: std::fmt::Debug>(r: pollfs_core::Result<T>) -> bool {
    matches!(r, Err(Error::Namespace(NamespaceError::NotFound)))
}

#[test]
fn unnamed_files_are_freed_or_named_whole_at_every_crash_point() {
    let ram = pollfs_core::dev::ram::RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    drop(Fs::format(ram.clone(), config(CACHE), 0x7E3).unwrap());
    let mut base = vec![0u8; DEV_BYTES as usize];
    ram.read_raw(0, &mut base);
    let dev = RecordingDevice::new(ram);
    let fs = Fs::mount(dev.clone(), config(CACHE)).unwrap();
    let who = NewInode::new(0o600, 0, 0);
    let dir = fs.mkdir("d").unwrap();
    fs.sync().unwrap();
    let data = pattern(3, 0, LEN);

    // Written and synced unnamed, then named, and its directory synced.
    let named = fs.create_unnamed(dir, who, true).unwrap();
    assert_eq!(fs.attr(named.ino()).unwrap().nlink, 0);
    named.write_all_at(&data, 0).unwrap();
    named.sync_all().unwrap();
    fs.link_in(named.ino(), dir, "named").unwrap();
    assert_eq!(fs.attr(named.ino()).unwrap().nlink, 1);
    fs.sync_dir(dir).unwrap();
    let named_at = dev.len();
    let named_ino = named.ino();
    drop(named);
    assert_eq!(
        fs.attr(named_ino).unwrap().nlink,
        1,
        "kept at its last close"
    );

    // Written, synced and closed without a name: gone at once.
    let lost = fs.create_unnamed(dir, who, true).unwrap();
    lost.write_all_at(&data, 0).unwrap();
    lost.sync_all().unwrap();
    let lost_ino = lost.ino();
    drop(lost);
    assert!(not_found(fs.attr(lost_ino)));
    assert!(not_found(fs.link_in(lost_ino, dir, "lost")));

    // O_EXCL: never named.
    let excl = fs.create_unnamed(dir, who, false).unwrap();
    excl.write_all_at(&data, 0).unwrap();
    excl.sync_all().unwrap();
    assert!(not_found(fs.link_in(excl.ino(), dir, "excl")));
    let excl_ino = excl.ino();

    // Named, then unlinked while open: not named again (as on Linux).
    let again = fs.create_unnamed(dir, who, true).unwrap();
    fs.link_in(again.ino(), dir, "again").unwrap();
    fs.unlink_in(dir, "again").unwrap();
    assert!(not_found(fs.link_in(again.ino(), dir, "again2")));
    let again_ino = again.ino();
    fs.sync().unwrap();
    // Still open at the last write: recovery frees these two.
    let events = dev.events();
    drop((excl, again));
    drop(fs);

    let mut rng = Rng::new(0x7E3);
    let mut checked = 0;
    for at in 0..=events.len() {
        for (desc, image) in crash_images(&base, &events, at, &mut rng) {
            let ctx = format!("at {at}: {desc}");
            let dev = device_from(&image, FRAMES);
            assert_fsck_clean(&dev, &format!("{ctx}: fsck"));
            let fs = mount_checked(dev, config(CACHE), &ctx);
            let Ok(dir) = fs.lookup("d") else {
                continue;
            };
            let names: Vec<String> = fs
                .read_dir(dir, 0, 16)
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            // "again" is there between its link and its unlink.
            let again_named = names.iter().any(|n| n == "again");
            let named_there = names.iter().any(|n| n == "named");
            assert!(
                names.iter().all(|n| n == "named" || n == "again"),
                "{ctx}: unexpected entries {names:?}"
            );
            assert!(
                named_there || at < named_at,
                "{ctx}: the synced name is lost"
            );
            if named_there {
                let f = fs.open("d/named").unwrap();
                assert_eq!(f.ino(), named_ino, "{ctx}");
                let mut got = vec![0u8; LEN];
                f.read_exact_at(&mut got, 0).unwrap();
                assert!(got == data, "{ctx}: the named file's bytes differ");
                assert_eq!(fs.attr(named_ino).unwrap().nlink, 1, "{ctx}");
            }
            let mut gone = vec![lost_ino, excl_ino];
            if !again_named {
                gone.push(again_ino);
            }
            for ino in gone {
                assert!(not_found(fs.attr(ino)), "{ctx}: inode {ino} survived");
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} crash images checked");
}

/// xfstests generic/035: a directory removed while held (an open
/// descriptor, a working directory) stays an inode with no link, lists
/// nothing and takes no entries until its holder lets go; held across a
/// crash, mount reclaims it as an orphan.
#[test]
fn a_removed_directory_stays_while_held_and_is_reclaimed_after_a_crash() {
    let ram = pollfs_core::dev::ram::RamDevice::new(DEV_BYTES, 4096, FRAMES).unwrap();
    let fs = Fs::format(ram.clone(), config(CACHE), 0x035).unwrap();
    let who = NewInode::new(0o755, 0, 0);
    let root = pollfs_core::InodeId::ROOT;
    let d = fs.mkdir("d").unwrap();
    let held = fs.hold_dir(d).unwrap();
    let again = fs.hold_dir(d).unwrap();
    fs.rmdir("d").unwrap();
    assert!(not_found(fs.lookup_in(root, "d")));
    let m = fs.attr(d).unwrap();
    assert_eq!((m.nlink, m.kind), (0, pollfs_core::Kind::Dir));
    assert!(fs.read_dir(d, 0, 16).unwrap().is_empty());
    assert!(not_found(fs.create_in(d, "f", who)));
    assert!(not_found(fs.mkdir_in(d, "s", who)));
    assert!(not_found(fs.lookup_in(d, "f")));
    fs.check_invariants().unwrap();
    drop(again);
    assert_eq!(fs.attr(d).unwrap().nlink, 0, "one holder is left");
    drop(held);
    assert!(not_found(fs.attr(d)), "freed with its last holder");
    assert!(not_found(fs.hold_dir(d)));
    fs.check_invariants().unwrap();

    // Removed, synced and still held when the filesystem stops.
    let e = fs.mkdir("e").unwrap();
    let held = fs.hold_dir(e).unwrap();
    fs.rmdir("e").unwrap();
    fs.sync().unwrap();
    let mut image = vec![0u8; DEV_BYTES as usize];
    ram.read_raw(0, &mut image);
    drop(held);
    drop(fs);
    let dev = device_from(&image, FRAMES);
    assert_fsck_clean(&dev, "a removed directory held at the crash");
    let fs = Fs::mount(dev, config(CACHE)).unwrap();
    fs.check_invariants().unwrap();
    assert!(not_found(fs.attr(e)), "reclaimed as an orphan");
    assert!(not_found(fs.lookup("e")));
}
