//! Driver tunables.

/// Tunables. Times are in the caller's clock units (nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverConfig {
    /// Namespace to use.
    pub nsid: u32,
    /// Admin queue entries (2..=4096).
    pub admin_entries: u16,
    /// Entries per I/O queue (clamped to CAP.MQES + 1); one fewer commands
    /// can be in flight.
    pub io_entries: u16,
    /// I/O queues to ask the controller for.
    pub max_io_queues: u16,
    /// Largest request the engine may send, in bytes (a multiple of 4 KiB);
    /// requests beyond MDTS are split. `None`: MDTS, capped at 1 MiB.
    pub max_transfer: Option<u32>,
    /// An I/O command still outstanding this long after its first poll is
    /// aborted.
    pub command_timeout: u64,
    /// An aborted command still outstanding this long triggers a reset.
    pub abort_timeout: u64,
    /// Deadline for each admin command.
    pub admin_timeout: u64,
    /// How often a queue with commands in flight reads CSTS for CFS.
    pub health_interval: u64,
    /// Resubmissions allowed per command (status without DNR, or reset).
    pub max_retries: u8,
    /// Consecutive resets without a successful I/O before giving up.
    pub max_resets: u32,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            nsid: 1,
            admin_entries: 32,
            io_entries: 256,
            max_io_queues: 64,
            max_transfer: None,
            command_timeout: 5_000_000_000,
            abort_timeout: 1_000_000_000,
            admin_timeout: 5_000_000_000,
            health_interval: 100_000_000,
            max_retries: 2,
            max_resets: 3,
        }
    }
}
