//! NVMe over Fabrics commands (NVMe-oF 1.1, chapter 3): Connect (3.3),
//! Property Get (3.5) and Property Set (3.6), and the 1024-byte Connect
//! data. A fabric controller has no registers the host can reach; it is
//! enabled, checked and shut down through properties instead.
//!
//! A Fabrics command has opcode 7Fh and its command type (FCTYPE) in byte
//! 4, where other commands keep the namespace id.

use super::command::SubmissionEntry;
use super::completion::CompletionEntry;

/// The opcode of every Fabrics command.
pub const FABRICS_OPCODE: u8 = 0x7f;

/// Fabrics command types (NVMe-oF 1.1, chapter 3).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send (NVMe Base 2.0, 6.2).
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive (NVMe Base 2.0, 6.3).
    pub const AUTH_RECEIVE: u8 = 0x06;
}

/// Connect attributes (CATTR, command byte 46).
pub mod cattr {
    /// Bit 2: the host asks the controller not to report SQ head updates
    /// (SQ flow control disabled); on NVMe/TCP this lets the controller
    /// elide the response capsule of a successful read (the SUCCESS flag
    /// of C2HData, NVMe/TCP 1.0, 3.3.2.1).
    pub const SQ_FLOW_CONTROL_DISABLE: u8 = 1 << 2;
}

/// Size of the Connect command's data (NVMe-oF 1.1, 3.3).
pub const CONNECT_DATA_SIZE: usize = 1024;
/// Size of an NQN field in the Connect data, NUL terminated.
pub const NQN_FIELD_SIZE: usize = 256;
/// Longest NQN (NVMe 1.4, 7.9): 223 bytes, UTF-8.
pub const NQN_MAX_LEN: usize = 223;
/// CNTLID in the admin queue's Connect data: "any controller" (the
/// dynamic controller model allocates one).
pub const CNTLID_DYNAMIC: u16 = 0xffff;

/// Property sizes (ATTRIB bits 2:0).
const PROPERTY_4_BYTES: u32 = 0;
const PROPERTY_8_BYTES: u32 = 1;

impl SubmissionEntry {
    /// A Fabrics command of type `fctype`, everything else zero.
    pub fn fabrics(fctype: u8) -> SubmissionEntry {
        let mut e = SubmissionEntry::new(FABRICS_OPCODE, 0);
        e.dw[1] = u32::from(fctype);
        e
    }
    /// The Fabrics command type, or `None` for any other command.
    pub fn fctype(&self) -> Option<u8> {
        (self.opcode() == FABRICS_OPCODE).then_some(self.dw[1] as u8)
    }
    /// Property Get (3.5) of the 4- or 8-byte property at `offset`; the
    /// value comes back in completion dwords 0 and 1.
    pub fn property_get(offset: u32, wide: bool) -> SubmissionEntry {
        let mut e = SubmissionEntry::fabrics(fctype::PROPERTY_GET);
        e.dw[10] = if wide {
            PROPERTY_8_BYTES
        } else {
            PROPERTY_4_BYTES
        };
        e.dw[11] = offset;
        e
    }
    /// Property Set (3.6) of the property at `offset` to `value`.
    pub fn property_set(offset: u32, wide: bool, value: u64) -> SubmissionEntry {
        let mut e = SubmissionEntry::property_get(offset, wide);
        e.dw[1] = u32::from(fctype::PROPERTY_SET);
        e.dw[12] = value as u32;
        e.dw[13] = (value >> 32) as u32;
        e
    }
    /// True for an 8-byte Property Get or Set.
    pub fn property_wide(&self) -> bool {
        self.dw[10] & 7 == PROPERTY_8_BYTES
    }
    /// The property offset of a Property Get or Set.
    pub fn property_offset(&self) -> u32 {
        self.dw[11]
    }
    /// The value of a Property Set.
    pub fn property_value(&self) -> u64 {
        u64::from(self.dw[12]) | (u64::from(self.dw[13]) << 32)
    }
    /// Connect (3.3) queue `qid` with `entries` submission queue entries
    /// (SQSIZE is 0's based), attributes `cattr` and, on the admin queue, a
    /// Keep Alive Timeout of `kato_ms` milliseconds (0: none). The
    /// [`ConnectData`] travels as the command's data.
    pub fn connect(qid: u16, entries: u16, cattr: u8, kato_ms: u32) -> SubmissionEntry {
        let mut e = SubmissionEntry::fabrics(fctype::CONNECT);
        // RECFMT 0 in bytes 41:40, QID in 43:42.
        e.dw[10] = u32::from(qid) << 16;
        e.dw[11] = u32::from(entries.saturating_sub(1)) | (u32::from(cattr) << 16);
        e.dw[12] = kato_ms;
        e
    }
    /// QID of a Connect.
    pub fn connect_qid(&self) -> u16 {
        (self.dw[10] >> 16) as u16
    }
    /// SQSIZE of a Connect, as a count of entries.
    pub fn connect_entries(&self) -> u32 {
        (self.dw[11] & 0xffff) + 1
    }
    /// CATTR of a Connect.
    pub fn connect_cattr(&self) -> u8 {
        (self.dw[11] >> 16) as u8
    }
    /// KATO of a Connect, in milliseconds.
    pub fn connect_kato(&self) -> u32 {
        self.dw[12]
    }
}

