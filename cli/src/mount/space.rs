//! `fallocate` on a file, from the engine's writes and punch-hole.
//!
//! The engine allocates a block when a page is first written, and has no
//! call that allocates without writing. So mode 0 (allocate) reserves
//! blocks by writing zeros where the range reads as zeros: holes get
//! blocks, zero bytes stay zero bytes, and other data is never touched.
//! Reading then writing is only safe if nothing writes the range between
//! the two: the caller holds the file's [`Gates`](super::server::Gates)
//! lock exclusively, which every write through the mount takes shared.
//!
//! Modes: 0 allocates (and grows the file to the range's end);
//! KEEP_SIZE allocates inside EOF (pollfs keeps no blocks past EOF, so a
//! range past it is refused with EOPNOTSUPP); PUNCH_HOLE|KEEP_SIZE frees
//! the range; ZERO_RANGE (with or without KEEP_SIZE) writes zeros over it,
//! so it reads as zeros and is allocated. Anything else is EOPNOTSUPP.

use fuser::Errno;
use pollfs_core::dev::BlockDevice;
use pollfs_core::File;

use super::server::errno;

/// How much is read or written per engine call.
const CHUNK: usize = 256 * 1024;
const PAGE: u64 = pollfs_core::units::PAGE_SIZE as u64;

/// What a `fallocate` mode asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallocate {
    /// Reserve blocks; grow the file unless `keep_size`.
    Allocate {
        /// FALLOC_FL_KEEP_SIZE.
        keep_size: bool,
    },
    /// Free the range (it reads as zeros); the size stays.
    PunchHole,
    /// Make the range read as zeros, allocated; grow unless `keep_size`.
    ZeroRange {
        /// FALLOC_FL_KEEP_SIZE.
        keep_size: bool,
    },
}

impl Fallocate {
    /// The request a mode word makes, or EOPNOTSUPP.
    pub fn from_mode(mode: i32) -> Result<Fallocate, Errno> {
        const KEEP: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        match mode {
            0 => Ok(Fallocate::Allocate { keep_size: false }),
            KEEP => Ok(Fallocate::Allocate { keep_size: true }),
            m if m == PUNCH | KEEP => Ok(Fallocate::PunchHole),
            ZERO => Ok(Fallocate::ZeroRange { keep_size: false }),
            m if m == ZERO | KEEP => Ok(Fallocate::ZeroRange { keep_size: true }),
            _ => Err(Errno::EOPNOTSUPP),
        }
    }
}

/// Runs `what` on `[off, off + len)` of `file`, on a filesystem with
/// `free_blocks` free. The caller holds the file's gate exclusively.
///
/// A request that cannot fit (more pages in the range than the file has
/// blocks plus the free blocks) fails with ENOSPC before anything
/// changes; one that fails part-way (space taken meanwhile) keeps what it
/// allocated, as ext4 does.
pub fn fallocate<D: BlockDevice>(
    file: &File<D>,
    what: Fallocate,
    off: u64,
    len: u64,
    free_blocks: u64,
) -> Result<(), Errno> {
    if len == 0 {
        return Err(Errno::EINVAL);
    }
    let end = off.checked_add(len).ok_or(Errno::EFBIG)?;
    if end > pollfs_core::MAX_FILE_SIZE {
        return Err(Errno::EFBIG);
    }
    let pages = end.div_ceil(PAGE) - off / PAGE;
    let allocates = !matches!(what, Fallocate::PunchHole);
    if allocates && pages.saturating_sub(file.metadata().blocks) > free_blocks {
        return Err(Errno::ENOSPC);
    }
    let size = file.len();
    match what {
        Fallocate::Allocate { keep_size } => {
            if keep_size && end > size {
                return Err(Errno::EOPNOTSUPP);
            }
            allocate(file, off, end)
        }
        Fallocate::PunchHole => {
            let end = end.min(size);
            if off < end {
                file.punch_hole(off, end - off).map_err(errno)?;
            }
            Ok(())
        }
        Fallocate::ZeroRange { keep_size } => {
            let end = if keep_size { end.min(size) } else { end };
            write_zeros(file, off, end)
        }
    }
}

/// Writes zeros where `[off, end)` reads as zeros, a page at a time (a
/// page is allocated whole, so a page whose part in the range is zero
/// gets that part written). Bytes past EOF read as zeros, so the file
/// grows to `end`.
fn allocate<D: BlockDevice>(file: &File<D>, off: u64, end: u64) -> Result<(), Errno> {
    let mut buf = vec![0u8; CHUNK];
    let mut pos = off;
    while pos < end {
        let n = (end - pos).min(CHUNK as u64) as usize;
        let chunk = &mut buf[..n];
        let got = read_full(file, chunk, pos)?;
        // Past EOF the bytes are zeros to be written.
        chunk[got..].fill(0);
        // Runs of whole zero pages (clipped to the range) become one write.
        let mut run: Option<(u64, u64)> = None;
        let mut at = pos;
        while at < pos + n as u64 {
            let page_end = ((at / PAGE) + 1) * PAGE;
            let piece_end = page_end.min(pos + n as u64);
            let piece = &chunk[(at - pos) as usize..(piece_end - pos) as usize];
            if piece.iter().all(|&b| b == 0) {
                run = match run {
                    Some((s, e)) if e == at => Some((s, piece_end)),
                    Some((s, e)) => {
                        write_zeros(file, s, e)?;
                        Some((at, piece_end))
                    }
                    None => Some((at, piece_end)),
                };
            }
            at = piece_end;
        }
        if let Some((s, e)) = run {
            write_zeros(file, s, e)?;
        }
        pos += n as u64;
    }
    Ok(())
}

