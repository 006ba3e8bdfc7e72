//! What a device or file already holds. Formatting (mkfs, the bench)
//! writes over the whole device, so before writing anything
//! [`crate::open`] reads its first [`PROBE_BYTES`] and refuses one that
//! holds anything (a known signature or any non-zero byte) unless the
//! caller forces it. A missing file, or one that is all zeros there, is
//! empty.

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use pollfs_core::dev::{BlockDevice, Command, DevError, DeviceQueue, FrameArena};
use pollfs_core::units::{FrameId, Lba, PAGE_SIZE};

/// Bytes looked at: far enough to see the btrfs superblock's magic, which
/// sits 64 bytes into the block at 64 KiB (rounded up to whole pages).
pub const PROBE_BYTES: usize = (BTRFS_MAGIC_AT + 8).div_ceil(PAGE_SIZE) * PAGE_SIZE;

const BTRFS_MAGIC_AT: usize = 65_536 + 64;
/// The ext2/3/4 superblock starts at byte 1024; its magic 0xEF53 is at 56.
const EXT_SUPER: usize = 1024;
/// The swap signature ends a 4 KiB page.
const SWAP_MAGIC_AT: usize = 4096 - 10;
/// The MBR's four partition entries, 16 bytes each, then 0x55 0xAA.
const MBR_ENTRIES: usize = 446;

/// A signature found on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Found {
    /// A pollfs superblock (block 0 or 1).
    Pollfs,
    /// An ext2, ext3 or ext4 superblock.
    Ext(u8),
    /// An XFS superblock.
    Xfs,
    /// A btrfs superblock.
    Btrfs,
    /// Linux swap.
    Swap,
    /// A GPT header (at 512 or 4096, for 512- and 4096-byte sectors).
    Gpt,
    /// An MBR with at least one partition.
    Mbr,
    /// No signature, but bytes that are not zero.
    Data {
        /// The first non-zero byte.
        offset: usize,
    },
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Pollfs => write!(f, "a pollfs filesystem"),
            Found::Ext(v) => write!(f, "an ext{v} filesystem"),
            Found::Xfs => write!(f, "an XFS filesystem"),
            Found::Btrfs => write!(f, "a btrfs filesystem"),
            Found::Swap => write!(f, "swap space"),
            Found::Gpt => write!(f, "a GPT partition table"),
            Found::Mbr => write!(f, "an MBR partition table"),
            Found::Data { offset } => write!(f, "data (a non-zero byte at offset {offset})"),
        }
    }
}

fn at(head: &[u8], offset: usize, magic: &[u8]) -> bool {
    head.get(offset..offset + magic.len()) == Some(magic)
}

