//! `direct=1`: reads and writes that bypass the page cache. Every direct
//! I/O of the pollfs engines goes through [`io`], the one place that
//! reaches the engine's direct calls (`Session::read_direct_async` and
//! `write_direct_async`); buffers for it come from [`Buf`], 4 KiB-aligned
//! (the engine needs only offset and length aligned; the kernel's
//! O_DIRECT, which the kernel baseline uses, needs the address too).

use anyhow::anyhow;
use pollfs_core::dev::BlockDevice;
use pollfs_core::{File, Session};

use super::job::DIRECT_ALIGN;
use super::workload::Op;

/// An I/O buffer of `len` bytes whose address is a multiple of 4 KiB
/// (found inside a larger allocation, so no unsafe allocation is needed).
#[derive(Debug)]
pub struct Buf {
    bytes: Vec<u8>,
    at: usize,
    len: usize,
}

impl Buf {
    /// A zeroed, aligned buffer of `len` bytes.
    pub fn new(len: usize) -> Buf {
        let align = DIRECT_ALIGN as usize;
        let bytes = vec![0u8; len + align];
        let at = bytes.as_ptr().align_offset(align);
        Buf { bytes, at, len }
    }
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[self.at..self.at + self.len]
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.at..self.at + self.len]
    }
}

/// One direct read or write of `buf` at `op.offset`. A read may be
/// short at EOF; a short write is an error.
pub async fn io<D: BlockDevice>(
    s: &Session<D>,
    f: &File<D>,
    buf: &mut Buf,
    op: Op,
) -> anyhow::Result<()> {
    if op.read {
        s.read_direct_async(f, buf.as_mut_slice(), op.offset)
            .await
            .map(|_| ())
            .map_err(|e| anyhow!("{e}"))
    } else {
        let n = s
            .write_direct_async(f, buf.as_slice(), op.offset)
            .await
            .map_err(|e| anyhow!("{e}"))?;
        if n == buf.len {
            Ok(())
        } else {
            Err(anyhow!(
                "direct write at {}: {n} of {} bytes written",
                op.offset,
                buf.len
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_as_long_as_asked() {
        for len in [1, 4096, 12288, 1 << 20] {
            let mut b = Buf::new(len);
            assert_eq!(b.as_slice().len(), len);
            assert_eq!(b.as_mut_slice().as_ptr() as usize % 4096, 0);
        }
    }
}
