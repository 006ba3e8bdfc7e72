//! Replacing a leg: a new device takes the place of a failed (or stale)
//! leg and is copied from the legs in sync, as md's `--replace` onto a
//! spare or `--add` after `--remove`.
//!
//! The new device holds no header of this mirror, so the headers alone
//! cannot assemble the mirror. [`Mirror::replace`] reads them, checks the
//! new device is fit to take the place, and assembles the mirror as if the
//! new device carried the oldest header of the leg it replaces: a header
//! of generation 0 is older than any change of membership, so the leg is
//! never taken for in sync (the rule of `assemble`). The leg is then
//! rejoined and copied whole: the write-intent bitmap says where the old
//! leg may differ, and a new device differs everywhere.
//!
//! Refused: a leg in sync (fail it first: replacing it would lose the copy
//! it holds), and a device that carries a header of this mirror at another
//! position (it is another leg) or of another mirror (it belongs to
//! another volume). A header of this mirror at this very position is the
//! old leg coming back, which is a rejoin, and is let through.

use alloc::vec::Vec;

use super::super::header::{Header, Recorded};
use super::super::VolumeError;
use super::{
    assemble, control_fanout, known_headers, read_headers, shape, LegState, Mirror, OpenOptions,
};
use crate::dev::BlockDevice;
use crate::units::Nanos;

impl<D: BlockDevice> Mirror<D> {
    /// Opens the mirror on `legs` (in their positions) with `legs[leg]` a
    /// new device in place of a failed or stale leg, and rejoins it: it is
    /// copied as the mirror is polled ([`settle`](Self::settle) waits for
    /// that). Always opened writable.
    pub fn replace(
        legs: Vec<D>,
        leg: usize,
        options: OpenOptions,
        clock: fn() -> Nanos,
        idle: fn(),
    ) -> Result<Mirror<D>, VolumeError> {
        if leg >= legs.len() {
            return Err(VolumeError::NoSuchLeg);
        }
        let shape = shape(&legs)?;
        let mut fanout = control_fanout(&legs);
        let mut headers = known_headers(read_headers(&legs, &shape, &mut fanout, clock, idle))?;
        let newest = newest_other(&headers, leg)?;
        check_newcomer(headers[leg].as_ref(), &newest, leg)?;
        headers[leg] = Some(Header {
            generation: 0,
            index: leg as u8,
            ..newest
        });
        let mut assembly = assemble(&headers, options.prefer)?;
        super::check_fits(&shape, &assembly)?;
        // A new device holds none of the mirror: it is copied whole,
        // whatever the write-intent bitmap says of the leg it replaces.
        assembly.covered &= !(1 << leg);
        let rejoin = assembly.table[leg] == Recorded::Failed;
        let options = OpenOptions {
            writable: true,
            ..options
        };
        let mirror = Mirror::start(legs, shape, fanout, assembly, options, clock, idle)?;
        if rejoin {
            mirror.rejoin_whole(leg)?;
        }
        Ok(mirror)
    }
}

/// The newest header on the legs other than `leg`, which must say `leg` is
/// not in sync.
fn newest_other(headers: &[Option<Header>], leg: usize) -> Result<Header, VolumeError> {
    let mut newest: Option<Header> = None;
    for (l, h) in headers.iter().enumerate().filter(|(l, _)| *l != leg) {
        let h = h.ok_or(VolumeError::NotAMirror { leg: l })?;
        if newest.is_none_or(|n| h.generation > n.generation) {
            newest = Some(h);
        }
    }
    let newest = newest.ok_or(VolumeError::NoLegs)?;
    if newest.table.get(leg) == Some(&Recorded::InSync) {
        return Err(VolumeError::LegState {
            leg,
            state: LegState::InSync,
        });
    }
    Ok(newest)
}

/// The new device's own header, if any, must not make it another leg of
/// this mirror or a leg of another.
fn check_newcomer(found: Option<&Header>, newest: &Header, leg: usize) -> Result<(), VolumeError> {
    let Some(h) = found else {
        return Ok(());
    };
    let field = if h.uuid != newest.uuid {
        "mirror id"
    } else if usize::from(h.index) != leg {
        "position"
    } else {
        return Ok(());
    };
    Err(VolumeError::Foreign { leg, field })
}

#[cfg(test)]
mod tests {
    use alloc::sync::Arc;
    use alloc::vec;
    use alloc::vec::Vec;

    use super::*;
    use crate::dev::ram::{RamDevice, RamFrames};
    use crate::dev::{Command, DeviceQueue, FrameArena};
    use crate::units::{FrameId, Lba, PAGE_SIZE};

    const LEG_BYTES: u64 = 1 << 20;

    fn clock() -> Nanos {
        Nanos(0)
    }
    fn idle() {}

