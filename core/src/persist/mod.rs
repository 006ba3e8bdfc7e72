//! Durability: the on-disk format, the metadata log, checkpoints and
//! recovery.
//!
//! Data blocks are written in place. Metadata lives in memory and reaches
//! the device two ways: the log, where a sync appends its inode's state
//! (size and extents, built from the in-memory inode) and any namespace
//! changes; and checkpoints, full images of the durable metadata written
//! to alternating slots when the log fills, after which a superblock write
//! moves the log's replay point. Recovery reads the newest valid superblock,
//! the checkpoint it names, and replays log writes while their checksums,
//! filesystem id and sequence numbers follow on. It writes nothing, so a
//! crash during recovery changes nothing.
//!
//! Ordering rules that make a crash safe (docs/design.md argues each):
//! a file's data is written and flushed before the log write that maps it
//! (and that log write is FUA); a freed block is not reused until a durable
//! record stops referencing it; a checkpoint is built from the durable
//! metadata, never from in-memory state.

mod blockio;
pub mod format;
pub mod record;

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::String;
use alloc::vec::Vec;

use crate::dev::BlockDevice;
use crate::error::{Error, Result};
use crate::units::{BlockNo, Nanos, PAGE_SIZE};
pub(crate) use blockio::BlockIo;
use format::{Frame, Layout, Superblock, FRAME_CKPT, FRAME_LOG};
use record::{Record, Shadow};

/// Frames kept out of the page cache for metadata I/O.
pub const META_FRAMES: u32 = 32;

/// A block freed in memory but still referenced by durable metadata.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingFree {
    pub(crate) ino: u64,
    pub(crate) dev: BlockNo,
    pub(crate) len: u64,
    /// The inode's metadata sequence after the free: a durable state
    /// captured at or after it no longer references the blocks.
    pub(crate) seq: u64,
}

/// An inode state captured by a sync, waiting to be logged.
#[derive(Clone, Debug)]
pub(crate) struct Captured {
    pub(crate) seq: u64,
    pub(crate) record: Record,
}

/// The journal's mutable state, behind one short spin lock.
#[derive(Debug)]
pub(crate) struct JState {
    pub(crate) next_lsn: u64,
    /// Next log block to write (relative to the log's start).
    pub(crate) pos: u64,
    /// First live log block (replay starts here).
    pub(crate) head: u64,
    pub(crate) generation: u64,
    pub(crate) ckpt_slot: u32,
    pub(crate) next_ticket: u64,
    pub(crate) durable_ticket: u64,
    pub(crate) queue: Vec<(u64, Option<Captured>)>,
    pub(crate) pending_ns: Vec<Record>,
    pub(crate) pending_frees: Vec<PendingFree>,
    /// Per inode: the metadata sequence of its newest durable state.
    pub(crate) durable_seq: BTreeMap<u64, u64>,
    /// Inodes whose removal is durable.
    pub(crate) removed: BTreeSet<u64>,
    pub(crate) shadow: Shadow,
}

impl JState {
    pub(crate) fn releasable(&self, f: &PendingFree) -> bool {
        self.removed.contains(&f.ino) || self.durable_seq.get(&f.ino).is_some_and(|&s| s >= f.seq)
    }
}

/// The metadata log of a mounted filesystem.
#[derive(Debug)]
pub(crate) struct Journal {
    pub(crate) layout: Layout,
    pub(crate) uuid: u64,
    pub(crate) lba_size: u32,
    /// First frame of the metadata frames.
    pub(crate) meta_frame: u32,
    /// Serialises log writes and checkpoints; taken with no other lock held.
    pub(crate) commit_lock: crate::lock::RangeLock,
    pub(crate) st: crate::sync::Mutex<JState>,
}

/// What recovery found.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// The durable metadata.
    pub shadow: Shadow,
    /// The superblock used.
    pub superblock: Option<Superblock>,
    /// Log writes replayed.
    pub log_writes: u64,
    /// Records replayed.
    pub records: u64,
    /// Last log sequence number applied.
    pub last_lsn: u64,
    /// Where the next log write goes.
    pub pos: u64,
    /// Problems that do not stop a mount (a damaged superblock copy).
    pub notes: Vec<String>,
}

