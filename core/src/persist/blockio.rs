//! Synchronous whole-block I/O for format, mount and check, through a few
//! frames the page cache does not use.

use alloc::vec::Vec;

use crate::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use crate::units::{FrameId, Lba, Nanos, PAGE_SIZE};

/// Polls before a command that never completes is declared timed out (the
/// NVMe driver has its own, clock-driven timeouts; this only bounds a broken
/// device with no clock).
const MAX_POLLS: u64 = 1 << 32;

/// Block I/O over `frames` of the device's arena.
pub(crate) struct BlockIo<'a, D: BlockDevice> {
    dev: &'a D,
    queue: D::Queue,
    frames: core::ops::Range<u32>,
    clock: fn() -> Nanos,
    idle: fn(),
}

impl<'a, D: BlockDevice> BlockIo<'a, D> {
    pub(crate) fn new(
        dev: &'a D,
        frames: core::ops::Range<u32>,
        clock: fn() -> Nanos,
        idle: fn(),
    ) -> Result<Self, DevError> {
        Ok(BlockIo {
            queue: dev.open_queue()?,
            dev,
            frames,
            clock,
            idle,
        })
    }

    fn run(&mut self, cmd: &Command<'_>) -> Result<(), DevError> {
        let tag = loop {
            match self.queue.submit(cmd) {
                Err(DevError::QueueFull) => {
                    self.queue.poll((self.clock)(), 64, &mut |_| {});
                    (self.idle)();
                }
                other => break other?,
            }
        };
        for _ in 0..MAX_POLLS {
            let mut result = None;
            self.queue.poll((self.clock)(), 64, &mut |c| {
                if c.tag == tag {
                    result = Some(c.result);
                }
            });
            if let Some(r) = result {
                return r;
            }
            (self.idle)();
        }
        Err(DevError::Timeout)
    }

    fn lba(&self, block: u64) -> Lba {
        Lba(block * self.dev.geometry().blocks_per_page())
    }

    fn batch(&self) -> usize {
        (self.frames.len())
            .min(self.dev.geometry().max_frames_per_command())
            .max(1)
    }

    /// Reads `n` blocks from `block`.
    pub(crate) fn read(&mut self, block: u64, n: usize) -> Result<Vec<u8>, DevError> {
        let mut out = alloc::vec![0u8; n * PAGE_SIZE];
        let mut done = 0;
        while done < n {
            let k = self.batch().min(n - done);
            let frames: Vec<FrameId> = (self.frames.start..self.frames.start + k as u32)
                .map(FrameId)
                .collect();
            self.run(&Command::Read {
                lba: self.lba(block + done as u64),
                frames: &frames,
            })?;
            for (i, f) in frames.iter().enumerate() {
                let at = (done + i) * PAGE_SIZE;
                self.dev.frames().read(*f, 0, &mut out[at..at + PAGE_SIZE]);
            }
            done += k;
        }
        Ok(out)
    }

    /// Writes whole blocks at `block`.
    pub(crate) fn write(&mut self, block: u64, data: &[u8], fua: bool) -> Result<(), DevError> {
        let n = data.len().div_ceil(PAGE_SIZE);
        let mut done = 0;
        while done < n {
            let k = self.batch().min(n - done);
            let frames: Vec<FrameId> = (self.frames.start..self.frames.start + k as u32)
                .map(FrameId)
                .collect();
            for (i, f) in frames.iter().enumerate() {
                let at = (done + i) * PAGE_SIZE;
                let end = (at + PAGE_SIZE).min(data.len());
                self.dev.frames().fill(*f, 0, PAGE_SIZE, 0);
                self.dev.frames().write(*f, 0, &data[at..end]);
            }
            self.run(&Command::Write {
                lba: self.lba(block + done as u64),
                frames: &frames,
                fua,
            })?;
            done += k;
        }
        Ok(())
    }

    /// Makes completed writes durable.
    pub(crate) fn flush(&mut self) -> Result<(), DevError> {
        self.run(&Command::Flush)
    }
}
