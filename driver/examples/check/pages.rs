//! Pages through one queue and back: patterned frames written at an LBA,
//! read back into other frames and compared. The device checks run it
//! against real controllers (`vm_check` through VFIO, `tcp_check` over
//! NVMe/TCP) and the driver's tests against the emulated controller and
//! the TCP test target, where they also compare the medium with the
//! pattern this returns.
//!
//! One file, included by `#[path]` from the examples and from
//! `tests/common`: a test procedure, not API, so it stays out of the
//! library users link and needs no feature of its own.

use pollfs_core::dev::{Command, DevError, FrameArena};
use pollfs_core::units::{FrameId, Lba, PAGE_SIZE};

/// Byte `i` of the pattern named `seed`.
pub fn byte(seed: u64, i: usize) -> u8 {
    (seed.wrapping_mul(0x9e37_79b9) as usize ^ i.wrapping_mul(31) ^ (i >> 9)) as u8
}

/// Fills `ids` with the pattern `seed`, page k of it in `ids[k]`; the
/// bytes written.
pub fn fill<F: FrameArena>(frames: &F, ids: &[FrameId], seed: u64) -> Result<Vec<u8>, String> {
    let all: Vec<u8> = (0..ids.len() * PAGE_SIZE).map(|i| byte(seed, i)).collect();
    for (&f, page) in ids.iter().zip(all.chunks(PAGE_SIZE)) {
        frames
            .write(f, 0, page)
            .map_err(|e| format!("frame {}: {e}", f.0))?;
    }
    Ok(all)
}

/// What `ids` hold, one page after another.
pub fn contents<F: FrameArena>(frames: &F, ids: &[FrameId]) -> Result<Vec<u8>, String> {
    let mut all = vec![0u8; ids.len() * PAGE_SIZE];
    for (&f, page) in ids.iter().zip(all.chunks_mut(PAGE_SIZE)) {
        frames
            .read(f, 0, page)
            .map_err(|e| format!("frame {}: {e}", f.0))?;
    }
    Ok(all)
}

/// `n` pages at `lba`, patterned by `seed`: written from frames
/// `first_frame..first_frame + n` (with FUA when `fua`) and read back into
/// the `n` frames after them.
#[derive(Clone, Copy, Debug)]
pub struct Pages {
    pub lba: u64,
    pub n: u32,
    pub seed: u64,
    pub first_frame: u32,
    pub fua: bool,
}

impl Pages {
    /// From frame 0, without FUA.
    pub fn new(lba: u64, n: u32, seed: u64) -> Pages {
        Pages {
            lba,
            n,
            seed,
            first_frame: 0,
            fua: false,
        }
    }
}

/// Writes `p`'s pattern, reads it back into frames filled with 0xee first
/// (so a read that moved nothing cannot pass) and compares; the pattern's
/// bytes, for a caller that checks the medium too. `run` submits one
/// command and waits for it: the examples through the engine's
/// [`pollfs_core::persist::run_polled`], the tests with their own clock
/// and bound on the wait.
pub fn write_read<F: FrameArena, Q>(
    frames: &F,
    q: &mut Q,
    p: Pages,
    mut run: impl FnMut(&mut Q, Command<'_>) -> Result<(), DevError>,
) -> Result<Vec<u8>, String> {
    let Pages { lba, n, .. } = p;
    let src: Vec<FrameId> = (p.first_frame..p.first_frame + n).map(FrameId).collect();
    let dst: Vec<FrameId> = (p.first_frame + n..p.first_frame + 2 * n)
        .map(FrameId)
        .collect();
    let want = fill(frames, &src, p.seed)?;
    for &f in &dst {
        frames
            .fill(f, 0, PAGE_SIZE, 0xee)
            .map_err(|e| format!("frame {}: {e}", f.0))?;
    }
    let w = Command::Write {
        lba: Lba(lba),
        frames: &src,
        fua: p.fua,
    };
    run(q, w).map_err(|e| format!("write of {n} pages at lba {lba}: {e}"))?;
    let r = Command::Read {
        lba: Lba(lba),
        frames: &dst,
    };
    run(q, r).map_err(|e| format!("read of {n} pages at lba {lba}: {e}"))?;
    let got = contents(frames, &dst)?;
    if let Some(b) = (0..want.len()).find(|&b| got[b] != want[b]) {
        return Err(format!(
            "{n} pages at lba {lba}: page {} differs at byte {}",
            b / PAGE_SIZE,
            b % PAGE_SIZE
        ));
    }
    Ok(want)
}