fn corrupt(block: u64, what: &'static str) -> Error {
    Error::Corrupt { block, what }
}

/// Reads superblocks, the checkpoint and the log, and returns the durable
/// metadata. Writes nothing. With `strict`, metadata that breaks an
/// invariant is an error; without, its problems are returned as notes.
pub(crate) fn recover<D: BlockDevice>(
    io: &mut BlockIo<'_, D>,
    capacity_blocks: u64,
    strict: bool,
) -> Result<Recovered> {
    let mut out = Recovered::default();
    let mut best: Option<Superblock> = None;
    let mut first_err = None;
    for b in 0..2u64 {
        let block = io.read(b, 1)?;
        match Superblock::decode(&block) {
            Ok(sb) if sb.layout.blocks <= capacity_blocks => {
                if best.is_none_or(|x| sb.generation > x.generation) {
                    best = Some(sb);
                }
            }
            Ok(_) => {
                out.notes.push(alloc::format!(
                    "superblock copy {b}: larger than the device"
                ));
                first_err.get_or_insert((b, "superblock describes a larger device"));
            }
            Err(e) => {
                out.notes.push(alloc::format!("superblock copy {b}: {e}"));
                first_err.get_or_insert((b, e));
            }
        }
    }
    let Some(sb) = best else {
        let (b, e) = first_err.unwrap_or((0, "no superblock"));
        return Err(corrupt(b, e));
    };
    out.superblock = Some(sb);
    let layout = sb.layout;
    // The checkpoint image.
    let start = layout.ckpt_slot(sb.ckpt_slot);
    let first = io.read(start, 1)?;
    let (frame, crc) =
        Frame::header(&first).ok_or(corrupt(start, "checkpoint header is invalid"))?;
    if frame.kind != FRAME_CKPT || frame.uuid != sb.uuid || frame.lsn != sb.ckpt_lsn {
        return Err(corrupt(start, "checkpoint does not match the superblock"));
    }
    if u64::from(frame.blocks) > layout.ckpt_blocks {
        return Err(corrupt(start, "checkpoint is larger than its slot"));
    }
    let bytes = if frame.blocks > 1 {
        io.read(start, frame.blocks as usize)?
    } else {
        first
    };
    let payload = Frame::payload(&bytes, &frame, crc)
        .ok_or(corrupt(start, "checkpoint checksum mismatch"))?;
    let records = Record::decode_all(payload)
        .map_err(|_| corrupt(start, "checkpoint record is malformed"))?;
    for r in &records {
        out.shadow.apply(r).map_err(|e| corrupt(start, e))?;
    }
    // The log, from the replay point, while it follows on.
    let mut pos = sb.log_head;
    let mut lsn = sb.ckpt_lsn + 1;
    let mut scanned = 0;
    while scanned < layout.log_blocks {
        let Some((bytes, f, at)) =
            read_log_frame(io, &layout, sb.uuid, lsn, pos)?.or(if pos != 0 {
                read_log_frame(io, &layout, sb.uuid, lsn, 0)?
            } else {
                None
            })
        else {
            break;
        };
        let at_block = layout.log_start + at;
        let records =
            Record::decode_all(&bytes).map_err(|_| corrupt(at_block, "log record is malformed"))?;
        for r in &records {
            out.shadow.apply(r).map_err(|e| corrupt(at_block, e))?;
        }
        out.records += records.len() as u64;
        out.log_writes += 1;
        scanned += u64::from(f.blocks)
            + if at != pos {
                layout.log_blocks - pos
            } else {
                0
            };
        pos = (at + u64::from(f.blocks)) % layout.log_blocks;
        lsn += 1;
    }
    out.last_lsn = lsn - 1;
    out.pos = pos;
    let problems = out.shadow.problems(&layout);
    if strict && !problems.is_empty() {
        return Err(corrupt(
            layout.data_start,
            "metadata is inconsistent (run fsck for details)",
        ));
    }
    out.notes.extend(problems);
    Ok(out)
}

