//! `fallocate`: reserving blocks, zeroing and punching ranges, under the
//! engine's own locks, with fallocate(2)'s size rules.
//!
//! - [`Allocate::Reserve`] (mode 0) gives every hole page of the range a
//!   block holding zeros (data already there is kept) and, unless
//!   `keep_size`, grows the file to `offset + len` wherever the old EOF
//!   lies, inside the range's last page included.
//! - With `keep_size` (FALLOC_FL_KEEP_SIZE) the size never changes. The
//!   part of the range past EOF is accepted without reserving anything:
//!   no block is ever mapped past the page holding EOF (recovery and the
//!   checker hold every image to that rule, see docs/design/format.md), so a
//!   later write there allocates as any write does and may find the
//!   device full, as on tmpfs.
//! - [`Allocate::ZeroRange`] (FALLOC_FL_ZERO_RANGE) makes the range read
//!   as zeros, allocated; it grows the file unless `keep_size`.
//! - [`Allocate::PunchHole`] (FALLOC_FL_PUNCH_HOLE, which Linux accepts
//!   only with KEEP_SIZE) is [`Session::punch_inode`].
//! - COLLAPSE_RANGE, INSERT_RANGE and UNSHARE_RANGE are not supported
//!   ([`Allocate::from_linux`] returns `None`; the mount answers
//!   EOPNOTSUPP): moving every extent after the range is a change of
//!   the log's records this engine does not have.
//!
//! Reserving and zeroing hold the inode lock (no size change, extending
//! write or commit meanwhile) and the extent lock over the range (no write
//! inside it meanwhile), and write zero pages through the cache as a write
//! does, so a block never shows before its zeros and a commit sees either
//! none of the range or all of it with the size. A request whose hole
//! pages outnumber the free blocks fails with
//! [`SpaceError::DeviceFull`] before anything changes (after one commit,
//! if freed blocks wait for one); one that fails part-way (a device
//! error) keeps what it did, as a short write does.

use core::sync::atomic::Ordering;

use super::inode::Inode;
use super::{Session, MAX_FILE_SIZE};
use crate::dev::BlockDevice;
use crate::error::{RangeError, Result, SpaceError};
use crate::lock::{Held, Mode};
use crate::units::{ByteRange, PageIndex, PAGE_SIZE, PAGE_SIZE_U64};

/// A page of zeros, the data reserving and zeroing write.
static ZEROS: [u8; PAGE_SIZE] = [0; PAGE_SIZE];

/// What a `fallocate` call asks for (see the module notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Allocate {
    /// Give the range's holes blocks; grow the file unless `keep_size`.
    Reserve {
        /// FALLOC_FL_KEEP_SIZE.
        keep_size: bool,
    },
    /// Make the range read as zeros, allocated; grow unless `keep_size`.
    ZeroRange {
        /// FALLOC_FL_KEEP_SIZE.
        keep_size: bool,
    },
    /// Free the range (it reads as zeros); the size stays.
    PunchHole,
}

impl Allocate {
    /// FALLOC_FL_KEEP_SIZE.
    pub const KEEP_SIZE: u32 = 0x01;
    /// FALLOC_FL_PUNCH_HOLE.
    pub const PUNCH_HOLE: u32 = 0x02;
    /// FALLOC_FL_COLLAPSE_RANGE (not supported).
    pub const COLLAPSE_RANGE: u32 = 0x08;
    /// FALLOC_FL_ZERO_RANGE.
    pub const ZERO_RANGE: u32 = 0x10;
    /// FALLOC_FL_INSERT_RANGE (not supported).
    pub const INSERT_RANGE: u32 = 0x20;

    /// The request a Linux `fallocate` mode word makes, or `None` for a
    /// mode this engine does not support (EOPNOTSUPP) or Linux refuses
    /// (PUNCH_HOLE without KEEP_SIZE).
    pub fn from_linux(mode: u32) -> Option<Allocate> {
        const KEEP: u32 = Allocate::KEEP_SIZE;
        const PUNCH: u32 = Allocate::PUNCH_HOLE | Allocate::KEEP_SIZE;
        const ZERO: u32 = Allocate::ZERO_RANGE;
        const ZERO_KEEP: u32 = Allocate::ZERO_RANGE | Allocate::KEEP_SIZE;
        match mode {
            0 => Some(Allocate::Reserve { keep_size: false }),
            KEEP => Some(Allocate::Reserve { keep_size: true }),
            PUNCH => Some(Allocate::PunchHole),
            ZERO => Some(Allocate::ZeroRange { keep_size: false }),
            ZERO_KEEP => Some(Allocate::ZeroRange { keep_size: true }),
            _ => None,
        }
    }
}

