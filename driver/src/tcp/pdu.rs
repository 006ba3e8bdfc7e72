//! NVMe/TCP PDU formats (NVMe/TCP Transport Specification 1.0, 3.6.2),
//! both directions: the initiator builds host-to-controller PDUs and
//! checks controller-to-host ones; the hosted test target does the
//! opposite with the same definitions.
//!
//! Every header is described once as a `#[repr(C)]` struct of byte arrays
//! (alignment 1, so no padding): its size is asserted at compile time and
//! every field offset comes from `offset_of!`, so the byte offsets the
//! encoders, the parsers and the error reports use cannot disagree with
//! the layout. Integers are little-endian on the wire (3, "Transport
//! Overview").
//!
//! Received bytes go through [`CommonHeader::parse`] and then
//! [`CommonHeader::check`], which validate the type, the lengths, the
//! flags and the data offset against what was negotiated; only then is the
//! PDU-specific header read, by parsers that take fixed-size arrays and so
//! cannot index out of bounds.

use core::mem::{offset_of, size_of};

use super::digest::{crc32c, DIGEST_LEN};
use super::error::TcpError;
use crate::spec::command::{SubmissionEntry, SQE_SIZE};
use crate::spec::completion::{CompletionEntry, CQE_SIZE};

/// PDU types (Figure 10). Bit 0 is the direction: 0 host to controller,
/// 1 controller to host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PduType {
    /// Initialize Connection Request (3.6.2.2).
    IcReq = 0x00,
    /// Initialize Connection Response (3.6.2.3).
    IcResp = 0x01,
    /// Host to Controller Terminate Connection Request (3.6.2.4).
    H2cTermReq = 0x02,
    /// Controller to Host Terminate Connection Request (3.6.2.5).
    C2hTermReq = 0x03,
    /// Command Capsule (3.6.2.6).
    CapsuleCmd = 0x04,
    /// Response Capsule (3.6.2.7).
    CapsuleResp = 0x05,
    /// Host To Controller Data (3.6.2.8).
    H2cData = 0x06,
    /// Controller To Host Data (3.6.2.9).
    C2hData = 0x07,
    /// Ready to Transfer (3.6.2.10).
    R2t = 0x09,
}

impl PduType {
    /// The type for a PDU-Type byte, if it names one.
    pub fn from_byte(b: u8) -> Option<PduType> {
        Some(match b {
            0x00 => PduType::IcReq,
            0x01 => PduType::IcResp,
            0x02 => PduType::H2cTermReq,
            0x03 => PduType::C2hTermReq,
            0x04 => PduType::CapsuleCmd,
            0x05 => PduType::CapsuleResp,
            0x06 => PduType::H2cData,
            0x07 => PduType::C2hData,
            0x09 => PduType::R2t,
            _ => return None,
        })
    }
    /// True for PDUs a controller sends.
    pub fn from_controller(self) -> bool {
        self as u8 & 1 == 1
    }
    /// The fixed header length (HLEN) of this type.
    pub fn header_len(self) -> usize {
        match self {
            PduType::IcReq | PduType::IcResp => IC_LEN,
            PduType::H2cTermReq | PduType::C2hTermReq => TERM_HLEN,
            PduType::CapsuleCmd => CAPSULE_CMD_HLEN,
            PduType::CapsuleResp => CAPSULE_RESP_HLEN,
            PduType::H2cData | PduType::C2hData => DATA_HLEN,
            PduType::R2t => R2T_HLEN,
        }
    }
    /// True for the types that may carry PDU data under digests and
    /// alignment (TermReq data is neither digested nor aligned).
    fn carries_data(self) -> bool {
        matches!(
            self,
            PduType::CapsuleCmd | PduType::H2cData | PduType::C2hData
        )
    }
}

/// FLAGS bits (Figures 24 to 28).
pub mod flags {
    /// A header digest follows the header.
    pub const HDGSTF: u8 = 1 << 0;
    /// A data digest follows the data.
    pub const DDGSTF: u8 = 1 << 1;
    /// H2CData: last PDU for its R2T; C2HData: last PDU of the command.
    pub const LAST_PDU: u8 = 1 << 2;
    /// C2HData: the command succeeded and no response capsule follows.
    pub const SUCCESS: u8 = 1 << 3;
}

/// Bits of the DGST byte of ICReq and ICResp.
pub mod dgst {
    /// Header digests.
    pub const HDGST_ENABLE: u8 = 1 << 0;
    /// Data digests.
    pub const DDGST_ENABLE: u8 = 1 << 1;
}

/// PDU Common Header (3.6.2.1, Figure 19).
#[repr(C)]
struct ChLayout {
    pdu_type: u8,
    flags: u8,
    hlen: u8,
    pdo: u8,
    plen: [u8; 4],
}

