//! The reference model: what a file must contain, computed the obvious way.

/// A file as a plain byte vector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelFile {
    /// The contents; its length is the file size.
    pub data: Vec<u8>,
}

impl ModelFile {
    /// `read_at`: bytes at `off`, short at EOF.
    pub fn read(&self, off: u64, len: usize) -> &[u8] {
        let size = self.data.len() as u64;
        if off >= size {
            return &[];
        }
        let end = (off + len as u64).min(size);
        &self.data[off as usize..end as usize]
    }
    /// `write_at`: extends with zeros as needed.
    pub fn write(&mut self, off: u64, buf: &[u8]) {
        if buf.is_empty() {
            return;
        }
        let end = off as usize + buf.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[off as usize..end].copy_from_slice(buf);
    }
    /// `set_len`.
    pub fn set_len(&mut self, size: u64) {
        self.data.resize(size as usize, 0);
    }
    /// `punch_hole`: zeros inside EOF, size unchanged.
    pub fn punch(&mut self, off: u64, len: u64) {
        let size = self.data.len() as u64;
        let (s, e) = (off.min(size), off.saturating_add(len).min(size));
        self.data[s as usize..e as usize].fill(0);
    }
    /// `File::allocate` with fallocate(2)'s size rules: the bytes of a
    /// reserve stay as they are and a zero range reads as zeros; unless
    /// `keep_size`, the file grows to `off + len` wherever its EOF lay.
    pub fn allocate(&mut self, off: u64, len: u64, what: pollfs_core::Allocate) {
        use pollfs_core::Allocate;
        let end = off + len;
        let (keep_size, zero) = match what {
            Allocate::PunchHole => return self.punch(off, len),
            Allocate::Reserve { keep_size } => (keep_size, false),
            Allocate::ZeroRange { keep_size } => (keep_size, true),
            _ => panic!("the model knows no {what:?}"),
        };
        if !keep_size && end > self.data.len() as u64 {
            self.data.resize(end as usize, 0);
        }
        if zero {
            self.punch(off, len);
        }
    }
}

/// A byte pattern that names where it was written: byte `i` of a write that
/// starts at `off` in operation `op` is a hash of `(op, off + i)`, so a wrong
/// byte in a read can be traced to the write that produced it.
pub fn pattern(op: u64, off: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = (op.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                ^ (off + i).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
            // Never zero, so holes and written bytes are told apart.
            ((x ^ (x >> 29)) % 255 + 1) as u8
        })
        .collect()
}
