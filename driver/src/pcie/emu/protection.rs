//! End-to-end protection information of the emulated namespace (NVMe 1.4,
//! 8.3): the PI tuple stored beside each block, generated on a write with
//! PRACT and checked on a read under PRCHK, as a controller does.
//!
//! The tuples live in RAM beside the medium (one word per block, each
//! written whole), for a RAM or a file medium alike: a file image does not
//! keep them, and a namespace opened again finds every block unwritten
//! (all-ones PI, which every check skips). The emulation moves no metadata
//! between host and device: it formats only with 8 bytes of metadata that
//! are all PI, and serves Read, Write and Write Zeroes with PRACT set,
//! refusing PRACT = 0 (which would transfer the PI) with Invalid Field.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::spec::command::SubmissionEntry;
use crate::spec::identify::IDENTIFY_SIZE;
use crate::spec::protection::{prinfo, PiCheck, PiTuple, PiType, Protection, PI_SIZE};

/// How the emulated namespace is formatted beyond its block size: its
/// metadata per block and its protection settings, reported in Identify
/// Namespace. The default is no metadata.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Metadata bytes per block (LBAF.MS).
    pub bytes: u16,
    /// Metadata after each block's data (FLBAS bit 4) rather than in a
    /// separate buffer.
    pub extended: bool,
    /// DPS: PI type in bits 2:0, PI in the first eight bytes in bit 3.
    pub dps: u8,
}

impl Metadata {
    /// 8 bytes of metadata, all PI of `pi_type` (what the driver uses).
    pub fn pi(pi_type: PiType) -> Metadata {
        Metadata {
            bytes: PI_SIZE,
            extended: false,
            dps: pi_type.bits(),
        }
    }
    /// The PI type if the emulation serves this format's data with PI.
    pub(super) fn pi_type(&self) -> Option<PiType> {
        let mut page = [0u8; IDENTIFY_SIZE];
        // The driver's own reading of the format decides, so the two
        // cannot disagree on what a format means.
        Protection::encode_format(&mut page, self.bytes, self.extended, self.dps);
        Protection::parse(&page).ok().flatten().map(|p| p.pi_type)
    }
    /// Whether the emulation can move this format's data at all: no
    /// metadata, or 8 bytes of PI with PRACT.
    pub(super) fn served(&self) -> bool {
        (self.bytes == 0 && self.dps & 7 == 0) || self.pi_type().is_some()
    }
}

/// The PI tuple of every block, packed into one word each.
#[derive(Debug)]
pub(super) struct PiStore {
    tuples: Box<[AtomicU64]>,
}

fn pack(t: PiTuple) -> u64 {
    u64::from_be_bytes(t.to_bytes())
}

fn unpack(w: u64) -> PiTuple {
    PiTuple::from_bytes(w.to_be_bytes())
}

impl PiStore {
    /// `blocks` unwritten tuples; `None` if they do not fit in memory.
    pub fn new(blocks: u64) -> Option<PiStore> {
        let n = usize::try_from(blocks).ok()?;
        let mut v = Vec::new();
        v.try_reserve_exact(n).ok()?;
        v.extend((0..n).map(|_| AtomicU64::new(pack(PiTuple::UNWRITTEN))));
        Some(PiStore {
            tuples: v.into_boxed_slice(),
        })
    }
    /// Block `lba`'s tuple (unwritten past the end).
    pub fn get(&self, lba: u64) -> PiTuple {
        let i = usize::try_from(lba).unwrap_or(usize::MAX);
        self.tuples
            .get(i)
            .map_or(PiTuple::UNWRITTEN, |w| unpack(w.load(Ordering::Acquire)))
    }
    /// Stores block `lba`'s tuple (nothing past the end).
    pub fn set(&self, lba: u64, t: PiTuple) {
        let i = usize::try_from(lba).unwrap_or(usize::MAX);
        if let Some(w) = self.tuples.get(i) {
            w.store(pack(t), Ordering::Release);
        }
    }
}

/// The protection fields of one Read, Write or Write Zeroes, taken from
/// the command under the state lock.
#[derive(Clone, Copy, Debug)]
pub(super) struct PiCommand {
    pub pi_type: PiType,
    /// PRINFO bits (PRACT set: checked when the command was accepted).
    pub prinfo: u32,
    /// ILBRT.
    pub ilbrt: u32,
    /// LBAT and LBATM.
    pub app: (u16, u16),
}

impl PiCommand {
    /// `sqe`'s protection fields on a namespace of `pi_type`, or the
    /// status the command is refused with: PRACT = 0 (the emulation moves
    /// no metadata), and on type 1 a reference tag check whose ILBRT is
    /// not the starting LBA (Invalid Protection Information).
    pub fn of(sqe: &SubmissionEntry, pi_type: PiType) -> Result<PiCommand, Refusal> {
        let bits = sqe.prinfo();
        if bits & prinfo::PRACT == 0 {
            return Err(Refusal::NoPract);
        }
        if pi_type == PiType::Type1
            && bits & prinfo::CHECK_REF_TAG != 0
            && sqe.ilbrt() != sqe.slba() as u32
        {
            return Err(Refusal::ReferenceTag);
        }
        Ok(PiCommand {
            pi_type,
            prinfo: bits,
            ilbrt: sqe.ilbrt(),
            app: sqe.app_tag(),
        })
    }
    /// The reference tag of the `i`th block of the command: one more per
    /// block on types 1 and 2, the same on type 3.
    pub fn ref_tag(&self, i: u64) -> u32 {
        match self.pi_type {
            PiType::Type1 | PiType::Type2 => self.ilbrt.wrapping_add(i as u32),
            PiType::Type3 => self.ilbrt,
        }
    }
    /// The tuple PRACT generates for the `i`th block, holding `data`.
    pub fn generate(&self, i: u64, data: &[u8]) -> PiTuple {
        PiTuple::generate(data, self.app.0, self.ref_tag(i))
    }
    /// Checks the `i`th block's stored tuple against its data and the
    /// command's expectations.
    pub fn check(&self, i: u64, stored: PiTuple, data: &[u8]) -> Result<(), PiCheck> {
        stored.check(data, self.pi_type, self.prinfo, self.app, self.ref_tag(i))
    }
}

/// Why a protected command was refused before any data moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// PRACT = 0: the PI would cross the bus, which this emulation does
    /// not do.
    NoPract,
    /// A type 1 reference tag check whose ILBRT is not the LBA.
    ReferenceTag,
}