/// ICReq and ICResp (3.6.2.2, 3.6.2.3, Figures 20 and 21): `pda` is HPDA
/// in a request and CPDA in a response, `limit` MAXR2T in a request and
/// MAXH2CDATA in a response.
#[repr(C)]
struct IcLayout {
    ch: ChLayout,
    pfv: [u8; 2],
    pda: u8,
    dgst: u8,
    limit: [u8; 4],
    reserved: [u8; 112],
}

/// H2CTermReq and C2HTermReq (3.6.2.4, 3.6.2.5, Figures 22 and 23).
#[repr(C)]
struct TermLayout {
    ch: ChLayout,
    fes: [u8; 2],
    fei: [u8; 4],
    reserved: [u8; 10],
}

/// CapsuleCmd (3.6.2.6, Figure 24).
#[repr(C)]
struct CapsuleCmdLayout {
    ch: ChLayout,
    sqe: [u8; SQE_SIZE],
}

/// CapsuleResp (3.6.2.7, Figure 25).
#[repr(C)]
struct CapsuleRespLayout {
    ch: ChLayout,
    cqe: [u8; CQE_SIZE],
}

/// H2CData and C2HData (3.6.2.8, 3.6.2.9, Figures 26 and 27); TTAG is
/// reserved in C2HData.
#[repr(C)]
struct DataLayout {
    ch: ChLayout,
    cccid: [u8; 2],
    ttag: [u8; 2],
    datao: [u8; 4],
    datal: [u8; 4],
    reserved: [u8; 4],
}

/// R2T (3.6.2.10, Figure 28).
#[repr(C)]
struct R2tLayout {
    ch: ChLayout,
    cccid: [u8; 2],
    ttag: [u8; 2],
    r2to: [u8; 4],
    r2tl: [u8; 4],
    reserved: [u8; 4],
}

/// Length of the common header.
pub const CH_LEN: usize = 8;
/// HLEN and PLEN of ICReq and ICResp.
pub const IC_LEN: usize = 128;
/// HLEN of the TermReq PDUs.
pub const TERM_HLEN: usize = 24;
/// Largest PLEN of a TermReq: its header and at most 128 bytes of the
/// offending PDU header (3.5).
pub const TERM_MAX_PLEN: usize = 152;
/// HLEN of CapsuleCmd.
pub const CAPSULE_CMD_HLEN: usize = 72;
/// HLEN of CapsuleResp.
pub const CAPSULE_RESP_HLEN: usize = 24;
/// HLEN of H2CData and C2HData.
pub const DATA_HLEN: usize = 24;
/// HLEN of R2T.
pub const R2T_HLEN: usize = 24;
/// Largest HPDA or CPDA (0's based dwords): 128-byte alignment (3.3).
pub const MAX_PDA: u8 = 31;
/// Smallest MAXH2CDATA a controller may offer (3.6.2.3).
pub const MIN_MAXH2CDATA: u32 = 4096;
/// Largest header region (header, digest and padding) a PDU can have: a
/// PDO is one byte.
pub const MAX_HEADER_REGION: usize = 255;

const _: () = assert!(size_of::<ChLayout>() == CH_LEN);
const _: () = assert!(size_of::<IcLayout>() == IC_LEN);
const _: () = assert!(size_of::<TermLayout>() == TERM_HLEN);
const _: () = assert!(size_of::<CapsuleCmdLayout>() == CAPSULE_CMD_HLEN);
const _: () = assert!(size_of::<CapsuleRespLayout>() == CAPSULE_RESP_HLEN);
const _: () = assert!(size_of::<DataLayout>() == DATA_HLEN);
const _: () = assert!(size_of::<R2tLayout>() == R2T_HLEN);
const _: () = assert!(TERM_MAX_PLEN <= MAX_HEADER_REGION);

const FLAGS_AT: usize = offset_of!(ChLayout, flags);
const HLEN_AT: usize = offset_of!(ChLayout, hlen);
const PDO_AT: usize = offset_of!(ChLayout, pdo);
const PLEN_AT: usize = offset_of!(ChLayout, plen);

fn le16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(&[x, y]) => u16::from_le_bytes([x, y]),
        _ => 0,
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[w, x, y, z]) => u32::from_le_bytes([w, x, y, z]),
        _ => 0,
    }
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(d) = b.get_mut(at..at + v.len()) {
        d.copy_from_slice(v);
    }
}

/// Alignment in bytes for a 0's based dword count (HPDA, CPDA).
pub fn pda_bytes(pda: u8) -> usize {
    (usize::from(pda.min(MAX_PDA)) + 1) * 4
}

/// What a connection negotiated, as far as the PDU format is concerned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Framing {
    /// Header digests on.
    pub hdgst: bool,
    /// Data digests on.
    pub ddgst: bool,
    /// Alignment the receiver asked for, for PDUs that carry data: HPDA
    /// for PDUs to the host, CPDA for PDUs to the controller.
    pub pda: u8,
}

