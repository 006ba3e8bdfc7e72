//! `pollfs mirror` against a mirror another process has open: a mount
//! serves its control socket, and status, fail and rejoin go through it;
//! the socket refuses other users, a stale one is replaced, and with the
//! mount gone the same commands act on the headers. `replace` puts a new
//! device in place of a failed leg (offline) and refuses what it must.
//! The mount tests need root and /dev/fuse, and say they were skipped
//! (and pass) without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{can_mount, is_mounted, pollfs, wait_for, Scratch};

/// How long a mount or a bench's socket may take to appear.
const WAIT: Duration = Duration::from_secs(60);

/// A mirror of two file legs, with its own control directory.
struct Fixture {
    s: Scratch,
    legs: [PathBuf; 2],
    dev: String,
    run: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Fixture {
        let s = Scratch::new(name);
        let legs = [s.path("a"), s.path("b")];
        Fixture::on(s, legs)
    }

    /// A mirror of the files `legs`, made in `s`.
    fn on(s: Scratch, legs: [PathBuf; 2]) -> Fixture {
        let dev = format!(
            "mirror:(file:{},file:{})",
            legs[0].display(),
            legs[1].display()
        );
        let run = s.path("run");
        let (ok, _, err) = pollfs(&["mkfs", "--size", "16m", &dev]);
        assert!(ok, "{err}");
        Fixture { s, legs, dev, run }
    }

    fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_pollfs"));
        c.env("POLLFS_CONTROL_DIR", &self.run);
        c
    }

    /// `pollfs ARGS` with this fixture's control directory.
    fn pollfs(&self, args: &[&str]) -> (bool, String, String) {
        let out = self.command().args(args).output().unwrap();
        text(out)
    }

    /// `pollfs mount --foreground DEV MNT`, once mounted.
    fn mount(&self) -> Mount {
        self.mount_logging(None)
    }

    /// As [`mount`](Self::mount), its log (stderr, at `info`) going to
    /// `log` if given.
    fn mount_logging(&self, log: Option<&Path>) -> Mount {
        let dir = self.s.path("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        let mut command = self.command();
        command
            .args(["mount", "--foreground", "--cache", "8m", &self.dev])
            .arg(&dir)
            .stdin(Stdio::null());
        if let Some(log) = log {
            command
                .env("POLLFS_LOG", "info")
                .stderr(std::fs::File::create(log).unwrap());
        }
        let child = command.spawn().unwrap();
        let mut m = Mount { child, dir };
        wait_for("the mount", WAIT, || {
            assert!(m.child.try_wait().unwrap().is_none(), "mount failed");
            is_mounted(&m.dir)
        });
        m
    }

    /// The only mirror's socket in the control directory (a mount's own,
    /// `mount-MAJ:MIN.sock`, for `pollfs stat`, may be beside it).
    fn socket(&self) -> PathBuf {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&self.run)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                !p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("mount-")
            })
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        found.remove(0)
    }
}

