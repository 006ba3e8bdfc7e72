//! Helpers shared by the command tests: run the built `pollfs`, a
//! scratch directory that is removed however the test ends, and what the
//! mount tests ask of the system (may we mount, is it mounted, wait).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Runs `pollfs ARGS`: (succeeded, stdout, stderr).
pub fn pollfs(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pollfs"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh directory under the system's temporary directory.
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// A directory unique to this process and `name`.
    pub fn new(name: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pollfs-cli-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }
    /// A path inside the directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
    /// Whether the directory holds anything at all.
    pub fn is_empty(&self) -> bool {
        std::fs::read_dir(&self.dir).unwrap().next().is_none()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `file:PATH`.
pub fn spec(path: &Path) -> String {
    format!("file:{}", path.display())
}

/// Writes a `len`-byte file of zeros with each `(offset, bytes)` patched in.
pub fn image(path: &Path, len: usize, patches: &[(usize, &[u8])]) {
    let mut data = vec![0u8; len];
    for (offset, bytes) in patches {
        data[*offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    std::fs::write(path, data).unwrap();
}

/// Whether mounts can be made here (root and /dev/fuse); says so when not,
/// and the mount tests then pass without mounting.
pub fn can_mount() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let ok = root && Path::new("/dev/fuse").exists();
    if !ok {
        eprintln!("skipped: mounting needs root and /dev/fuse");
    }
    ok
}

/// Whether a pollfs mount sits on `dir`.
pub fn is_mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(dir) && l.contains(" - fuse.pollfs "))
}

/// Polls `done` until it holds; fails the test, naming `what`, after
/// `limit`.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
