//! Recovery: from the newest valid superblock, read the metadata index
//! and the records the checkpoint carried beside it, replay the log while its writes follow on, and then make sure the log
//! really ended there. Writes nothing, so a crash during recovery changes
//! nothing.
//!
//! A log write that fails its checksum is the end of the log if nothing
//! after it is newer: the write a crash tore. If an intact write with a
//! later sequence number lies anywhere in the log, the bad one is a hole in
//! the middle (a damaged block), and everything from it on would be lost
//! silently; that is reported as [`Damage::LogHole`] instead.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::format::{
    Frame, Layout, Location, Superblock, CKPT_FRAME_MAX_BLOCKS, FRAME_CKPT, FRAME_LOG, MAX_SEQUENCE,
};
use super::metaio::MetaIo;
use super::pages::{read_tree, runs};
use super::problems::Problem;
use super::record::Record;
use super::shadow::Shadow;
use crate::error::{CheckpointDamage, Damage, Error, Result};
use crate::units::PAGE_SIZE;

/// How recovery treats damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Any damage or broken invariant is an error.
    Mount,
    /// Damage in the log stops replay there and is reported; broken
    /// invariants are listed (fsck, repair).
    Check,
}

/// What recovery found.
#[derive(Clone, Debug)]
pub(crate) struct Recovered {
    /// The durable metadata.
    pub(crate) shadow: Shadow,
    /// The superblock used.
    pub(crate) superblock: Superblock,
    /// Every block the checkpoint occupies (the index's pages, live
    /// pages' copies, the carried chain), as runs in block order.
    pub(crate) chain: Vec<(u64, u64)>,
    /// The carried records' chain, in chain order.
    pub(crate) carry: Vec<(u64, u64)>,
    /// Log writes replayed.
    pub(crate) log_writes: u64,
    /// Records replayed from the log.
    pub(crate) records: u64,
    /// Last log sequence number applied.
    pub(crate) last_lsn: u64,
    /// Highest intact log sequence number anywhere in the log (past
    /// `last_lsn` only if the log has a hole).
    pub(crate) newest_lsn: u64,
    /// Where the next log write goes.
    pub(crate) pos: u64,
    /// Where replay stopped early, and why (only in [`Mode::Check`]).
    pub(crate) damage: Option<(u64, Damage)>,
    /// Broken invariants (only in [`Mode::Check`]; mount refuses them).
    pub(crate) problems: Vec<Problem>,
    /// Things worth saying that are not problems (a damaged superblock
    /// copy while the other is good).
    pub(crate) notes: Vec<String>,
}

fn corrupt(block: u64, damage: Damage) -> Error {
    Error::Corrupt { block, damage }
}

/// How useful a superblock error is to report when no copy is usable: a
/// version or size mismatch says more than a bad checksum.
fn rank(d: &Damage) -> u8 {
    match d {
        Damage::Version { .. } => 6,
        Damage::DeviceTooSmall { .. } => 5,
        Damage::BlockSize { .. } => 4,
        Damage::Features(_) => 3,
        Damage::SuperblockFields(_) => 2,
        Damage::SuperblockChecksum => 1,
        _ => 0,
    }
}

/// Picks the newest usable superblock copy for a device of
/// `device_blocks` blocks of `lba_size` bytes.
async fn superblock<M: MetaIo>(
    io: &M,
    device_blocks: u64,
    lba_size: u32,
    notes: &mut Vec<String>,
) -> Result<Superblock> {
    let mut best: Option<Superblock> = None;
    let mut worst: Option<(u64, Damage)> = None;
    for b in 0..2u64 {
        let block = io.read(b, 1).await?;
        let found = Superblock::decode(&block).and_then(|sb| {
            if sb.layout.blocks > device_blocks {
                Err(Damage::DeviceTooSmall {
                    fs_blocks: sb.layout.blocks,
                    device_blocks,
                })
            } else if sb.lba_size != lba_size {
                Err(Damage::BlockSize {
                    fs: sb.lba_size,
                    device: lba_size,
                })
            } else {
                Ok(sb)
            }
        });
        match found {
            Ok(sb) => {
                if best.is_none_or(|x| sb.generation > x.generation) {
                    best = Some(sb);
                }
            }
            Err(d) => {
                notes.push(alloc::format!("superblock copy {b}: {d}"));
                if worst.is_none_or(|(_, w)| rank(&d) > rank(&w)) {
                    worst = Some((b, d));
                }
            }
        }
    }
    best.ok_or_else(|| {
        let (b, d) = worst.unwrap_or((0, Damage::NotPollfs));
        corrupt(b, d)
    })
}

