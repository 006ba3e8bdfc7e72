//! Reading and crafting on-disk images directly on a [`RamDevice`]: the
//! newest superblock, the log writes recovery would replay, and
//! checksum-valid log writes appended after them.

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::persist::format::{Enc, Frame, Superblock, FRAME_LOG};
use pollfs_core::persist::record::Record;
use pollfs_core::units::{PAGE_SIZE, PAGE_SIZE_U64};

/// The newest valid superblock copy.
pub fn superblock(dev: &RamDevice) -> Superblock {
    let mut best: Option<Superblock> = None;
    for b in 0..2 {
        let mut block = vec![0u8; PAGE_SIZE];
        dev.read_raw(b * PAGE_SIZE_U64, &mut block);
        if let Ok(sb) = Superblock::decode(&block) {
            if best.is_none_or(|x| sb.generation > x.generation) {
                best = Some(sb);
            }
        }
    }
    best.expect("a valid superblock")
}

/// Writes `sb` (with a fresh checksum) to the copy its generation selects.
pub fn write_superblock(dev: &RamDevice, sb: &Superblock) {
    dev.write_raw((sb.generation % 2) * PAGE_SIZE_U64, &sb.encode());
}

/// One live log write.
#[derive(Debug)]
pub struct LogFrame {
    /// First block, relative to the log's start.
    pub block: u64,
    /// Its header.
    pub frame: Frame,
    /// Its records.
    pub records: Vec<Record>,
}

/// The log writes recovery would replay: from the superblock's replay
/// point, while the uuid, the sequence numbers and the checksums follow on
/// (wrapping to the log's start as the writer does).
pub fn live_frames(dev: &RamDevice) -> Vec<LogFrame> {
    let sb = superblock(dev);
    let l = sb.layout;
    let read = |pos: u64, lsn: u64| -> Option<LogFrame> {
        let mut first = vec![0u8; PAGE_SIZE];
        dev.read_raw((l.log_start + pos) * PAGE_SIZE_U64, &mut first);
        let (f, crc) = Frame::header(&first)?;
        if f.kind != FRAME_LOG
            || f.uuid != sb.uuid
            || f.lsn != lsn
            || pos + u64::from(f.blocks) > l.log_blocks
        {
            return None;
        }
        let mut bytes = vec![0u8; f.blocks as usize * PAGE_SIZE];
        dev.read_raw((l.log_start + pos) * PAGE_SIZE_U64, &mut bytes);
        let payload = Frame::payload(&bytes, &f, crc)?;
        Some(LogFrame {
            block: pos,
            frame: f,
            records: Record::decode_all(payload).ok()?,
        })
    };
    let mut out = Vec::new();
    let (mut pos, mut lsn, mut scanned) = (sb.log_head, sb.ckpt_lsn + 1, 0);
    while scanned < l.log_blocks {
        let Some(f) = read(pos, lsn).or_else(|| (pos != 0).then(|| read(0, lsn)).flatten()) else {
            break;
        };
        let skipped = if f.block != pos {
            l.log_blocks - pos
        } else {
            0
        };
        scanned += u64::from(f.frame.blocks) + skipped;
        pos = (f.block + u64::from(f.frame.blocks)) % l.log_blocks;
        lsn += 1;
        out.push(f);
    }
    out
}

/// Appends a checksum-valid log write holding `records` after the live
/// log, with the filesystem's uuid and the next sequence number.
pub fn append_frame(dev: &RamDevice, records: &[Record]) {
    let sb = superblock(dev);
    let l = sb.layout;
    let (pos, lsn) = match live_frames(dev).last() {
        Some(f) => (
            (f.block + u64::from(f.frame.blocks)) % l.log_blocks,
            f.frame.lsn + 1,
        ),
        None => (sb.log_head, sb.ckpt_lsn + 1),
    };
    let mut e = Enc::default();
    for r in records {
        r.encode(&mut e);
    }
    let bytes = Frame::log(sb.uuid, lsn).encode(&e.0);
    let n = (bytes.len() / PAGE_SIZE) as u64;
    let at = if pos + n <= l.log_blocks { pos } else { 0 };
    dev.write_raw((l.log_start + at) * PAGE_SIZE_U64, &bytes);
}
