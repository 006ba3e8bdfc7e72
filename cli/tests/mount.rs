//! `pollfs mount` through the kernel: directories, links, modes, owners
//! and times as `stat` shows them, the errno of each refusal, files
//! removed while open, what survives SIGKILL and
//! what SIGTERM saves, one process per device, and the background mode.
//! Each test mounts a fresh image, in the cache mode `CACHE_MODE` names
//! (`kernel`, the default, or `direct`). They need root and /dev/fuse,
//! and say they were skipped (and pass) without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{can_mount, is_mounted, pollfs, spec, wait_for, Scratch};

/// How long a mount, an unmount or a server's end may take.
const WAIT: Duration = Duration::from_secs(30);

/// The cache mode every mount here runs in.
fn cache_mode() -> String {
    std::env::var("CACHE_MODE").unwrap_or_else(|_| "kernel".into())
}

fn lazy_unmount(dir: &Path) {
    let c = c_path(dir);
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill takes a process id (our child's, not yet reaped) and a
    // signal number; it touches no memory.
    unsafe { libc::kill(child.id() as i32, sig) };
}

/// An image and a mount point.
struct Fixture {
    _scratch: Scratch,
    image: PathBuf,
    dir: PathBuf,
}

/// A fresh mount point in `scratch`, as the kernel names it.
fn mount_point(scratch: &Scratch) -> PathBuf {
    let dir = scratch.path("mnt");
    std::fs::create_dir(&dir).unwrap();
    dir.canonicalize().unwrap()
}

/// `pollfs fsck DEVICE` passes with no problem found.
fn fsck_clean(device: &str) {
    let (ok, out, err) = pollfs(&["fsck", device]);
    assert!(ok && out.contains(" 0 problems"), "{device}: {out}{err}");
}

impl Fixture {
    /// A fresh 128 MiB image and mount point; `None` (and the test passes
    /// without mounting, saying so) where mounts cannot be made.
    fn new(name: &str) -> Option<Fixture> {
        if !can_mount() {
            return None;
        }
        let scratch = Scratch::new(name);
        let image = scratch.path("img");
        let dir = mount_point(&scratch);
        let (ok, _, err) = pollfs(&["mkfs", &spec(&image), "--size", "128m"]);
        assert!(ok, "{err}");
        Some(Fixture {
            _scratch: scratch,
            image,
            dir,
        })
    }

    /// `pollfs mount --foreground`, once the mount is there.
    fn mount(&self) -> Server {
        self.mount_with(&[])
    }

    /// `pollfs mount --foreground --cache 32m ARGS`, once the mount is
    /// there.
    fn mount_with(&self, args: &[&str]) -> Server {
        let args: Vec<&str> = ["--cache", "32m"].iter().chain(args).copied().collect();
        serve_with(&spec(&self.image), &self.dir, &args)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn fsck(&self) {
        fsck_clean(&spec(&self.image));
    }
}

/// A running `pollfs mount`.
struct Server {
    child: Child,
    dir: PathBuf,
}

impl Server {
    /// SIGTERM, and the exit status.
    fn stop(mut self) -> ExitStatus {
        signal(&self.child, libc::SIGTERM);
        let status = self.child.wait().unwrap();
        assert!(!is_mounted(&self.dir), "SIGTERM unmounted");
        status
    }

    /// SIGKILL, and the dead mount taken away.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        lazy_unmount(&self.dir);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        lazy_unmount(&self.dir);
    }
}

/// `pollfs mount --foreground ARGS DEVICE DIR` in the cache mode under
/// test, once the mount is there.
fn serve_with(device: &str, dir: &Path, args: &[&str]) -> Server {
    let child = Command::new(env!("CARGO_BIN_EXE_pollfs"))
        .args(["mount", "--foreground", "--cache-mode", &cache_mode()])
        .args(args)
        .arg(device)
        .arg(dir)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server {
        child,
        dir: dir.to_path_buf(),
    };
    wait_for(&format!("the mount of {device}"), WAIT, || {
        assert!(server.child.try_wait().unwrap().is_none(), "mount failed");
        is_mounted(dir)
    });
    server
}

/// `pollfs mount --foreground --cache 8m --threads 2 DEVICE DIR`, once the
/// mount is there.
fn serve(device: &str, dir: &Path) -> Server {
    serve_with(device, dir, &["--cache", "8m", "--threads", "2"])
}

fn errno<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

fn c_path(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    let (f, t) = (c_path(from), c_path(to));
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn fallocate(f: &File, mode: i32, off: i64, len: i64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor is open for the call; fallocate touches no
    // memory of ours.
    let rc = unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn the_namespace_and_attributes_through_the_kernel_and_each_refusals_errno() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(fx) = Fixture::new("namespace") else {
        return;
    };
    let server = fx.mount();
    let d = fx.path("d");
    std::fs::create_dir(&d).unwrap();
    let a = d.join("a");
    std::fs::write(&a, b"data").unwrap();
    std::fs::write(fx.path("b"), b"other").unwrap();
    assert_eq!(errno(std::fs::remove_dir(&d)), Some(libc::ENOTEMPTY));
    assert_eq!(errno(std::fs::remove_dir(&a)), Some(libc::ENOTDIR));
    assert_eq!(errno(std::fs::remove_file(&d)), Some(libc::EISDIR));
    assert_eq!(
        errno(std::fs::remove_dir(fx.path("none"))),
        Some(libc::ENOENT)
    );
    assert_eq!(std::fs::metadata(&d).unwrap().nlink(), 2);
    assert_eq!(std::fs::metadata(&fx.dir).unwrap().nlink(), 3);

    // Links: symbolic ones are followed by the kernel, hard ones counted.
    std::os::unix::fs::symlink("d/a", fx.path("s")).unwrap();
    assert_eq!(std::fs::read_link(fx.path("s")).unwrap(), Path::new("d/a"));
    assert_eq!(std::fs::read(fx.path("s")).unwrap(), b"data");
    std::fs::hard_link(&a, fx.path("h")).unwrap();
    assert_eq!(std::fs::metadata(&a).unwrap().nlink(), 2);
    assert_eq!(
        errno(std::fs::hard_link(&d, fx.path("dh"))),
        Some(libc::EPERM)
    );
    // Special files are inodes of their own kinds.
    let fifo = c_path(&fx.path("p"));
    // SAFETY: the path is NUL-terminated and outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    use std::os::unix::fs::FileTypeExt;
    let p = std::fs::symlink_metadata(fx.path("p")).unwrap();
    assert!(p.file_type().is_fifo(), "{:?}", p.file_type());
    assert_eq!(p.mode() & 0o7777 & !0o644, 0, "mode {:o}", p.mode());

    // Mode, owner and times are kept and shown.
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&a, Some(4242), Some(4343)).unwrap();
    let f = File::options().write(true).open(&a).unwrap();
    let then = std::time::SystemTime::UNIX_EPOCH + Duration::new(1_000_000_000, 123);
    f.set_modified(then).unwrap();
    drop(f);
    let m = std::fs::metadata(fx.path("h")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o600, 4242, 4343));
    assert_eq!(m.modified().unwrap(), then);

    // Renames: across directories; NOREPLACE refuses an existing target;
    // EXCHANGE swaps two names.
    let b = fx.path("b");
    assert_eq!(
        errno(renameat2(&a, &b, libc::RENAME_NOREPLACE)),
        Some(libc::EEXIST)
    );
    renameat2(&a, &b, libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(std::fs::read(&b).unwrap(), b"data");
    assert_eq!(std::fs::read(&a).unwrap(), b"other");
    renameat2(&a, &fx.path("c"), libc::RENAME_NOREPLACE).unwrap();
    std::fs::rename(fx.path("c"), &b).unwrap();
    assert_eq!(std::fs::read(&b).unwrap(), b"other");
    assert_eq!(
        errno(std::fs::rename(&d, d.join("under"))),
        Some(libc::EINVAL)
    );

    // Names and opens.
    let long = fx.path(&"n".repeat(256));
    assert_eq!(errno(File::create(long)), Some(libc::ENAMETOOLONG));
    assert_eq!(
        errno(OpenOptions::new().write(true).create_new(true).open(&b)),
        Some(libc::EEXIST)
    );
    assert_eq!(errno(File::open(fx.path("none"))), Some(libc::ENOENT));

    // fallocate: collapse and insert range are not supported.
    let f = File::options().write(true).open(&b).unwrap();
    assert_eq!(
        errno(fallocate(&f, libc::FALLOC_FL_COLLAPSE_RANGE, 0, 4096)),
        Some(libc::EOPNOTSUPP)
    );
    assert_eq!(
        errno(fallocate(&f, libc::FALLOC_FL_INSERT_RANGE, 0, 4096)),
        Some(libc::EOPNOTSUPP)
    );
    fallocate(&f, 0, 0, 1 << 20).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 1 << 20);
    drop(f);

    let c = c_path(&fx.dir);
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: the path is NUL-terminated and `st` is writable memory the
    // size of a statvfs, both alive for the call.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: statvfs returned 0 and filled it.
    let st = unsafe { st.assume_init() };
    assert_eq!((st.f_namemax, st.f_bsize), (255, 4096));
    assert!(st.f_bfree > 0 && st.f_bfree < st.f_blocks);
    assert!(st.f_bavail < st.f_bfree, "blocks held back for checkpoints");
    // Inodes: the root, d, s, p, the file named b and the one named h.
    assert_eq!(st.f_files - st.f_ffree, 6);

    assert!(server.stop().success());
    fx.fsck();
}