impl CompletionEntry {
    /// The controller id a successful Connect returns (DW0 bits 15:0).
    pub fn connect_cntlid(&self) -> u16 {
        self.dw0 as u16
    }
    /// The value a Property Get returns (DW0, and DW1 for 8 bytes).
    pub fn property_value(&self) -> u64 {
        u64::from(self.dw0) | (u64::from(self.dw1) << 32)
    }
}

/// Why Connect data could not be built or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NqnError {
    /// Empty, longer than 223 bytes, or with a NUL inside.
    Invalid,
}

impl core::fmt::Display for NqnError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("an NQN must be 1 to 223 bytes without NUL")
    }
}

impl core::error::Error for NqnError {}

/// An NVMe Qualified Name, checked: 1..=223 bytes, no NUL.
#[derive(Clone, PartialEq, Eq)]
pub struct Nqn {
    bytes: [u8; NQN_MAX_LEN],
    len: u8,
}

impl Nqn {
    /// Checks `s`.
    pub fn new(s: &str) -> Result<Nqn, NqnError> {
        Nqn::from_bytes(s.as_bytes())
    }
    /// Checks raw bytes (a field read off the wire, NUL already cut).
    pub fn from_bytes(b: &[u8]) -> Result<Nqn, NqnError> {
        if b.is_empty() || b.len() > NQN_MAX_LEN || b.contains(&0) {
            return Err(NqnError::Invalid);
        }
        let mut bytes = [0u8; NQN_MAX_LEN];
        bytes[..b.len()].copy_from_slice(b);
        Ok(Nqn {
            bytes,
            len: b.len() as u8,
        })
    }
    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
    /// The name as text (lossy only for names that are not UTF-8).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or("<non-UTF-8 NQN>")
    }
}

impl core::fmt::Debug for Nqn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl core::fmt::Display for Nqn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Connect command's data (NVMe-oF 1.1, 3.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// Host Identifier (bytes 15:00).
    pub hostid: [u8; 16],
    /// Controller id (bytes 17:16): [`CNTLID_DYNAMIC`] on the admin
    /// queue, the id the admin Connect returned on I/O queues.
    pub cntlid: u16,
    /// Subsystem NQN (bytes 511:256).
    pub subnqn: Nqn,
    /// Host NQN (bytes 767:512).
    pub hostnqn: Nqn,
}