fn le32(head: &[u8], offset: usize) -> u32 {
    head.get(offset..offset + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// ext4 if the superblock asks for a feature ext3 lacks (extents, 64-bit,
/// flex_bg, huge files, group descriptor or metadata checksums), ext3 if
/// it has a journal, else ext2: the same rule blkid follows.
fn ext_version(head: &[u8]) -> u8 {
    let compat = le32(head, EXT_SUPER + 0x5c);
    let incompat = le32(head, EXT_SUPER + 0x60);
    let ro_compat = le32(head, EXT_SUPER + 0x64);
    const INCOMPAT_EXT4: u32 = 0x40 | 0x80 | 0x200;
    const RO_COMPAT_EXT4: u32 = 0x08 | 0x10 | 0x400;
    const HAS_JOURNAL: u32 = 0x4;
    if incompat & INCOMPAT_EXT4 != 0 || ro_compat & RO_COMPAT_EXT4 != 0 {
        4
    } else if compat & HAS_JOURNAL != 0 {
        3
    } else {
        2
    }
}

fn mbr_has_partition(head: &[u8]) -> bool {
    // An entry's byte 4 is its partition type; 0 marks an unused entry.
    at(head, 510, &[0x55, 0xaa])
        && (0..4).any(|i| head.get(MBR_ENTRIES + 16 * i + 4).is_some_and(|&t| t != 0))
}

/// What `head` (the first bytes of a device, possibly fewer than
/// [`PROBE_BYTES`]) holds, or `None` if it is all zeros.
pub fn identify(head: &[u8]) -> Option<Found> {
    let found = if at(head, 0, b"POLLFSv1") || at(head, PAGE_SIZE, b"POLLFSv1") {
        Found::Pollfs
    } else if at(head, 512, b"EFI PART") || at(head, 4096, b"EFI PART") {
        // Before the MBR: a GPT disk also carries a protective MBR.
        Found::Gpt
    } else if at(head, BTRFS_MAGIC_AT, b"_BHRfS_M") {
        Found::Btrfs
    } else if at(head, 0, b"XFSB") {
        Found::Xfs
    } else if at(head, EXT_SUPER + 56, &[0x53, 0xef]) {
        Found::Ext(ext_version(head))
    } else if at(head, SWAP_MAGIC_AT, b"SWAPSPACE2") || at(head, SWAP_MAGIC_AT, b"SWAP-SPACE") {
        Found::Swap
    } else if mbr_has_partition(head) {
        Found::Mbr
    } else {
        Found::Data {
            offset: head.iter().position(|&b| b != 0)?,
        }
    };
    Some(found)
}

/// The first [`PROBE_BYTES`] of a file or block device (fewer if it is
/// shorter); `None` if it does not exist.
pub fn read_file_head(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut head = Vec::with_capacity(PROBE_BYTES);
    file.take(PROBE_BYTES as u64).read_to_end(&mut head)?;
    Ok(Some(head))
}

/// The first [`PROBE_BYTES`] of a block device (fewer if it is smaller),
/// read one page at a time through frame 0, before anything else uses it.
/// A device that does not answer within ten seconds is reported as
/// [`DevError::Timeout`].
pub fn read_device_head<D: BlockDevice>(dev: &D) -> Result<Vec<u8>, DevError> {
    let geometry = dev.geometry();
    let pages = geometry
        .capacity_pages()
        .min((PROBE_BYTES / PAGE_SIZE) as u64);
    let mut q = dev.open_queue()?;
    let mut head = vec![0u8; pages as usize * PAGE_SIZE];
    for (page, buf) in head.chunks_mut(PAGE_SIZE).enumerate() {
        let lba = Lba(page as u64 * geometry.blocks_per_page());
        let tag = q.submit(&Command::Read {
            lba,
            frames: &[FrameId(0)],
        })?;
        let mut result = None;
        // A device that never answers is reported, not waited on forever.
        let deadline = Instant::now() + Duration::from_secs(10);
        while result.is_none() && Instant::now() < deadline {
            q.poll(pollfs_core::hosted::monotonic_clock(), 8, &mut |c| {
                if c.tag == tag {
                    result = Some(c.result);
                }
            });
        }
        result.ok_or(DevError::Timeout)??;
        dev.frames().read(FrameId(0), 0, buf)?;
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(offset: usize, bytes: &[u8]) -> Vec<u8> {
        let mut head = vec![0u8; PROBE_BYTES];
        head[offset..offset + bytes.len()].copy_from_slice(bytes);
        head
    }

    #[test]
    fn each_signature_is_named() {
        assert_eq!(identify(&vec![0u8; PROBE_BYTES]), None);
        assert_eq!(identify(&[]), None);
        assert_eq!(identify(&with(0, b"POLLFSv1")), Some(Found::Pollfs));
        assert_eq!(identify(&with(4096, b"POLLFSv1")), Some(Found::Pollfs));
        assert_eq!(identify(&with(0, b"XFSB")), Some(Found::Xfs));
        assert_eq!(identify(&with(65_600, b"_BHRfS_M")), Some(Found::Btrfs));
        assert_eq!(identify(&with(4086, b"SWAPSPACE2")), Some(Found::Swap));
        assert_eq!(identify(&with(4086, b"SWAP-SPACE")), Some(Found::Swap));
        assert_eq!(identify(&with(512, b"EFI PART")), Some(Found::Gpt));
        assert_eq!(identify(&with(4096, b"EFI PART")), Some(Found::Gpt));
        assert_eq!(
            identify(&with(100, b"x")),
            Some(Found::Data { offset: 100 })
        );
    }

    #[test]
    fn ext_versions_follow_the_feature_flags() {
        let mut h = with(1080, &[0x53, 0xef]);
        assert_eq!(identify(&h), Some(Found::Ext(2)));
        h[1024 + 0x5c] = 0x4;
        assert_eq!(identify(&h), Some(Found::Ext(3)));
        h[1024 + 0x60] = 0x40;
        assert_eq!(identify(&h), Some(Found::Ext(4)));
    }

    #[test]
    fn an_mbr_counts_only_with_a_partition() {
        let mut h = with(510, &[0x55, 0xaa]);
        // A boot sector with no partitions is still not empty.
        assert_eq!(identify(&h), Some(Found::Data { offset: 510 }));
        h[446 + 16 + 4] = 0x83;
        assert_eq!(identify(&h), Some(Found::Mbr));
    }

    #[test]
    fn the_device_path_reads_far_enough_for_btrfs() {
        use pollfs_core::dev::ram::RamDevice;
        let dev = RamDevice::new(1 << 20, 512, 4).unwrap();
        let mut q = dev.open_queue().unwrap();
        dev.frames().write(FrameId(1), 64, b"_BHRfS_M").unwrap();
        // Page 16 is at LBA 128 with 512-byte blocks.
        let tag = q
            .submit(&Command::Write {
                lba: Lba(128),
                frames: &[FrameId(1)],
                fua: false,
            })
            .unwrap();
        let mut done = false;
        while !done {
            q.poll(pollfs_core::units::Nanos(0), 8, &mut |c| {
                done |= c.tag == tag && c.result.is_ok();
            });
        }
        let head = read_device_head(&dev).unwrap();
        assert_eq!(head.len(), PROBE_BYTES);
        assert_eq!(identify(&head), Some(Found::Btrfs));
    }
}
