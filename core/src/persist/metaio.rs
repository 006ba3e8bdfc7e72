//! Metadata I/O: whole 4 KiB blocks through a few frames the page cache
//! does not use. One trait serves recovery and fsck (through [`BlockIo`],
//! which polls its own queue) and commits (through a session's queue).

use alloc::vec::Vec;
use core::cell::RefCell;
use core::future::Future;
use core::ops::Range;

use crate::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use crate::error::Result;
use crate::units::{FrameId, Lba, Nanos, PAGE_SIZE};

/// Reads and writes of whole metadata blocks.
pub(crate) trait MetaIo {
    /// Reads `n` blocks from `block`.
    fn read(&self, block: u64, n: usize) -> impl Future<Output = Result<Vec<u8>>>;
    /// Writes `bytes` (whole blocks) at `block`; with `fua`, they are
    /// durable when this returns.
    fn write(&self, block: u64, bytes: &[u8], fua: bool) -> impl Future<Output = Result<()>>;
    /// Makes every completed write durable.
    fn flush(&self) -> impl Future<Output = Result<()>>;
}

/// Polls before a command that never completes is declared timed out (the
/// NVMe driver has its own, clock-driven timeouts; this only bounds a broken
/// device with no clock).
const MAX_POLLS: u64 = 1 << 32;

/// Runs one command on `queue` to completion by polling (also the
/// device checks' submit-and-wait, `driver/examples/check/pages.rs`).
pub fn run_polled<Q: DeviceQueue>(
    queue: &mut Q,
    cmd: &Command<'_>,
    clock: fn() -> Nanos,
    idle: fn(),
) -> core::result::Result<(), DevError> {
    let tag = loop {
        match queue.submit(cmd) {
            Err(DevError::QueueFull) => {
                queue.poll(clock(), 64, &mut |_| {});
                idle();
            }
            other => break other?,
        }
    };
    for _ in 0..MAX_POLLS {
        let mut result = None;
        queue.poll(clock(), 64, &mut |c| {
            if c.tag == tag {
                result = Some(c.result);
            }
        });
        if let Some(r) = result {
            return r;
        }
        idle();
    }
    Err(DevError::Timeout)
}

/// Splits `blocks` blocks from `block` into commands of at most `per`
/// frames: `(first block, count, offset in blocks)` each.
pub(crate) fn chunks(
    block: u64,
    blocks: usize,
    per: usize,
) -> impl Iterator<Item = (u64, usize, usize)> {
    let per = per.max(1);
    (0..blocks)
        .step_by(per)
        .map(move |done| (block + done as u64, per.min(blocks - done), done))
}

/// Synchronous block I/O over `frames` of the device's arena, with a queue
/// of its own: for format, mount, fsck and repair.
pub(crate) struct BlockIo<'a, D: BlockDevice> {
    dev: &'a D,
    queue: RefCell<D::Queue>,
    frames: Range<u32>,
    clock: fn() -> Nanos,
    idle: fn(),
}

impl<'a, D: BlockDevice> BlockIo<'a, D> {
    pub(crate) fn new(
        dev: &'a D,
        frames: Range<u32>,
        clock: fn() -> Nanos,
        idle: fn(),
    ) -> core::result::Result<Self, DevError> {
        if frames.is_empty() || frames.end > dev.frames().frame_count() {
            return Err(DevError::InvalidRequest);
        }
        Ok(BlockIo {
            queue: RefCell::new(dev.open_queue()?),
            dev,
            frames,
            clock,
            idle,
        })
    }

    fn run(&self, cmd: &Command<'_>) -> core::result::Result<(), DevError> {
        run_polled(&mut *self.queue.borrow_mut(), cmd, self.clock, self.idle)
    }

    fn lba(&self, block: u64) -> core::result::Result<Lba, DevError> {
        block
            .checked_mul(self.dev.geometry().blocks_per_page())
            .map(Lba)
            .ok_or(DevError::OutOfRange)
    }

    fn per_command(&self) -> usize {
        self.frames
            .len()
            .min(self.dev.geometry().max_frames_per_command())
    }

    fn frames(&self, k: usize) -> Vec<FrameId> {
        (self.frames.start..self.frames.start + k as u32)
            .map(FrameId)
            .collect()
    }

    /// The device's capacity in 4 KiB blocks.
    pub(crate) fn capacity_blocks(&self) -> u64 {
        self.dev.geometry().capacity_pages()
    }

    /// The device's logical block size.
    pub(crate) fn lba_size(&self) -> u32 {
        self.dev.geometry().block_size
    }

    fn read_sync(&self, block: u64, n: usize) -> Result<Vec<u8>> {
        let mut out = alloc::vec![0u8; n * PAGE_SIZE];
        for (at, k, done) in chunks(block, n, self.per_command()) {
            let frames = self.frames(k);
            self.run(&Command::Read {
                lba: self.lba(at)?,
                frames: &frames,
            })?;
            for (i, f) in frames.iter().enumerate() {
                let off = (done + i) * PAGE_SIZE;
                self.dev
                    .frames()
                    .read(*f, 0, &mut out[off..off + PAGE_SIZE])?;
            }
        }
        Ok(out)
    }

    fn write_sync(&self, block: u64, data: &[u8], fua: bool) -> Result<()> {
        // A device without FUA: the same write, then a flush.
        let native = fua && self.dev.geometry().fua;
        let n = data.len().div_ceil(PAGE_SIZE);
        for (at, k, done) in chunks(block, n, self.per_command()) {
            let frames = self.frames(k);
            for (i, f) in frames.iter().enumerate() {
                let off = (done + i) * PAGE_SIZE;
                let end = (off + PAGE_SIZE).min(data.len());
                self.dev.frames().fill(*f, 0, PAGE_SIZE, 0)?;
                self.dev.frames().write(*f, 0, &data[off..end])?;
            }
            self.run(&Command::Write {
                lba: self.lba(at)?,
                frames: &frames,
                fua: native,
            })?;
        }
        if fua && !native {
            self.run(&Command::Flush)?;
        }
        Ok(())
    }
}

impl<D: BlockDevice> MetaIo for BlockIo<'_, D> {
    async fn read(&self, block: u64, n: usize) -> Result<Vec<u8>> {
        self.read_sync(block, n)
    }
    async fn write(&self, block: u64, bytes: &[u8], fua: bool) -> Result<()> {
        self.write_sync(block, bytes, fua)
    }
    async fn flush(&self) -> Result<()> {
        Ok(self.run(&Command::Flush)?)
    }
}

#[cfg(test)]
mod tests {
    use super::chunks;
    use alloc::vec::Vec;

    #[test]
    fn chunks_cover_every_block_once() {
        let c: Vec<_> = chunks(10, 70, 32).collect();
        assert_eq!(c, [(10, 32, 0), (42, 32, 32), (74, 6, 64)]);
        assert_eq!(chunks(0, 0, 32).count(), 0);
    }
}