impl Framing {
    fn hd(&self) -> usize {
        if self.hdgst {
            DIGEST_LEN
        } else {
            0
        }
    }
    fn dd(&self) -> usize {
        if self.ddgst {
            DIGEST_LEN
        } else {
            0
        }
    }
    /// The PDO of a data-bearing PDU with header length `hlen`: after the
    /// header and its digest, rounded up to the alignment.
    pub fn data_offset(&self, hlen: usize) -> usize {
        let a = pda_bytes(self.pda);
        (hlen + self.hd()).div_ceil(a) * a
    }
    /// The digest field length after data, 0 or 4.
    pub fn data_digest_len(&self) -> usize {
        self.dd()
    }
}

/// The common header of a received PDU, checked for a known type and its
/// fixed header length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommonHeader {
    /// PDU type.
    pub pdu_type: PduType,
    /// FLAGS.
    pub flags: u8,
    /// PDU Data Offset.
    pub pdo: u8,
    /// PDU Length.
    pub plen: u32,
}

/// Where the bytes of a checked PDU lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Bytes from the start of the PDU up to its data (or its end, with no
    /// data): header, header digest, padding. At most
    /// [`MAX_HEADER_REGION`].
    pub header: usize,
    /// Data bytes.
    pub data: usize,
    /// Data digest bytes after the data (0 or 4).
    pub digest: usize,
}

impl CommonHeader {
    /// Reads the eight bytes every PDU starts with.
    pub fn parse(b: &[u8; CH_LEN]) -> Result<CommonHeader, TcpError> {
        let [t, fl, hlen, pdo, ..] = *b;
        let pdu_type = PduType::from_byte(t).ok_or(TcpError::HeaderField { pdu: t, offset: 0 })?;
        if usize::from(hlen) != pdu_type.header_len() {
            return Err(TcpError::HeaderField {
                pdu: t,
                offset: HLEN_AT as u8,
            });
        }
        Ok(CommonHeader {
            pdu_type,
            flags: fl,
            pdo,
            plen: le32(b, PLEN_AT),
        })
    }

    fn bad(&self, at: usize) -> TcpError {
        TcpError::HeaderField {
            pdu: self.pdu_type as u8,
            offset: at as u8,
        }
    }

    /// Checks the lengths, digest flags and data offset against what the
    /// connection negotiated (`framing`, with `pda` the receiver's
    /// alignment), and that at most `max_data` bytes of data follow.
    /// ICReq/ICResp are checked with `framing` all off, as they precede
    /// negotiation; TermReq PDUs never carry digests.
    pub fn check(&self, framing: &Framing, max_data: usize) -> Result<Extent, TcpError> {
        let t = self.pdu_type;
        let hlen = t.header_len();
        let plen = self.plen as usize;
        match t {
            PduType::IcReq | PduType::IcResp => {
                if plen != IC_LEN {
                    return Err(self.bad(PLEN_AT));
                }
                return Ok(Extent {
                    header: IC_LEN,
                    data: 0,
                    digest: 0,
                });
            }
            PduType::H2cTermReq | PduType::C2hTermReq => {
                // 3.5: a TermReq outside 24..=152 bytes is ignored and the
                // connection closed, which a header field error does too.
                if !(TERM_HLEN..=TERM_MAX_PLEN).contains(&plen) {
                    return Err(self.bad(PLEN_AT));
                }
                return Ok(Extent {
                    header: plen,
                    data: 0,
                    digest: 0,
                });
            }
            _ => {}
        }
        let mut allowed = flags::HDGSTF;
        match t {
            PduType::CapsuleCmd => allowed |= flags::DDGSTF,
            PduType::H2cData => allowed |= flags::DDGSTF | flags::LAST_PDU,
            PduType::C2hData => allowed |= flags::DDGSTF | flags::LAST_PDU | flags::SUCCESS,
            _ => {}
        }
        if self.flags & !allowed != 0 || (self.flags & flags::HDGSTF != 0) != framing.hdgst {
            return Err(self.bad(FLAGS_AT));
        }
        let after_header = hlen + framing.hd();
        let has_data = t.carries_data() && plen > after_header;
        if !has_data {
            if plen != after_header {
                return Err(self.bad(PLEN_AT));
            }
            if self.flags & flags::DDGSTF != 0 {
                return Err(self.bad(FLAGS_AT));
            }
            if matches!(t, PduType::C2hData | PduType::H2cData) {
                // A data PDU must carry data.
                return Err(self.bad(PLEN_AT));
            }
            return Ok(Extent {
                header: plen,
                data: 0,
                digest: 0,
            });
        }
        if (self.flags & flags::DDGSTF != 0) != framing.ddgst {
            return Err(self.bad(FLAGS_AT));
        }
        let pdo = usize::from(self.pdo);
        let aligned = pdo % pda_bytes(framing.pda) == 0;
        if pdo < after_header || !aligned {
            return Err(self.bad(PDO_AT));
        }
        let digest = framing.dd();
        let data = plen
            .checked_sub(pdo + digest)
            .filter(|&d| d > 0 && d <= max_data)
            .ok_or_else(|| self.bad(PLEN_AT))?;
        Ok(Extent {
            header: pdo,
            data,
            digest,
        })
    }
}

