//! [`DeviceSpec`]: every device pollfs opens, named in one string.
//!
//! ```text
//! DEVICE := LEAF | mirror:(LEG,LEG[,LEG...]) | stripe:[CHUNK:](LEG,LEG[,LEG...])
//! LEAF   := emu | ram | file:PATH | vfio:DDDD:BB:DD.F | nvme-tcp://HOST:PORT/NQN[?OPTIONS]
//! LEG    := LEAF, with `\` before any `,` `(` `)` or `\` it contains
//! CHUNK  := a size, a multiple of 4 KiB (64k when left out)
//! ```
//!
//! The legs are split at the commas that are outside parentheses and not
//! escaped, so a leg's own syntax never matters:
//! `mirror:(file:/a,file:/b)`, `stripe:128k:(emu,emu,emu)`,
//! `mirror:(file:/data/x\,y,vfio:0000:01:00.0)`. A leaf given alone (not
//! as a leg) is taken as it is, with no escapes. A volume's legs are
//! single devices: volumes of volumes are refused here.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use pollfs_driver::tcp::address::AddressError;
use pollfs_driver::tcp::TcpAddress;

use crate::units::{parse_size, UnitError};

/// Chunk size of a stripe that names none.
pub const DEFAULT_CHUNK: u64 = 64 << 10;

/// The forms a device name takes, for messages.
pub const FORMS: &str = "emu, ram, file:PATH, vfio:PCI_ADDR, nvme-tcp://HOST:PORT/NQN, \
                         mirror:(DEV,DEV,...) or stripe:CHUNK:(DEV,DEV,...)";

/// A single device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leaf {
    /// An emulated NVMe controller over a namespace in this process's
    /// memory: new and empty each time it is opened.
    Emu,
    /// Memory, without a driver: new and empty each time.
    Ram,
    /// A file or block device through `pread`/`pwrite`.
    File(PathBuf),
    /// A controller bound to vfio-pci, by PCI address (`dddd:bb:dd.f`).
    Vfio(String),
    /// An NVMe/TCP subsystem.
    Tcp(Box<TcpAddress>),
}

impl Leaf {
    /// True if its blocks live in this process's memory (and are gone when
    /// it closes).
    pub fn in_memory(&self) -> bool {
        matches!(self, Leaf::Emu | Leaf::Ram)
    }

    /// True if the driver runs it (it has an NVMe controller).
    pub fn is_nvme(&self) -> bool {
        matches!(self, Leaf::Emu | Leaf::Vfio(_) | Leaf::Tcp(_))
    }

    fn parse(s: &str) -> Result<Leaf, SpecProblem> {
        match s {
            "" => Err(SpecProblem::Empty),
            "emu" => Ok(Leaf::Emu),
            "ram" => Ok(Leaf::Ram),
            _ => {
                if let Some(path) = s.strip_prefix("file:") {
                    if path.is_empty() {
                        return Err(SpecProblem::NoPath);
                    }
                    return Ok(Leaf::File(PathBuf::from(path)));
                }
                if let Some(addr) = s.strip_prefix("vfio:") {
                    if !valid_pci_address(addr) {
                        return Err(SpecProblem::PciAddress);
                    }
                    return Ok(Leaf::Vfio(addr.to_string()));
                }
                if TcpAddress::is_tcp(s) {
                    return TcpAddress::parse(s)
                        .map(|a| Leaf::Tcp(Box::new(a)))
                        .map_err(SpecProblem::Tcp);
                }
                Err(SpecProblem::Unknown)
            }
        }
    }
}

impl fmt::Display for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leaf::Emu => write!(f, "emu"),
            Leaf::Ram => write!(f, "ram"),
            Leaf::File(p) => write!(f, "file:{}", p.display()),
            Leaf::Vfio(a) => write!(f, "vfio:{a}"),
            Leaf::Tcp(a) => write!(f, "{a}"),
        }
    }
}

/// True if `addr` is a PCI address in the form sysfs uses,
/// `dddd:bb:dd.f` (hex digits).
pub fn valid_pci_address(addr: &str) -> bool {
    let b = addr.as_bytes();
    b.len() == 12
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b':',
            10 => *c == b'.',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A device name, parsed: a single device, or a volume of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// One device.
    One(Leaf),
    /// RAID-1 over the legs.
    Mirror(Vec<Leaf>),
    /// RAID-0 over the legs in chunks of `chunk` bytes.
    Stripe {
        /// Bytes per chunk, a multiple of 4 KiB.
        chunk: u64,
        /// The legs, in layout order.
        legs: Vec<Leaf>,
    },
}

