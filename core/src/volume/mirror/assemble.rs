//! Deciding, from the headers found on the legs, which legs hold the
//! mirror's data. Pure, so every case is a unit test.
//!
//! The rules, for the newest generation `G` found on any leg:
//!
//! - every leg must carry a header of the same mirror, at its own
//!   position, of the same shape;
//! - a leg is in sync only if its own header is of generation `G` and the
//!   table of generation `G` says it is in sync. A leg with an older header
//!   missed a change of membership (it was dropped, or a crash cut the
//!   header writes short): it is stale, even if its old table says
//!   otherwise;
//! - if the mirror was not closed cleanly (`dirty`), legs in sync may
//!   differ in writes that were under way at the crash (one leg written,
//!   the other not). Each leg alone is a state the filesystem recovers
//!   from, but reading both would mix two states, so one leg in sync is
//!   chosen as the source (the caller's preference, or the first) and the
//!   others become stale, to be copied from it before they serve reads.
//!
//! And for the write-intent bitmap (`bitmap.rs`): the mirror's bitmap is
//! the union of every leg's (a crash can leave one leg's header a
//! generation ahead of another's; a region set in either may differ), and
//! a leg not in sync is *covered* (copied only in the bitmap's regions)
//! if its own header carries a bitmap, says the leg was in sync, and is of
//! a generation the newest bitmap records (`since`). Otherwise (a version
//! 1 mirror, a leg that was mid-copy or never in sync) it is copied whole.

use alloc::vec::Vec;

use super::super::header::{Bitmap, Header, Recorded};
use super::super::{VolumeError, MAX_LEGS};
use super::LegState;

/// The mirror as its headers describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assembly {
    /// The mirror's identity.
    pub uuid: u64,
    /// The newest generation found.
    pub generation: u64,
    /// Capacity in logical blocks.
    pub data_blocks: u64,
    /// Logical block size.
    pub block_size: u32,
    /// Every leg's state from now on.
    pub table: [Recorded; MAX_LEGS],
    /// The newest header says the mirror was not closed cleanly.
    pub dirty: bool,
    /// The union of the legs' bitmaps, with the newest header's region
    /// size and `since` (`None`: the newest header has no bitmap).
    pub bitmap: Option<Bitmap>,
    /// Bit per leg not in sync whose resync may copy only the bitmap's
    /// regions.
    pub covered: u32,
}