#[test]
fn a_removed_file_stays_readable_until_closed() {
    let Some(fx) = Fixture::new("unlinked") else {
        return;
    };
    let server = fx.mount();
    let p = fx.path("x");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all(&[7u8; 100_000]).unwrap();
    std::fs::remove_file(&p).unwrap();
    assert!(!p.exists());
    use std::os::unix::fs::MetadataExt;
    assert_eq!(f.metadata().unwrap().nlink(), 0, "fstat of a removed file");
    let mut back = vec![0u8; 100_000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back.iter().all(|&b| b == 7));
    f.write_all_at(b"more", 100_000).unwrap();
    f.sync_all().unwrap();
    assert_eq!(f.metadata().unwrap().len(), 100_004);
    let names: Vec<_> = std::fs::read_dir(&fx.dir).unwrap().collect();
    assert!(names.is_empty());
    drop(f);
    assert!(server.stop().success());
    fx.fsck();
}

#[test]
fn fsynced_files_survive_sigkill_and_sigterm_saves_everything() {
    let Some(fx) = Fixture::new("durable") else {
        return;
    };
    let server = fx.mount();
    let synced: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut f = File::create(fx.path("synced")).unwrap();
    f.write_all(&synced).unwrap();
    f.sync_data().unwrap();
    drop(f);
    let mut f = File::create(fx.path("renamed")).unwrap();
    f.write_all(b"named by rename").unwrap();
    f.sync_all().unwrap();
    drop(f);
    std::fs::rename(fx.path("renamed"), fx.path("moved")).unwrap();
    File::open(&fx.dir).unwrap().sync_all().unwrap();
    server.kill();

    let server = fx.mount();
    assert_eq!(std::fs::read(fx.path("synced")).unwrap(), synced);
    assert_eq!(std::fs::read(fx.path("moved")).unwrap(), b"named by rename");
    assert!(!fx.path("renamed").exists());
    // Written and never synced: SIGTERM syncs it before the server exits.
    std::fs::write(fx.path("unsynced"), b"kept by unmount").unwrap();
    assert!(server.stop().success());
    fx.fsck();

    let server = fx.mount();
    assert_eq!(
        std::fs::read(fx.path("unsynced")).unwrap(),
        b"kept by unmount"
    );
    assert!(server.stop().success());
}

