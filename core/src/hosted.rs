//! Conveniences for hosted (`std`) users: clocks and a configuration for
//! threads under an OS. What needs a thread of its own (the driver of the
//! log's background steps, the timer of hybrid polling under an async
//! runtime) is not here: the engine crate starts no thread, and
//! `pollfs_hosted::config` adds both.

use std::sync::OnceLock;
use std::time::Instant;

use crate::units::Nanos;
use crate::Config;

/// Nanoseconds since the first call, from the OS's monotonic clock.
pub fn monotonic_clock() -> Nanos {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = START.get_or_init(Instant::now);
    Nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// Nanoseconds since the Unix epoch, from the system clock (0 before it).
pub fn wall_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The default configuration for threads under an OS: a real clock for
/// device timeouts, and waiting threads yield their CPU (there may be more
/// threads than cores). It names no driver of the log's background steps
/// ([`Config::background`]) and keeps the default `park` (a future waiting
/// for the device under an async runtime is woken at once): both need a
/// thread, which the engine crate does not start; `pollfs_hosted::config`
/// adds them.
pub fn config() -> Config {
    Config {
        clock: monotonic_clock,
        idle: std::thread::yield_now,
        wall_clock,
        ..Config::default()
    }
}
