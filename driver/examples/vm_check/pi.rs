//! End-to-end protection information on QEMU's controller, its namespace
//! formatted with 4096-byte blocks and 8 bytes of type 1 PI (`ms=8,pi=1`,
//! run by `vm/pi-test.sh`):
//!
//! - after the device test, the host checks the PI QEMU stored beside the
//!   guest's pattern (`pi-image`): each block's guard is the CRC-16
//!   T10-DIF of its data and its reference tag its LBA, so the controller
//!   generated it (PRACT) from what the driver sent;
//! - the host then damages the image (`pi-corrupt`): a bit of one block's
//!   data flipped, and another block overwritten with a third block's
//!   data and PI, as a misdirected write or a wrong mapping leaves it;
//! - in a second boot (`pi-detect`) the driver reads them back: the first
//!   fails with the guard check error, the second with the reference tag
//!   check error, a block beside them reads back right.
//!
//! QEMU keeps the namespace's blocks at the start of the image and their
//! metadata after all of them, 8 bytes per block (`hw/nvme/ns.c`).

use pollfs_core::dev::{BlockDevice, Command, FrameArena};
use pollfs_core::units::{FrameId, Lba, PAGE_SIZE};
use pollfs_driver::spec::protection::{guard, PiCheck, PiTuple, PiType};
use pollfs_driver::vfio::VfioDevice;

use crate::pattern;

/// Block size and metadata size the VM formats the namespace with.
const BLOCK: u64 = 4096;
const META: u64 = 8;

/// The pattern region's first block.
const FIRST: u64 = pattern::PATTERN_AT / BLOCK;
/// A block left alone, read back right.
pub const GOOD_LBA: u64 = FIRST + 1;
/// A block whose data gets a bit flipped.
pub const GUARD_LBA: u64 = FIRST + 10;
/// A block overwritten with `SOURCE_LBA`'s data and PI.
pub const MISDIRECTED_LBA: u64 = FIRST + 20;
const SOURCE_LBA: u64 = FIRST + 30;

struct Image {
    file: std::fs::File,
    path: String,
    /// Blocks in the namespace.
    blocks: u64,
}

impl Image {
    fn open(path: &str, write: bool) -> Result<Image, String> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .map_err(|e| format!("{path}: {e}"))?;
        let len = file.metadata().map_err(|e| format!("{path}: {e}"))?.len();
        Ok(Image {
            file,
            path: path.to_string(),
            blocks: len / (BLOCK + META),
        })
    }
    fn data_at(&self, lba: u64) -> u64 {
        lba * BLOCK
    }
    fn pi_at(&self, lba: u64) -> u64 {
        self.blocks * BLOCK + lba * META
    }
    fn read(&self, at: u64, buf: &mut [u8]) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        self.file
            .read_exact_at(buf, at)
            .map_err(|e| format!("{} at {at}: {e}", self.path))
    }
    fn write(&self, at: u64, buf: &[u8]) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(buf, at)
            .map_err(|e| format!("{} at {at}: {e}", self.path))
    }
    fn tuple(&self, lba: u64) -> Result<PiTuple, String> {
        let mut b = [0u8; 8];
        self.read(self.pi_at(lba), &mut b)?;
        Ok(PiTuple::from_bytes(b))
    }
}

/// Host side, after the device test: the pattern is in the image's data
/// and each of its blocks carries the PI the controller generated for it.
pub fn verify_image(path: &str) -> Result<(), String> {
    let img = Image::open(path, false)?;
    pattern::verify_image(path, Some(img.blocks * BLOCK))?;
    let mut data = vec![0u8; BLOCK as usize];
    for lba in FIRST..FIRST + pattern::PATTERN_LEN / BLOCK {
        img.read(img.data_at(lba), &mut data)?;
        let t = img.tuple(lba)?;
        let want = PiTuple {
            guard: guard(&data),
            app_tag: 0,
            ref_tag: lba as u32,
        };
        if t != want {
            return Err(format!(
                "{path}: block {lba} has PI {t:?}, expected {want:?}"
            ));
        }
    }
    println!(
        "image {path}: {} blocks, pattern present, {} blocks of it carry the PI the controller generated (guard = CRC-16 T10-DIF of the data, reference tag = LBA)",
        img.blocks,
        pattern::PATTERN_LEN / BLOCK
    );
    Ok(())
}

/// Host side: flips a bit of `GUARD_LBA`'s data and copies `SOURCE_LBA`'s
/// data and PI over `MISDIRECTED_LBA`'s.
pub fn corrupt_image(path: &str) -> Result<(), String> {
    let img = Image::open(path, true)?;
    let mut byte = [0u8];
    let at = img.data_at(GUARD_LBA) + 100;
    img.read(at, &mut byte)?;
    img.write(at, &[byte[0] ^ 0x04])?;
    let mut data = vec![0u8; BLOCK as usize];
    img.read(img.data_at(SOURCE_LBA), &mut data)?;
    img.write(img.data_at(MISDIRECTED_LBA), &data)?;
    let t = img.tuple(SOURCE_LBA)?;
    img.write(img.pi_at(MISDIRECTED_LBA), &t.to_bytes())?;
    img.file.sync_all().map_err(|e| format!("{path}: {e}"))?;
    println!(
        "image {path}: a bit of block {GUARD_LBA} flipped; block {SOURCE_LBA}'s data and PI copied over block {MISDIRECTED_LBA}"
    );
    Ok(())
}

/// Guest side, second boot: the damaged blocks fail with the named
/// checks, a good one reads back right.
pub fn detect(dev: &VfioDevice) -> Result<(), String> {
    let info = dev.controller().info();
    match info.protection {
        Some(p) if p.pi_type == PiType::Type1 => {}
        other => return Err(format!("expected type 1 protection, found {other:?}")),
    }
    if u64::from(dev.geometry().block_size) != BLOCK {
        return Err(format!("expected {BLOCK}-byte blocks"));
    }
    let mut q = dev
        .open_nvme_queue()
        .map_err(|e| format!("open queue: {e}"))?;
    let frame = [FrameId(0)];
    let mut read = |lba: u64| {
        dev.frames()
            .fill(frame[0], 0, PAGE_SIZE, 0xee)
            .map_err(|e| e.to_string())?;
        let r = Command::Read {
            lba: Lba(lba),
            frames: &frame,
        };
        let result = crate::run(&mut q, r);
        let mut page = vec![0u8; PAGE_SIZE];
        dev.frames()
            .read(frame[0], 0, &mut page)
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((result, page))
    };
    let (result, page) = read(GOOD_LBA)?;
    result.map_err(|e| format!("block {GOOD_LBA}: {e}"))?;
    if page != pattern::page(GOOD_LBA * BLOCK) {
        return Err(format!("block {GOOD_LBA} read back wrong"));
    }
    println!("block {GOOD_LBA}: read back right");
    for (lba, want) in [
        (GUARD_LBA, PiCheck::Guard),
        (MISDIRECTED_LBA, PiCheck::RefTag),
    ] {
        let (result, _) = read(lba)?;
        match result.map_err(PiCheck::of) {
            Err(Some(c)) if c == want => println!("block {lba}: {c}"),
            other => return Err(format!("block {lba}: expected {want:?}, got {other:?}")),
        }
    }
    println!(
        "integrity errors counted: queue {}, controller {}",
        q.stats().integrity_errors,
        dev.controller().integrity_errors()
    );
    if dev.controller().integrity_errors() < 2 {
        return Err("the integrity errors were not counted".to_string());
    }
    Ok(())
}