#[test]
fn a_device_is_served_by_one_process_at_a_time() {
    let Some(fx) = Fixture::new("exclusive") else {
        return;
    };
    let server = fx.mount();
    let other = fx._scratch.path("other");
    std::fs::create_dir(&other).unwrap();
    let dir = other.to_str().unwrap();
    let (ok, _, err) = pollfs(&[
        "mount",
        "--foreground",
        "--wait-device",
        "1",
        &spec(&fx.image),
        dir,
    ]);
    assert!(
        !ok && err.contains("waiting up to 1 s")
            && err.contains("in use by another pollfs process"),
        "{err}"
    );
    let (ok, _, err) = pollfs(&["fsck", &spec(&fx.image)]);
    assert!(!ok && err.contains("in use"), "{err}");
    let (ok, _, err) = pollfs(&["mkfs", "--force", &spec(&fx.image)]);
    assert!(!ok && err.contains("in use"), "{err}");
    assert!(server.stop().success());
    fx.fsck();
}

#[test]
fn in_the_background_mount_returns_once_mounted_and_umount_ends_it() {
    let Some(fx) = Fixture::new("background") else {
        return;
    };
    let dir = fx.dir.to_str().unwrap();
    let (ok, out, err) = pollfs(&["mount", "--cache", "32m", &spec(&fx.image), dir]);
    assert!(ok, "{out}{err}");
    // If the test fails, the background server still ends: detached, with
    // nothing open, its session ends.
    struct Detach<'a>(&'a Path);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            lazy_unmount(self.0);
        }
    }
    let _detach = Detach(&fx.dir);
    assert!(is_mounted(&fx.dir), "mounted when the command returned");
    std::fs::write(fx.path("f"), b"in the background").unwrap();
    let c = c_path(&fx.dir);
    // Another test thread's child may hold a copy of a descriptor on the
    // mount for a moment (between its fork and its exec): EBUSY then.
    wait_for("umount", WAIT, || {
        // SAFETY: the path is NUL-terminated and outlives the call.
        let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
        let e = std::io::Error::last_os_error();
        assert!(
            rc == 0 || e.raw_os_error() == Some(libc::EBUSY),
            "umount: {e}"
        );
        rc == 0
    });
    // The server exits once it has checkpointed, and lets go of the
    // device then: fsck can lock it.
    wait_for("the server to finish", WAIT, || {
        pollfs(&["fsck", &spec(&fx.image)]).0
    });
    let server = fx.mount();
    assert_eq!(std::fs::read(fx.path("f")).unwrap(), b"in the background");
    assert!(server.stop().success());

    let missing = fx._scratch.path("missing");
    let (ok, _, err) = pollfs(&["mount", &spec(&missing), dir]);
    assert!(!ok && err.contains("missing"), "the parent reports: {err}");
}

