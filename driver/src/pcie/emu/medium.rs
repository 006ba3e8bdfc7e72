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
//!
//! A RAM chunk takes memory when it is first written, not before, and
//! gives it back when zeroed whole (Write Zeroes, deallocate): a
//! namespace of 1 GiB written only where a filesystem's metadata and a
//! job's files are costs what they hold, as a thin-provisioned drive does.

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
    /// Memory in chunks, each behind its own lock (the lock guards that
    /// chunk's bytes only; no transfer holds two at once); a chunk never
    /// written, or zeroed whole since, holds nothing and reads as zeros.
    Ram(Box<[Chunk]>),
    /// A file of at least the medium's length.
    File(File),
}

impl Medium {
    /// `len` zeroed bytes of RAM (none if `len` does not fit in memory),
    /// each chunk allocated when first written.
    pub fn ram(len: u64) -> Medium {
        let len = usize::try_from(len).unwrap_or(0);
        let chunks = (0..len.div_ceil(CHUNK))
            .map(|_| RwLock::new(None))
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
                let Some(chunk) = chunks.get(c) else {
                    return false;
                };
                let held = chunk.read();
                match held.as_deref() {
                    Some(bytes) => bytes.get(range).is_some_and(|src| f(off, src)),
                    None => ZEROS.get(range).is_some_and(|src| f(off, src)),
                }
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
                let Some(chunk) = chunks.get(c) else {
                    return false;
                };
                let mut held = chunk.write();
                if held.is_none() {
                    // Out of memory: the write fails (a device error), it
                    // does not abort the process.
                    let Some(bytes) = zeroed(self.chunk_len(c)) else {
                        return false;
                    };
                    *held = Some(bytes);
                }
                held.as_deref_mut()
                    .and_then(|bytes| bytes.get_mut(range))
                    .is_some_and(|dst| f(off, dst))
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
    /// Zeroes `len` bytes at `pos` (clipped at the end), a chunk at a
    /// time: a RAM chunk zeroed whole gives its memory back, a part of
    /// one never written is zero already.
    pub fn zero(&self, pos: u64, len: u64) -> bool {
        let n = self.clip(pos, usize::try_from(len).unwrap_or(usize::MAX));
        let Store::Ram(chunks) = &self.store else {
            return self.zero_file(pos, n);
        };
        self.pieces(pos, n).all(|(c, range, _)| {
            let Some(chunk) = chunks.get(c) else {
                return false;
            };
            let mut held = chunk.write();
            if range.len() == self.chunk_len(c) {
                *held = None;
            } else if let Some(dst) = held.as_deref_mut().and_then(|b| b.get_mut(range)) {
                dst.fill(0);
            }
            true
        })
    }

    /// Zeroes `n` bytes of the file at `pos`, a chunk's worth at a time.
    fn zero_file(&self, pos: u64, n: usize) -> bool {
        let mut done = 0;
        while done < n {
            let k = (n - done).min(CHUNK);
            let Some(at) = pos.checked_add(done as u64) else {
                return true;
            };
            if !self.write_with(at, k, |_, dst| {
                dst.fill(0);
                true
            }) {
                return false;
            }
            done += k;
        }
        true
    }

    /// Bytes in RAM chunk `c`: [`CHUNK`], less for the last one.
    fn chunk_len(&self, c: usize) -> usize {
        let len = usize::try_from(self.len).unwrap_or(0);
        len.saturating_sub(c.saturating_mul(CHUNK)).min(CHUNK)
    }
}

/// One RAM chunk: its bytes once written, `None` before (zeros).
type Chunk = RwLock<Option<Box<[u8]>>>;

/// What a RAM chunk never written reads as.
static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// `n` zeroed bytes, or `None` if the memory cannot be had.
fn zeroed(n: usize) -> Option<Box<[u8]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, 0);
    Some(v.into_boxed_slice())
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

    /// RAM chunks that hold memory.
    fn held(m: &Medium) -> usize {
        match &m.store {
            Store::Ram(chunks) => chunks.iter().filter(|c| c.read().is_some()).count(),
            Store::File(_) => 0,
        }
    }

    #[test]
    fn ram_is_taken_where_written_and_given_back_where_zeroed_whole() {
        let m = Medium::ram(1 << 30);
        assert_eq!(held(&m), 0, "nothing written, nothing held");
        let mut b = [9u8; 4096];
        assert!(m.read_at(5 << 20, &mut b));
        assert!(b.iter().all(|&x| x == 0), "never written: zeros");
        assert_eq!(held(&m), 0, "a read takes nothing");
        assert!(m.write_at(3 * CHUNK as u64 + 10, &[4; 100]));
        assert_eq!(held(&m), 1);
        assert!(m.zero(3 * CHUNK as u64, 64));
        assert_eq!(held(&m), 1, "a part of a chunk is zeroed in place");
        assert!(m.read_at(3 * CHUNK as u64, &mut b));
        assert!(b[..64].iter().all(|&x| x == 0));
        assert!(b[64..110].iter().all(|&x| x == 4));
        assert!(m.zero(2 * CHUNK as u64, 3 * CHUNK as u64));
        assert_eq!(held(&m), 0, "zeroed whole: given back");
        assert!(m.read_at(3 * CHUNK as u64, &mut b));
        assert!(b.iter().all(|&x| x == 0));
    }
}