/// Reads the log frame at relative block `pos` if it is the one expected.
fn read_log_frame<D: BlockDevice>(
    io: &mut BlockIo<'_, D>,
    layout: &Layout,
    uuid: u64,
    lsn: u64,
    pos: u64,
) -> Result<Option<(Vec<u8>, Frame, u64)>> {
    let first = io.read(layout.log_start + pos, 1)?;
    let Some((f, crc)) = Frame::header(&first) else {
        return Ok(None);
    };
    if f.kind != FRAME_LOG
        || f.uuid != uuid
        || f.lsn != lsn
        || pos + u64::from(f.blocks) > layout.log_blocks
    {
        return Ok(None);
    }
    let bytes = if f.blocks > 1 {
        io.read(layout.log_start + pos, f.blocks as usize)?
    } else {
        first
    };
    Ok(Frame::payload(&bytes, &f, crc).map(|p| (p.to_vec(), f, pos)))
}

/// Writes an empty filesystem: an empty checkpoint in slot 0 and a
/// superblock naming it; the other superblock copy is zeroed so no older
/// filesystem's superblock can win.
pub(crate) fn format<D: BlockDevice>(
    io: &mut BlockIo<'_, D>,
    layout: Layout,
    uuid: u64,
    lba_size: u32,
) -> Result<()> {
    let image = Frame::encode(FRAME_CKPT, uuid, 0, &[]);
    io.write(layout.ckpt_slot(0), &image, false)?;
    io.write(layout.log_start, &[0u8; PAGE_SIZE], false)?;
    io.write(0, &[0u8; PAGE_SIZE], false)?;
    io.flush()?;
    let sb = Superblock {
        uuid,
        generation: 1,
        lba_size,
        layout,
        ckpt_slot: 0,
        ckpt_lsn: 0,
        log_head: 0,
    };
    io.write(1, &sb.encode(), true)?;
    io.flush()?;
    Ok(())
}

/// What `check` found.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// Every problem found; empty means clean.
    pub problems: Vec<String>,
    /// Files in the durable metadata.
    pub files: usize,
    /// Data blocks in use.
    pub blocks_used: u64,
    /// Log writes replayed.
    pub log_writes: u64,
    /// Notes that are not problems.
    pub notes: Vec<String>,
}

/// Checks a filesystem image without changing it: superblocks, checkpoint,
/// log, and every metadata invariant (extents inside the data area, no
/// block owned twice, nothing mapped past EOF, names unique).
pub fn check<D: BlockDevice>(dev: &D, clock: fn() -> Nanos, idle: fn()) -> Result<CheckReport> {
    let frames = crate::dev::FrameArena::frame_count(dev.frames());
    if frames < 1 {
        return Err(Error::Config("the device offers no DMA frames"));
    }
    let first = frames.saturating_sub(META_FRAMES);
    let mut io = BlockIo::new(dev, first..frames, clock, idle)?;
    let mut report = CheckReport::default();
    match recover(&mut io, dev.geometry().capacity_pages(), false) {
        Ok(r) => {
            report.files = r.shadow.files.len();
            report.blocks_used = r
                .shadow
                .files
                .values()
                .flat_map(|f| f.extents.iter())
                .map(|x| x.len)
                .sum();
            report.log_writes = r.log_writes;
            let layout = r.superblock.map(|s| s.layout);
            let invariant = layout.map(|l| r.shadow.problems(&l)).unwrap_or_default();
            for n in r.notes {
                if invariant.contains(&n) {
                    report.problems.push(n);
                } else {
                    report.notes.push(n);
                }
            }
        }
        Err(Error::Corrupt { block, what }) => report
            .problems
            .push(alloc::format!("block {block}: {what}")),
        Err(e) => return Err(e),
    }
    Ok(report)
}