#[test]
fn o_direct_and_appends_work() {
    let Some(fx) = Fixture::new("odirect") else {
        return;
    };
    let server = fx.mount();
    let p = fx.path("log");
    for line in ["one\n", "two\n", "three\n"] {
        let mut f = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&p)
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    }
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "one\ntwo\nthree\n");
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "one\ntwo\nthree\n");
    drop(f);
    assert!(server.stop().success());
}

#[test]
fn a_signal_while_a_file_is_open_detaches_and_the_server_ends_at_its_close() {
    let Some(fx) = Fixture::new("busy") else {
        return;
    };
    let mut server = fx.mount();
    let p = fx.path("open");
    std::fs::write(&p, b"still here").unwrap();
    let f = File::open(&p).unwrap();
    signal(&server.child, libc::SIGINT);
    wait_for("the detach", WAIT, || !is_mounted(&fx.dir));
    // Detached: the open file keeps working, the server keeps serving it.
    let mut back = [0u8; 10];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(&back, b"still here");
    assert!(server.child.try_wait().unwrap().is_none());
    drop(f);
    let mut status = None;
    wait_for("the server to end", WAIT, || {
        status = server.child.try_wait().unwrap();
        status.is_some()
    });
    assert!(status.unwrap().success());
    fx.fsck();
    let server = fx.mount();
    assert_eq!(std::fs::read(&p).unwrap(), b"still here");
    assert!(server.stop().success());
}

