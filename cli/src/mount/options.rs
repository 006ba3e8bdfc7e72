//! `-o OPTIONS`: mount(8)'s comma-separated options, as an fstab line or
//! `mount -t fuse.pollfs` hands them to the `mount.fuse.pollfs` helper.
//!
//! Kernel flags (`ro`, `nosuid`, ...) go to mount(2); `allow_other` lets
//! every user in (the kernel checks each request against the inode's mode,
//! owner and group: `default_permissions` is always on); `cache=`,
//! `threads=`, `cache_mode=` and `uring=` set what `--cache`, `--threads`,
//! `--cache-mode` and `--uring` set; `log=LEVEL` filters the log on
//! stderr (as `POLLFS_LOG` does, and over it); the options that
//! only mount(8), systemd or fstab read are accepted and ignored. A later
//! option overrides an earlier one, as with mount(8).

use fuser::MountOption;

use super::error::{MountError, OptionError};

/// Where file data is cached between programs and pollfs (docs/design/mount.md,
/// "Cache modes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CacheMode {
    /// The kernel's page cache answers cached reads and gathers buffered
    /// writes (FUSE's writeback cache); fsync sends the dirty pages, then
    /// one pollfs sync.
    Kernel,
    /// Every read and write is a request to pollfs (`FOPEN_DIRECT_IO`):
    /// one copy of the data, in pollfs's cache.
    Direct,
}

impl CacheMode {
    /// The mode `--cache-mode` or `-o cache_mode=` names.
    pub fn parse(s: &str) -> Option<CacheMode> {
        match s {
            "kernel" => Some(CacheMode::Kernel),
            "direct" => Some(CacheMode::Direct),
            _ => None,
        }
    }
}

/// Whether requests come over io_uring (docs/design/mount.md, "FUSE over
/// io_uring").
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Uring {
    /// The ring where the kernel offers it, else `/dev/fuse`.
    Auto,
    /// The ring, or the mount fails.
    On,
    /// `/dev/fuse` only.
    Off,
}

impl Uring {
    /// The choice `--uring` or `-o uring=` names.
    pub fn parse(s: &str) -> Option<Uring> {
        match s {
            "auto" => Some(Uring::Auto),
            "on" => Some(Uring::On),
            "off" => Some(Uring::Off),
            _ => None,
        }
    }
}

/// What the options ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `ro`: the kernel refuses every change. (The engine still opens
    /// the device for writing: a log left by a crash is replayed, and the
    /// unmount writes a checkpoint.)
    pub read_only: bool,
    /// `allow_other`: users other than the one who mounted may use it.
    pub allow_other: bool,
    /// `suid`: set-user-id and set-group-id bits take effect on exec.
    pub suid: bool,
    /// `dev`: device nodes on the mount open their devices (`nodev`, the
    /// default: they do not).
    pub dev: bool,
    /// `remount`: change the flags of the mount already on the mountpoint
    /// (mount(8) hands `mount -o remount,...` to the helper) instead of
    /// mounting.
    pub remount: bool,
    /// `exec`: programs on the mount may run (`noexec`: not).
    pub exec: bool,
    /// `sync`: every write is synced before it returns.
    pub sync: bool,
    /// `dirsync`: every directory change is synced before it returns.
    pub dirsync: bool,
    /// `cache=SIZE`, overriding `--cache`.
    pub cache: Option<String>,
    /// `threads=N`, overriding `--threads`.
    pub threads: Option<usize>,
    /// `cache_mode=kernel|direct`, overriding `--cache-mode`.
    pub cache_mode: Option<CacheMode>,
    /// `uring=auto|on|off`, overriding `--uring`.
    pub uring: Option<Uring>,
    /// `log=FILTER`: which log lines go to stderr (`crate::log`).
    pub log: Option<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            read_only: false,
            allow_other: false,
            suid: false,
            dev: false,
            remount: false,
            exec: true,
            sync: false,
            dirsync: false,
            cache: None,
            threads: None,
            cache_mode: None,
            uring: None,
            log: None,
        }
    }
}

