//! `direct=1`: reads and writes that bypass the page cache. Every direct
//! I/O of the pollfs engines goes through [`io`], the one place that
//! reaches the engine's direct calls; and buffers for it come from
//! [`Buf`], aligned as direct I/O needs (4 KiB for offset, length and
//! address).

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

/// True if this build's engine has direct I/O.
pub const AVAILABLE: bool = false;

/// Refuses, before any run, direct jobs this build cannot run.
pub fn check() -> Result<(), String> {
    if AVAILABLE {
        Ok(())
    } else {
        Err(NOT_YET.to_string())
    }
}

const NOT_YET: &str = "direct=1: this build's engine has no direct I/O yet \
    (Session::read_direct_async and write_direct_async); the bench never runs a direct job \
    through the page cache instead";

/// One direct read or write of `buf` at `op.offset`.
pub async fn io<D: BlockDevice>(
    _s: &Session<D>,
    _f: &File<D>,
    _buf: &mut Buf,
    _op: Op,
) -> Result<(), String> {
    Err(NOT_YET.to_string())
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
