//! A file with a position, for code written against `std::io`: `Read`,
//! `Write` and `Seek` (hosted builds).

use std::io::{self, Read, Seek, SeekFrom, Write};

use super::File;
use crate::dev::BlockDevice;

/// A [`File`] and a position, like `std::fs::File`'s cursor. Reads and
/// writes move the position; `flush` does nothing (pollfs buffers in its
/// own page cache; call [`File::sync_data`] for durability).
#[derive(Debug)]
pub struct FileCursor<D: BlockDevice> {
    file: File<D>,
    pos: u64,
}

impl<D: BlockDevice> FileCursor<D> {
    /// A cursor on `file` at position 0.
    pub fn new(file: File<D>) -> FileCursor<D> {
        FileCursor { file, pos: 0 }
    }
    /// The file.
    pub fn file(&self) -> &File<D> {
        &self.file
    }
    /// The position.
    pub fn position(&self) -> u64 {
        self.pos
    }
    /// The file, given back.
    pub fn into_inner(self) -> File<D> {
        self.file
    }
}

impl<D: BlockDevice> Read for FileCursor<D> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<D: BlockDevice> Write for FileCursor<D> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<D: BlockDevice> Seek for FileCursor<D> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let (base, delta) = match to {
            SeekFrom::Start(at) => {
                self.pos = at;
                return Ok(at);
            }
            SeekFrom::End(d) => (self.file.len(), d),
            SeekFrom::Current(d) => (self.pos, d),
        };
        let at = base.checked_add_signed(delta).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek to a negative or overflowing position",
            )
        })?;
        self.pos = at;
        Ok(at)
    }
}