impl DeviceSpec {
    /// Parses a device name.
    pub fn parse(s: &str) -> Result<DeviceSpec, SpecError> {
        parse(s).map_err(|problem| SpecError {
            // A secret typed into the name is not repeated.
            spec: pollfs_driver::tcp::address::redact(s).into_owned(),
            problem,
        })
    }

    /// The single devices it is made of (one for a single device).
    pub fn legs(&self) -> &[Leaf] {
        match self {
            DeviceSpec::One(leaf) => std::slice::from_ref(leaf),
            DeviceSpec::Mirror(legs) | DeviceSpec::Stripe { legs, .. } => legs,
        }
    }

    /// True for a mirror or a stripe.
    pub fn is_volume(&self) -> bool {
        !matches!(self, DeviceSpec::One(_))
    }

    /// True if every block lives in this process's memory: nothing is
    /// there before it opens, and nothing is kept after it closes.
    pub fn in_memory(&self) -> bool {
        self.legs().iter().all(Leaf::in_memory)
    }

    /// The first leg that lives in this process's memory, if any.
    pub fn memory_leg(&self) -> Option<&Leaf> {
        self.legs().iter().find(|l| l.in_memory())
    }
}

impl FromStr for DeviceSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<DeviceSpec, SpecError> {
        DeviceSpec::parse(s)
    }
}

/// Why a device name did not parse: the name and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// The name as given.
    pub spec: String,
    /// What is wrong with it.
    pub problem: SpecProblem,
}

/// What is wrong with a device name.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecProblem {
    /// An empty name.
    Empty,
    /// None of the forms.
    Unknown,
    /// `file:` with no path.
    NoPath,
    /// `vfio:` with something that is not a PCI address.
    PciAddress,
    /// An `nvme-tcp://` name that does not parse.
    Tcp(AddressError),
    /// A volume whose legs are not `(LEG,LEG,...)`.
    Parentheses,
    /// A `(` with no `)` or the reverse, inside the legs.
    Unbalanced,
    /// An empty leg.
    EmptyLeg,
    /// A `\` at the end of a leg.
    TrailingEscape,
    /// A mirror with fewer than two legs, a stripe with none.
    TooFewLegs {
        /// The fewest legs the kind takes.
        min: usize,
    },
    /// A stripe chunk that is not a size.
    ChunkSize(UnitError),
    /// A stripe chunk that is not a non-zero multiple of 4 KiB.
    ChunkAlign,
    /// A volume as a leg of a volume.
    Nested(String),
    /// A leg that is not a device.
    Leg {
        /// The leg as written.
        leg: String,
        /// What is wrong with it.
        problem: Box<SpecProblem>,
    },
}

impl fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecProblem::Empty => write!(f, "an empty device name: use {FORMS}"),
            SpecProblem::Unknown => write!(f, "unknown device: use {FORMS}"),
            SpecProblem::NoPath => write!(f, "no path after file:"),
            SpecProblem::PciAddress => {
                write!(f, "not a PCI address: use vfio:dddd:bb:dd.f (see `lspci -D`)")
            }
            SpecProblem::Tcp(e) => write!(f, "{e}"),
            SpecProblem::Parentheses => {
                write!(f, "expected the legs in parentheses: (LEG,LEG,...)")
            }
            SpecProblem::Unbalanced => write!(f, "a `(` or `)` without its pair in the legs"),
            SpecProblem::EmptyLeg => write!(f, "an empty leg"),
            SpecProblem::TrailingEscape => write!(f, "a `\\` at the end of a leg"),
            SpecProblem::TooFewLegs { min: 2 } => write!(f, "a mirror needs at least two legs"),
            SpecProblem::TooFewLegs { min } => write!(f, "needs at least {min} leg(s)"),
            SpecProblem::ChunkSize(e) => write!(f, "chunk size: {e}"),
            SpecProblem::ChunkAlign => write!(f, "the chunk size must be a multiple of 4k"),
            SpecProblem::Nested(leg) => write!(
                f,
                "leg {leg}: a leg of a volume must be a single device (volumes of volumes are not built)"
            ),
            SpecProblem::Leg { leg, problem } => write!(f, "leg {leg}: {problem}"),
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.spec.is_empty() {
            write!(f, "{}", self.problem)
        } else {
            write!(f, "{}: {}", self.spec, self.problem)
        }
    }
}

impl std::error::Error for SpecError {}

