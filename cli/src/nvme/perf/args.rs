//! `pollfs perf`'s options, spelled as spdk_nvme_perf spells them, and
//! their checks: what is accepted becomes a [`Settings`].

use std::time::Duration;

use anyhow::anyhow;
use clap::{ArgAction, Args as ClapArgs, ValueEnum};
use pollfs_core::units::PAGE_SIZE;
use pollfs_device::DeviceSpec as Target;

/// The access pattern (spdk_nvme_perf's `-w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniformly random reads.
    Randread,
    /// Uniformly random writes.
    Randwrite,
    /// Sequential reads and writes, -M percent reads.
    Rw,
    /// Random reads and writes, -M percent reads.
    Randrw,
}

impl Pattern {
    /// True if offsets are drawn at random.
    pub fn random(self) -> bool {
        matches!(
            self,
            Pattern::Randread | Pattern::Randwrite | Pattern::Randrw
        )
    }
    /// Percent reads, or `None` for the mixes (which take `-M`).
    fn fixed_mix(self) -> Option<u8> {
        match self {
            Pattern::Read | Pattern::Randread => Some(100),
            Pattern::Write | Pattern::Randwrite => Some(0),
            Pattern::Rw | Pattern::Randrw => None,
        }
    }
}

/// Arguments of `pollfs perf`.
#[derive(ClapArgs, Debug, Clone)]
#[command(after_help = "The short options are spdk_nvme_perf's: \
`pollfs perf emu -q 32 -o 4k -w randrw -M 70 -t 10`. Sizes take k, m, g (powers of 1024); times \
are seconds or a number with a unit (500ms, 2m). Latency is always tracked: the table gives \
average, min and max per queue pair, the summary gives percentiles; -LL adds the histogram.")]
pub struct Args {
    /// `emu`, `vfio:<pci-address>` or `nvme-tcp://HOST:PORT/NQN`
    /// (`?hdgst=1&ddgst=1` for digests), a stripe or mirror of them, or
    /// give -r.
    #[arg(value_parser = crate::nvme::parse_target)]
    pub device: Option<Target>,
    /// The controller as spdk_nvme_perf names it: 'trtype:PCIe
    /// traddr:0000:01:00.0' or 'trtype:TCP adrfam:IPv4 traddr:HOST
    /// trsvcid:4420 subnqn:NQN'.
    #[arg(short = 'r', long = "transport")]
    pub transport: Option<String>,
    /// Commands kept in flight per queue pair.
    #[arg(short = 'q', long = "io-depth", default_value_t = 32)]
    pub io_depth: u32,
    /// Bytes per command, a multiple of 4 KiB (4k, 64k, 1m).
    #[arg(short = 'o', long = "io-size", default_value = "4096")]
    pub io_size: String,
    /// Access pattern.
    #[arg(short = 'w', long = "io-pattern", value_enum, default_value_t = Pattern::Randread)]
    pub io_pattern: Pattern,
    /// Percent reads, 0 to 100: required for rw and randrw, refused for
    /// the others.
    #[arg(short = 'M', long = "rwmixread")]
    pub rwmixread: Option<u8>,
    /// How long to measure (seconds, or with a unit).
    #[arg(short = 't', long = "time", default_value = "5")]
    pub time: String,
    /// Run this long before measuring.
    #[arg(short = 'a', long = "warmup-time")]
    pub warmup_time: Option<String>,
    /// Stop each worker after this many commands (at least -q; not with
    /// -a).
    #[arg(short = 'd', long = "number-ios")]
    pub number_ios: Option<u64>,
    /// Workers: one thread per set bit, pinned to that CPU (hex, 0x3 is
    /// CPUs 0 and 1). Without it, one worker that is not pinned.
    #[arg(short = 'c', long = "core-mask")]
    pub core_mask: Option<String>,
    /// Queue pairs per worker, polled in turn by its thread.
    #[arg(short = 'P', long = "num-qpairs", default_value_t = 1)]
    pub num_qpairs: u32,
    /// Latency tracking is always on; -LL also prints the histogram.
    #[arg(short = 'L', long = "enable-sw-latency-tracking", action = ArgAction::Count)]
    pub latency_level: u8,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A run, checked.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Settings {
    #[serde(skip)]
    pub target: Target,
    pub io_depth: u32,
    pub io_size: u32,
    pub io_pattern: Pattern,
    /// Percent reads.
    pub rwmixread: u8,
    #[serde(serialize_with = "secs")]
    pub time: Duration,
    #[serde(serialize_with = "secs")]
    pub warmup: Duration,
    /// Commands per worker (0: no limit).
    pub number_ios: u64,
    /// Each worker's CPU, if pinned.
    pub cores: Vec<Option<usize>>,
    pub qpairs_per_worker: u32,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The controller an SPDK transport ID names: `trtype:PCIe traddr:ADDR`,
/// or `trtype:TCP adrfam:IPv4 traddr:HOST trsvcid:PORT subnqn:NQN` (the
/// port defaults to 4420, as in spdk_nvme_perf).
fn parse_transport(trid: &str) -> anyhow::Result<Target> {
    let mut fields: [Option<&str>; 5] = [None; 5];
    const KEYS: [&str; 5] = ["trtype", "traddr", "adrfam", "trsvcid", "subnqn"];
    for pair in trid.split_whitespace() {
        let slot = pair.split_once(':').and_then(|(k, v)| {
            KEYS.iter()
                .position(|n| k.eq_ignore_ascii_case(n))
                .map(|i| (i, v))
        });
        match slot {
            Some((i, v)) => fields[i] = Some(v),
            None => {
                return Err(anyhow!(
                    "-r '{trid}': '{pair}' is not a key:value pair pollfs takes ({})",
                    KEYS.join(", ")
                ))
            }
        }
    }
    let [trtype, traddr, adrfam, trsvcid, subnqn] = fields;
    match (trtype, traddr) {
        (Some(t), Some(a)) if t.eq_ignore_ascii_case("pcie") => {
            if adrfam.or(trsvcid).or(subnqn).is_some() {
                return Err(anyhow!("-r '{trid}': PCIe takes only trtype and traddr"));
            }
            Ok(format!("vfio:{a}").parse()?)
        }
        (Some(t), Some(host)) if t.eq_ignore_ascii_case("tcp") => {
            if let Some(f) = adrfam.filter(|f| !f.eq_ignore_ascii_case("ipv4") && !f.eq_ignore_ascii_case("ipv6")) {
                return Err(anyhow!("-r '{trid}': adrfam {f}: pollfs takes IPv4 or IPv6"));
            }
            let nqn = subnqn.ok_or_else(|| anyhow!("-r '{trid}': give the subsystem as subnqn:NQN"))?;
            let host = if host.contains(':') { format!("[{host}]") } else { host.to_string() };
            Ok(format!("nvme-tcp://{host}:{}/{nqn}", trsvcid.unwrap_or("4420")).parse()?)
        }
        (Some(t), _) if !t.eq_ignore_ascii_case("pcie") && !t.eq_ignore_ascii_case("tcp") => Err(anyhow!(
            "-r '{trid}': trtype {t}: pollfs perf drives PCIe (through VFIO) and TCP controllers"
        )),
        _ => Err(anyhow!(
            "-r '{trid}': give trtype:PCIe traddr:dddd:bb:dd.f or trtype:TCP traddr:HOST trsvcid:PORT subnqn:NQN"
        )),
    }
}

/// CPUs of a hex core mask (`0x5` is CPUs 0 and 2).
fn parse_mask(mask: &str) -> anyhow::Result<Vec<usize>> {
    let digits = mask
        .strip_prefix("0x")
        .or_else(|| mask.strip_prefix("0X"))
        .unwrap_or(mask);
    let bits = u128::from_str_radix(digits, 16)
        .map_err(|_| anyhow!("-c {mask}: not a hex core mask (0x3 is CPUs 0 and 1)"))?;
    if bits == 0 {
        return Err(anyhow!("-c {mask}: no CPU in the mask"));
    }
    Ok((0..128).filter(|b| bits >> b & 1 == 1).collect())
}

impl Args {
    /// Checks the options as spdk_nvme_perf does, and refuses what it
    /// would only warn about.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let target = match (&self.device, &self.transport) {
            (Some(_), Some(_)) => return Err(anyhow!("give a DEVICE or -r, not both")),
            (Some(t), None) => t.clone(),
            (None, Some(trid)) => parse_transport(trid)?,
            (None, None) => return Err(anyhow!("give a DEVICE (emu or vfio:ADDR) or -r")),
        };
        let io_size = crate::units::parse_size(&self.io_size)
            .map_err(|e| anyhow!("-o {}: {e}", e.input()))?;
        let io_size = u32::try_from(io_size)
            .ok()
            .filter(|&s| s > 0 && s as usize % PAGE_SIZE == 0)
            .ok_or_else(|| anyhow!("-o {}: a non-zero multiple of 4096 bytes", self.io_size))?;
        let time =
            crate::units::parse_time(&self.time).map_err(|e| anyhow!("-t {}: {e}", e.input()))?;
        if time.is_zero() {
            return Err(anyhow!("-t: must be more than 0"));
        }
        let warmup = match &self.warmup_time {
            Some(t) => crate::units::parse_time(t).map_err(|e| anyhow!("-a {}: {e}", e.input()))?,
            None => Duration::ZERO,
        };
        if self.io_depth == 0 || self.num_qpairs == 0 {
            return Err(anyhow!("-q and -P must be at least 1"));
        }
        let rwmixread = match (self.io_pattern.fixed_mix(), self.rwmixread) {
            (Some(_), Some(m)) => {
                return Err(anyhow!(
                    "-M {m}: -M (--rwmixread) is for -w rw and randrw only"
                ))
            }
            (Some(fixed), None) => fixed,
            (None, Some(m)) if m <= 100 => m,
            (None, Some(m)) => return Err(anyhow!("-M {m}: a percentage, 0 to 100")),
            (None, None) => {
                return Err(anyhow!(
                    "-w rw and randrw need -M (percent reads, 0 to 100)"
                ))
            }
        };
        let number_ios = self.number_ios.unwrap_or(0);
        if number_ios > 0 && !warmup.is_zero() {
            return Err(anyhow!(
                "-d (--number-ios) with -a (--warmup-time) is not supported"
            ));
        }
        if number_ios > 0 && number_ios < u64::from(self.io_depth) {
            return Err(anyhow!("-d {number_ios}: less than -q {}", self.io_depth));
        }
        let cores = match &self.core_mask {
            Some(mask) => parse_mask(mask)?.into_iter().map(Some).collect(),
            None => vec![None],
        };
        Ok(Settings {
            target,
            io_depth: self.io_depth,
            io_size,
            io_pattern: self.io_pattern,
            rwmixread,
            time,
            warmup,
            number_ios,
            cores,
            qpairs_per_worker: self.num_qpairs,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use pollfs_device::Leaf;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse_argv(argv: &[&str]) -> anyhow::Result<Settings> {
        Cli::try_parse_from(std::iter::once(&"perf").chain(argv))
            .map_err(|e| anyhow!("{e}"))?
            .args
            .settings()
    }

    /// Splits at spaces, except inside the `-r` value after a `-r`.
    fn parse(line: &str) -> anyhow::Result<Settings> {
        let (head, trid) = match line.split_once("-r ") {
            Some((h, t)) => (h, Some(t)),
            None => (line, None),
        };
        let mut argv: Vec<&str> = head.split_whitespace().collect();
        if let Some(t) = trid {
            argv.extend(["-r", t]);
        }
        parse_argv(&argv)
    }

    #[test]
    fn spdk_perfs_short_flags_are_understood() {
        let s = parse("emu -q 64 -o 4k -w randrw -M 70 -t 10 -P 2 -c 0x5 -L").unwrap();
        assert_eq!(s.target, Target::One(Leaf::Emu));
        assert_eq!(
            (s.io_depth, s.io_size, s.io_pattern),
            (64, 4096, Pattern::Randrw)
        );
        assert_eq!((s.rwmixread, s.time), (70, Duration::from_secs(10)));
        assert_eq!((s.qpairs_per_worker, s.cores), (2, vec![Some(0), Some(2)]));
        let s = parse("emu --io-depth 8 --io-size 1m --io-pattern write --time 500ms").unwrap();
        assert_eq!((s.io_depth, s.io_size, s.rwmixread), (8, 1 << 20, 0));
        assert_eq!(s.time, Duration::from_millis(500));
        let s = parse("emu -w rw -M 0 -d 100 -q 4").unwrap();
        assert_eq!(
            (s.io_pattern, s.rwmixread, s.number_ios),
            (Pattern::Rw, 0, 100)
        );
        let s = parse("emu -a 1 -w read").unwrap();
        assert_eq!(
            (s.warmup, s.rwmixread, s.cores.clone()),
            (Duration::from_secs(1), 100, vec![None])
        );
        let s = parse("-r trtype:PCIe traddr:0000:01:00.0").unwrap();
        assert_eq!(s.target, Target::One(Leaf::Vfio("0000:01:00.0".into())));
        let s =
            parse("-r trtype:TCP adrfam:IPv4 traddr:10.0.0.2 trsvcid:4421 subnqn:nqn.x").unwrap();
        assert_eq!(s.target, "nvme-tcp://10.0.0.2:4421/nqn.x".parse().unwrap());
        let s = parse("-r trtype:tcp traddr:::1 subnqn:nqn.x").unwrap();
        assert_eq!(s.target, "nvme-tcp://[::1]:4420/nqn.x".parse().unwrap());
        assert_eq!(parse("emu -LL").unwrap().io_depth, 32);
    }

    #[test]
    fn what_spdk_perf_refuses_or_ignores_is_an_error() {
        for (line, want) in [
            ("emu -w randrw", "need -M"),
            ("emu -w rw -M 101", "-M 101: a percentage"),
            (
                "emu -w read -M 50",
                "-M 50: -M (--rwmixread) is for -w rw and randrw only",
            ),
            ("emu -o 1000", "-o 1000: a non-zero multiple of 4096"),
            ("emu -o 0", "-o 0"),
            ("emu -o lots", "-o lots: not a size"),
            ("emu -t 0", "-t: must be more than 0"),
            ("emu -t soon", "-t soon: not a time"),
            ("emu -a x", "-a x: not a time"),
            ("emu -q 0", "-q and -P must be at least 1"),
            ("emu -P 0", "-q and -P must be at least 1"),
            ("emu -d 10 -a 1", "-d (--number-ios) with -a"),
            ("emu -d 4 -q 8", "-d 4: less than -q 8"),
            ("emu -c 0", "-c 0: no CPU"),
            ("emu -c zz", "-c zz: not a hex core mask"),
            ("emu -w sideways", "invalid value 'sideways'"),
            ("", "give a DEVICE"),
            ("emu -r trtype:PCIe traddr:0000:01:00.0", "not both"),
            (
                "-r trtype:RDMA traddr:10.0.0.1",
                "PCIe (through VFIO) and TCP",
            ),
            (
                "-r trtype:TCP traddr:127.0.0.1",
                "give the subsystem as subnqn",
            ),
            (
                "-r trtype:TCP adrfam:AF_UNIX traddr:x subnqn:n",
                "pollfs takes IPv4 or IPv6",
            ),
            ("-r traddr:0000:01:00.0", "give trtype:PCIe"),
            ("-r trtype:PCIe traddr:01:00.0", "not a PCI address"),
            (
                "-r trtype:PCIe traddr:0000:01:00.0 subnqn:x",
                "PCIe takes only trtype and traddr",
            ),
            (
                "-r trtype:PCIe hostnqn:x",
                "'hostnqn:x' is not a key:value pair pollfs takes",
            ),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: wanted '{want}' in: {e}");
        }
    }
}
