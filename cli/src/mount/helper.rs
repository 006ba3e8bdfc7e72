//! `pollfs` run as mount(8)'s helper for the `fuse.pollfs` type: linked
//! as `/sbin/mount.fuse.pollfs` (or `/sbin/mount.pollfs`, for `-t
//! pollfs`), so that an fstab line such as
//!
//! ```text
//! file:/srv/pollfs.img  /srv/data  fuse.pollfs  allow_other,nofail  0 0
//! ```
//!
//! and `mount -t fuse.pollfs DEVICE DIR` mount.
//!
//! mount(8) calls `mount.TYPE SOURCE DIR [-sfnv] [-o OPTIONS] [-t TYPE]`,
//! which becomes `pollfs mount SOURCE DIR [-o OPTIONS]`. (umount(8) has no
//! such way in: as root it reads a FUSE mount's type from statfs, "fuse",
//! and calls umount(2) itself unless /run/mount/utab names the mount; so
//! `pollfs umount` is the unmount that waits.)

use std::ffi::OsString;
use std::path::Path;

use clap::{Arg, ArgAction};

/// The helper's name for `-t pollfs`.
pub const NAME: &str = "mount.pollfs";

/// The helper's name for `-t fuse.pollfs` (fstab's type).
pub const FSTAB_NAME: &str = "mount.fuse.pollfs";

/// The helper's command line as mount(8) gives it, for its manual page:
/// `mount`'s (`pollfs mount`'s) device, mount point and `-o`, and the
/// options of mount(8)'s helpers that [`args`] reads.
pub fn command(mount: &clap::Command) -> clap::Command {
    let kept = mount
        .get_arguments()
        .filter(|a| matches!(a.get_id().as_str(), "device" | "mountpoint" | "options"))
        .cloned();
    let flag = |id: &'static str, short: char, help: &'static str| {
        Arg::new(id)
            .short(short)
            .action(ArgAction::SetTrue)
            .help(help)
    };
    clap::Command::new(NAME)
        .version(env!("CARGO_PKG_VERSION"))
        // mount(8) passes neither; `args` drops them.
        .disable_help_flag(true)
        .disable_version_flag(true)
        .about("mount(8)'s helper for pollfs filesystems")
        .long_about(format!(
            "mount(8)'s helper for pollfs filesystems: `pollfs` linked as \
             /sbin/{FSTAB_NAME} (for `-t fuse.pollfs` and fstab lines of that \
             type) or /sbin/{NAME} (for `-t pollfs`). `{NAME} DEVICE DIR -o \
             OPTIONS` runs `pollfs mount DEVICE DIR -o OPTIONS`; see \
             pollfs-mount(8). An fstab line: `file:/srv/pollfs.img /srv/data \
             fuse.pollfs allow_other,nofail 0 0`. `pollfs umount DIR` is the \
             unmount that waits until everything is durable (umount(8) does \
             not call a helper for FUSE mounts)."
        ))
        .args(kept)
        .arg(flag(
            "fake",
            'f',
            "Fake: do everything but the mount (only prints the version)",
        ))
        .arg(flag("no_mtab", 'n', "Ignored (no /etc/mtab is written)"))
        .arg(flag(
            "sloppy",
            's',
            "Ignored (sloppy: unknown mount options are still refused)",
        ))
        .arg(flag("verbose", 'v', "Ignored (verbose)"))
        .arg(
            Arg::new("type")
                .short('t')
                .value_name("TYPE")
                .help("Ignored: the type mount(8) passes (fuse.pollfs or pollfs)"),
        )
}

/// The command line to parse: `args` itself, or, when the program was
/// called by a helper's name, the `pollfs` command it stands for.
pub fn args(args: Vec<OsString>) -> Vec<OsString> {
    let called = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    if called != NAME && called != FSTAB_NAME {
        return args;
    }
    let mut out: Vec<OsString> = vec!["pollfs".into(), "mount".into()];
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
                // -f: do everything but the mount; -n (no mtab), -s
                // (sloppy), -v (verbose): nothing to do.
                fake |= flags.contains('f');
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
    use clap::CommandFactory;

    fn strs(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn mount8_helper_calls_become_pollfs_mount() {
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
            args(strs(&["mount.pollfs", "emu", "/mnt", "-fv"])),
            strs(&["pollfs", "--version"])
        );
        assert_eq!(
            args(strs(&["pollfs", "mount", "emu", "/m"])),
            strs(&["pollfs", "mount", "emu", "/m"])
        );
    }

    /// The page's options are the ones `args` reads: each flag is dropped,
    /// `-t` with its value, and `-o` passed on.
    #[test]
    fn the_page_describes_what_args_reads() {
        let cli = crate::Cli::command();
        let mount = cli.find_subcommand("mount").unwrap();
        let page = command(mount);
        let mut shorts = Vec::new();
        for arg in page.get_arguments() {
            let Some(short) = arg.get_short() else {
                continue;
            };
            shorts.push(short);
            let flag = format!("-{short}");
            let mut call = vec!["mount.pollfs", "emu", "/m", flag.as_str()];
            let out = match short {
                'o' => {
                    call.push("ro");
                    vec!["pollfs", "mount", "emu", "/m", "-o", "ro"]
                }
                't' => {
                    call.push("fuse.pollfs");
                    vec!["pollfs", "mount", "emu", "/m"]
                }
                'f' => vec!["pollfs", "--version"],
                _ => vec!["pollfs", "mount", "emu", "/m"],
            };
            assert_eq!(args(strs(&call)), strs(&out), "{flag}");
        }
        shorts.sort_unstable();
        assert_eq!(shorts, ['f', 'n', 'o', 's', 't', 'v']);
        let positionals: Vec<_> = page
            .get_positionals()
            .map(|a| a.get_id().as_str())
            .collect();
        assert_eq!(positionals, ["device", "mountpoint"]);
    }
}
