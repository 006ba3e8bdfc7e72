//! `pollfs` run as mount(8)'s and umount(8)'s helper for the
//! `fuse.pollfs` type: linked as `/sbin/mount.fuse.pollfs` (or
//! `/sbin/mount.pollfs`, for `-t pollfs`) and `/sbin/umount.fuse.pollfs`,
//! so that an fstab line such as
//!
//! ```text
//! file:/srv/pollfs.img  /srv/data  fuse.pollfs  allow_other,nofail  0 0
//! ```
//!
//! and `mount -t fuse.pollfs DEVICE DIR` mount, and `umount DIR` returns
//! only once the server has written its checkpoint.
//!
//! mount(8) calls `mount.TYPE SOURCE DIR [-sfnv] [-o OPTIONS] [-t TYPE]`;
//! umount(8) calls `umount.TYPE DIR [-flnrv] [-t TYPE]`. Each becomes the
//! `pollfs mount` or `pollfs umount` command line.

use std::ffi::OsString;
use std::path::Path;

/// The command line to parse: `args` itself, or, when the program was
/// called by a helper's name, the `pollfs` command it stands for.
pub fn args(args: Vec<OsString>) -> Vec<OsString> {
    let called = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let verb = match called {
        "mount.fuse.pollfs" | "mount.pollfs" => "mount",
        "umount.fuse.pollfs" | "umount.pollfs" => "umount",
        _ => return args,
    };
    let mut out: Vec<OsString> = vec!["pollfs".into(), verb.into()];
    let mut rest = args.into_iter().skip(1);
    let mut fake = false;
    while let Some(a) = rest.next() {
        match a.to_str() {
            Some("-o") => {
                if let Some(v) = rest.next() {
                    out.push("-o".into());
                    out.push(v);
                }
            }
            // The type (`-t fuse.pollfs`): known already.
            Some("-t") => {
                rest.next();
            }
            Some(flags) if flags.starts_with('-') && flags.len() > 1 => {
                for c in flags.chars().skip(1) {
                    match (verb, c) {
                        // mount -f: do everything but the mount.
                        ("mount", 'f') => fake = true,
                        ("umount", 'l') => out.push("--lazy".into()),
                        // -n (no mtab), -s (sloppy), -v (verbose), and
                        // umount's -f (force) and -r (remount read-only
                        // on failure): nothing to do.
                        _ => {}
                    }
                }
            }
            _ => out.push(a),
        }
    }
    if fake {
        return vec!["pollfs".into(), "--version".into()];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn mount8_and_umount8_helper_calls_become_pollfs_commands() {
        assert_eq!(
            args(strs(&[
                "/sbin/mount.fuse.pollfs",
                "file:/x.img",
                "/mnt",
                "-n",
                "-o",
                "rw,allow_other",
                "-t",
                "fuse.pollfs"
            ])),
            strs(&[
                "pollfs",
                "mount",
                "file:/x.img",
                "/mnt",
                "-o",
                "rw,allow_other"
            ])
        );
        assert_eq!(
            args(strs(&["umount.fuse.pollfs", "/mnt", "-nl"])),
            strs(&["pollfs", "umount", "/mnt", "--lazy"])
        );
        assert_eq!(
            args(strs(&["pollfs", "mount", "emu", "/m"])),
            strs(&["pollfs", "mount", "emu", "/m"])
        );
    }
}
