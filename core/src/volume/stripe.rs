//! [`Stripe`]: RAID-0 over legs that share one frame arena.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use super::fanout::Fanout;
use super::split::StripeMap;
use super::tally::Tally;
use super::{check_legs, VolumeError};
use crate::dev::requests::{Merge, Requests};
use crate::dev::{BlockDevice, Command, Completion, DevError, DeviceQueue, Geometry, Tag};
use crate::stats::DeviceCounts;
use crate::units::{FrameId, Lba, Nanos, PAGE_SIZE};

/// Blocks dealt to the legs in chunks, round robin.
///
/// The legs carry no label: the order they are given in is the layout, so
/// they must always be given in the same order.
#[derive(Debug)]
pub struct Stripe<D> {
    legs: Vec<D>,
    map: StripeMap,
    geometry: Geometry,
    /// Every queue's commands and errors per leg.
    tally: Arc<Tally>,
}

impl<D: BlockDevice> Stripe<D> {
    /// A stripe over `legs`, in chunks of `chunk_bytes` (a multiple of
    /// 4 KiB). The legs must share one frame arena and one block size.
    pub fn new(legs: Vec<D>, chunk_bytes: u64) -> Result<Stripe<D>, VolumeError> {
        let block_size = check_legs(&legs)?;
        if chunk_bytes == 0 || chunk_bytes % PAGE_SIZE as u64 != 0 {
            return Err(VolumeError::ChunkSize);
        }
        let smallest = legs.iter().map(|l| l.geometry().capacity).min();
        let map = StripeMap::new(
            legs.len(),
            chunk_bytes / u64::from(block_size),
            smallest.unwrap_or(0),
        )?;
        let leg_max = legs.iter().map(|l| l.geometry().max_transfer).min();
        let depth = legs.iter().map(|l| l.geometry().queue_depth).min();
        let geometry = Geometry {
            block_size,
            capacity: map.capacity(),
            // A request this large gives every leg about one transfer.
            max_transfer: leg_max.unwrap_or(0).saturating_mul(legs.len() as u32) / PAGE_SIZE as u32
                * PAGE_SIZE as u32,
            queue_depth: depth.unwrap_or(0),
            // A FUA write goes to its legs as FUA writes: only if all take
            // them.
            fua: legs.iter().all(|l| l.geometry().fua),
        };
        geometry.validate().map_err(|_| VolumeError::Leg {
            leg: 0,
            error: DevError::BadGeometry,
        })?;
        Ok(Stripe {
            tally: Tally::new(legs.len()),
            legs,
            map,
            geometry,
        })
    }
    /// The legs, in layout order.
    pub fn legs(&self) -> &[D] {
        &self.legs
    }
    /// How blocks are dealt to the legs.
    pub fn map(&self) -> &StripeMap {
        &self.map
    }
}

impl<D: BlockDevice> BlockDevice for Stripe<D> {
    type Queue = StripeQueue<D::Queue>;
    type Frames = D::Frames;
    fn geometry(&self) -> Geometry {
        self.geometry
    }
    fn frames(&self) -> &D::Frames {
        // Every leg has this arena (checked in `new`), and there is a leg.
        self.legs[0].frames()
    }
    fn open_queue(&self) -> Result<Self::Queue, DevError> {
        let queues = self
            .legs
            .iter()
            .map(|l| l.open_queue().map(Some))
            .collect::<Result<Vec<_>, _>>()?;
        let n = self.legs.len();
        Ok(StripeQueue {
            fanout: Fanout::new(queues, self.tally.clone()),
            map: self.map,
            geometry: self.geometry,
            leg_frames: self
                .legs
                .iter()
                .map(|l| l.geometry().max_frames_per_command())
                .collect(),
            ops: Requests::default(),
            shares: vec![Share::default(); n],
        })
    }
    fn leg_counts(&self) -> Vec<DeviceCounts> {
        let mut counts = self.tally.sum();
        for (c, leg) in counts.iter_mut().zip(&self.legs) {
            c.health = leg.health();
        }
        counts
    }
}

/// One leg's part of a request: a contiguous range on the leg, and for
/// data commands the frames for it, gathered from the request's.
#[derive(Clone, Debug, Default)]
struct Share {
    start: Option<Lba>,
    blocks: u64,
    frames: Vec<FrameId>,
}