/// Assembles a mirror from each leg's newest intact header (`None`: none
/// found), preferring leg `prefer` as the source after an unclean
/// shutdown.
pub fn assemble(
    headers: &[Option<Header>],
    prefer: Option<usize>,
) -> Result<Assembly, VolumeError> {
    let legs = headers.len();
    if legs == 0 {
        return Err(VolumeError::NoLegs);
    }
    if legs > MAX_LEGS {
        return Err(VolumeError::TooManyLegs);
    }
    let found: Vec<Header> = headers
        .iter()
        .enumerate()
        .map(|(leg, h)| h.ok_or(VolumeError::NotAMirror { leg }))
        .collect::<Result<_, _>>()?;
    // The first leg with the newest generation speaks for it.
    let newest = found
        .iter()
        .fold(None::<&Header>, |best, h| match best {
            Some(b) if b.generation >= h.generation => Some(b),
            _ => Some(h),
        })
        .copied()
        .ok_or(VolumeError::NoLegs)?;
    for (leg, h) in found.iter().enumerate() {
        let field = if h.uuid != newest.uuid {
            Some("mirror id")
        } else if usize::from(h.legs) != legs {
            Some("leg count")
        } else if usize::from(h.index) != leg {
            Some("position")
        } else if h.data_blocks != newest.data_blocks {
            Some("data blocks")
        } else if h.block_size != newest.block_size {
            Some("block size")
        } else {
            None
        };
        if let Some(field) = field {
            return Err(VolumeError::Foreign { leg, field });
        }
    }
    let mut table = [Recorded::InSync; MAX_LEGS];
    for (leg, h) in found.iter().enumerate() {
        table[leg] = match newest.table[leg] {
            Recorded::InSync if h.generation == newest.generation => Recorded::InSync,
            Recorded::Failed => Recorded::Failed,
            _ => Recorded::Stale,
        };
    }
    let in_sync = |t: &[Recorded; MAX_LEGS], l: usize| t[l] == Recorded::InSync;
    let first = (0..legs)
        .find(|&l| in_sync(&table, l))
        .ok_or(VolumeError::NoLegInSync)?;
    if let Some(p) = prefer {
        if p >= legs {
            return Err(VolumeError::NoSuchLeg);
        }
        if !in_sync(&table, p) {
            let state = match table[p] {
                Recorded::Failed => LegState::Failed,
                _ => LegState::Stale,
            };
            return Err(VolumeError::LegState { leg: p, state });
        }
    }
    if newest.dirty {
        let source = prefer.unwrap_or(first);
        for (leg, t) in table.iter_mut().enumerate().take(legs) {
            if leg != source && *t == Recorded::InSync {
                *t = Recorded::Stale;
            }
        }
    }
    let bitmap = newest.bitmap.map(|mut union| {
        for other in found.iter().filter_map(|h| h.bitmap) {
            if other.shift == union.shift {
                for (u, o) in union.bits.iter_mut().zip(other.bits) {
                    *u |= o;
                }
            }
        }
        union
    });
    let covered = (0..legs)
        .filter(|&leg| table[leg] != Recorded::InSync)
        .filter(|&leg| {
            let own = &found[leg];
            matches!((bitmap, own.bitmap), (Some(b), Some(o)) if o.shift == b.shift
                && own.generation >= b.since
                && own.table[leg] == Recorded::InSync)
        })
        .fold(0u32, |m, leg| m | 1 << leg);
    Ok(Assembly {
        uuid: newest.uuid,
        generation: newest.generation,
        data_blocks: newest.data_blocks,
        block_size: newest.block_size,
        table,
        dirty: newest.dirty,
        bitmap,
        covered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Recorded::*;

    fn header(index: u8, generation: u64, dirty: bool, states: &[Recorded]) -> Option<Header> {
        let mut table = [InSync; MAX_LEGS];
        table[..states.len()].copy_from_slice(states);
        Some(Header {
            block_size: 4096,
            uuid: 42,
            generation,
            data_blocks: 1000,
            legs: states.len() as u8,
            index,
            dirty,
            table,
            bitmap: Some(Bitmap::empty(8, 0)),
        })
    }

    fn states(a: &Assembly, legs: usize) -> Vec<Recorded> {
        a.table[..legs].to_vec()
    }

    #[test]
    fn a_clean_mirror_keeps_every_leg_in_sync() {
        let h = [
            header(0, 5, false, &[InSync, InSync]),
            header(1, 5, false, &[InSync, InSync]),
        ];
        let a = assemble(&h, None).unwrap();
        assert_eq!(states(&a, 2), [InSync, InSync]);
        assert!(!a.dirty);
        assert_eq!(a.generation, 5);
    }

    #[test]
    fn after_a_crash_one_leg_is_the_source_and_the_others_are_copied() {
        let h = [
            header(0, 5, true, &[InSync, InSync]),
            header(1, 5, true, &[InSync, InSync]),
        ];
        assert_eq!(states(&assemble(&h, None).unwrap(), 2), [InSync, Stale]);
        assert_eq!(states(&assemble(&h, Some(1)).unwrap(), 2), [Stale, InSync]);
    }

    #[test]
    fn a_leg_with_an_older_header_missed_a_change_and_is_stale() {
        // Leg 1 was dropped at generation 6; its own header still says 5.
        let h = [
            header(0, 6, true, &[InSync, Failed]),
            header(1, 5, true, &[InSync, InSync]),
        ];
        assert_eq!(states(&assemble(&h, None).unwrap(), 2), [InSync, Failed]);
        // A crash cut the header writes of generation 6 short.
        let h = [
            header(0, 6, false, &[InSync, InSync]),
            header(1, 5, false, &[InSync, InSync]),
        ];
        assert_eq!(states(&assemble(&h, None).unwrap(), 2), [InSync, Stale]);
        // Its position in the newest table does not rescue it.
        assert_eq!(
            assemble(&h, Some(1)),
            Err(VolumeError::LegState {
                leg: 1,
                state: LegState::Stale
            })
        );
    }

    #[test]
    fn mirrors_that_cannot_be_assembled_say_why() {
        let good = header(0, 3, false, &[InSync, InSync]);
        assert_eq!(
            assemble(&[good, None], None),
            Err(VolumeError::NotAMirror { leg: 1 })
        );
        let mut other = header(1, 3, false, &[InSync, InSync]);
        if let Some(h) = other.as_mut() {
            h.uuid = 7;
        }
        assert_eq!(
            assemble(&[good, other], None),
            Err(VolumeError::Foreign {
                leg: 1,
                field: "mirror id"
            })
        );
        let swapped = [
            header(1, 3, false, &[InSync, InSync]),
            header(0, 3, false, &[InSync, InSync]),
        ];
        assert_eq!(
            assemble(&swapped, None),
            Err(VolumeError::Foreign {
                leg: 0,
                field: "position"
            })
        );
        let none = [
            header(0, 3, true, &[Failed, Stale]),
            header(1, 3, true, &[Failed, Stale]),
        ];
        assert_eq!(assemble(&none, None), Err(VolumeError::NoLegInSync));
        assert_eq!(
            assemble(&[good], None),
            Err(VolumeError::Foreign {
                leg: 0,
                field: "leg count"
            })
        );
        assert_eq!(assemble(&[], None), Err(VolumeError::NoLegs));
        let h = [good, header(1, 3, false, &[InSync, InSync])];
        assert_eq!(assemble(&h, Some(2)), Err(VolumeError::NoSuchLeg));
    }

    #[test]
    fn the_bitmap_is_the_union_and_only_legs_that_left_in_sync_are_covered() {
        let with_bits = |h: Option<Header>, byte: u8, since: u64| {
            h.map(|mut h| {
                let mut b = Bitmap::empty(8, since);
                b.bits[0] = byte;
                h.bitmap = Some(b);
                h
            })
        };
        // A crash: leg 0's header a generation ahead (region 0 cleared
        // there), leg 1's still has it. The union keeps it.
        let h = [
            with_bits(header(0, 6, true, &[InSync, InSync]), 0b10, 1),
            with_bits(header(1, 5, true, &[InSync, InSync]), 0b11, 1),
        ];
        let a = assemble(&h, None).unwrap();
        assert_eq!(a.bitmap.map(|b| b.bits[0]), Some(0b11));
        assert_eq!(a.covered, 0b10, "leg 1 left in sync at generation 5");
        // Left before the bitmap's records begin: copied whole.
        let h = [
            with_bits(header(0, 6, true, &[InSync, Failed]), 0, 6),
            with_bits(header(1, 5, true, &[InSync, InSync]), 0, 1),
        ];
        assert_eq!(assemble(&h, None).unwrap().covered, 0);
        // Its own header says it was being copied: copied whole.
        let h = [
            with_bits(header(0, 6, true, &[InSync, Stale]), 0, 1),
            with_bits(header(1, 6, true, &[InSync, Stale]), 0, 1),
        ];
        assert_eq!(assemble(&h, None).unwrap().covered, 0);
        // A version 1 mirror has no bitmap: every return is a whole copy.
        let mut old = [
            header(0, 6, true, &[InSync, InSync]),
            header(1, 6, true, &[InSync, InSync]),
        ];
        for h in old.iter_mut().flatten() {
            h.bitmap = None;
        }
        let a = assemble(&old, None).unwrap();
        assert_eq!((a.bitmap, a.covered), (None, 0));
    }
}
