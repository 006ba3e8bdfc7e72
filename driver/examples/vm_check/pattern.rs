//! The data the guest leaves on the namespace for the host to check in the
//! backing image after the VM has powered off. It proves the writes went
//! through the real controller to the medium, not just into a cache the
//! driver reads back from.

/// Byte offset of the region the guest fills with [`byte`].
pub const PATTERN_AT: u64 = 64 << 20;
/// Its length: 1 MiB, written as one command (several PRP list entries).
pub const PATTERN_LEN: u64 = 1 << 20;
/// Byte offset of a region written with a pattern, then Write Zeroes.
pub const ZEROED_AT: u64 = 32 << 20;
/// Its length.
pub const ZEROED_LEN: u64 = 1 << 20;
/// Pages of pattern at the very end of the namespace.
pub const TAIL_PAGES: u64 = 8;

/// The pattern byte at device byte offset `at`: differs between pages and
/// between bytes of one page, so a misplaced or shifted page shows.
pub fn byte(at: u64) -> u8 {
    let page = (at >> 12).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((page >> 56) as u8) ^ (at as u8).wrapping_mul(13) ^ 0x5a
}

/// One page of pattern starting at device byte offset `at`.
pub fn page(at: u64) -> Vec<u8> {
    (0..4096u64).map(|i| byte(at + i)).collect()
}

/// Host side: checks the backing image after the guest has run; its
/// first `data_len` bytes hold the blocks' data (all of it when `None`;
/// QEMU keeps a namespace's metadata after its data).
pub fn verify_image(path: &str, data_len: Option<u64>) -> Result<(), String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let len = f.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    let len = data_len.unwrap_or(len);
    let mut check = |at: u64, n: u64, want: &dyn Fn(u64) -> u8| -> Result<(), String> {
        let mut buf = vec![0u8; n as usize];
        f.seek(SeekFrom::Start(at))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| format!("{path} at {at}: {e}"))?;
        match (0..n).find(|&i| buf[i as usize] != want(at + i)) {
            None => Ok(()),
            Some(i) => Err(format!(
                "{path}: byte at {} is {:#04x}, expected {:#04x}",
                at + i,
                buf[i as usize],
                want(at + i)
            )),
        }
    };
    check(PATTERN_AT, PATTERN_LEN, &byte)?;
    check(ZEROED_AT, ZEROED_LEN, &|_| 0)?;
    let tail = TAIL_PAGES * 4096;
    check(len - tail, tail, &byte)?;
    Ok(())
}
