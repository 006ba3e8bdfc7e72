//! The page-cache frames of a TCP-attached device: ordinary memory, one
//! lock per frame. Data PDUs are received straight into a frame and sent
//! straight out of one (the socket copies once, as DMA would), so the
//! transport needs the frame's bytes as a slice, which `FrameArena`'s
//! copying interface does not give; [`TcpFrames::with`] and
//! [`TcpFrames::with_mut`] do, under the frame's lock.

use alloc::boxed::Box;
use alloc::vec::Vec;

use pollfs_core::dev::{frame_span, DevError, FrameArena};
use pollfs_core::units::{FrameId, PAGE_SIZE};
use spin::RwLock;

/// One frame's bytes.
type Frame = RwLock<Box<[u8; PAGE_SIZE]>>;

/// Page frames in ordinary memory. A frame's lock is held only for a copy
/// or one non-blocking socket call; the engine and the transport never
/// touch a frame at the same time (the engine holds a page for I/O while
/// its command is in flight), so the locks are never contended in
/// practice and exist to keep every access safe.
pub struct TcpFrames {
    frames: Vec<Frame>,
}

impl core::fmt::Debug for TcpFrames {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TcpFrames")
            .field("frames", &self.frames.len())
            .finish()
    }
}

impl TcpFrames {
    /// `count` zeroed frames.
    pub fn new(count: u32) -> TcpFrames {
        TcpFrames {
            frames: (0..count)
                .map(|_| RwLock::new(Box::new([0u8; PAGE_SIZE])))
                .collect(),
        }
    }

    fn span(
        &self,
        frame: FrameId,
        offset: usize,
        len: usize,
    ) -> Result<(&Frame, core::ops::Range<usize>), DevError> {
        let r = frame_span(self.frame_count(), frame, offset, len)?;
        let f = self.frames.get(frame.index()).ok_or(DevError::FrameRange)?;
        Ok((f, r))
    }

    /// Runs `f` on `[offset, offset + len)` of `frame`, read-locked.
    pub fn with<R>(
        &self,
        frame: FrameId,
        offset: usize,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, DevError> {
        let (fr, r) = self.span(frame, offset, len)?;
        let g = fr.read();
        let bytes = g.get(r).ok_or(DevError::FrameRange)?;
        Ok(f(bytes))
    }

    /// Runs `f` on `[offset, offset + len)` of `frame`, write-locked.
    pub fn with_mut<R>(
        &self,
        frame: FrameId,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DevError> {
        let (fr, r) = self.span(frame, offset, len)?;
        let mut g = fr.write();
        let bytes = g.get_mut(r).ok_or(DevError::FrameRange)?;
        Ok(f(bytes))
    }
}

impl TcpFrames {
    /// Frame `frame`, read-locked, for a send that gathers several frames
    /// into one system call.
    pub(crate) fn read_lock(
        &self,
        frame: FrameId,
    ) -> Option<spin::RwLockReadGuard<'_, Box<[u8; PAGE_SIZE]>>> {
        self.frames.get(frame.index()).map(|f| f.read())
    }
}

impl TcpFrames {
    /// Frame `frame`, write-locked, for a receive that fills it in place.
    #[inline]
    pub(crate) fn write_lock(
        &self,
        frame: FrameId,
    ) -> Option<spin::RwLockWriteGuard<'_, Box<[u8; PAGE_SIZE]>>> {
        self.frames.get(frame.index()).map(|f| f.write())
    }
}

impl FrameArena for TcpFrames {
    fn frame_count(&self) -> u32 {
        self.frames.len() as u32
    }
    fn read(&self, frame: FrameId, offset: usize, dst: &mut [u8]) -> Result<(), DevError> {
        self.with(frame, offset, dst.len(), |s| dst.copy_from_slice(s))
    }
    fn write(&self, frame: FrameId, offset: usize, src: &[u8]) -> Result<(), DevError> {
        self.with_mut(frame, offset, src.len(), |d| d.copy_from_slice(src))
    }
    fn fill(&self, frame: FrameId, offset: usize, len: usize, byte: u8) -> Result<(), DevError> {
        self.with_mut(frame, offset, len, |d| d.fill(byte))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_copy_inside_one_page_only() {
        let f = TcpFrames::new(2);
        f.write(FrameId(1), 4000, &[7; 96]).unwrap();
        assert_eq!(
            f.write(FrameId(1), 4000, &[7; 97]),
            Err(DevError::FrameRange)
        );
        assert_eq!(f.fill(FrameId(2), 0, 1, 0), Err(DevError::FrameRange));
        let sum = f.with(FrameId(1), 3999, 97, |s| {
            s.iter().map(|&b| u32::from(b)).sum::<u32>()
        });
        assert_eq!(sum, Ok(7 * 96));
        f.with_mut(FrameId(0), 0, 4, |s| s.copy_from_slice(b"abcd"))
            .unwrap();
        let mut b = [0u8; 4];
        f.read(FrameId(0), 0, &mut b).unwrap();
        assert_eq!(&b, b"abcd");
    }
}