#[test]
fn a_filesystem_behind_an_nvme_tcp_target_mounts_and_keeps_what_was_synced() {
    use pollfs_driver::tcp::target::{TargetConfig, TestTarget};
    if !can_mount() {
        return;
    }
    let target = TestTarget::start(TargetConfig::default()).unwrap();
    let url = target.url(true, true);
    let (ok, _, err) = pollfs(&["mkfs", &url]);
    assert!(ok, "{err}");
    let scratch = Scratch::new("tcp");
    let dir = mount_point(&scratch);
    let serve = || serve(&url, &dir);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let server = serve();
    let mut f = File::create(dir.join("over-tcp")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    server.kill();
    let server = serve();
    assert_eq!(std::fs::read(dir.join("over-tcp")).unwrap(), data);
    assert!(server.stop().success());
    fsck_clean(&url);
}

#[test]
fn a_listings_dot_entries_carry_the_directory_and_its_parent() {
    use std::os::unix::fs::MetadataExt;
    let Some(fx) = Fixture::new("dots") else {
        return;
    };
    let server = fx.mount();
    std::fs::create_dir_all(fx.path("a/b")).unwrap();
    // `ls -fai` lists unsorted with inode numbers, dots included, as
    // getdents(2) returns them.
    let out = Command::new("ls")
        .arg("-fai")
        .arg(fx.path("a/b"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let ino_of = |name: &str| -> u64 {
        text.split_whitespace()
            .collect::<Vec<_>>()
            .chunks(2)
            .find(|c| c.get(1) == Some(&name))
            .unwrap_or_else(|| panic!("no {name} in {text}"))[0]
            .parse()
            .unwrap()
    };
    let meta = |p: &str| std::fs::metadata(fx.path(p)).unwrap().ino();
    assert_eq!(ino_of("."), meta("a/b"), "{text}");
    assert_eq!(ino_of(".."), meta("a"), "{text}");
    assert!(server.stop().success());
}

#[test]
fn a_mirror_mounts_keeps_both_legs_equal_and_is_closed_clean() {
    if !can_mount() {
        return;
    }
    let scratch = Scratch::new("mirror-mount");
    let (a, b) = (scratch.path("a"), scratch.path("b"));
    let dev = format!("mirror:(file:{},file:{})", a.display(), b.display());
    let (ok, _, err) = pollfs(&["mkfs", "--size", "64m", &dev]);
    assert!(ok, "{err}");
    let dir = mount_point(&scratch);
    let serve = || serve(&dev, &dir);
    let server = serve();
    // While mounted, the legs are the server's alone.
    let (ok, _, err) = pollfs(&["fsck", &spec(&a)]);
    assert!(!ok && err.contains("in use"), "{err}");
    let data: Vec<u8> = (0..500_000u32).map(|i| (i % 241) as u8).collect();
    std::fs::create_dir(dir.join("d")).unwrap();
    let mut f = File::create(dir.join("d/m")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert!(server.stop().success());
    let (ok, out, err) = pollfs(&["mirror", "status", &dev]);
    assert!(ok, "{err}");
    assert!(out.contains("clean"), "closed clean at unmount: {out}");
    assert_eq!(out.matches(": in sync").count(), 2, "{out}");
    // Each leg alone is the whole filesystem.
    for leg in [&a, &b] {
        fsck_clean(&spec(leg));
    }
    let server = serve();
    assert_eq!(std::fs::read(dir.join("d/m")).unwrap(), data);
    assert!(server.stop().success());
}

/// `sh -c SCRIPT` as uid and gid 65534 (nobody), with no other group:
/// (succeeded, stderr).
fn as_nobody(script: &str) -> (bool, String) {
    use std::os::unix::process::CommandExt;
    let out = Command::new("sh")
        .args(["-c", script])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn allow_other_lets_other_users_in_and_their_writes_drop_setuid() {
    use std::os::unix::fs::PermissionsExt;
    let Some(fx) = Fixture::new("others") else {
        return;
    };
    std::fs::set_permissions(fx._scratch.path(""), std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = fx.mount();
    std::fs::create_dir(fx.path("d")).unwrap();
    std::fs::set_permissions(fx.path("d"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let d = fx.path("d");
    let d = d.to_str().unwrap();
    let (ok, err) = as_nobody(&format!("ls {d}"));
    assert!(
        !ok && err.contains("Permission denied"),
        "without allow_other: {err}"
    );
    assert!(server.stop().success());

    let server = fx.mount_with(&["-o", "allow_other,noatime"]);
    let (ok, err) = as_nobody(&format!("echo mine > {d}/n && cat {d}/n"));
    assert!(ok, "{err}");
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(fx.path("d/n")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    // Root's file, 0644: nobody may read it, not write it.
    std::fs::write(fx.path("d/r"), b"root's").unwrap();
    std::fs::set_permissions(fx.path("d/r"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, _) = as_nobody(&format!("cat {d}/r >/dev/null"));
    assert!(ok);
    let (ok, err) = as_nobody(&format!("echo x >> {d}/r"));
    assert!(!ok && err.contains("Permission denied"), "{err}");

    // A write by a user without CAP_FSETID drops set-user-id, and
    // set-group-id where the group may execute or the writer is not in
    // the file's group; root's write keeps them.
    let f = fx.path("d/f");
    std::fs::write(&f, b"x").unwrap();
    let table = [
        (0o4777, 0o777),
        (0o6777, 0o777),
        (0o2767, 0o767),
        (0o2766, 0o2766),
    ];
    for (i, (before, after)) in table.into_iter().enumerate() {
        // The last: nobody is in the file's group.
        std::os::unix::fs::chown(&f, None, Some(if i == 3 { 65534 } else { 0 })).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(before)).unwrap();
        let (ok, err) = as_nobody(&format!("echo y >> {}", f.display()));
        assert!(ok, "{err}");
        assert_eq!(mode(&f), after, "{before:o} after another user's write");
    }
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o4777)).unwrap();
    OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"root")
        .unwrap();
    assert_eq!(mode(&f), 0o4777, "root's write keeps set-user-id");
    // Truncate by another user, and chown, drop them too.
    let (ok, err) = as_nobody(&format!("truncate -s 1 {}", f.display()));
    assert!(ok, "{err}");
    assert_eq!(mode(&f), 0o777);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o6755)).unwrap();
    std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
    assert_eq!(mode(&f), 0o755, "chown drops set-user-id and set-group-id");
    assert!(server.stop().success());

    // ro: the kernel refuses every change, and the files are there.
    let server = fx.mount_with(&["-o", "ro"]);
    assert_eq!(std::fs::read(fx.path("d/n")).unwrap(), b"mine\n");
    assert_eq!(
        errno(std::fs::write(fx.path("d/x"), b"")),
        Some(libc::EROFS)
    );
    assert!(server.stop().success());
    let (ok, _, err) = pollfs(&["mount", "-o", "relatime", &spec(&fx.image), d]);
    assert!(!ok && err.contains("noatime"), "{err}");
    fx.fsck();
}

#[test]
fn pollfs_umount_returns_once_durable_and_a_mount_right_after_works() {
    let Some(fx) = Fixture::new("umount") else {
        return;
    };
    let dir = fx.dir.to_str().unwrap();
    let img = spec(&fx.image);
    for round in 0..3u8 {
        let (ok, out, err) = pollfs(&["mount", "--cache", "32m", &img, dir]);
        assert!(ok, "{out}{err}");
        if round > 0 {
            let got = std::fs::read(fx.path(&format!("f{}", round - 1))).unwrap();
            assert_eq!(got, vec![round - 1; 100_000], "round {round}");
        }
        // Written, never synced.
        std::fs::write(fx.path(&format!("f{round}")), vec![round; 100_000]).unwrap();
        let (ok, out, err) = pollfs(&["umount", dir]);
        assert!(ok, "{out}{err}");
        assert!(!is_mounted(&fx.dir));
        // The server has checkpointed and exited: the device's lock is
        // free at once, and fsck finds the filesystem clean.
        fsck_clean(&img);
    }
    // A plain umount(2) returns before the server is done; the next mount
    // waits for it.
    let (ok, out, err) = pollfs(&["mount", "--cache", "32m", &img, dir]);
    assert!(ok, "{out}{err}");
    std::fs::write(fx.path("g"), b"after a plain umount").unwrap();
    sys_umount(&fx.dir);
    let server = fx.mount();
    assert_eq!(
        std::fs::read(fx.path("g")).unwrap(),
        b"after a plain umount"
    );
    assert!(server.stop().success());
    let (ok, _, err) = pollfs(&["umount", dir]);
    assert!(!ok && err.contains("not a pollfs mount"), "{err}");
}

fn sys_umount(dir: &Path) {
    let c = c_path(dir);
    wait_for("umount", WAIT, || {
        // SAFETY: the path is NUL-terminated and outlives the call.
        let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
        let e = std::io::Error::last_os_error();
        assert!(
            rc == 0 || e.raw_os_error() == Some(libc::EBUSY),
            "umount: {e}"
        );
        rc == 0
    });
}
