//! `pollfs identify DEVICE`: what bring-up learned about the controller and
//! its namespace, the facts a user checks before trusting a benchmark
//! (transfer limit, block format, queue counts).

use std::fmt::Write as _;

use clap::Args as ClapArgs;
use pollfs_core::dev::BlockDevice;
use pollfs_driver::controller::MPS_SHIFT;
use pollfs_driver::spec::regs::Vs;
use pollfs_driver::{ControllerInfo, DriverConfig, NvmeDevice, Transport};

use super::{with_device, DeviceJob, Target};
use crate::volume::{Open, VolumeJob};
use pollfs_core::volume::Mirror;

/// Arguments of `pollfs identify`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// `emu`, `vfio:<pci-address>`, `nvme-tcp://HOST:PORT/NQN`
    /// (`?hdgst=1&ddgst=1` for digests), or a volume of them
    /// (`stripe:CHUNK:(DEV,DEV,...)`, or `mirror:(DEV,DEV,...)` over legs
    /// that hold a mirror).
    pub device: Target,
}

/// Brings the device up and prints its identity.
pub fn run(args: &Args) -> Result<(), String> {
    let text = match &args.device {
        Target::Volume(volume) => {
            let what = volume.to_string();
            let open = Open {
                bytes: super::EMU_BYTES,
                ..Open::existing(crate::volume::admin::FRAMES)
            };
            crate::volume::run(volume, &what, &open, Describe::new(volume))?
        }
        target => with_device(target, DriverConfig::default(), 1, Identify)?,
    };
    print!("{text}");
    Ok(())
}

/// What a volume is made of: each leg's geometry, then the volume's (and a
/// mirror's state, read from its headers without writing anything).
struct Describe {
    text: String,
    leg: usize,
}

impl Describe {
    fn new(volume: &crate::volume::Volume) -> Describe {
        let kind = match volume.chunk {
            Some(chunk) => format!("stripe, chunks of {} KiB", chunk >> 10),
            None => "mirror".to_string(),
        };
        Describe {
            text: format!("{:<18} {kind}, {} legs\n", "volume:", volume.legs.len()),
            leg: 0,
        }
    }
}

fn geometry_line(g: pollfs_core::dev::Geometry) -> String {
    format!(
        "{} blocks of {} bytes, {} KiB per request, {} deep",
        g.capacity,
        g.block_size,
        g.max_transfer >> 10,
        g.queue_depth
    )
}

impl VolumeJob for Describe {
    type Output = String;
    fn check_leg<D: BlockDevice>(&mut self, leg: &D, what: &str) -> Result<(), String> {
        let key = format!("leg {}:", self.leg);
        let line = format!("{what}, {}", geometry_line(leg.geometry()));
        let _ = writeln!(self.text, "{key:<18} {line}");
        self.leg += 1;
        Ok(())
    }
    fn run<D: BlockDevice>(mut self, dev: D, _what: &str) -> Result<String, String> {
        let _ = writeln!(
            self.text,
            "{:<18} {}",
            "capacity:",
            geometry_line(dev.geometry())
        );
        Ok(self.text)
    }
    fn run_mirror<L: BlockDevice>(self, m: Mirror<L>, what: &str) -> Result<String, String> {
        let legs: Vec<_> = (0..m.legs().len()).map(|i| format!("leg {i}")).collect();
        let status = m.status();
        let mut text = self.run(m, what)?;
        let _ = writeln!(
            text,
            "{:<18} {:016x}, generation {}",
            "mirror id:", status.uuid, status.generation
        );
        for ((state, _), leg) in status.legs.iter().zip(legs) {
            let _ = writeln!(text, "{:<18} {state}", format!("{leg} state:"));
        }
        Ok(text)
    }
}

struct Identify;

impl DeviceJob for Identify {
    type Output = String;
    fn run<T: Transport>(self, dev: &NvmeDevice<T>) -> Result<String, String> {
        Ok(report(dev.controller().info(), dev.geometry().max_transfer))
    }
}

/// Identify strings are space-padded ASCII; anything else is shown escaped
/// rather than trusted.
fn ascii(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string().trim_end().to_string()
}

fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The report, one `key: value` line each, so scripts can grep it.
pub fn report(info: &ControllerInfo, max_transfer: u32) -> String {
    let id = &info.identify;
    let ns = &info.namespace;
    let (major, minor, tertiary) = Vs(info.version).version();
    let bytes = ns.nsze.saturating_mul(u64::from(ns.block_size));
    let mdts = if id.mdts == 0 {
        "no limit".to_string()
    } else {
        // From the identify data itself: the driver's own limit
        // (`mdts_bytes`) is capped at the largest request it was set up for.
        let bytes = id.max_transfer(info.cap.mps_min_shift(), u64::MAX);
        format!("{} KiB (2^{} minimum-size pages)", bytes >> 10, id.mdts)
    };
    let mut s = String::new();
    let mut line = |k: &str, v: String| {
        let _ = writeln!(s, "{k:<18} {v}");
    };
    line("model:", ascii(&id.model));
    line("serial:", ascii(&id.serial));
    line("firmware:", ascii(&id.firmware));
    line("pci vendor:", format!("{:#06x}", id.vid));
    line(
        "version:",
        format!("{major}.{minor}.{tertiary} (VS {:#010x})", info.version),
    );
    line("controller id:", id.cntlid.to_string());
    line("mdts:", mdts);
    line(
        "max transfer:",
        format!(
            "{} KiB per request, {} KiB per command",
            max_transfer >> 10,
            info.mdts_bytes >> 10
        ),
    );
    line("namespaces:", id.nn.to_string());
    line(
        "lba format:",
        format!("{} bytes, no metadata", ns.block_size),
    );
    line(
        "capacity:",
        format!(
            "{} blocks, {} bytes ({:.2} GiB)",
            ns.nsze,
            bytes,
            bytes as f64 / f64::from(1u32 << 30)
        ),
    );
    line("io queues:", format!("{} granted", info.io_queues));
    line(
        "queue entries:",
        format!(
            "{} per I/O queue (controller max {})",
            info.io_entries,
            info.cap.max_queue_entries()
        ),
    );
    line("page size:", format!("{} bytes", 1u32 << MPS_SHIFT));
    line(
        "write zeroes:",
        yes_no(id.supports_write_zeroes()).to_string(),
    );
    line("deallocate:", yes_no(id.supports_dsm()).to_string());
    line("write cache:", yes_no(id.vwc).to_string());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_on_emu_reports_the_emulated_controller() {
        let text = with_device(&Target::Emu, DriverConfig::default(), 1, Identify).unwrap();
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(text.contains("lba format: 4096 bytes"), "{text}");
        let cap = format!("capacity: {} blocks", super::super::EMU_BYTES / 4096);
        assert!(text.contains(&cap), "{text}");
        assert!(text.contains("version:"), "{text}");
        assert!(text.contains("io queues:"), "{text}");
    }

    #[test]
    fn identify_over_nvme_tcp_reports_the_target() {
        use pollfs_driver::tcp::target::{TargetConfig, TestTarget};
        let t = TestTarget::start(TargetConfig::default()).unwrap();
        let target: Target = t.url(false, true).parse().unwrap();
        let text = with_device(&target, DriverConfig::default(), 1, Identify).unwrap();
        assert!(text.contains("pollfs test target"), "{text}");
        assert!(text.contains("512 bytes, no metadata"), "{text}");
    }

    #[test]
    fn hostile_strings_are_escaped() {
        assert_eq!(ascii(b"QEMU\x1b[2J  "), "QEMU\\x1b[2J");
    }
}
