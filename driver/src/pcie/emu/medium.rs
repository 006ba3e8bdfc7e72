//! What the emulated namespace stores its blocks in: RAM, or a regular
//! file (so an image survives the process, like a real disk).
//!
//! The medium is shared by every queue's data transfers, which run outside
//! the controller's state lock, so it synchronises itself: RAM is kept in
//! [`CHUNK`]-byte chunks, each behind its own lock, and a transfer holds
//! one chunk at a time (a block never spans two chunks, so each block is
//! written whole, which is all the atomicity the controller claims: AWUN
//! and AWUPF are zero, one block); a file is written and read with
//! positioned calls on a shared handle. As on a real device, commands on
//! different queues that touch the same blocks land in no promised order.

use std::fs::File;
use std::os::unix::fs::FileExt;

use spin::RwLock;

/// Bytes in one RAM chunk: a multiple of the largest block size (4 KiB),
/// and half the largest transfer the controller accepts by default, so a
/// small command waits for at most one chunk's copy of a large one.
pub const CHUNK: usize = 64 << 10;

/// The namespace's backing store. Offsets are bytes from the start of the
/// namespace; callers range-check against [`Medium::len`] first, and every
/// method also clips, so nothing here can panic on a bad range.
#[derive(Debug)]
pub struct Medium {
    store: Store,
    len: u64,
}

#[derive(Debug)]
enum Store {
    /// Zero-filled memory in chunks, each behind its own lock (the lock
    /// guards that chunk's bytes only; no transfer holds two at once).
    Ram(Box<[RwLock<Box<[u8]>>]>),
    /// A file of at least the medium's length.
    File(File),
}