/// Reads as much of `buf` as the file holds from `off`.
fn read_full<D: BlockDevice>(file: &File<D>, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(errno(e)),
        }
    }
    Ok(got)
}

fn write_zeros<D: BlockDevice>(file: &File<D>, off: u64, end: u64) -> Result<(), Errno> {
    let zeros = vec![0u8; CHUNK];
    let mut pos = off;
    while pos < end {
        let n = (end - pos).min(CHUNK as u64) as usize;
        file.write_all_at(&zeros[..n], pos).map_err(errno)?;
        pos += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pollfs_core::dev::ram::RamDevice;
    use pollfs_core::Fs;

    /// More free blocks than any test needs.
    const FREE: u64 = 1 << 20;

    fn fs() -> Fs<RamDevice> {
        let dev = RamDevice::new(64 << 20, 4096, 256).unwrap();
        let cfg = pollfs_core::Config {
            cache_pages: 128,
            ..pollfs_core::hosted::config()
        };
        Fs::format(dev, cfg, 1).unwrap()
    }

    #[test]
    fn modes_map_to_requests_and_the_rest_is_refused() {
        use Fallocate::*;
        assert_eq!(Fallocate::from_mode(0), Ok(Allocate { keep_size: false }));
        assert_eq!(Fallocate::from_mode(1), Ok(Allocate { keep_size: true }));
        assert_eq!(Fallocate::from_mode(3), Ok(PunchHole));
        assert_eq!(
            Fallocate::from_mode(0x10),
            Ok(ZeroRange { keep_size: false })
        );
        assert_eq!(
            Fallocate::from_mode(0x11),
            Ok(ZeroRange { keep_size: true })
        );
        for refused in [2, 0x08, 0x20, 0x40, 0x09] {
            assert_eq!(Fallocate::from_mode(refused), Err(Errno::EOPNOTSUPP));
        }
    }

    #[test]
    fn allocate_reserves_holes_and_keeps_data() {
        let fs = fs();
        let f = fs.create("a").unwrap();
        f.write_all_at(&[7u8; 4096], 3 * 4096).unwrap();
        assert_eq!(f.metadata().blocks, 1);
        let before = fs.free_blocks();
        fallocate(
            &f,
            Fallocate::Allocate { keep_size: false },
            100,
            10 * 4096,
            FREE,
        )
        .unwrap();
        assert_eq!(f.len(), 100 + 10 * 4096);
        // Pages 0..=10 are all mapped now (page 10 holds the range's tail).
        assert_eq!(f.metadata().blocks, 11);
        assert_eq!(before - fs.free_blocks(), 10);
        let mut page = [0u8; 4096];
        f.read_exact_at(&mut page, 3 * 4096).unwrap();
        assert_eq!(page, [7u8; 4096], "data in the range is kept");
    }

    #[test]
    fn keep_size_stays_inside_eof() {
        let fs = fs();
        let f = fs.create("a").unwrap();
        f.set_len(8 * 4096).unwrap();
        let keep = Fallocate::Allocate { keep_size: true };
        assert_eq!(
            fallocate(&f, keep, 0, 9 * 4096, FREE),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(f.metadata().blocks, 0, "a refused request changes nothing");
        fallocate(&f, keep, 0, 8 * 4096, FREE).unwrap();
        assert_eq!((f.len(), f.metadata().blocks), (8 * 4096, 8));
    }

    #[test]
    fn punch_and_zero_range_read_back_zeros() {
        let fs = fs();
        let f = fs.create("a").unwrap();
        f.write_all_at(&[9u8; 16384], 0).unwrap();
        fallocate(&f, Fallocate::PunchHole, 100, 5000, FREE).unwrap();
        fallocate(
            &f,
            Fallocate::ZeroRange { keep_size: true },
            12000,
            10000,
            FREE,
        )
        .unwrap();
        let mut all = [0u8; 16384];
        f.read_exact_at(&mut all, 0).unwrap();
        for (i, &b) in all.iter().enumerate() {
            let zero = (100..5100).contains(&i) || i >= 12000;
            assert_eq!(b, if zero { 0 } else { 9 }, "byte {i}");
        }
        assert_eq!(f.len(), 16384, "KEEP_SIZE kept the size");
        fallocate(
            &f,
            Fallocate::ZeroRange { keep_size: false },
            16000,
            1000,
            FREE,
        )
        .unwrap();
        assert_eq!(f.len(), 17000);
        assert_eq!(
            fallocate(&f, Fallocate::PunchHole, 0, 0, FREE),
            Err(Errno::EINVAL)
        );
    }

    #[test]
    fn a_request_that_cannot_fit_changes_nothing() {
        let fs = fs();
        let f = fs.create("a").unwrap();
        f.write_all_at(&[1u8; 8192], 0).unwrap();
        let alloc = Fallocate::Allocate { keep_size: false };
        // 10 pages, 2 already the file's: 8 more needed, 7 free.
        assert_eq!(fallocate(&f, alloc, 0, 10 * 4096, 7), Err(Errno::ENOSPC));
        assert_eq!((f.len(), f.metadata().blocks), (8192, 2));
        fallocate(&f, alloc, 0, 10 * 4096, 8).unwrap();
        assert_eq!((f.len(), f.metadata().blocks), (10 * 4096, 10));
    }
}