/// A queue of a [`Stripe`]: one queue on each leg, owned, so nothing here
/// is shared with other queues.
#[derive(Debug)]
pub struct StripeQueue<Q> {
    fanout: Fanout<Q>,
    map: StripeMap,
    geometry: Geometry,
    /// Most frames one command may carry, per leg.
    leg_frames: Vec<usize>,
    /// Requests, each the merge of its legs' commands.
    ops: Requests<Merge>,
    /// Per leg, the request being split (kept to reuse its buffers).
    shares: Vec<Share>,
}

impl<Q: DeviceQueue> StripeQueue<Q> {
    /// Splits `cmd` into the legs' shares. A data command whose frames
    /// would straddle a chunk boundary (possible only with 512-byte blocks
    /// and a start inside a page) is refused.
    fn split(&mut self, cmd: &Command<'_>) -> Result<(), DevError> {
        for s in &mut self.shares {
            s.start = None;
            s.blocks = 0;
            s.frames.clear();
        }
        let Some((lba, blocks)) = cmd.block_span(&self.geometry) else {
            return Ok(());
        };
        let bpp = self.geometry.blocks_per_page();
        let frames = match cmd {
            Command::Read { frames, .. } | Command::Write { frames, .. } => Some(*frames),
            _ => None,
        };
        for p in self.map.pieces(lba.0, blocks) {
            let share = self.shares.get_mut(p.leg).ok_or(DevError::InvalidRequest)?;
            share.start.get_or_insert(p.leg_lba);
            share.blocks += p.blocks;
            if let Some(frames) = frames {
                if p.offset % bpp != 0 || p.blocks % bpp != 0 {
                    return Err(DevError::InvalidRequest);
                }
                let (a, b) = (
                    (p.offset / bpp) as usize,
                    ((p.offset + p.blocks) / bpp) as usize,
                );
                let part = frames.get(a..b).ok_or(DevError::InvalidRequest)?;
                share.frames.extend_from_slice(part);
            }
        }
        Ok(())
    }

    /// A command that lies inside one chunk and fits one leg command: that
    /// leg and the command with its address on the leg (the common case of
    /// small requests, sent with no copying of frame lists).
    fn one_leg<'c>(&self, cmd: &Command<'c>) -> Option<(usize, Command<'c>)> {
        let (lba, blocks) = cmd.block_span(&self.geometry)?;
        let chunk = self.map.chunk_blocks();
        if lba.0 % chunk + blocks > chunk {
            return None;
        }
        let (leg, at) = self.map.locate(lba.0);
        let max = *self.leg_frames.get(leg)?;
        let c = match *cmd {
            Command::Read { frames, .. } if frames.len() <= max => {
                Command::Read { lba: at, frames }
            }
            Command::Write { frames, fua, .. } if frames.len() <= max => Command::Write {
                lba: at,
                frames,
                fua,
            },
            Command::Deallocate { .. } => Command::Deallocate { lba: at, blocks },
            Command::WriteZeroes { .. } => Command::WriteZeroes { lba: at, blocks },
            _ => return None,
        };
        Some((leg, c))
    }

    /// Sends every leg its share of `cmd` as pieces of operation `op`;
    /// returns how many leg commands went out, and the first refusal.
    fn send_shares(&mut self, op: u32, cmd: &Command<'_>) -> (u32, Option<DevError>) {
        let bpp = self.geometry.blocks_per_page();
        let (mut sent, mut error) = (0, None);
        let mut send =
            |fanout: &mut Fanout<Q>, leg: usize, c: &Command<'_>| match fanout.send(leg, op, c) {
                Ok(()) => sent += 1,
                Err(e) => {
                    error.get_or_insert(e);
                }
            };
        if let Command::Flush = cmd {
            for leg in 0..self.shares.len() {
                send(&mut self.fanout, leg, cmd);
            }
            return (sent, error);
        }
        for (leg, share) in self.shares.iter().enumerate() {
            let Some(start) = share.start else {
                continue;
            };
            match *cmd {
                Command::Read { .. } | Command::Write { .. } => {
                    let max = self.leg_frames[leg];
                    for (i, part) in share.frames.chunks(max).enumerate() {
                        let lba = Lba(start.0 + (i * max) as u64 * bpp);
                        let c = match *cmd {
                            Command::Write { fua, .. } => Command::Write {
                                lba,
                                frames: part,
                                fua,
                            },
                            _ => Command::Read { lba, frames: part },
                        };
                        send(&mut self.fanout, leg, &c);
                    }
                }
                Command::Deallocate { .. } => send(
                    &mut self.fanout,
                    leg,
                    &Command::Deallocate {
                        lba: start,
                        blocks: share.blocks,
                    },
                ),
                Command::WriteZeroes { .. } => send(
                    &mut self.fanout,
                    leg,
                    &Command::WriteZeroes {
                        lba: start,
                        blocks: share.blocks,
                    },
                ),
                Command::Flush => {}
            }
        }
        (sent, error)
    }
}

