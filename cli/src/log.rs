//! The log on stderr: `tracing` events with a level, filtered by
//! `POLLFS_LOG` (`RUST_LOG`'s syntax: `debug`, `pollfs_device=debug,warn`)
//! or a mount's `-o log=LEVEL`, which wins over it; `info` otherwise. A
//! background mount's stderr is /dev/null once it is mounted; run it in
//! the foreground (as a systemd unit does) to keep the log, which
//! journald then takes with its levels.
//!
//! What is logged: mount (what recovery replayed), unmount, checkpoints,
//! device and background errors (`watch`, from the engine's counters,
//! not from the data path), mirror state changes, and the control
//! socket's requests. No line is written per read, write or sync.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The variable that filters the log.
pub const VARIABLE: &str = "POLLFS_LOG";

/// The filter when neither the variable nor an option names one.
const DEFAULT: &str = "info";

/// Added unless the filter names `fuser`: the FUSE library logs every
/// request at debug (a line on the data path) and, at warn, an unmount
/// of a mount the kernel has already let go; its errors stay.
const FUSER: &str = "fuser=error";

/// Says why `filter` is not one, if it is not.
pub fn check(filter: &str) -> Result<(), tracing_subscriber::filter::ParseError> {
    EnvFilter::try_new(filter).map(drop)
}

/// Sends log events to stderr, filtered by `option` (a mount's `-o
/// log=`), else by `POLLFS_LOG`, else at `info`. A variable that does not
/// parse is said once and the default used: a typo must not stop a mount.
pub fn init(option: Option<&str>) {
    let from_env = std::env::var(VARIABLE).ok();
    let wanted = option.or(from_env.as_deref()).unwrap_or(DEFAULT);
    let mut filter = EnvFilter::try_new(wanted).unwrap_or_else(|e| {
        eprintln!("pollfs: {VARIABLE}={wanted}: not a log filter ({e}); logging at {DEFAULT}");
        EnvFilter::new(DEFAULT)
    });
    if !wanted.contains("fuser") {
        if let Ok(quiet) = FUSER.parse() {
            filter = filter.add_directive(quiet);
        }
    }
    // A second call (none is made) would find a subscriber in place: the
    // first one stays.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