    fn rams(arena: &Arc<RamFrames>, n: usize) -> Vec<RamDevice> {
        (0..n)
            .map(|_| RamDevice::with_arena(LEG_BYTES, 4096, arena.clone()).unwrap())
            .collect()
    }

    /// Writes page `page` full of `byte` through the mirror.
    fn write(m: &Mirror<RamDevice>, page: u64, byte: u8) {
        m.frames().fill(FrameId(0), 0, PAGE_SIZE, byte).unwrap();
        let mut q = m.open_queue().unwrap();
        let cmd = Command::Write {
            lba: Lba(page),
            frames: &[FrameId(0)],
            fua: true,
        };
        let tag = q.submit(&cmd).unwrap();
        let mut done = None;
        while done.is_none() {
            q.poll(Nanos(0), 8, &mut |c| {
                if c.tag == tag {
                    done = Some(c.result);
                }
            });
        }
        done.unwrap().unwrap();
    }

    /// Page `page` of `leg` (read directly), as its first byte.
    fn leg_page(leg: &RamDevice, page: u64) -> u8 {
        let mut q = leg.open_queue().unwrap();
        let frame = FrameId(100);
        let cmd = Command::Read {
            lba: Lba(page),
            frames: &[frame],
        };
        let tag = q.submit(&cmd).unwrap();
        let mut done = None;
        while done.is_none() {
            q.poll(Nanos(0), 8, &mut |c| {
                if c.tag == tag {
                    done = Some(c.result);
                }
            });
        }
        done.unwrap().unwrap();
        let mut b = [0u8; 1];
        leg.frames().read(frame, 0, &mut b).unwrap();
        b[0]
    }

    #[test]
    fn a_failed_leg_is_replaced_by_a_blank_device_and_copied() {
        let arena = Arc::new(RamFrames::new(128));
        let old = rams(&arena, 2);
        let m = Mirror::create(old.clone(), 7, OpenOptions::default(), clock, idle).unwrap();
        write(&m, 3, 0x5A);
        m.fail_leg(1).unwrap();
        write(&m, 4, 0x6B);
        m.close(clock, idle).unwrap();

        let blank = rams(&arena, 1).remove(0);
        let legs = vec![old[0].clone(), blank.clone()];
        let m = Mirror::replace(legs, 1, OpenOptions::default(), clock, idle).unwrap();
        m.settle(clock, idle).unwrap();
        m.close(clock, idle).unwrap();
        assert_eq!(leg_page(&blank, 3), 0x5A);
        assert_eq!(leg_page(&blank, 4), 0x6B);
        // The new leg now carries the mirror's header: it opens as a leg.
        let m = Mirror::open(
            vec![old[0].clone(), blank],
            OpenOptions::default(),
            clock,
            idle,
        )
        .unwrap();
        let s = m.status();
        assert!(
            s.legs.iter().all(|(state, _)| *state == LegState::InSync),
            "{s:?}"
        );
    }

    #[test]
    fn a_leg_in_sync_another_leg_and_another_mirror_are_refused() {
        let arena = Arc::new(RamFrames::new(128));
        let legs = rams(&arena, 3);
        let m = Mirror::create(legs.clone(), 7, OpenOptions::default(), clock, idle).unwrap();
        m.close(clock, idle).unwrap();
        let other = rams(&arena, 2);
        let o = Mirror::create(other.clone(), 8, OpenOptions::default(), clock, idle).unwrap();
        o.close(clock, idle).unwrap();

        let again = |l: Vec<RamDevice>, leg| {
            Mirror::replace(l, leg, OpenOptions::default(), clock, idle).map(drop)
        };
        let in_sync = again(legs.clone(), 2);
        assert_eq!(
            in_sync,
            Err(VolumeError::LegState {
                leg: 2,
                state: LegState::InSync
            })
        );
        let m = Mirror::open(legs.clone(), OpenOptions::default(), clock, idle).unwrap();
        m.fail_leg(2).unwrap();
        m.close(clock, idle).unwrap();
        let twice = vec![legs[0].clone(), legs[1].clone(), legs[0].clone()];
        assert_eq!(
            again(twice, 2),
            Err(VolumeError::Foreign {
                leg: 2,
                field: "position"
            })
        );
        let foreign = vec![legs[0].clone(), legs[1].clone(), other[0].clone()];
        assert_eq!(
            again(foreign, 2),
            Err(VolumeError::Foreign {
                leg: 2,
                field: "mirror id"
            })
        );
        assert_eq!(again(legs.clone(), 3), Err(VolumeError::NoSuchLeg));
        // The old leg itself is let through: it is copied as on a rejoin.
        again(legs, 2).unwrap();
    }
}