impl Medium {
    /// `len` zeroed bytes of RAM (none if `len` does not fit in memory).
    pub fn ram(len: u64) -> Medium {
        let len = usize::try_from(len).unwrap_or(0);
        let chunks = (0..len.div_ceil(CHUNK))
            .map(|i| RwLock::new(vec![0u8; (len - i * CHUNK).min(CHUNK)].into_boxed_slice()))
            .collect();
        Medium {
            store: Store::Ram(chunks),
            len: len as u64,
        }
    }
    /// The first `len` bytes of `file`, which must be at least that long.
    pub fn file(file: File, len: u64) -> Medium {
        Medium {
            store: Store::File(file),
            len,
        }
    }
    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True for an empty medium.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn clip(&self, pos: u64, n: usize) -> usize {
        let avail = self.len().saturating_sub(pos);
        n.min(usize::try_from(avail).unwrap_or(usize::MAX))
    }
    /// The RAM chunk pieces of `[pos, pos + n)` in order: (chunk, range in
    /// the chunk, offset of the piece in the span). `n` is clipped first.
    fn pieces(
        &self,
        pos: u64,
        n: usize,
    ) -> impl Iterator<Item = (usize, core::ops::Range<usize>, usize)> {
        let start = usize::try_from(pos).unwrap_or(usize::MAX);
        let mut done = 0;
        core::iter::from_fn(move || {
            let p = start.checked_add(done)?;
            if done >= n {
                return None;
            }
            let (chunk, at) = (p / CHUNK, p % CHUNK);
            let k = (CHUNK - at).min(n - done);
            let piece = (chunk, at..at + k, done);
            done += k;
            Some(piece)
        })
    }
    /// Hands `f` the bytes `[pos, pos + n)` (clipped at the end) a piece at
    /// a time with the piece's offset in the span: each RAM chunk under
    /// its lock, or a file's bytes read into a buffer. `false` if `f`
    /// fails or the file cannot be read.
    pub fn read_with(&self, pos: u64, n: usize, mut f: impl FnMut(usize, &[u8]) -> bool) -> bool {
        let n = self.clip(pos, n);
        match &self.store {
            Store::Ram(chunks) => self.pieces(pos, n).all(|(c, range, off)| {
                chunks
                    .get(c)
                    .and_then(|chunk| chunk.read().get(range).map(|src| f(off, src)))
                    .unwrap_or(false)
            }),
            Store::File(file) => {
                let mut buf = vec![0u8; n];
                n == 0 || (file.read_exact_at(&mut buf, pos).is_ok() && f(0, &buf))
            }
        }
    }
    /// Lets `f` fill the bytes `[pos, pos + n)` (clipped at the end) a
    /// piece at a time, as [`read_with`](Self::read_with): a RAM chunk in
    /// place under its lock, or a buffer then written to the file. A
    /// failing `f` stops the transfer; the pieces before it stay written.
    pub fn write_with(
        &self,
        pos: u64,
        n: usize,
        mut f: impl FnMut(usize, &mut [u8]) -> bool,
    ) -> bool {
        let n = self.clip(pos, n);
        match &self.store {
            Store::Ram(chunks) => self.pieces(pos, n).all(|(c, range, off)| {
                chunks
                    .get(c)
                    .and_then(|chunk| chunk.write().get_mut(range).map(|dst| f(off, dst)))
                    .unwrap_or(false)
            }),
            Store::File(file) => {
                let mut buf = vec![0u8; n];
                n == 0 || (f(0, &mut buf) && file.write_all_at(&buf, pos).is_ok())
            }
        }
    }
    /// Reads bytes at `pos`; bytes past the end read as zero. `false` on an
    /// I/O error of the backing file.
    pub fn read_at(&self, pos: u64, dst: &mut [u8]) -> bool {
        let n = self.clip(pos, dst.len());
        dst[n..].fill(0);
        self.read_with(pos, n, |off, src| {
            dst[off..off + src.len()].copy_from_slice(src);
            true
        })
    }
    /// Writes bytes at `pos`, dropping any past the end.
    pub fn write_at(&self, pos: u64, src: &[u8]) -> bool {
        self.write_with(pos, src.len(), |off, dst| {
            dst.copy_from_slice(&src[off..off + dst.len()]);
            true
        })
    }
    /// Zeroes `len` bytes at `pos`, a chunk at a time.
    pub fn zero(&self, pos: u64, len: u64) -> bool {
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(CHUNK as u64) as usize;
            let Some(at) = pos.checked_add(done) else {
                return true;
            };
            if !self.write_with(at, n, |_, dst| {
                dst.fill(0);
                true
            }) {
                return false;
            }
            done += n as u64;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(m: Medium, len: u64) {
        assert_eq!(m.len(), len);
        let end = len - 192;
        assert!(m.write_at(end, &[7u8; 300]), "clipped at the end");
        let mut b = [1u8; 300];
        assert!(m.read_at(end, &mut b));
        assert!(b[..192].iter().all(|&x| x == 7));
        assert!(b[192..].iter().all(|&x| x == 0));
        assert!(m.zero(end + 100, 1000));
        assert!(m.read_at(end, &mut b));
        assert!(b[..100].iter().all(|&x| x == 7));
        assert!(b[100..].iter().all(|&x| x == 0));
        assert!(m.read_at(u64::MAX, &mut b));
        assert!(m.write_at(u64::MAX, &b));
        assert!(m.zero(u64::MAX - 10, 100));
        // Across a chunk boundary (RAM keeps the two sides apart).
        let span: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let at = CHUNK as u64 - 5000;
        assert!(m.write_at(at, &span));
        let mut back = vec![0u8; span.len()];
        assert!(m.read_at(at, &mut back));
        assert_eq!(back, span);
        let mut offsets = Vec::new();
        assert!(m.read_with(at, span.len(), |off, src| {
            offsets.push((off, src.len()));
            true
        }));
        assert!(!m.read_with(at, span.len(), |_, _| false));
        assert!(!m.write_with(at, 10, |_, _| false));
        assert_eq!(offsets.iter().map(|o| o.1).sum::<usize>(), span.len());
    }

    #[test]
    fn ram_and_file_media_behave_alike() {
        let len = 3 * CHUNK as u64 + 8192;
        exercise(Medium::ram(len), len);
        let path = std::env::temp_dir().join(format!("pollfs-medium-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(len).unwrap();
        exercise(Medium::file(file, len), len);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_ram_span_is_handed_out_one_chunk_at_a_time() {
        let m = Medium::ram(4 * CHUNK as u64);
        let mut pieces = Vec::new();
        assert!(m.write_with(CHUNK as u64 - 4096, CHUNK + 8192, |off, dst| {
            pieces.push((off, dst.len()));
            dst.fill(1);
            true
        }));
        assert_eq!(pieces, [(0, 4096), (4096, CHUNK), (4096 + CHUNK, 4096)]);
        assert!(!m.is_empty() && Medium::ram(0).is_empty());
    }
}