impl<Q: DeviceQueue> DeviceQueue for StripeQueue<Q> {
    fn submit(&mut self, cmd: &Command<'_>) -> Result<Tag, DevError> {
        cmd.validate(&self.geometry)?;
        if self.ops.in_flight() >= self.geometry.queue_depth as usize {
            return Err(DevError::QueueFull);
        }
        let (id, _) = self.ops.take();
        let (sent, error) = match self.one_leg(cmd) {
            Some((leg, c)) => match self.fanout.send(leg, id, &c) {
                Ok(()) => (1, None),
                Err(e) => (0, Some(e)),
            },
            None => match self.split(cmd) {
                Ok(()) => self.send_shares(id, cmd),
                Err(e) => (0, Some(e)),
            },
        };
        if sent == 0 {
            self.ops.withdraw(id);
            return Err(error.unwrap_or(DevError::InvalidRequest));
        }
        if let Some(op) = self.ops.get_mut(id) {
            *op = Merge::new(sent);
            if let Some(e) = error {
                op.fail(e);
            }
        }
        Ok(Tag(id))
    }

    fn poll(&mut self, now: Nanos, max: usize, done: &mut dyn FnMut(Completion)) -> usize {
        let ops = &mut self.ops;
        self.fanout.poll(now, max, &mut |id, _leg, result| {
            if ops.get_mut(id).is_some_and(|op| op.piece_done(result)) {
                let result = ops.get(id).map_or(Ok(()), Merge::result);
                ops.finish(id, result);
            }
        });
        self.ops.hand_back(max, done)
    }