impl<D: BlockDevice> Session<D> {
    /// Does `what` over `[off, off + len)` of `inode` (see the module
    /// notes). An empty range is [`RangeError::Empty`], one past the
    /// largest file [`RangeError::TooLarge`].
    pub(crate) async fn allocate_inode(
        &self,
        inode: &Inode,
        off: u64,
        len: u64,
        what: Allocate,
    ) -> Result<()> {
        let range = ByteRange::at(off, len).ok_or(RangeError::Overflow)?;
        if range.is_empty() {
            return Err(RangeError::Empty.into());
        }
        if range.end > MAX_FILE_SIZE {
            return Err(RangeError::TooLarge.into());
        }
        let (keep_size, zero) = match what {
            Allocate::PunchHole => return self.punch_inode(inode, off, len).await,
            Allocate::Reserve { keep_size } => (keep_size, false),
            Allocate::ZeroRange { keep_size } => (keep_size, true),
        };
        let done = self
            .with_room(|| self.reserve(inode, range, keep_size, zero))
            .await;
        if done.is_ok() {
            inode.touch((self.fs.config.wall_clock)());
        }
        done
    }

    /// Gives the hole pages of `range` blocks of zeros (and, if `zero`,
    /// writes zeros over the rest of it), clipped to EOF if `keep_size`;
    /// then grows the file to the range's end unless `keep_size`.
    async fn reserve(
        &self,
        inode: &Inode,
        range: ByteRange,
        keep_size: bool,
        zero: bool,
    ) -> Result<()> {
        let held = Held::new();
        let _inode_lock = self.inode_lock(inode, Mode::Exclusive, &held).await;
        let old = inode.size();
        let end = if keep_size {
            range.end.min(old)
        } else {
            range.end
        };
        let range = ByteRange::new(range.start.min(end), end);
        let (first, last) = range.pages();
        let holes = {
            let extents = inode.extents.read();
            (first.0..last.0)
                .filter(|&p| extents.lookup(p).is_none())
                .count() as u64
        };
        let usable = {
            let reserve = self.fs.meta_reserve(0);
            self.fs.space.lock().free_blocks().saturating_sub(reserve)
        };
        if holes > usable {
            return Err(SpaceError::DeviceFull.into());
        }
        if end > old {
            // As for an extending write: the old EOF page's tail becomes
            // part of the file and must read as zeros.
            self.zero_past_eof(inode, old).await?;
        }
        let mut failed = Ok(());
        let mut reached = range.start;
        if !range.is_empty() {
            let _extent = self
                .lock_striped(inode.extent_lock(), range, Mode::Exclusive, &held)
                .await;
            (reached, failed) = self.zero_pages(inode, range, zero).await;
        }
        // Blocks are never mapped past the page holding EOF: if the range
        // stopped part-way past the old EOF, the size covers what it did.
        let new_end = if failed.is_ok() { end } else { reached };
        if !keep_size && new_end > old {
            inode.size.store(new_end, Ordering::Release);
            inode.meta_changed();
        }
        failed
    }

    /// Writes a page of zeros over every hole page of `range` and, if
    /// `zero`, zeros over the range's part of every other page. Returns
    /// how far it got and the error that stopped it. The caller holds the
    /// inode lock and the extent lock over `range`.
    async fn zero_pages(&self, inode: &Inode, range: ByteRange, zero: bool) -> (u64, Result<()>) {
        let mut pos = range.start;
        while pos < range.end {
            if pos != range.start {
                if let Err(e) = self.throttle(inode).await {
                    return (pos, Err(e));
                }
            }
            let index = PageIndex::containing(pos);
            let next = ((index.0 + 1) * PAGE_SIZE_U64).min(range.end);
            let hole = inode.extents.read().lookup(index.0).is_none();
            let written = if hole {
                // A hole reads as zeros: the whole page is zeros to write.
                self.write_page(inode, index, 0, &ZEROS).await
            } else if zero {
                let in_page = (pos % PAGE_SIZE_U64) as usize;
                let n = (next - pos) as usize;
                self.write_page(inode, index, in_page, &ZEROS[..n]).await
            } else {
                Ok(())
            };
            if let Err(e) = written {
                return (pos, Err(e));
            }
            pos = next;
        }
        (pos, Ok(()))
    }
}
