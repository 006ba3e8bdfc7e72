//! Conveniences for hosted (`std`) users.

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

/// The default configuration for threads under an OS: a real clock for
/// device timeouts, and waiting threads yield their CPU (there may be more
/// threads than cores).
pub fn config() -> Config {
    Config {
        clock: monotonic_clock,
        idle: std::thread::yield_now,
        ..Config::default()
    }
}