/// Verifies the header digest of a PDU whose header region is `region`
/// (header, then the digest).
pub fn check_header_digest(t: PduType, region: &[u8]) -> Result<(), TcpError> {
    let hlen = t.header_len();
    let (Some(header), Some(got)) = (region.get(..hlen), region.get(hlen..hlen + DIGEST_LEN))
    else {
        return Err(TcpError::HeaderField {
            pdu: t as u8,
            offset: HLEN_AT as u8,
        });
    };
    if crc32c(header) != le32(got, 0) {
        return Err(TcpError::HeaderDigest { pdu: t as u8 });
    }
    Ok(())
}

/// Writes the common header, then (with header digests) the digest after
/// the header and zero padding up to `pdo`. `out` must hold the header
/// region. Returns its length.
#[inline]
fn seal(out: &mut [u8], t: PduType, extra_flags: u8, framing: &Framing, data: usize) -> usize {
    let hlen = t.header_len();
    let digests_apply = !matches!(
        t,
        PduType::IcReq | PduType::IcResp | PduType::H2cTermReq | PduType::C2hTermReq
    );
    let hd = if digests_apply { framing.hd() } else { 0 };
    let (pdo, dd) = if data > 0 && t.carries_data() {
        (framing.data_offset(hlen), framing.dd())
    } else {
        (hlen + hd, 0)
    };
    let mut fl = extra_flags;
    if hd > 0 {
        fl |= flags::HDGSTF;
    }
    if dd > 0 {
        fl |= flags::DDGSTF;
    }
    let plen = match t {
        PduType::H2cTermReq | PduType::C2hTermReq => hlen + data,
        _ => pdo + data + dd,
    };
    put(out, 0, &[t as u8, fl, hlen as u8]);
    put(
        out,
        PDO_AT,
        &[if data > 0 && t.carries_data() {
            pdo as u8
        } else {
            0
        }],
    );
    put(out, PLEN_AT, &(plen as u32).to_le_bytes());
    if hd > 0 {
        let digest = out.get(..hlen).map_or(0, crc32c);
        put(out, hlen, &digest.to_le_bytes());
    }
    if let Some(pad) = out.get_mut(hlen + hd..pdo) {
        pad.fill(0);
    }
    pdo
}

/// ICReq (3.6.2.2): the host's alignment, digests and MAXR2T.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcReq {
    /// HPDA: alignment of data in PDUs to the host (0's based dwords).
    pub hpda: u8,
    /// Header digests requested.
    pub hdgst: bool,
    /// Data digests requested.
    pub ddgst: bool,
    /// MAXR2T, 0's based: R2Ts one command may have outstanding, minus 1.
    pub maxr2t: u32,
}

impl IcReq {
    /// The 128 wire bytes.
    pub fn encode(&self) -> [u8; IC_LEN] {
        let mut b = [0u8; IC_LEN];
        seal(&mut b, PduType::IcReq, 0, &Framing::default(), 0);
        b[offset_of!(IcLayout, pda)] = self.hpda;
        b[offset_of!(IcLayout, dgst)] = dgst_byte(self.hdgst, self.ddgst);
        put(
            &mut b,
            offset_of!(IcLayout, limit),
            &self.maxr2t.to_le_bytes(),
        );
        b
    }
    /// Reads a checked ICReq (the target's side).
    pub fn parse(b: &[u8; IC_LEN]) -> Result<IcReq, TcpError> {
        let bad = |at: usize| TcpError::HeaderField {
            pdu: PduType::IcReq as u8,
            offset: at as u8,
        };
        if le16(b, offset_of!(IcLayout, pfv)) != 0 {
            return Err(bad(offset_of!(IcLayout, pfv)));
        }
        let hpda = b[offset_of!(IcLayout, pda)];
        if hpda > MAX_PDA {
            return Err(bad(offset_of!(IcLayout, pda)));
        }
        let d = b[offset_of!(IcLayout, dgst)];
        Ok(IcReq {
            hpda,
            hdgst: d & dgst::HDGST_ENABLE != 0,
            ddgst: d & dgst::DDGST_ENABLE != 0,
            maxr2t: le32(b, offset_of!(IcLayout, limit)),
        })
    }
}

fn dgst_byte(h: bool, d: bool) -> u8 {
    (if h { dgst::HDGST_ENABLE } else { 0 }) | (if d { dgst::DDGST_ENABLE } else { 0 })
}