    fn in_flight(&self) -> usize {
        self.ops.in_flight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::ram::{RamDevice, RamFrames};
    use crate::dev::FrameArena;
    use alloc::sync::Arc;

    fn legs(n: usize, bytes: u64, block_size: u32, frames: u32) -> Vec<RamDevice> {
        let arena = Arc::new(RamFrames::new(frames));
        (0..n)
            .map(|_| RamDevice::with_arena(bytes, block_size, arena.clone()).unwrap())
            .collect()
    }

    /// Submits `cmd` and polls until it completes.
    fn run<Q: DeviceQueue>(q: &mut Q, cmd: Command<'_>) -> Result<(), DevError> {
        let tag = q.submit(&cmd)?;
        let mut out = None;
        for _ in 0..100 {
            q.poll(Nanos(0), 64, &mut |c| {
                if c.tag == tag {
                    out = Some(c.result);
                }
            });
            if let Some(r) = out {
                return r;
            }
        }
        panic!("command never completed");
    }

    /// Frame `f` filled with bytes that name `(seed, f, byte)`.
    fn fill(arena: &RamFrames, frames: &[FrameId], seed: u8) {
        for (i, f) in frames.iter().enumerate() {
            let page: Vec<u8> = (0..PAGE_SIZE)
                .map(|b| seed ^ (i as u8).wrapping_mul(31) ^ (b / 512) as u8 ^ b as u8)
                .collect();
            arena.write(*f, 0, &page).unwrap();
        }
    }

    fn contents(arena: &RamFrames, frames: &[FrameId]) -> Vec<u8> {
        let mut out = vec![0u8; frames.len() * PAGE_SIZE];
        for (i, f) in frames.iter().enumerate() {
            arena
                .read(*f, 0, &mut out[i * PAGE_SIZE..][..PAGE_SIZE])
                .unwrap();
        }
        out
    }

    /// The volume's blocks `[lba, lba + n)` as the legs hold them, found
    /// block by block with the map.
    fn on_legs(s: &Stripe<RamDevice>, lba: u64, n: u64) -> Vec<u8> {
        let bs = u64::from(s.geometry().block_size);
        let mut out = vec![0u8; (n * bs) as usize];
        for b in 0..n {
            let (leg, at) = s.map().locate(lba + b);
            s.legs()[leg].read_raw(at.0 * bs, &mut out[(b * bs) as usize..][..bs as usize]);
        }
        out
    }

    #[test]
    fn data_lands_where_the_map_says_and_reads_back() {
        for (block_size, chunk) in [(4096u32, 8192u64), (512, 4096), (512, 65536)] {
            let s = Stripe::new(legs(3, 1 << 20, block_size, 128), chunk).unwrap();
            let arena = s.frames();
            let mut q = s.open_queue().unwrap();
            let bpp = s.geometry().blocks_per_page();
            let cap = s.geometry().capacity;
            let chunk_blocks = chunk / u64::from(block_size);
            // Page-aligned starts: at a chunk, inside one, the last pages.
            for (lba, pages) in [
                (0, 1),
                (chunk_blocks - bpp, 2),
                (bpp, 17),
                (cap - 5 * bpp, 5),
            ] {
                let src: Vec<FrameId> = (0..pages).map(FrameId).collect();
                let dst: Vec<FrameId> = (64..64 + pages).map(FrameId).collect();
                fill(arena, &src, lba as u8);
                run(
                    &mut q,
                    Command::Write {
                        lba: Lba(lba),
                        frames: &src,
                        fua: false,
                    },
                )
                .unwrap();
                run(
                    &mut q,
                    Command::Read {
                        lba: Lba(lba),
                        frames: &dst,
                    },
                )
                .unwrap();
                let want = contents(arena, &src);
                assert_eq!(contents(arena, &dst), want, "bs {block_size} lba {lba}");
                assert_eq!(
                    on_legs(&s, lba, u64::from(pages) * bpp),
                    want,
                    "on the legs"
                );
            }
        }
    }

    #[test]
    fn flush_reaches_every_leg_and_zeroing_splits_like_data() {
        let s = Stripe::new(legs(2, 1 << 20, 512, 64), 4096).unwrap();
        let mut q = s.open_queue().unwrap();
        let frames: Vec<FrameId> = (0..32).map(FrameId).collect();
        fill(s.frames(), &frames, 9);
        run(
            &mut q,
            Command::Write {
                lba: Lba(0),
                frames: &frames,
                fua: false,
            },
        )
        .unwrap();
        // From the middle of a chunk across several, to the middle of one.
        run(
            &mut q,
            Command::WriteZeroes {
                lba: Lba(3),
                blocks: 45,
            },
        )
        .unwrap();
        run(
            &mut q,
            Command::Deallocate {
                lba: Lba(100),
                blocks: 30,
            },
        )
        .unwrap();
        run(&mut q, Command::Flush).unwrap();
        let got = on_legs(&s, 0, 256);
        let mut want = contents(s.frames(), &frames);
        want[3 * 512..48 * 512].fill(0);
        want[100 * 512..130 * 512].fill(0);
        assert_eq!(got, want);
    }

    #[test]
    fn each_leg_counts_its_share_and_its_own_errors() {
        use crate::dev::fault::{FaultPlan, FaultyDevice};
        use crate::dev::CommandKind;
        let plans = [FaultPlan::new(), FaultPlan::new()];
        let faulty: Vec<_> = legs(2, 1 << 20, 4096, 64)
            .into_iter()
            .zip(&plans)
            .map(|(l, p)| FaultyDevice::new(l, p.clone()))
            .collect();
        let s = Stripe::new(faulty, 4096).unwrap();
        let mut q = s.open_queue().unwrap();
        let frames: Vec<FrameId> = (0..4).map(FrameId).collect();
        let write = Command::Write {
            lba: Lba(0),
            frames: &frames,
            fua: false,
        };
        // Four chunks of one page over two legs: two each, in one command
        // per leg.
        run(&mut q, write).unwrap();
        run(&mut q, Command::Flush).unwrap();
        let c = s.leg_counts();
        assert_eq!(c.len(), 2);
        for leg in &c {
            assert_eq!((leg.writes, leg.write_bytes, leg.flushes), (1, 8192, 1));
            assert_eq!(leg.errors, 0);
        }
        plans[1].fail(CommandKind::Write, 1, DevError::Media);
        assert_eq!(run(&mut q, write), Err(DevError::Media));
        drop(q);
        let c = s.leg_counts();
        assert_eq!((c[0].writes, c[0].errors), (2, 0), "{c:?}");
        assert_eq!((c[1].writes, c[1].errors), (2, 1), "{c:?}");
    }

    #[test]
    fn pieces_that_find_a_leg_queue_full_wait_and_go_later() {
        // Legs 8 deep, one frame per command: a two-page request inside
        // one chunk is two commands on one leg, so 8 requests to leg 0's
        // chunks are 16 commands for a queue that holds 8.
        let small: Vec<RamDevice> = legs(2, 1 << 20, 4096, 64)
            .into_iter()
            .map(|l| {
                l.with_max_transfer(4096)
                    .and_then(|l| l.with_queue_depth(8))
                    .unwrap()
            })
            .collect();
        let s = Stripe::new(small, 8192).unwrap();
        assert_eq!(s.geometry().queue_depth, 8);
        let frames: Vec<FrameId> = (0..16).map(FrameId).collect();
        fill(s.frames(), &frames, 3);
        let mut q = s.open_queue().unwrap();
        for i in 0..8u64 {
            let part = &frames[2 * i as usize..][..2];
            let lba = Lba(i * 4);
            q.submit(&Command::Write {
                lba,
                frames: part,
                fua: false,
            })
            .unwrap();
        }
        assert_eq!(
            q.submit(&Command::Flush),
            Err(DevError::QueueFull),
            "the volume queue is as deep as its legs'"
        );
        let mut done = Vec::new();
        for _ in 0..10 {
            q.poll(Nanos(0), 3, &mut |c| done.push(c));
        }
        assert_eq!(done.len(), 8);
        assert!(done.iter().all(|c| c.result.is_ok()));
        let want = contents(s.frames(), &frames);
        for i in 0..8u64 {
            let part = &want[i as usize * 2 * PAGE_SIZE..][..2 * PAGE_SIZE];
            assert_eq!(on_legs(&s, i * 4, 2), part, "request {i}");
        }
        assert_eq!(q.in_flight(), 0);
    }

    #[test]
    fn legs_and_requests_a_stripe_cannot_take_are_refused() {
        let apart = vec![
            RamDevice::new(1 << 20, 4096, 8).unwrap(),
            RamDevice::new(1 << 20, 4096, 8).unwrap(),
        ];
        assert_eq!(
            Stripe::new(apart, 8192).err(),
            Some(VolumeError::ArenasDiffer)
        );
        let arena = Arc::new(RamFrames::new(8));
        let mixed = vec![
            RamDevice::with_arena(1 << 20, 4096, arena.clone()).unwrap(),
            RamDevice::with_arena(1 << 20, 512, arena).unwrap(),
        ];
        assert_eq!(
            Stripe::new(mixed, 8192).err(),
            Some(VolumeError::BlockSizesDiffer)
        );
        assert_eq!(
            Stripe::new(legs(2, 1 << 20, 512, 8), 6000).err(),
            Some(VolumeError::ChunkSize)
        );
        // A frame that would straddle a chunk boundary (512-byte blocks, a
        // start inside a page).
        let s = Stripe::new(legs(2, 1 << 20, 512, 8), 4096).unwrap();
        let mut q = s.open_queue().unwrap();
        let e = run(
            &mut q,
            Command::Read {
                lba: Lba(4),
                frames: &[FrameId(0)],
            },
        );
        assert_eq!(e, Err(DevError::InvalidRequest));
        // Inside one chunk it is fine.
        let wide = Stripe::new(legs(2, 1 << 20, 512, 8), 65536).unwrap();
        let mut wq = wide.open_queue().unwrap();
        assert_eq!(
            run(
                &mut wq,
                Command::Read {
                    lba: Lba(9),
                    frames: &[FrameId(0)]
                }
            ),
            Ok(())
        );
        let cap = s.geometry().capacity;
        let e = run(
            &mut q,
            Command::Read {
                lba: Lba(cap),
                frames: &[FrameId(0)],
            },
        );
        assert_eq!(e, Err(DevError::OutOfRange));
    }
}
