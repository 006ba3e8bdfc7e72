//! The header and data digests of NVMe/TCP: CRC-32C (Castagnoli, the
//! iSCSI polynomial; NVMe/TCP 1.0, 3.3.1.1), stored little-endian after
//! the header or the data they protect.

use crc::{Crc, Digest, Table, CRC_32_ISCSI};

/// Slice-by-16 tables: a data digest covers every byte moved, so it is
/// worth the 16 KiB of tables.
static CASTAGNOLI: Crc<u32, Table<16>> = Crc::<u32, Table<16>>::new(&CRC_32_ISCSI);

/// Length of a digest field.
pub const DIGEST_LEN: usize = 4;

/// CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    CASTAGNOLI.checksum(bytes)
}

/// A digest over data that arrives or leaves in pieces.
pub struct Running(Digest<'static, u32, Table<16>>);

impl core::fmt::Debug for Running {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Running")
    }
}

impl Running {
    /// An empty digest.
    pub fn new() -> Running {
        Running(CASTAGNOLI.digest())
    }
    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    /// The digest of everything added.
    pub fn finish(self) -> u32 {
        self.0.finalize()
    }
}

impl Default for Running {
    fn default() -> Self {
        Running::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_published_check_values() {
        // RFC 3720, B.4: 32 bytes of zeros, of ones, and ascending bytes.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let ascending: [u8; 32] = core::array::from_fn(|i| i as u8);
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let mut r = Running::new();
        r.update(b"1234");
        r.update(b"56789");
        assert_eq!(r.finish(), 0xe306_9283);
    }
}
