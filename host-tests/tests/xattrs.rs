//! Extended attributes through the engine: setxattr(2)'s flags and
//! errors, the limits of `persist::xattr`, and durability: through the log
//! (a copy of the device taken while the filesystem runs, as a crash
//! leaves it), through a checkpoint (an unmount), and gone with their
//! inode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::error::XattrError;
use pollfs_core::persist::xattr::{INODE_TOTAL_MAX, NAME_MAX, VALUE_MAX};
use pollfs_core::{Error, Fs, InodeId, Kind, NewInode, XattrMode};
use pollfs_host_tests::setup::config;

const BYTES: u64 = 32 << 20;

fn device() -> RamDevice {
    RamDevice::new(BYTES, 4096, 96).unwrap()
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

fn clean(dev: &RamDevice) {
    pollfs_host_tests::setup::fsck_clean(dev);
}

fn err(e: XattrError) -> Result<(), Error> {
    Err(Error::Xattr(e))
}

#[test]
fn flags_errors_and_limits_are_setxattrs() {
    let fs = Fs::format(device(), config(64), 1).unwrap();
    let _s = fs.session().unwrap();
    let f = fs.create("f").unwrap().ino();
    let any = XattrMode::Any;
    assert_eq!(
        fs.set_xattr(f, "user.a", b"1", XattrMode::Replace),
        err(XattrError::NotFound)
    );
    fs.set_xattr(f, "user.a", b"1", XattrMode::Create).unwrap();
    assert_eq!(
        fs.set_xattr(f, "user.a", b"2", XattrMode::Create),
        err(XattrError::Exists)
    );
    fs.set_xattr(f, "user.a", b"2", XattrMode::Replace).unwrap();
    fs.set_xattr(f, "trusted.t", b"", any).unwrap();
    fs.set_xattr(f, "system.posix_acl_access", b"acl", any)
        .unwrap();
    assert_eq!(fs.get_xattr(f, "user.a").unwrap(), b"2");
    assert_eq!(fs.get_xattr(f, "trusted.t").unwrap(), b"");
    assert_eq!(
        fs.list_xattr(f).unwrap(),
        ["system.posix_acl_access", "trusted.t", "user.a"]
    );
    assert_eq!(
        fs.get_xattr(f, "user.b"),
        Err(Error::Xattr(XattrError::NotFound))
    );
    assert_eq!(
        fs.set_xattr(f, "other.a", b"", any),
        err(XattrError::Namespace)
    );
    assert_eq!(
        fs.set_xattr(f, "system.x", b"", any),
        err(XattrError::Namespace)
    );
    let long = format!("user.{}", "n".repeat(NAME_MAX - 4));
    assert_eq!(
        fs.set_xattr(f, &long, b"", any),
        err(XattrError::NameLength)
    );
    let big = vec![7; VALUE_MAX];
    assert_eq!(
        fs.set_xattr(f, "user.big", &[big.as_slice(), b"x"].concat(), any),
        err(XattrError::ValueTooLarge)
    );
    // Full-size values up to the per-inode total, then no more.
    let mut n = 0;
    let result = loop {
        match fs.set_xattr(f, &format!("user.v{n}"), &big, any) {
            Ok(()) => n += 1,
            e => break e,
        }
    };
    assert_eq!(result, err(XattrError::Full));
    // 42 bytes of small ones, and 7 + 64 Ki per full one: three fit.
    assert_eq!(n, 3);
    const { assert!(42 + 4 * (7 + VALUE_MAX) > INODE_TOTAL_MAX) };
    fs.remove_xattr(f, "user.a").unwrap();
    assert_eq!(fs.remove_xattr(f, "user.a"), err(XattrError::NotFound));
    // Directories, links and special files have them too.
    let d = fs
        .mkdir_in(InodeId::ROOT, "d", NewInode::new(0o755, 0, 0))
        .unwrap();
    let p = fs
        .mknod_in(
            InodeId::ROOT,
            "p",
            Kind::Fifo,
            0,
            NewInode::new(0o644, 0, 0),
        )
        .unwrap();
    fs.set_xattr(d, "system.posix_acl_default", b"dacl", any)
        .unwrap();
    fs.set_xattr(p, "user.p", b"pipe", any).unwrap();
    assert_eq!(
        fs.get_xattr(d, "system.posix_acl_default").unwrap(),
        b"dacl"
    );
}

#[test]
fn attributes_survive_the_log_a_checkpoint_and_go_with_their_inode() {
    let dev = device();
    let fs = Fs::format(dev.clone(), config(64), 1).unwrap();
    let s = fs.session().unwrap();
    let f = fs.create("f").unwrap().ino();
    let g = fs.create("g").unwrap().ino();
    fs.set_xattr(f, "user.kept", b"value", XattrMode::Any)
        .unwrap();
    fs.set_xattr(f, "user.gone", b"x", XattrMode::Any).unwrap();
    fs.set_xattr(f, "security.big", &vec![3; VALUE_MAX], XattrMode::Any)
        .unwrap();
    fs.remove_xattr(f, "user.gone").unwrap();
    fs.set_xattr(g, "user.g", b"g", XattrMode::Any).unwrap();
    fs.sync().unwrap();
    // After the sync, before anything else: what the log holds.
    let crashed = crash_copy(&dev);
    fs.unlink_in(InodeId::ROOT, "g").unwrap();
    fs.set_xattr(f, "user.unsynced", b"u", XattrMode::Any)
        .unwrap();

    clean(&crashed);
    let fs2 = Fs::mount(crashed, config(64)).unwrap();
    assert_eq!(fs2.list_xattr(f).unwrap(), ["security.big", "user.kept"]);
    assert_eq!(fs2.get_xattr(f, "user.kept").unwrap(), b"value");
    assert_eq!(
        fs2.get_xattr(f, "security.big").unwrap(),
        vec![3; VALUE_MAX]
    );
    assert_eq!(fs2.get_xattr(g, "user.g").unwrap(), b"g");
    drop(fs2);

    fs.sync().unwrap();
    drop(s);
    drop(fs);
    clean(&dev);
    let fs = Fs::mount(dev.clone(), config(64)).unwrap();
    assert_eq!(
        fs.list_xattr(f).unwrap(),
        ["security.big", "user.kept", "user.unsynced"]
    );
    assert!(fs.list_xattr(g).is_err(), "g's inode is gone");
    fs.check_invariants().unwrap();
}
