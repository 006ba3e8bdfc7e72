//! What the machine can give a run: memory, from `/proc/meminfo`, and free
//! space on a filesystem, from `statvfs`. The tools compare what a run
//! needs against these before allocating or creating anything, so an
//! impossible run is refused with a message instead of being killed.

use std::path::Path;

/// Memory figures from `/proc/meminfo`, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    /// `MemAvailable`: what can be allocated without swapping.
    pub available: u64,
    /// `MemTotal`.
    pub total: u64,
    /// Free 2 MiB (or other size) hugepages, which VFIO DMA memory can
    /// use and `MemAvailable` does not count.
    pub hugepages_free: u64,
}

/// This machine's memory, or `None` where `/proc/meminfo` cannot be read
/// (not Linux): then only the static limits apply.
pub fn memory() -> Option<Memory> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_meminfo(text: &str) -> Option<Memory> {
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let rest = line[name.len()..].trim_start().strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let n: u64 = words.next()?.parse().ok()?;
        Some(match words.next() {
            Some("kB") => n.saturating_mul(1024),
            _ => n,
        })
    };
    let total = field("MemTotal")?;
    Some(Memory {
        // Kernels before 3.14 have no MemAvailable; MemFree is the
        // conservative stand-in.
        available: field("MemAvailable").or_else(|| field("MemFree"))?,
        total,
        hugepages_free: field("HugePages_Free")
            .unwrap_or(0)
            .saturating_mul(field("Hugepagesize").unwrap_or(0)),
    })
}

/// Bytes an unprivileged writer can still put on the filesystem holding
/// `dir`, or `None` if that cannot be asked.
pub fn free_space(dir: &Path) -> Option<u64> {
    crate::sys::statvfs_available(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_read_in_bytes() {
        let text = "MemTotal:       24684096 kB\nMemFree:        23681620 kB\n\
                    MemAvailable:   24120128 kB\nHugePages_Free:       3\n\
                    Hugepagesize:       2048 kB\n";
        assert_eq!(
            parse_meminfo(text),
            Some(Memory {
                available: 24_120_128 * 1024,
                total: 24_684_096 * 1024,
                hugepages_free: 3 * 2048 * 1024,
            })
        );
        let old = "MemTotal: 100 kB\nMemFree: 50 kB\n";
        assert_eq!(parse_meminfo(old).map(|m| m.available), Some(50 * 1024));
        assert_eq!(parse_meminfo("nothing"), None);
    }

    #[test]
    fn free_space_is_known_for_the_temp_dir() {
        assert!(free_space(&std::env::temp_dir()).is_some());
    }
}