/// ICResp (3.6.2.3): the controller's alignment, digests and MAXH2CDATA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcResp {
    /// CPDA: alignment of data in PDUs to the controller.
    pub cpda: u8,
    /// Header digests on.
    pub hdgst: bool,
    /// Data digests on.
    pub ddgst: bool,
    /// Largest H2CData data length.
    pub maxh2cdata: u32,
}

impl IcResp {
    /// The 128 wire bytes (the target's side).
    pub fn encode(&self) -> [u8; IC_LEN] {
        let mut b = [0u8; IC_LEN];
        seal(&mut b, PduType::IcResp, 0, &Framing::default(), 0);
        b[offset_of!(IcLayout, pda)] = self.cpda;
        b[offset_of!(IcLayout, dgst)] = dgst_byte(self.hdgst, self.ddgst);
        put(
            &mut b,
            offset_of!(IcLayout, limit),
            &self.maxh2cdata.to_le_bytes(),
        );
        b
    }
    /// Reads an ICResp answering `req`: PFV 0, CPDA in range, digests the
    /// host asked for (3.3.1.1: a digest the host did not request is a
    /// fatal error; one it requested and was refused it also refuses
    /// here, since the caller asked for it), MAXH2CDATA at least 4096 and
    /// a multiple of 4.
    pub fn parse(b: &[u8; IC_LEN], req: &IcReq) -> Result<IcResp, TcpError> {
        let bad = |at: usize| TcpError::HeaderField {
            pdu: PduType::IcResp as u8,
            offset: at as u8,
        };
        if le16(b, offset_of!(IcLayout, pfv)) != 0 {
            return Err(TcpError::Unsupported {
                offset: offset_of!(IcLayout, pfv) as u8,
            });
        }
        let cpda = b[offset_of!(IcLayout, pda)];
        if cpda > MAX_PDA {
            return Err(bad(offset_of!(IcLayout, pda)));
        }
        let d = b[offset_of!(IcLayout, dgst)];
        let (hdgst, ddgst) = (d & dgst::HDGST_ENABLE != 0, d & dgst::DDGST_ENABLE != 0);
        if d & !(dgst::HDGST_ENABLE | dgst::DDGST_ENABLE) != 0
            || hdgst != req.hdgst
            || ddgst != req.ddgst
        {
            return Err(TcpError::Unsupported {
                offset: offset_of!(IcLayout, dgst) as u8,
            });
        }
        let maxh2cdata = le32(b, offset_of!(IcLayout, limit));
        if maxh2cdata < MIN_MAXH2CDATA || maxh2cdata % 4 != 0 {
            return Err(bad(offset_of!(IcLayout, limit)));
        }
        Ok(IcResp {
            cpda,
            hdgst,
            ddgst,
            maxh2cdata,
        })
    }
}

/// H2CTermReq / C2HTermReq (3.6.2.4, 3.6.2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermReq {
    /// Fatal Error Status.
    pub fes: u16,
    /// Fatal Error Information.
    pub fei: u32,
}

impl TermReq {
    /// Encodes a TermReq of type `t` carrying (up to 128 bytes of) the
    /// offending header `culprit` into `out`; returns its length.
    pub fn encode(&self, t: PduType, culprit: &[u8], out: &mut [u8; TERM_MAX_PLEN]) -> usize {
        let n = culprit.len().min(TERM_MAX_PLEN - TERM_HLEN);
        out.fill(0);
        seal(out, t, 0, &Framing::default(), n);
        put(out, offset_of!(TermLayout, fes), &self.fes.to_le_bytes());
        put(out, offset_of!(TermLayout, fei), &self.fei.to_le_bytes());
        put(out, TERM_HLEN, culprit.get(..n).unwrap_or(&[]));
        TERM_HLEN + n
    }
    /// Reads a TermReq header.
    pub fn parse(b: &[u8; TERM_HLEN]) -> TermReq {
        TermReq {
            fes: le16(b, offset_of!(TermLayout, fes)),
            fei: le32(b, offset_of!(TermLayout, fei)),
        }
    }
}

/// Header region of a CapsuleCmd or H2CData the host sends: header,
/// digest, padding; at most 72 + 4 bytes rounded up to 128.
pub const TX_HEADER_MAX: usize = 256;

/// Encodes a CapsuleCmd header for `sqe` with `data` bytes of in-capsule
/// data into `out`; returns the header region's length (the PDO, or the
/// PLEN when there is no data).
pub fn encode_capsule_cmd(
    sqe: &SubmissionEntry,
    data: usize,
    framing: &Framing,
    out: &mut [u8; TX_HEADER_MAX],
) -> usize {
    put(out, offset_of!(CapsuleCmdLayout, sqe), &sqe.to_bytes());
    seal(out, PduType::CapsuleCmd, 0, framing, data)
}