/// Options only mount(8), systemd or an fstab line read; the helper is
/// handed them too.
fn ignored(o: &str) -> bool {
    matches!(
        o,
        "defaults" | "auto" | "noauto" | "nofail" | "_netdev" | "nouser" | ""
    ) || o.starts_with("x-")
        || o.starts_with("comment=")
        || fuse_own(o)
}

/// The FUSE superblock's own options, which the mount sets itself and
/// mountinfo shows: mount(8) hands them back to the helper on a remount.
fn fuse_own(o: &str) -> bool {
    [
        "user_id=",
        "group_id=",
        "rootmode=",
        "max_read=",
        "blksize=",
    ]
    .iter()
    .any(|p| o.starts_with(p))
}

impl Options {
    /// Parses every `-o` argument in order.
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Options, MountError> {
        let mut o = Options::default();
        for opt in args.iter().flat_map(|a| a.as_ref().split(',')) {
            let bad = |why: OptionError| MountError::Option {
                opt: opt.to_string(),
                why,
            };
            match opt {
                "ro" => o.read_only = true,
                "rw" => o.read_only = false,
                "allow_other" => o.allow_other = true,
                // Always on: the kernel checks modes, owners and groups.
                "default_permissions" => {}
                "suid" => o.suid = true,
                "nosuid" => o.suid = false,
                "exec" => o.exec = true,
                "noexec" => o.exec = false,
                "dev" => o.dev = true,
                "nodev" => o.dev = false,
                "remount" => o.remount = true,
                // Always: reads record no access time.
                "noatime" => {}
                "sync" => o.sync = true,
                "async" => o.sync = false,
                "dirsync" => o.dirsync = true,
                "atime" | "relatime" | "strictatime" | "lazytime" => {
                    return Err(bad(OptionError::AccessTimes))
                }
                "allow_root" => return Err(bad(OptionError::AllowRoot)),
                "user" | "users" | "owner" | "group" => return Err(bad(OptionError::UserMount)),
                _ if ignored(opt) => {}
                _ => {
                    if let Some(v) = opt.strip_prefix("cache=") {
                        o.cache = Some(v.to_string());
                    } else if let Some(v) = opt.strip_prefix("threads=") {
                        o.threads = Some(v.parse().map_err(|_| bad(OptionError::Threads))?);
                    } else if let Some(v) = opt.strip_prefix("cache_mode=") {
                        o.cache_mode =
                            Some(CacheMode::parse(v).ok_or_else(|| bad(OptionError::CacheMode))?);
                    } else if let Some(v) = opt.strip_prefix("uring=") {
                        o.uring = Some(Uring::parse(v).ok_or_else(|| bad(OptionError::Uring))?);
                    } else if let Some(v) = opt.strip_prefix("log=") {
                        crate::log::check(v).map_err(|_| bad(OptionError::Log))?;
                        o.log = Some(v.to_string());
                    } else {
                        return Err(bad(OptionError::Unknown));
                    }
                }
            }
        }
        Ok(o)
    }

    /// The options mount(2) gets, after the source's name.
    pub fn mount_options(&self) -> Vec<MountOption> {
        let mut v = vec![
            // The type shows as `fuse.pollfs`: mount(8) and umount(8) find
            // the `mount.fuse.pollfs` and `umount.fuse.pollfs` helpers by it.
            MountOption::CUSTOM("subtype=pollfs".into()),
            MountOption::DefaultPermissions,
            if self.dev {
                MountOption::Dev
            } else {
                MountOption::NoDev
            },
            MountOption::NoAtime,
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
            if self.suid {
                MountOption::Suid
            } else {
                MountOption::NoSuid
            },
            if self.exec {
                MountOption::Exec
            } else {
                MountOption::NoExec
            },
        ];
        if self.sync {
            v.push(MountOption::Sync);
        }
        if self.dirsync {
            v.push(MountOption::DirSync);
        }
        v
    }