fn parse(s: &str) -> Result<DeviceSpec, SpecProblem> {
    if let Some(rest) = s.strip_prefix("mirror:") {
        let legs = legs(rest)?;
        if legs.len() < 2 {
            return Err(SpecProblem::TooFewLegs { min: 2 });
        }
        return Ok(DeviceSpec::Mirror(legs));
    }
    if let Some(rest) = s.strip_prefix("stripe:") {
        let (chunk, rest) = match rest.split_once(':') {
            Some((c, legs)) if !rest.starts_with('(') => {
                (parse_size(c).map_err(SpecProblem::ChunkSize)?, legs)
            }
            _ => (DEFAULT_CHUNK, rest),
        };
        if chunk == 0 || chunk % 4096 != 0 {
            return Err(SpecProblem::ChunkAlign);
        }
        let legs = legs(rest)?;
        if legs.is_empty() {
            return Err(SpecProblem::TooFewLegs { min: 1 });
        }
        return Ok(DeviceSpec::Stripe { chunk, legs });
    }
    Leaf::parse(s).map(DeviceSpec::One)
}

fn is_volume(s: &str) -> bool {
    s.starts_with("mirror:") || s.starts_with("stripe:")
}

/// Splits `(LEG,LEG,...)` into legs.
fn legs(s: &str) -> Result<Vec<Leaf>, SpecProblem> {
    let inner = s
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or(SpecProblem::Parentheses)?;
    let mut legs = Vec::new();
    let mut raw = String::new();
    let (mut depth, mut escaped) = (0u32, false);
    for c in inner.chars() {
        if escaped {
            raw.push('\\');
            raw.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '(' => {
                depth += 1;
                raw.push(c);
            }
            ')' => {
                depth = depth.checked_sub(1).ok_or(SpecProblem::Unbalanced)?;
                raw.push(c);
            }
            ',' if depth == 0 => legs.push(leg(&std::mem::take(&mut raw))?),
            _ => raw.push(c),
        }
    }
    if escaped {
        return Err(SpecProblem::TrailingEscape);
    }
    if depth != 0 {
        return Err(SpecProblem::Unbalanced);
    }
    legs.push(leg(&raw)?);
    Ok(legs)
}

/// One leg: a leaf with its escapes undone.
fn leg(raw: &str) -> Result<Leaf, SpecProblem> {
    if raw.is_empty() {
        return Err(SpecProblem::EmptyLeg);
    }
    if is_volume(raw) {
        return Err(SpecProblem::Nested(raw.to_string()));
    }
    let mut out = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            _ => out.push(c),
        }
    }
    Leaf::parse(&out).map_err(|problem| SpecProblem::Leg {
        leg: out,
        problem: Box::new(problem),
    })
}