/// The common header of every command capsule without data under
/// `framing`, when it has no header digest (which would depend on the
/// command): a connection builds it once.
pub fn plain_capsule_header(framing: &Framing) -> Option<[u8; CH_LEN]> {
    if framing.hdgst {
        return None;
    }
    let mut out = [0u8; TX_HEADER_MAX];
    encode_capsule_cmd(&SubmissionEntry::default(), 0, framing, &mut out);
    prefix::<CH_LEN>(&out).copied()
}

/// Reads the SQE of a checked CapsuleCmd (the target's side).
pub fn parse_capsule_cmd(b: &[u8; CAPSULE_CMD_HLEN]) -> SubmissionEntry {
    let mut sqe = [0u8; SQE_SIZE];
    if let Some(s) = b.get(offset_of!(CapsuleCmdLayout, sqe)..) {
        sqe.copy_from_slice(s);
    }
    SubmissionEntry::from_bytes(&sqe)
}

/// Encodes a CapsuleResp for `cqe` (the target's side); returns its
/// length.
pub fn encode_capsule_resp(
    cqe: &CompletionEntry,
    framing: &Framing,
    out: &mut [u8; TX_HEADER_MAX],
) -> usize {
    put(out, offset_of!(CapsuleRespLayout, cqe), &cqe.to_bytes());
    seal(out, PduType::CapsuleResp, 0, framing, 0)
}

/// Reads the CQE of a checked CapsuleResp.
pub fn parse_capsule_resp(b: &[u8; CAPSULE_RESP_HLEN]) -> CompletionEntry {
    let mut cqe = [0u8; CQE_SIZE];
    if let Some(s) = b.get(offset_of!(CapsuleRespLayout, cqe)..) {
        cqe.copy_from_slice(s);
    }
    CompletionEntry::from_bytes(&cqe)
}

/// The header of an H2CData or C2HData PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// Command Capsule CID.
    pub cccid: u16,
    /// Transfer tag (H2CData only).
    pub ttag: u16,
    /// Data offset in the command's buffer.
    pub datao: u32,
    /// Data length.
    pub datal: u32,
}

impl DataHeader {
    /// Encodes a data PDU header of type `t` with `extra` flags
    /// (LAST_PDU, SUCCESS) into `out`; returns the header region's length.
    pub fn encode(
        &self,
        t: PduType,
        extra: u8,
        framing: &Framing,
        out: &mut [u8; TX_HEADER_MAX],
    ) -> usize {
        put(
            out,
            offset_of!(DataLayout, cccid),
            &self.cccid.to_le_bytes(),
        );
        put(out, offset_of!(DataLayout, ttag), &self.ttag.to_le_bytes());
        put(
            out,
            offset_of!(DataLayout, datao),
            &self.datao.to_le_bytes(),
        );
        put(
            out,
            offset_of!(DataLayout, datal),
            &self.datal.to_le_bytes(),
        );
        put(out, offset_of!(DataLayout, reserved), &[0; 4]);
        seal(out, t, extra, framing, self.datal as usize)
    }
    /// Reads a checked data PDU header whose data is `data` bytes long:
    /// DATAL must agree with the PDU length, and DATAO and DATAL must be
    /// dword multiples.
    #[inline]
    pub fn parse(b: &[u8; DATA_HLEN], t: PduType, data: usize) -> Result<DataHeader, TcpError> {
        let h = DataHeader {
            cccid: le16(b, offset_of!(DataLayout, cccid)),
            ttag: le16(b, offset_of!(DataLayout, ttag)),
            datao: le32(b, offset_of!(DataLayout, datao)),
            datal: le32(b, offset_of!(DataLayout, datal)),
        };
        let bad = |at: usize| TcpError::HeaderField {
            pdu: t as u8,
            offset: at as u8,
        };
        if h.datao % 4 != 0 {
            return Err(bad(offset_of!(DataLayout, datao)));
        }
        if h.datal as usize != data || h.datal % 4 != 0 {
            return Err(bad(offset_of!(DataLayout, datal)));
        }
        Ok(h)
    }
}

/// An R2T.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct R2t {
    /// Command Capsule CID.
    pub cccid: u16,
    /// Transfer tag, echoed in the H2CData PDUs.
    pub ttag: u16,
    /// Offset of the requested data in the command's buffer.
    pub r2to: u32,
    /// Length of the requested data.
    pub r2tl: u32,
}