impl ConnectData {
    /// The 1024 wire bytes.
    pub fn encode(&self) -> [u8; CONNECT_DATA_SIZE] {
        let mut b = [0u8; CONNECT_DATA_SIZE];
        b[0..16].copy_from_slice(&self.hostid);
        b[16..18].copy_from_slice(&self.cntlid.to_le_bytes());
        let sub = self.subnqn.as_bytes();
        b[256..256 + sub.len()].copy_from_slice(sub);
        let host = self.hostnqn.as_bytes();
        b[512..512 + host.len()].copy_from_slice(host);
        b
    }
    /// Reads Connect data (the target's side); `None` if it is short or an
    /// NQN is malformed.
    pub fn parse(b: &[u8]) -> Option<ConnectData> {
        let b = b.get(..CONNECT_DATA_SIZE)?;
        let nqn = |at: usize| {
            let field = b.get(at..at + NQN_FIELD_SIZE)?;
            let end = field.iter().position(|&c| c == 0)?;
            Nqn::from_bytes(field.get(..end)?).ok()
        };
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(b.get(0..16)?);
        Some(ConnectData {
            hostid,
            cntlid: u16::from_le_bytes([*b.get(16)?, *b.get(17)?]),
            subnqn: nqn(256)?,
            hostnqn: nqn(512)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabrics_commands_match_the_spec_layout() {
        let e = SubmissionEntry::property_get(0x1c, false);
        let b = e.to_bytes();
        assert_eq!(b[0], 0x7f);
        assert_eq!(b[4], fctype::PROPERTY_GET);
        assert_eq!(b[40], 0, "4-byte property");
        assert_eq!(&b[44..48], &0x1cu32.to_le_bytes());
        assert_eq!(e.fctype(), Some(fctype::PROPERTY_GET));
        let e = SubmissionEntry::property_set(0x14, false, 0x46_0001);
        let b = e.to_bytes();
        assert_eq!(b[4], fctype::PROPERTY_SET);
        assert_eq!(&b[48..56], &0x46_0001u64.to_le_bytes());
        assert_eq!((e.property_offset(), e.property_value()), (0x14, 0x46_0001));
        assert!(SubmissionEntry::property_get(0, true).property_wide());
        let e = SubmissionEntry::connect(3, 128, cattr::SQ_FLOW_CONTROL_DISABLE, 15_000);
        let b = e.to_bytes();
        assert_eq!(b[4], fctype::CONNECT);
        assert_eq!(&b[40..42], &[0, 0], "RECFMT");
        assert_eq!(&b[42..44], &3u16.to_le_bytes());
        assert_eq!(&b[44..46], &127u16.to_le_bytes(), "SQSIZE is 0's based");
        assert_eq!(b[46], 4);
        assert_eq!(&b[48..52], &15_000u32.to_le_bytes());
        assert_eq!(e.connect_qid(), 3);
        assert_eq!(e.connect_entries(), 128);
        assert_eq!(e.connect_cattr(), 4);
        assert_eq!(e.connect_kato(), 15_000);
        assert_eq!(SubmissionEntry::read(1, 0, 1).fctype(), None);
        let c = CompletionEntry {
            dw0: 0xdead_0007,
            dw1: 0x1234,
            ..CompletionEntry::default()
        };
        assert_eq!(c.connect_cntlid(), 7);
        assert_eq!(c.property_value(), 0x1234_dead_0007);
    }

    #[test]
    fn connect_data_round_trips_and_nqns_are_checked() {
        let d = ConnectData {
            hostid: [7; 16],
            cntlid: CNTLID_DYNAMIC,
            subnqn: Nqn::new("testnqn").unwrap(),
            hostnqn: Nqn::new("nqn.2014-08.org.nvmexpress:uuid:x").unwrap(),
        };
        let b = d.encode();
        assert_eq!(&b[16..18], &[0xff, 0xff]);
        assert_eq!(&b[256..263], b"testnqn");
        assert_eq!(b[263], 0);
        assert_eq!(ConnectData::parse(&b), Some(d));
        assert_eq!(ConnectData::parse(&b[..1000]), None);
        let mut bad = b;
        bad[256..512].fill(b'a');
        assert_eq!(ConnectData::parse(&bad), None, "no terminating NUL");
        assert_eq!(Nqn::new(""), Err(NqnError::Invalid));
        assert_eq!(Nqn::new(&"n".repeat(224)), Err(NqnError::Invalid));
        assert!(Nqn::new(&"n".repeat(223)).is_ok());
        assert_eq!(Nqn::from_bytes(b"a\0b"), Err(NqnError::Invalid));
    }
}