fn text(out: Output) -> (bool, String, String) {
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The part of a leg file the mirror's data lives in.
fn data(path: &Path) -> Vec<u8> {
    let mut v = std::fs::read(path).unwrap();
    v.truncate(v.len() - 2 * 4096);
    v
}

struct Mount {
    child: Child,
    dir: PathBuf,
}

impl Mount {
    /// Unmounts and waits for the mount to exit cleanly.
    fn stop(mut self) {
        let c = std::ffi::CString::new(self.dir.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the mount exited with {status}");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let c = std::ffi::CString::new(self.dir.to_str().unwrap()).unwrap();
        // SAFETY: as in `stop`.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
fn a_mounted_mirror_is_administered_through_its_socket() {
    if !can_mount() {
        return;
    }
    let f = Fixture::new("live");
    // A socket left by a process that is gone: replaced, not an obstacle.
    std::fs::create_dir_all(&f.run).unwrap();
    let (ok, out, err) = f.pollfs(&["mirror", "status", &f.dev]);
    assert!(
        ok && !out.contains("(open, live)"),
        "offline while not mounted: {out}{err}"
    );
    let uuid = out.split("mirror ").nth(1).unwrap()[..16].to_string();
    let stale = f.run.join(format!("{uuid}.sock"));
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());

    let m = f.mount();
    let sock = f.socket();
    assert_eq!(sock, stale);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "owner only");
    let (ok, out, err) = f.pollfs(&["mirror", "status", &f.dev]);
    assert!(ok, "{err}");
    assert!(out.contains("(open, live)"), "{out}");
    assert_eq!(out.matches(": in sync").count(), 2, "{out}");

    let (ok, out, err) = f.pollfs(&["mirror", "fail", &f.dev, "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("leg 1") && out.contains(": failed"), "{out}");
    // `pollfs stat` of the mount shows the legs beside the filesystem's
    // figures.
    let (ok, out, err) = f.pollfs(&["stat", m.dir.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["mirror"]["legs"][0]["state"], "in_sync", "{v}");
    assert_eq!(v["mirror"]["legs"][1]["state"], "failed", "{v}");
    let (ok, out, err) = f.pollfs(&["stat", m.dir.to_str().unwrap()]);
    assert!(
        ok && out.contains("leg 1 ") && out.contains(": failed,"),
        "{out}{err}"
    );
    let (ok, _, err) = f.pollfs(&["mirror", "fail", &f.dev, "0"]);
    assert!(!ok && err.contains("no leg"), "the last leg stays: {err}");
    // Written while leg 1 is out: only leg 0 has it.
    let payload: Vec<u8> = (0..4 << 20)
        .map(|i: u32| (i * 7 + i / 4096) as u8)
        .collect();
    std::fs::write(m.dir.join("while-out"), &payload).unwrap();
    std::fs::File::open(m.dir.join("while-out"))
        .unwrap()
        .sync_all()
        .unwrap();
    let (ok, _, err) = f.pollfs(&["mirror", "replace", &f.dev, "1", "file:/nonexistent"]);
    assert!(!ok && err.contains("is open in another process"), "{err}");

    let (ok, out, err) = f.pollfs(&["mirror", "rejoin", &f.dev, "1"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("leg 1") && (out.contains("resyncing") || out.contains("stale")),
        "the rejoin returns at once, the copy under way: {out}"
    );
    let (ok, out, err) = f.pollfs(&["mirror", "rejoin", "--wait", &f.dev, "1"]);
    assert!(ok, "{err}");
    assert_eq!(out.matches(": in sync").count(), 2, "{out}");
    assert_eq!(std::fs::read(m.dir.join("while-out")).unwrap(), payload);
    // `--wait` on a leg in sync (its copy done) returns at once; a plain
    // rejoin of a leg in sync is still refused.
    let (ok, out, err) = f.pollfs(&["mirror", "rejoin", "--wait", &f.dev, "1"]);
    assert!(ok, "{err}");
    assert_eq!(out.matches(": in sync").count(), 2, "{out}");
    let (ok, _, err) = f.pollfs(&["mirror", "rejoin", &f.dev, "1"]);
    assert!(!ok && err.contains("leg 1 is in sync"), "{err}");

    m.stop();
    assert!(!sock.exists(), "the socket is removed at the unmount");
    let (ok, out, err) = f.pollfs(&["mirror", "status", &f.dev]);
    assert!(
        ok && out.contains("clean") && !out.contains("(open, live)"),
        "{out}{err}"
    );
    assert_eq!(out.matches(": in sync").count(), 2, "{out}");
    assert!(data(&f.legs[0]) == data(&f.legs[1]), "the legs agree");
    let (ok, out, err) = f.pollfs(&["fsck", &format!("file:{}", f.legs[1].display())]);
    assert!(ok && out.contains(" 0 problems"), "leg 1 alone: {out}{err}");
}

#[test]
fn another_user_is_refused_by_the_socket_and_by_the_server() {
    if !can_mount() {
        return;
    }
    let f = Fixture::new("peer");
    for p in [&f.legs[0], &f.legs[1]] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let m = f.mount();
    let sock = f.socket();
    let as_nobody = |args: &[&str]| {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_pollfs"))
            .args(args)
            .env("POLLFS_CONTROL_DIR", &f.run)
            .output()
            .unwrap();
        text(out)
    };
    let (ok, _, err) = as_nobody(&["mirror", "fail", &f.dev, "1"]);
    assert!(!ok && err.contains("permission denied"), "{err}");
    // With the socket opened to all, the server's own check refuses.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, _, err) = as_nobody(&["mirror", "fail", &f.dev, "1"]);
    assert!(
        !ok && err.contains("uid 65534 may not use this control socket"),
        "{err}"
    );
    let (ok, out, err) = f.pollfs(&["mirror", "status", &f.dev]);
    assert!(
        ok && out.matches(": in sync").count() == 2,
        "nothing changed: {out}{err}"
    );
    // The mount's statistics socket keeps the same rule, both ways.
    let dir = m.dir.to_str().unwrap();
    let (ok, _, err) = as_nobody(&["stat", dir]);
    assert!(!ok && err.contains("permission denied"), "{err}");
    let (ok, out, err) = f.pollfs(&["stat", dir]);
    assert!(
        ok && out.contains("operations"),
        "root is answered: {out}{err}"
    );
    let stats_socket = std::fs::read_dir(&f.run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("mount-")
        })
        .unwrap();
    std::fs::set_permissions(&stats_socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, _, err) = as_nobody(&["stat", dir]);
    assert!(
        !ok && err.contains("uid 65534 may not use this control socket"),
        "{err}"
    );
    m.stop();
}

#[test]
fn a_failed_leg_is_replaced_by_a_new_file_and_what_must_not_be_is_refused() {
    let f = Fixture::new("replace");
    let c = f.s.path("c");
    let (ok, _, err) = f.pollfs(&[
        "mirror",
        "replace",
        &f.dev,
        "1",
        &format!("file:{}", c.display()),
    ]);
    assert!(!ok && err.contains("leg 1 is in sync"), "{err}");
    assert!(err.contains("pollfs mirror fail"), "{err}");
    let (ok, _, err) = f.pollfs(&["mirror", "fail", &f.dev, "1"]);
    assert!(ok, "{err}");
    let a = format!("file:{}", f.legs[0].display());
    let (ok, _, err) = f.pollfs(&["mirror", "replace", &f.dev, "1", &a]);
    assert!(
        !ok && err.contains("is leg 0 of this mirror already"),
        "{err}"
    );
    let other = f.s.path("other");
    let (ok, _, err) = pollfs(&[
        "mkfs",
        "--size",
        "16m",
        &format!("file:{}", other.display()),
    ]);
    assert!(ok, "{err}");
    let (ok, _, err) = f.pollfs(&[
        "mirror",
        "replace",
        &f.dev,
        "1",
        &format!("file:{}", other.display()),
    ]);
    assert!(
        !ok && err.contains("holds a pollfs filesystem") && err.contains("another volume"),
        "{err}"
    );

    let (ok, out, err) = f.pollfs(&[
        "mirror",
        "replace",
        &f.dev,
        "1",
        &format!("file:{}", c.display()),
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("leg 1 is resynced"), "{err}");
    assert!(
        out.contains(&format!("leg 1 file:{}: in sync", c.display())),
        "{out}"
    );
    assert_eq!(
        std::fs::metadata(&c).unwrap().len(),
        16 << 20,
        "made at a leg's size"
    );
    assert!(data(&f.legs[0]) == data(&c), "the new leg holds the mirror");
    let replaced = format!("mirror:(file:{},file:{})", f.legs[0].display(), c.display());
    let (ok, out, err) = f.pollfs(&["fsck", &replaced]);
    assert!(ok && out.contains(" 0 problems"), "{out}{err}");
    // The old leg is no longer part of the mirror's story: it is stale.
    let (ok, out, err) = f.pollfs(&["mirror", "status", &replaced]);
    assert!(ok && out.matches(": in sync").count() == 2, "{out}{err}");
}

#[test]
fn a_bench_that_asks_serves_its_mirror_too() {
    let s = Scratch::new("bench-control");
    let run = s.path("run");
    let (a, b) = (s.path("a"), s.path("b"));
    let dev = format!("mirror:(file:{},file:{})", a.display(), b.display());
    let mut bench = Command::new(env!("CARGO_BIN_EXE_pollfs"))
        .env("POLLFS_CONTROL_DIR", &run)
        .args(["bench", "--control", "--device", &dev, "--rw", "randwrite"])
        .args(["--size", "4m", "--runtime", "6", "--fsync", "8"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let admin = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_pollfs"))
            .env("POLLFS_CONTROL_DIR", &run)
            .arg("mirror")
            .args(args)
            .arg(&dev)
            .output()
            .unwrap();
        text(out)
    };
    wait_for("the bench's socket", WAIT, || {
        assert!(bench.try_wait().unwrap().is_none(), "the bench ended early");
        let (ok, out, _) = admin(&["status"]);
        ok && out.contains("(open, live)")
    });
    let out = Command::new(env!("CARGO_BIN_EXE_pollfs"))
        .env("POLLFS_CONTROL_DIR", &run)
        .args(["mirror", "fail", &dev, "1"])
        .output()
        .unwrap();
    let (ok, out, err) = text(out);
    assert!(
        ok && out.contains("(open, live)") && out.contains(": failed"),
        "{out}{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pollfs"))
        .env("POLLFS_CONTROL_DIR", &run)
        .args(["mirror", "rejoin", "--wait", &dev, "1"])
        .output()
        .unwrap();
    let (ok, out, err) = text(out);
    assert!(ok && out.matches(": in sync").count() == 2, "{out}{err}");
    let end = bench.wait_with_output().unwrap();
    assert!(
        end.status.success(),
        "{}",
        String::from_utf8_lossy(&end.stderr)
    );
    assert!(
        std::fs::read_dir(&run).unwrap().next().is_none(),
        "socket removed"
    );
}

/// A tmpfs of `size` mounted at `dir` while it lives: a leg file on it
/// fails its writes (ENOSPC) once the tmpfs is full, as a dying device
/// would.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -t tmpfs on {}", dir.display());
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let c = std::ffi::CString::new(self.0.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Writes `bytes` bytes of `byte` to `path` and syncs them.
fn write_synced(path: &Path, bytes: usize, byte: u8) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&vec![byte; bytes]).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_leg_that_fails_counts_its_errors_in_stat_and_the_log_names_it() {
    if !can_mount() {
        return;
    }
    let s = Scratch::new("leg-fails");
    // Leg b lives on 3 MiB: the 16 MiB mirror's format fits, 6 MiB of
    // data does not.
    let small = Tmpfs::mount(s.path("small"), "3m");
    let legs = [s.path("a"), small.0.join("b")];
    let f = Fixture::on(s, legs.clone());
    let log = f.s.path("mount.log");
    let m = f.mount_logging(Some(&log));
    let mnt = m.dir.to_str().unwrap().to_string();
    let stat = || -> serde_json::Value {
        let (ok, out, err) = f.pollfs(&["stat", &mnt, "--json"]);
        assert!(ok, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let leg = |v: &serde_json::Value, i: u64, name: &str| -> u64 {
        let d = v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["role"] == "mirror_leg" && d["leg"] == i)
            .unwrap_or_else(|| panic!("no leg {i} in {v}"));
        d["counters"][name].as_u64().unwrap()
    };
    let before = stat();
    assert_eq!(leg(&before, 1, "errors"), 0, "{before}");
    // The data outgrows leg b: it fails, is dropped, and the writer goes
    // on on leg a.
    write_synced(&m.dir.join("big"), 6 << 20, 1);
    let failed = stat();
    assert!(leg(&failed, 1, "errors") > 0, "{failed}");
    assert_eq!(leg(&failed, 0, "errors"), 0, "{failed}");
    assert_eq!(failed["mirror"]["legs"][1]["state"], "failed", "{failed}");
    let b = format!("file:{}", legs[1].display());
    let names: Vec<&str> = failed["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [f.dev.as_str(), &format!("file:{}", legs[0].display()), &b]
    );
    // Leg a takes the later writes; the failed leg is sent none.
    write_synced(&m.dir.join("more"), 1 << 20, 2);
    let later = stat();
    assert!(
        leg(&later, 0, "write_bytes") >= leg(&failed, 0, "write_bytes") + (1 << 20),
        "{later}"
    );
    for name in ["writes", "errors"] {
        assert_eq!(
            leg(&later, 1, name),
            leg(&failed, 1, name),
            "{name}: {later}"
        );
    }
    m.stop();
    drop(small);
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("mirror: leg 1 failed"))
        .unwrap_or_else(|| panic!("no line about the leg failing in {text}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains(&format!("device=\"{b}\"")), "{line}");
    let errors = format!("WARN mirror leg 1 ({b}): ");
    assert!(
        text.lines()
            .any(|l| l.contains(&errors) && l.contains("commands failed")),
        "no line counting the leg's failed commands in {text}"
    );
}