impl R2t {
    /// Encodes an R2T (the target's side); returns its length.
    pub fn encode(&self, framing: &Framing, out: &mut [u8; TX_HEADER_MAX]) -> usize {
        put(out, offset_of!(R2tLayout, cccid), &self.cccid.to_le_bytes());
        put(out, offset_of!(R2tLayout, ttag), &self.ttag.to_le_bytes());
        put(out, offset_of!(R2tLayout, r2to), &self.r2to.to_le_bytes());
        put(out, offset_of!(R2tLayout, r2tl), &self.r2tl.to_le_bytes());
        put(out, offset_of!(R2tLayout, reserved), &[0; 4]);
        seal(out, PduType::R2t, 0, framing, 0)
    }
    /// Reads a checked R2T: a non-empty, dword-aligned range.
    pub fn parse(b: &[u8; R2T_HLEN]) -> Result<R2t, TcpError> {
        let r = R2t {
            cccid: le16(b, offset_of!(R2tLayout, cccid)),
            ttag: le16(b, offset_of!(R2tLayout, ttag)),
            r2to: le32(b, offset_of!(R2tLayout, r2to)),
            r2tl: le32(b, offset_of!(R2tLayout, r2tl)),
        };
        let bad = |at: usize| TcpError::HeaderField {
            pdu: PduType::R2t as u8,
            offset: at as u8,
        };
        if r.r2to % 4 != 0 {
            return Err(bad(offset_of!(R2tLayout, r2to)));
        }
        if r.r2tl == 0 || r.r2tl % 4 != 0 {
            return Err(bad(offset_of!(R2tLayout, r2tl)));
        }
        Ok(r)
    }
}

/// The header digest a PDU of type `t` carries in `region` (0 if short).
pub fn received_header_digest(t: PduType, region: &[u8]) -> u32 {
    le32(region, t.header_len())
}

