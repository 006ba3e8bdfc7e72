//! `pollfs identify DEVICE`: what bring-up learned about the controller and
//! its namespace, the facts a user checks before trusting a benchmark
//! (transfer limit, block format, queue counts).

use std::fmt::Write as _;

use clap::Args as ClapArgs;
use pollfs_core::dev::BlockDevice;
use pollfs_core::volume::{Mirror, Stripe};
use pollfs_device::{Access, DeviceJob, DeviceSpec, OpenOptions};
use pollfs_driver::controller::MPS_SHIFT;
use pollfs_driver::spec::regs::Vs;
use pollfs_driver::{ControllerInfo, NvmeDevice, Transport};

/// Arguments of `pollfs identify`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// `emu`, `vfio:<pci-address>`, `nvme-tcp://HOST:PORT/NQN`
    /// (`?hdgst=1&ddgst=1` for digests), or a volume of them
    /// (`stripe:CHUNK:(DEV,DEV,...)`, or `mirror:(DEV,DEV,...)` over legs
    /// that hold a mirror).
    #[arg(value_parser = super::parse_target)]
    pub device: DeviceSpec,
}

/// Brings the device up and prints its identity.
pub fn run(args: &Args) -> anyhow::Result<()> {
    print!("{}", describe(&args.device)?);
    Ok(())
}

/// What `spec` is: a controller's identity, or what a volume is made of.
/// Nothing is written (a mirror is opened read-only).
pub fn describe(spec: &DeviceSpec) -> anyhow::Result<String> {
    let frames = if spec.is_volume() {
        crate::mirror::FRAMES
    } else {
        1
    };
    let options = OpenOptions {
        size: super::EMU_BYTES,
        ..OpenOptions::new(Access::Read, frames)
    };
    pollfs_device::run(spec, &options, Describe::new(spec))
}

/// A controller's identity; for a volume, each leg's geometry, then the
/// volume's (and a mirror's state, read from its headers).
struct Describe<'a> {
    spec: &'a DeviceSpec,
    text: String,
}

impl Describe<'_> {
    fn new(spec: &DeviceSpec) -> Describe<'_> {
        let kind = match spec {
            DeviceSpec::Stripe { chunk, .. } => format!("stripe, chunks of {} KiB", chunk >> 10),
            DeviceSpec::Mirror(_) => "mirror".to_string(),
            DeviceSpec::One(_) => String::new(),
        };
        let text = if spec.is_volume() {
            format!("{:<18} {kind}, {} legs\n", "volume:", spec.legs().len())
        } else {
            String::new()
        };
        Describe { spec, text }
    }

    fn legs<D: BlockDevice>(&mut self, legs: &[D]) {
        for (i, (leg, leaf)) in legs.iter().zip(self.spec.legs()).enumerate() {
            let key = format!("leg {i}:");
            let line = format!("{leaf}, {}", geometry_line(leg.geometry()));
            let _ = writeln!(self.text, "{key:<18} {line}");
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

impl DeviceJob for Describe<'_> {
    type Output = String;
    type Error = anyhow::Error;
    fn run<D: BlockDevice>(mut self, dev: D, _what: &str) -> anyhow::Result<String> {
        let _ = writeln!(
            self.text,
            "{:<18} {}",
            "capacity:",
            geometry_line(dev.geometry())
        );
        Ok(self.text)
    }
    fn run_stripe<L: BlockDevice>(mut self, s: Stripe<L>, what: &str) -> anyhow::Result<String> {
        self.legs(s.legs());
        self.run(s, what)
    }
    fn run_mirror<L: BlockDevice>(mut self, m: Mirror<L>, what: &str) -> anyhow::Result<String> {
        self.legs(m.legs());
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
    fn run_nvme<T: Transport>(self, dev: NvmeDevice<T>, _what: &str) -> anyhow::Result<String> {
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
        let text = describe(&DeviceSpec::One(pollfs_device::Leaf::Emu)).unwrap();
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
        let text = describe(&t.url(false, true).parse().unwrap()).unwrap();
        assert!(text.contains("pollfs test target"), "{text}");
        assert!(text.contains("512 bytes, no metadata"), "{text}");
    }

    #[test]
    fn hostile_strings_are_escaped() {
        assert_eq!(ascii(b"QEMU\x1b[2J  "), "QEMU\\x1b[2J");
    }
}
