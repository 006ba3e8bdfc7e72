//! One newtype per kind of number that crosses a layer.
//!
//! A bare `u64` could be a byte offset, a page index, a filesystem block or a
//! device LBA; mixing them up is the classic storage bug. Conversions between
//! them live here and are checked.

/// Size of a page-cache page, a DMA frame and a filesystem block.
pub const PAGE_SIZE: usize = 4096;
/// `PAGE_SIZE` as a `u64`, for offset arithmetic.
pub const PAGE_SIZE_U64: u64 = PAGE_SIZE as u64;
/// log2 of `PAGE_SIZE`.
pub const PAGE_SHIFT: u32 = 12;

/// Longest file name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Most pages a file can have: 2^32 (page indices fit 32 bits).
pub const MAX_FILE_PAGES: u64 = 1 << 32;
/// Largest file size, in bytes (2^32 pages of 4 KiB: 16 TiB).
pub const MAX_FILE_SIZE: u64 = MAX_FILE_PAGES * PAGE_SIZE_U64;
/// Largest inode number: 2^48 - 1, so that numbering can never wrap and a
/// number read from disk leaves room for arithmetic.
pub const MAX_INODE: u64 = (1 << 48) - 1;
/// The root directory's inode number as the persist layer keeps it (in
/// records and the namespace [`Tree`](crate::persist::tree::Tree)); the
/// file API's is [`InodeId::ROOT`].
pub const ROOT_INO: u64 = InodeId::ROOT.0;
/// Longest symbolic link target, in bytes (Linux's `PATH_MAX` less its NUL).
pub const MAX_SYMLINK_LEN: usize = 4095;
/// Most links an inode may have.
pub const MAX_LINKS: u32 = 65_000;

/// A device logical block address (in units of the device's block size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lba(pub u64);

/// A filesystem block number (4 KiB units from the start of the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BlockNo(pub u64);

impl BlockNo {
    /// The block `n` blocks after this one, or `None` on overflow.
    pub fn checked_add(self, n: u64) -> Option<BlockNo> {
        self.0.checked_add(n).map(BlockNo)
    }
}

/// The index of a page within a file (`byte offset / PAGE_SIZE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PageIndex(pub u64);

impl PageIndex {
    /// The page that holds byte `offset`.
    #[inline]
    pub fn containing(offset: u64) -> PageIndex {
        PageIndex(offset >> PAGE_SHIFT)
    }
    /// The first byte offset of this page. Page indices come from byte
    /// offsets below `MAX_FILE_SIZE`, so this cannot overflow.
    pub fn byte_offset(self) -> u64 {
        self.0 << PAGE_SHIFT
    }
}

/// A DMA-capable page frame, by index in the device's frame arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FrameId(pub u32);

impl FrameId {
    /// The frame's position in its arena.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A file's identity, never reused while the filesystem is mounted: what
/// every call of the file API that names an inode takes or returns.
///
/// The number inside is the one `stat` shows, FUSE passes and the on-disk
/// records hold; code at the edges (the FUSE adapter, the C library)
/// converts explicitly, `InodeId(n)` in and `.get()` out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct InodeId(pub u64);

impl InodeId {
    /// The root directory (its own parent).
    pub const ROOT: InodeId = InodeId(1);

    /// The number, as `stat` shows it.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl core::fmt::Display for InodeId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.0, f)
    }
}

/// Caller-supplied monotonic time in nanoseconds. The engine never reads a
/// clock itself: time is passed in so tests can drive it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

/// A half-open byte range `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ByteRange {
    /// First byte in the range.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

impl ByteRange {
    /// `[start, end)`; an inverted range is treated as empty at `start`.
    #[inline]
    pub fn new(start: u64, end: u64) -> ByteRange {
        ByteRange {
            start,
            end: end.max(start),
        }
    }
    /// `[offset, offset + len)`, or `None` if the end overflows.
    pub fn at(offset: u64, len: u64) -> Option<ByteRange> {
        offset
            .checked_add(len)
            .map(|end| ByteRange::new(offset, end))
    }
    /// Everything from `start` to the end of the address space.
    pub fn from(start: u64) -> ByteRange {
        ByteRange::new(start, u64::MAX)
    }
    /// Number of bytes in the range.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    /// True if the range holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
    /// True if the two ranges share at least one byte.
    pub fn overlaps(&self, other: &ByteRange) -> bool {
        self.start < other.end && other.start < self.end
    }
    /// The pages this range touches, as `[first, last_exclusive)`.
    #[inline]
    pub fn pages(&self) -> (PageIndex, PageIndex) {
        if self.is_empty() {
            return (
                PageIndex::containing(self.start),
                PageIndex::containing(self.start),
            );
        }
        let first = PageIndex::containing(self.start);
        let last = PageIndex::containing(self.end - 1);
        (first, PageIndex(last.0 + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_pages_cover_partial_edges() {
        let r = ByteRange::new(4095, 4097);
        assert_eq!(r.pages(), (PageIndex(0), PageIndex(2)));
        let r = ByteRange::new(4096, 8192);
        assert_eq!(r.pages(), (PageIndex(1), PageIndex(2)));
        assert!(ByteRange::at(u64::MAX, 1).is_none());
        assert!(ByteRange::new(0, 10).overlaps(&ByteRange::new(9, 11)));
        assert!(!ByteRange::new(0, 10).overlaps(&ByteRange::new(10, 11)));
    }
}