/// The first `N` bytes of `b` as an array (`None` if shorter): how the
/// parsers above get the fixed-size views they need.
pub fn prefix<const N: usize>(b: &[u8]) -> Option<&[u8; N]> {
    b.get(..N).and_then(|s| s.try_into().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Framing = Framing {
        hdgst: false,
        ddgst: false,
        pda: 0,
    };
    const BOTH: Framing = Framing {
        hdgst: true,
        ddgst: true,
        pda: 0,
    };

    fn ch(b: &[u8]) -> CommonHeader {
        CommonHeader::parse(prefix(b).unwrap()).unwrap()
    }

    #[test]
    fn field_offsets_follow_the_spec_figures() {
        assert_eq!(offset_of!(IcLayout, pfv), 8);
        assert_eq!(offset_of!(IcLayout, pda), 10);
        assert_eq!(offset_of!(IcLayout, dgst), 11);
        assert_eq!(offset_of!(IcLayout, limit), 12);
        assert_eq!(offset_of!(TermLayout, fes), 8);
        assert_eq!(offset_of!(TermLayout, fei), 10);
        assert_eq!(offset_of!(DataLayout, cccid), 8);
        assert_eq!(offset_of!(DataLayout, ttag), 10);
        assert_eq!(offset_of!(DataLayout, datao), 12);
        assert_eq!(offset_of!(DataLayout, datal), 16);
        assert_eq!(offset_of!(R2tLayout, r2to), 12);
        assert_eq!(offset_of!(R2tLayout, r2tl), 16);
        assert_eq!(offset_of!(CapsuleRespLayout, cqe), 8);
    }

    #[test]
    fn icreq_and_icresp_round_trip_and_refuse_what_was_not_asked() {
        let req = IcReq {
            hpda: 0,
            hdgst: true,
            ddgst: false,
            maxr2t: 0,
        };
        let b = req.encode();
        assert_eq!(&b[..8], &[0, 0, 128, 0, 128, 0, 0, 0]);
        assert_eq!(b[11], 1);
        assert_eq!(IcReq::parse(&b), Ok(req));
        let resp = IcResp {
            cpda: 0,
            hdgst: true,
            ddgst: false,
            maxh2cdata: 0x40_0000,
        };
        let mut b = resp.encode();
        assert_eq!(ch(&b).check(&NONE, 0).unwrap().header, 128);
        assert_eq!(IcResp::parse(&b, &req), Ok(resp));
        b[11] = 3;
        assert_eq!(
            IcResp::parse(&b, &req),
            Err(TcpError::Unsupported { offset: 11 }),
            "a data digest the host did not request"
        );
        b[11] = 1;
        b[12..16].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(
            IcResp::parse(&b, &req),
            Err(TcpError::HeaderField { pdu: 1, offset: 12 })
        );
    }

    #[test]
    fn capsule_and_data_headers_carry_digests_padding_and_lengths() {
        let mut sqe = SubmissionEntry::write(1, 0, 8, false);
        sqe.set_cid(5);
        let mut out = [0u8; TX_HEADER_MAX];
        let framing = Framing { pda: 15, ..BOTH };
        let n = encode_capsule_cmd(&sqe, 4096, &framing, &mut out);
        assert_eq!(n, 128, "72 + 4 rounded up to 64-byte alignment");
        let c = ch(&out);
        assert_eq!(c.pdo, 128);
        assert_eq!(c.plen, 128 + 4096 + 4);
        assert_eq!(c.flags, flags::HDGSTF | flags::DDGSTF);
        let e = c.check(&framing, 1 << 20).unwrap();
        assert_eq!((e.header, e.data, e.digest), (128, 4096, 4));
        check_header_digest(PduType::CapsuleCmd, &out[..76]).unwrap();
        assert_eq!(parse_capsule_cmd(prefix(&out).unwrap()), sqe);
        out[20] ^= 1;
        assert!(matches!(
            check_header_digest(PduType::CapsuleCmd, &out[..76]),
            Err(TcpError::HeaderDigest { pdu: 4, .. })
        ));
        let d = DataHeader {
            cccid: 9,
            ttag: 3,
            datao: 8192,
            datal: 4096,
        };
        let n = d.encode(PduType::C2hData, flags::LAST_PDU, &NONE, &mut out);
        assert_eq!(n, 24);
        let c = ch(&out);
        assert_eq!(c.plen, 24 + 4096);
        let e = c.check(&NONE, 4096).unwrap();
        assert_eq!(e.data, 4096);
        assert_eq!(
            c.check(&NONE, 4095),
            Err(TcpError::HeaderField { pdu: 7, offset: 4 }),
            "more data than the caller allows"
        );
        assert_eq!(
            c.check(&BOTH, 4096),
            Err(TcpError::HeaderField { pdu: 7, offset: 1 }),
            "digest flags must match the negotiation"
        );
        assert_eq!(
            DataHeader::parse(prefix(&out).unwrap(), PduType::C2hData, 4096),
            Ok(d)
        );
        assert_eq!(
            DataHeader::parse(prefix(&out).unwrap(), PduType::C2hData, 4092),
            Err(TcpError::HeaderField { pdu: 7, offset: 16 })
        );
    }

    #[test]
    fn headers_without_data_and_bad_common_headers_are_refused() {
        let mut out = [0u8; TX_HEADER_MAX];
        let cqe = CompletionEntry::new(1, 0, 1, 7, false, crate::spec::status::Status::SUCCESS);
        let n = encode_capsule_resp(&cqe, &BOTH, &mut out);
        assert_eq!(n, 28);
        let c = ch(&out);
        assert_eq!(c.check(&BOTH, 0).unwrap().header, 28);
        assert_eq!(parse_capsule_resp(prefix(&out).unwrap()), cqe);
        let r = R2t {
            cccid: 1,
            ttag: 2,
            r2to: 0,
            r2tl: 8192,
        };
        let n = r.encode(&NONE, &mut out);
        assert_eq!(n, 24);
        assert_eq!(R2t::parse(prefix(&out).unwrap()), Ok(r));
        out[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            R2t::parse(prefix(&out).unwrap()),
            Err(TcpError::HeaderField { pdu: 9, offset: 16 })
        );
        assert_eq!(
            CommonHeader::parse(&[8, 0, 24, 0, 24, 0, 0, 0]),
            Err(TcpError::HeaderField { pdu: 8, offset: 0 })
        );
        assert_eq!(
            CommonHeader::parse(&[5, 0, 25, 0, 25, 0, 0, 0]),
            Err(TcpError::HeaderField { pdu: 5, offset: 2 })
        );
        let c = CommonHeader::parse(&[5, 0, 24, 0, 30, 0, 0, 0]).unwrap();
        assert_eq!(
            c.check(&NONE, 0),
            Err(TcpError::HeaderField { pdu: 5, offset: 4 })
        );
        let c = CommonHeader::parse(&[7, 0, 24, 0, 24, 0, 0, 0]).unwrap();
        assert!(c.check(&NONE, 100).is_err(), "C2HData without data");
        let c = CommonHeader::parse(&[7, 0, 24, 20, 60, 0, 0, 0]).unwrap();
        assert_eq!(
            c.check(&NONE, 100),
            Err(TcpError::HeaderField { pdu: 7, offset: 3 }),
            "data inside the header"
        );
        let c = CommonHeader::parse(&[3, 0, 24, 0, 200, 0, 0, 0]).unwrap();
        assert!(c.check(&NONE, 0).is_err(), "TermReq longer than 152 bytes");
    }

    #[test]
    fn termreq_carries_the_offending_header() {
        let mut out = [0u8; TERM_MAX_PLEN];
        let t = TermReq { fes: 1, fei: 12 };
        let n = t.encode(PduType::H2cTermReq, &[0xaa; 200], &mut out);
        assert_eq!(n, 152);
        let c = ch(&out);
        assert_eq!(c.plen, 152);
        assert_eq!(c.check(&BOTH, 0).unwrap().header, 152, "never digested");
        assert_eq!(TermReq::parse(prefix(&out).unwrap()), t);
        assert_eq!(out[24], 0xaa);
    }
}
