//! `pollfs umount MOUNTPOINT`: unmounts, then returns once the server has
//! synced everything and written its checkpoint, as a local filesystem's
//! umount does.
//!
//! A FUSE mount's umount(2) does not wait for its server: the kernel
//! sends FUSE_DESTROY and waits for the answer only for a `fuseblk` mount
//! (one on a block device), and the FUSE library answers it before the
//! filesystem hears of it. So each server registers itself: it holds an
//! exclusive `flock` on `/run/pollfs/MAJ:MIN.lock` (the mount's device
//! number in /proc/self/mountinfo) from the moment it is mounted until it
//! exits, and writes there whether it finished cleanly. `pollfs umount`
//! opens that file before it unmounts, then waits for the lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::sys;

use super::error::MountError;

/// Where servers register.
pub(super) const REGISTRY: &str = "/run/pollfs";

/// What a server writes in its registration when it has synced and
/// written its checkpoint.
const CLEAN: &str = "clean";

/// The filesystem type mountinfo shows for a pollfs mount.
pub const FSTYPE: &str = "fuse.pollfs";

/// Options of `pollfs umount`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The mount point.
    mountpoint: PathBuf,
    /// Detach now (umount -l): the mount goes away once nothing on it is
    /// in use, and this does not wait for the server.
    #[arg(long, short)]
    lazy: bool,
}

/// The device number ("MAJ:MIN") of the newest pollfs mount on `dir`.
pub(crate) fn mount_id(dir: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    newest_mount(&info, dir)
}

/// In mountinfo text, the device number of the last pollfs mount on `dir`
/// (a later mount on the same directory hides the earlier ones).
fn newest_mount(info: &str, dir: &Path) -> Option<String> {
    let dir = dir.to_str()?;
    info.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        let fstype = right.split(' ').next()?;
        (fstype == FSTYPE && unescape(fields.get(4)?) == dir).then(|| fields[2].to_string())
    })
}

/// The device number and mount point of the newest pollfs mount of
/// `source` (the device as the mount names it, which /proc/mounts shows).
pub(crate) fn mount_of_source(source: &str) -> Option<(String, PathBuf)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    newest_mount_of_source(&info, source)
}

/// In mountinfo text, the device number and mount point of the last
/// pollfs mount of `source`.
fn newest_mount_of_source(info: &str, source: &str) -> Option<(String, PathBuf)> {
    info.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        let mut right = right.split(' ');
        let fstype = right.next()?;
        let theirs = unescape(right.next()?);
        if fstype != FSTYPE || theirs != source {
            return None;
        }
        Some((fields.get(2)?.to_string(), unescape(fields.get(4)?).into()))
    })
}

/// mountinfo writes a space, tab, newline and backslash in a path as
/// `\040`, `\011`, `\012` and `\134`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn registration(id: &str) -> PathBuf {
    Path::new(REGISTRY).join(format!("{id}.lock"))
}

/// A server's registration: held from its mount to its exit.
#[derive(Debug)]
pub struct Registration {
    file: File,
    path: PathBuf,
}

impl Registration {
    /// Registers the server of the pollfs mount on `dir` (just mounted).
    pub fn new(dir: &Path) -> Result<Registration, MountError> {
        let id = mount_id(dir).ok_or_else(|| MountError::NotInMountinfo(dir.to_path_buf()))?;
        std::fs::create_dir_all(REGISTRY).map_err(|source| MountError::Path {
            path: REGISTRY.into(),
            source,
        })?;
        let path = registration(&id);
        // A file left by an earlier mount with the same number (a server
        // that was killed) goes; whoever still waits on it keeps its copy.
        let _ = std::fs::remove_file(&path);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| MountError::Path {
                path: path.clone(),
                source,
            })?;
        pollfs_device::lock::try_flock(&file, true).map_err(|source| MountError::Path {
            path: path.clone(),
            source,
        })?;
        let _ = writeln!(file, "pid {}", std::process::id());
        Ok(Registration { file, path })
    }

    /// Says how the server ended, and takes the file's name away (a
    /// waiter holds it open); the lock goes when the process exits.
    pub fn finish(mut self, outcome: &Result<(), MountError>) {
        let said = match outcome {
            Ok(()) => CLEAN.to_string(),
            Err(e) => format!("failed: {e}"),
        };
        let _ = self.file.seek(SeekFrom::Start(0));
        let _ = self.file.set_len(0);
        let _ = self.file.write_all(said.as_bytes());
        let ours = self.file.metadata().map(|m| m.ino()).ok();
        let named = std::fs::metadata(&self.path).map(|m| m.ino()).ok();
        if ours.is_some() && ours == named {
            let _ = std::fs::remove_file(&self.path);
        }
        // Held (and so locked) until the process exits.
        std::mem::forget(self.file);
    }
}

/// `pollfs umount`.
pub fn run(args: &Args) -> Result<(), MountError> {
    let shown = || args.mountpoint.clone();
    let dir = args
        .mountpoint
        .canonicalize()
        .map_err(|source| MountError::Path {
            path: shown(),
            source,
        })?;
    let id = mount_id(&dir).ok_or_else(|| MountError::NotPollfs(shown()))?;
    // Opened before the unmount, so the server cannot finish unseen.
    let registered = File::open(registration(&id)).ok();
    if let Err(e) = sys::unmount(&dir, args.lazy) {
        return Err(if e.raw_os_error() == Some(libc::EBUSY) {
            MountError::Busy(shown())
        } else {
            MountError::CannotUnmount {
                dir: shown(),
                source: e,
            }
        });
    }
    if args.lazy {
        return Ok(());
    }
    let Some(mut file) = registered else {
        return Err(MountError::NotRegistered(shown()));
    };
    if pollfs_device::lock::try_flock(&file, false).is_err() {
        pollfs_device::lock::flock_wait(&file, false).map_err(|source| MountError::Wait {
            dir: shown(),
            source,
        })?;
    }
    let mut said = String::new();
    let _ = file.read_to_string(&mut said);
    if said == CLEAN {
        Ok(())
    } else if let Some(e) = said.strip_prefix("failed: ") {
        Err(MountError::ServerFailed {
            dir: shown(),
            said: e.to_string(),
        })
    } else {
        Err(MountError::NoCheckpoint(shown()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_pollfs_mount_on_a_directory_is_found_by_its_escaped_path() {
        let info = "\
22 1 0:21 / /proc rw - proc proc rw
40 22 0:50 / /tmp/a\\040b rw,nosuid - fuse.pollfs file:/x rw
41 22 0:51 / /tmp/c rw - fuse other rw
42 40 0:52 / /tmp/a\\040b rw,nosuid - fuse.pollfs file:/y rw
";
        assert_eq!(
            newest_mount(info, Path::new("/tmp/a b")).as_deref(),
            Some("0:52")
        );
        assert_eq!(newest_mount(info, Path::new("/tmp/c")), None);
        assert_eq!(
            newest_mount_of_source(info, "file:/x"),
            Some(("0:50".to_string(), PathBuf::from("/tmp/a b")))
        );
        assert_eq!(newest_mount_of_source(info, "fuse"), None);
        assert_eq!(unescape("a\\011\\134z\\9"), "a\t\\z\\9");
    }
}
