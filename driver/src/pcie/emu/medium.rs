//! What the emulated namespace stores its blocks in: RAM, or a regular
//! file (so an image survives the process, like a real disk).

use std::fs::File;
use std::os::unix::fs::FileExt;

/// The namespace's backing store. Offsets are bytes from the start of the
/// namespace; callers range-check against [`Medium::len`] first, and every
/// method also clips, so nothing here can panic on a bad range.
#[derive(Debug)]
pub enum Medium {
    /// Zero-filled memory.
    Ram(Vec<u8>),
    /// A file of at least `len` bytes.
    File {
        /// The open file.
        file: File,
        /// Namespace size in bytes.
        len: u64,
    },
}

impl Medium {
    /// Size in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Medium::Ram(v) => v.len() as u64,
            Medium::File { len, .. } => *len,
        }
    }
    /// True for an empty medium.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn clip(&self, pos: u64, n: usize) -> usize {
        let avail = self.len().saturating_sub(pos);
        n.min(usize::try_from(avail).unwrap_or(usize::MAX))
    }
    /// Reads bytes at `pos`; bytes past the end read as zero. `false` on an
    /// I/O error of the backing file.
    pub fn read_at(&self, pos: u64, dst: &mut [u8]) -> bool {
        let n = self.clip(pos, dst.len());
        dst[n..].fill(0);
        match self {
            Medium::Ram(v) => {
                let start = pos as usize;
                match v.get(start..start + n) {
                    Some(src) => {
                        dst[..n].copy_from_slice(src);
                        true
                    }
                    None => n == 0,
                }
            }
            Medium::File { file, .. } => file.read_exact_at(&mut dst[..n], pos).is_ok(),
        }
    }
    /// Writes bytes at `pos`, dropping any past the end.
    pub fn write_at(&mut self, pos: u64, src: &[u8]) -> bool {
        let n = self.clip(pos, src.len());
        match self {
            Medium::Ram(v) => {
                let start = pos as usize;
                match v.get_mut(start..start + n) {
                    Some(dst) => {
                        dst.copy_from_slice(&src[..n]);
                        true
                    }
                    None => n == 0,
                }
            }
            Medium::File { file, .. } => file.write_all_at(&src[..n], pos).is_ok(),
        }
    }
    /// Zeroes `len` bytes at `pos`.
    pub fn zero(&mut self, pos: u64, len: u64) -> bool {
        let zeros = [0u8; 64 * 1024];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            if !self.write_at(pos + done, &zeros[..n]) {
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

    fn exercise(mut m: Medium) {
        assert_eq!(m.len(), 8192);
        assert!(m.write_at(8000, &[7u8; 300]), "clipped at the end");
        let mut b = [1u8; 300];
        assert!(m.read_at(8000, &mut b));
        assert!(b[..192].iter().all(|&x| x == 7));
        assert!(b[192..].iter().all(|&x| x == 0));
        assert!(m.zero(8100, 1000));
        assert!(m.read_at(8000, &mut b));
        assert!(b[100..].iter().all(|&x| x == 0));
        assert!(m.read_at(u64::MAX, &mut b));
        assert!(m.write_at(u64::MAX, &b));
    }

    #[test]
    fn ram_and_file_media_behave_alike() {
        exercise(Medium::Ram(vec![0; 8192]));
        let path = std::env::temp_dir().join(format!("pollfs-medium-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(8192).unwrap();
        exercise(Medium::File { file, len: 8192 });
        std::fs::remove_file(&path).unwrap();
    }
}