    /// The `MS_*` flags a remount gives the mount: the same kernel flags
    /// as [`Options::mount_options`], which a remount replaces whole.
    pub fn remount_flags(&self) -> libc::c_ulong {
        let set = |on: bool, flag: libc::c_ulong| if on { flag } else { 0 };
        libc::MS_NOATIME
            | set(self.read_only, libc::MS_RDONLY)
            | set(!self.suid, libc::MS_NOSUID)
            | set(!self.dev, libc::MS_NODEV)
            | set(!self.exec, libc::MS_NOEXEC)
            | set(self.sync, libc::MS_SYNCHRONOUS)
            | set(self.dirsync, libc::MS_DIRSYNC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_read_in_order_and_the_later_one_wins() {
        let o = Options::parse(&[
            "ro,allow_other,cache_mode=kernel",
            "rw,noexec,cache=64m,threads=2,cache_mode=direct,uring=on,uring=off",
        ])
        .unwrap();
        assert!(!o.read_only && o.allow_other && !o.exec);
        assert_eq!(o.uring, Some(Uring::Off));
        assert_eq!(o.cache_mode, Some(CacheMode::Direct));
        assert_eq!(o.cache.as_deref(), Some("64m"));
        assert_eq!(o.threads, Some(2));
        let o = Options::parse(&["defaults,noauto,nofail,_netdev,x-systemd.automount,ro"]).unwrap();
        assert!(o.read_only && !o.allow_other && !o.suid);
        assert_eq!(Options::parse::<&str>(&[]).unwrap(), Options::default());
        let o = Options::parse(&["log=warn,log=debug"]).unwrap();
        assert_eq!(o.log.as_deref(), Some("debug"));
        assert!(Options::parse(&["log=loud=very"]).is_err());
    }

    #[test]
    fn unknown_and_unsupported_options_are_refused_with_what_to_use() {
        let why = |opt: &str| match Options::parse(&[opt]) {
            Err(MountError::Option { why, .. }) => Some(why),
            _ => None,
        };
        assert_eq!(why("bogus"), Some(OptionError::Unknown));
        assert_eq!(why("relatime"), Some(OptionError::AccessTimes));
        assert_eq!(why("threads=x"), Some(OptionError::Threads));
        assert_eq!(why("cache_mode=both"), Some(OptionError::CacheMode));
        assert_eq!(why("uring=yes"), Some(OptionError::Uring));
        assert_eq!(why("allow_root"), Some(OptionError::AllowRoot));
        assert_eq!(why("user"), Some(OptionError::UserMount));
        // The message says what to use instead.
        let e = Options::parse(&["relatime"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "-o relatime: pollfs does not record access times on reads; use noatime (the default)"
        );
    }

    #[test]
    fn a_remount_replaces_every_kernel_flag() {
        // As mount(8) hands it over, with the superblock's options.
        let o = Options::parse(&["remount,ro,user_id=0,group_id=0,default_permissions"]).unwrap();
        assert!(o.remount && o.read_only);
        let f = o.remount_flags();
        assert_eq!(
            f,
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOATIME
        );
        let f = Options::parse(&["remount,rw,suid,dev,noexec"])
            .unwrap()
            .remount_flags();
        assert_eq!(f, libc::MS_NOEXEC | libc::MS_NOATIME);
        let m = Options::parse(&["dev"]).unwrap().mount_options();
        assert!(m.contains(&MountOption::Dev) && !m.contains(&MountOption::NoDev));
    }

    #[test]
    fn mount2_gets_the_type_flags_and_default_permissions() {
        let o = Options::parse(&["ro,suid"]).unwrap();
        let m = o.mount_options();
        assert!(m.contains(&MountOption::RO) && m.contains(&MountOption::Suid));
        assert!(m.contains(&MountOption::DefaultPermissions));
        assert!(m.contains(&MountOption::CUSTOM("subtype=pollfs".into())));
        let m = Options::default().mount_options();
        assert!(m.contains(&MountOption::RW) && m.contains(&MountOption::NoSuid));
    }
}