fn escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if matches!(c, ',' | '(' | ')' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn write_legs(f: &mut fmt::Formatter<'_>, legs: &[Leaf]) -> fmt::Result {
    write!(f, "(")?;
    for (i, l) in legs.iter().enumerate() {
        if i > 0 {
            write!(f, ",")?;
        }
        write!(f, "{}", escape(&l.to_string()))?;
    }
    write!(f, ")")
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::One(leaf) => write!(f, "{leaf}"),
            DeviceSpec::Mirror(legs) => {
                write!(f, "mirror:")?;
                write_legs(f, legs)
            }
            DeviceSpec::Stripe { chunk, legs } => {
                write!(f, "stripe:{}k:", chunk >> 10)?;
                write_legs(f, legs)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(p: &str) -> Leaf {
        Leaf::File(PathBuf::from(p))
    }

    fn problem(s: &str) -> SpecProblem {
        DeviceSpec::parse(s).unwrap_err().problem
    }

    #[test]
    fn single_devices_parse() {
        assert_eq!(DeviceSpec::parse("emu"), Ok(DeviceSpec::One(Leaf::Emu)));
        assert_eq!(DeviceSpec::parse("ram"), Ok(DeviceSpec::One(Leaf::Ram)));
        assert_eq!("file:/tmp/x".parse(), Ok(DeviceSpec::One(file("/tmp/x"))));
        assert_eq!(
            DeviceSpec::parse("vfio:0000:01:00.0"),
            Ok(DeviceSpec::One(Leaf::Vfio("0000:01:00.0".into())))
        );
        let Ok(DeviceSpec::One(Leaf::Tcp(a))) =
            DeviceSpec::parse("nvme-tcp://127.0.0.1:4420/testnqn?hdgst=1")
        else {
            panic!("an nvme-tcp device");
        };
        assert_eq!(
            (a.port, a.subnqn.as_str(), a.header_digest),
            (4420, "testnqn", true)
        );
        // A leaf alone is verbatim.
        assert_eq!(
            DeviceSpec::parse("file:/odd,(name)"),
            Ok(DeviceSpec::One(file("/odd,(name)")))
        );
    }

    #[test]
    fn volumes_parse_with_any_leaf_as_a_leg() {
        assert_eq!(
            DeviceSpec::parse("mirror:(file:/a,file:/b)"),
            Ok(DeviceSpec::Mirror(vec![file("/a"), file("/b")]))
        );
        assert_eq!(
            DeviceSpec::parse("stripe:128k:(emu,ram,vfio:0000:01:00.0)"),
            Ok(DeviceSpec::Stripe {
                chunk: 128 << 10,
                legs: vec![Leaf::Emu, Leaf::Ram, Leaf::Vfio("0000:01:00.0".into())]
            })
        );
        assert_eq!(
            DeviceSpec::parse("stripe:(emu,emu)"),
            Ok(DeviceSpec::Stripe {
                chunk: DEFAULT_CHUNK,
                legs: vec![Leaf::Emu, Leaf::Emu]
            })
        );
        // The TCP form's colons, slashes, brackets and query strings are
        // a leg as they are.
        let tcp = "nvme-tcp://[::1]:4420/nqn.2014-08.org.nvmexpress:uuid:1?hdgst=1&ddgst=1";
        let spec = DeviceSpec::parse(&format!("mirror:({tcp},file:/x)")).unwrap();
        assert_eq!(spec.legs().len(), 2);
        assert!(matches!(spec.legs()[0], Leaf::Tcp(_)));
        assert_eq!(DeviceSpec::parse(&spec.to_string()), Ok(spec));
    }

    #[test]
    fn escapes_carry_commas_parentheses_and_backslashes_in_a_leg() {
        let s = r"mirror:(file:/d/a\,b,file:/d/\(c\)\\)";
        let spec = DeviceSpec::parse(s).unwrap();
        assert_eq!(
            spec,
            DeviceSpec::Mirror(vec![file("/d/a,b"), file(r"/d/(c)\")])
        );
        assert_eq!(spec.to_string(), s, "display gives the name back");
        assert_eq!(DeviceSpec::parse(&spec.to_string()), Ok(spec));
    }

    #[test]
    fn each_mistake_has_its_kind() {
        assert_eq!(problem(""), SpecProblem::Empty);
        assert_eq!(problem("tape"), SpecProblem::Unknown);
        assert_eq!(problem("/dev/nvme0n1"), SpecProblem::Unknown);
        assert_eq!(problem("file:"), SpecProblem::NoPath);
        assert_eq!(problem("vfio:01:00.0"), SpecProblem::PciAddress);
        assert_eq!(
            problem("nvme-tcp://127.0.0.1:4420"),
            SpecProblem::Tcp(AddressError::Nqn)
        );
        assert_eq!(
            problem("mirror:(file:/a)"),
            SpecProblem::TooFewLegs { min: 2 }
        );
        assert_eq!(problem("mirror:file:/a,file:/b"), SpecProblem::Parentheses);
        assert_eq!(problem("mirror:(file:/a,,file:/b)"), SpecProblem::EmptyLeg);
        assert_eq!(problem("mirror:(file:/a,file:/b"), SpecProblem::Parentheses);
        assert_eq!(problem("stripe:6k:(emu,emu)"), SpecProblem::ChunkAlign);
        assert!(matches!(
            problem("stripe:lots:(emu,emu)"),
            SpecProblem::ChunkSize(_)
        ));
        assert_eq!(
            problem(r"mirror:(file:/a,file:/b\)"),
            SpecProblem::TrailingEscape
        );
        assert_eq!(problem("mirror:(file:/a),(b)"), SpecProblem::Unbalanced);
        assert!(matches!(
            problem("mirror:(stripe:(emu,emu),emu)"),
            SpecProblem::Nested(_)
        ));
        assert!(matches!(
            problem("mirror:(emu,tape)"),
            SpecProblem::Leg { .. }
        ));
    }

    #[test]
    fn every_message_names_the_device_and_the_forms() {
        let e = DeviceSpec::parse("tape").unwrap_err().to_string();
        assert!(e.starts_with("tape: unknown device: use emu, ram"), "{e}");
        let e = DeviceSpec::parse("mirror:(emu,tape)")
            .unwrap_err()
            .to_string();
        assert!(e.contains("leg tape: unknown device"), "{e}");
    }

    #[test]
    fn pci_addresses() {
        assert!(valid_pci_address("0000:01:00.0"));
        assert!(valid_pci_address("0000:af:1f.7"));
        assert!(!valid_pci_address("01:00.0"));
        assert!(!valid_pci_address("0000:01:00:0"));
        assert!(!valid_pci_address("0000:01:00.0/../x"));
    }
}