/// Reads the chain of records the checkpoint carried (see
/// [`Superblock::carry`]); returns their bytes and its runs.
async fn carried<M: MetaIo>(io: &M, sb: &Superblock) -> Result<(Vec<u8>, Vec<(u64, u64)>)> {
    let layout = sb.layout;
    let mut stream = Vec::new();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    if sb.carry.blocks == 0 {
        return Ok((stream, runs));
    }
    // Start -> end of every run so far, to catch a chain that loops.
    let mut taken: BTreeMap<u64, u64> = BTreeMap::new();
    let mut loc = sb.carry;
    let mut total = 0u64;
    for index in 0u32.. {
        let blocks = u64::from(loc.blocks);
        let bad = |what| corrupt(loc.block, Damage::Checkpoint(what));
        if blocks == 0 || blocks > CKPT_FRAME_MAX_BLOCKS || !layout.in_data(loc.block, blocks) {
            return Err(bad(CheckpointDamage::OutsideData { index }));
        }
        let end = loc.block + blocks;
        let overlaps = taken
            .range(..end)
            .next_back()
            .is_some_and(|(_, &e)| e > loc.block);
        total += blocks;
        if overlaps || total > sb.carry_total {
            return Err(bad(CheckpointDamage::Loops { index }));
        }
        taken.insert(loc.block, end);
        let bytes = io.read(loc.block, blocks as usize).await?;
        let (f, crc) = Frame::header(&bytes).ok_or(bad(CheckpointDamage::Header { index }))?;
        if f.kind != FRAME_CKPT
            || f.uuid != sb.uuid
            || f.lsn != sb.ckpt_lsn
            || f.index != index
            || u64::from(f.blocks) != blocks
        {
            return Err(bad(CheckpointDamage::Foreign { index }));
        }
        let payload =
            Frame::payload(&bytes, &f, crc).ok_or(bad(CheckpointDamage::Checksum { index }))?;
        stream.extend_from_slice(payload);
        runs.push((loc.block, blocks));
        if f.next.blocks == 0 {
            break;
        }
        loc = f.next;
    }
    if total != sb.carry_total {
        return Err(corrupt(
            sb.carry.block,
            Damage::Checkpoint(CheckpointDamage::Short {
                found: total,
                expected: sb.carry_total,
            }),
        ));
    }
    Ok((stream, runs))
}

/// The log write with sequence `lsn` at relative block `at`, if it is there
/// and intact.
async fn log_frame<M: MetaIo>(
    io: &M,
    layout: &Layout,
    uuid: u64,
    lsn: u64,
    at: u64,
) -> Result<Option<(Vec<u8>, u64)>> {
    let first = io.read(layout.log_start + at, 1).await?;
    let Some((f, crc)) = Frame::header(&first) else {
        return Ok(None);
    };
    let n = u64::from(f.blocks);
    if f.kind != FRAME_LOG
        || f.uuid != uuid
        || f.lsn != lsn
        || lsn > MAX_SEQUENCE
        || n > layout.log_frame_max()
        || at + n > layout.log_blocks
    {
        return Ok(None);
    }
    let bytes = if n > 1 {
        io.read(layout.log_start + at, n as usize).await?
    } else {
        first
    };
    Ok(Frame::payload(&bytes, &f, crc).map(|p| (p.to_vec(), n)))
}

/// The highest sequence number of an intact log write anywhere in the log,
/// if above `after`, and where it is.
async fn newest_in_log<M: MetaIo>(
    io: &M,
    layout: &Layout,
    uuid: u64,
    after: u64,
) -> Result<Option<(u64, u64)>> {
    const CHUNK: u64 = 64;
    let mut newest: Option<(u64, u64)> = None;
    let mut at = 0;
    while at < layout.log_blocks {
        let n = CHUNK.min(layout.log_blocks - at);
        let chunk = io.read(layout.log_start + at, n as usize).await?;
        for i in 0..n {
            let off = (i as usize) * PAGE_SIZE;
            let Some((f, _)) = Frame::header(&chunk[off..off + PAGE_SIZE]) else {
                continue;
            };
            let here = at + i;
            if f.kind != FRAME_LOG
                || f.uuid != uuid
                || f.lsn <= after
                || f.lsn > MAX_SEQUENCE
                || newest.is_some_and(|(l, _)| f.lsn <= l)
            {
                continue;
            }
            if log_frame(io, layout, uuid, f.lsn, here).await?.is_some() {
                newest = Some((f.lsn, layout.log_start + here));
            }
        }
        at += n;
    }
    Ok(newest)
}

/// Reads superblocks, the checkpoint and the log, and returns the durable
/// metadata of the filesystem on a device of `device_blocks` 4 KiB blocks
/// with `lba_size`-byte logical blocks.
pub(crate) async fn recover<M: MetaIo>(
    io: &M,
    device_blocks: u64,
    lba_size: u32,
    mode: Mode,
) -> Result<Recovered> {
    let mut notes = Vec::new();
    let sb = superblock(io, device_blocks, lba_size, &mut notes).await?;
    let layout = sb.layout;
    let (records, mut blocks) = read_tree(io, sb.uuid, sb.root, &layout).await?;
    let mut shadow = Shadow::default();
    let at = sb.root.block;
    // The image is taken as it is, up to its end marker; the live data
    // after it applies like the log (which checks each page is mapped).
    let mut in_image = true;
    for r in &records {
        let applied = match (r, in_image) {
            (Record::ImageEnd, true) => {
                in_image = false;
                Ok(())
            }
            (_, true) => shadow.load(r),
            (_, false) => shadow.apply(r),
        };
        applied.map_err(|d| corrupt(at, d))?;
    }
    drop(records);
    // What the index holds needs no writing again; what follows does.
    shadow.take_dirty();
    let (stream, carry) = carried(io, &sb).await?;
    let at = sb.carry.block;
    for r in Record::decode_all(&stream).map_err(|d| corrupt(at, d))? {
        shadow.apply(&r).map_err(|d| corrupt(at, d))?;
    }
    blocks.extend(carry.iter().flat_map(|&(b, n)| b..b + n));
    let chain = runs(blocks);
    let mut out = Recovered {
        shadow,
        superblock: sb,
        chain,
        carry,
        log_writes: 0,
        records: 0,
        last_lsn: sb.ckpt_lsn,
        newest_lsn: sb.ckpt_lsn,
        pos: sb.log_head,
        damage: None,
        problems: Vec::new(),
        notes,
    };
    // The log, from the replay point, while it follows on. A write that did
    // not fit before the log's end went to its start.
    let mut scanned = 0;
    while scanned < layout.log_blocks {
        let (pos, lsn) = (out.pos, out.last_lsn + 1);
        let mut found = log_frame(io, &layout, sb.uuid, lsn, pos)
            .await?
            .map(|f| (f, pos));
        if found.is_none() && pos != 0 {
            found = log_frame(io, &layout, sb.uuid, lsn, 0)
                .await?
                .filter(|(_, n)| pos + n > layout.log_blocks)
                .map(|f| (f, 0));
        }
        let Some(((payload, n), at)) = found else {
            break;
        };
        let block = layout.log_start + at;
        // Mount applies in place (any error ends it); fsck applies a log
        // write whole or not at all, so repair keeps only whole commits.
        let applied = Record::decode_all(&payload).and_then(|records| {
            let n = records.len() as u64;
            if mode == Mode::Mount {
                records.iter().try_for_each(|r| out.shadow.apply(r))?;
            } else {
                let mut next = out.shadow.clone();
                records.iter().try_for_each(|r| next.apply(r))?;
                out.shadow = next;
            }
            Ok(n)
        });
        match applied {
            Ok(n) => out.records += n,
            Err(d) if mode == Mode::Check => {
                out.damage = Some((block, d));
                break;
            }
            Err(d) => return Err(corrupt(block, d)),
        }
        out.log_writes += 1;
        out.last_lsn = lsn;
        scanned += n + if at != pos {
            layout.log_blocks - pos
        } else {
            0
        };
        out.pos = (at + n) % layout.log_blocks;
    }
    out.newest_lsn = out.last_lsn;
    if let Some((later_lsn, block)) = newest_in_log(io, &layout, sb.uuid, out.last_lsn).await? {
        out.newest_lsn = later_lsn;
        let hole = Damage::LogHole {
            lsn: out.last_lsn + 1,
            later_lsn,
        };
        match mode {
            Mode::Mount => return Err(corrupt(block, hole)),
            Mode::Check => {
                out.damage.get_or_insert((layout.log_start + out.pos, hole));
            }
        }
    }
    let problems = out.shadow.problems(&layout, &out.chain);
    if !problems.is_empty() {
        if mode == Mode::Mount {
            return Err(corrupt(
                layout.data_start,
                Damage::Inconsistent {
                    problems: problems.len(),
                },
            ));
        }
        out.problems = problems;
    }
    Ok(out)
}

/// The checkpoint location for a chain's first run.
pub(crate) fn first_location(chain: &[(u64, u64)]) -> Location {
    chain
        .first()
        .map_or(Location::default(), |&(block, n)| Location {
            block,
            blocks: n as u32,
        })
}
