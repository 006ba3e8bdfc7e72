//! The valid image every `recovery` input starts from, built once per
//! process: a 1 MiB filesystem whose checkpoint is a chain of several
//! frames (long names make it span blocks, punched holes make free space
//! come in single blocks) followed by several live log writes (creates,
//! renames, removes, truncates, punches and appends since the checkpoint).

use std::sync::OnceLock;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::persist::format::{Frame, Superblock};
use pollfs_core::persist::record::Record;
use pollfs_core::persist::META_FRAMES;
use pollfs_core::units::{PAGE_SIZE, PAGE_SIZE_U64};
use pollfs_core::{Config, Fs, Result};
use pollfs_host_tests::crash::device_from;
use pollfs_host_tests::image;
use pollfs_host_tests::model::pattern;

use super::values;

/// Device size: two superblocks, the log's 64 blocks and a data area of
/// 190 blocks.
pub const DEV_BYTES: u64 = 1 << 20;
/// Page-cache pages of every mount.
pub const CACHE_PAGES: u32 = 16;
const UUID: u64 = 0x5EED_F00D_0000_0001;
/// Files with long names: enough to make the checkpoint span blocks.
const LONG_NAMES: u64 = 20;

/// The engine settings of every mount: a small cache, no readahead, and a
/// polling loop that needs no clock (the RAM device completes at once).
pub fn config() -> Config {
    Config {
        cache_pages: CACHE_PAGES,
        readahead_pages: 0,
        ..Config::default()
    }
}

/// A RAM device holding `bytes`, with frames for the cache and metadata.
pub fn device(bytes: &[u8]) -> RamDevice {
    device_from(bytes, CACHE_PAGES + META_FRAMES)
}

/// One frame of the checkpoint chain.
#[derive(Clone, Debug)]
pub struct CkptFrame {
    /// First block.
    pub block: u64,
    /// Blocks.
    pub blocks: u64,
    /// Its header.
    pub frame: Frame,
}

/// The base image and where its structures are.
#[derive(Debug)]
pub struct Base {
    /// The whole device.
    pub bytes: Vec<u8>,
    /// The newest superblock.
    pub sb: Superblock,
    /// The live log writes, in replay order.
    pub log: Vec<image::LogFrame>,
    /// The checkpoint chain, in chain order.
    pub ckpt: Vec<CkptFrame>,
    /// The checkpoint's records.
    pub ckpt_records: Vec<Record>,
}

/// The base image (built on first use).
pub fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| build().expect("the base image builds"))
}

thread_local! {
    /// One device per thread, reused: allocating and zeroing a fresh one
    /// for every input costs more than the run itself.
    static DEVICE: RamDevice = device(&base().bytes);
}

/// A device holding the base image (this thread's, overwritten).
pub fn fresh_device() -> RamDevice {
    DEVICE.with(|d| {
        d.write_raw(0, &base().bytes);
        d.clone()
    })
}

fn name(i: u64) -> String {
    format!("{i:02}-{}", "n".repeat(240))
}

fn build() -> Result<Base> {
    let dev = device(&vec![0; DEV_BYTES as usize]);
    let fs = Fs::format(dev.clone(), config(), UUID)?;
    {
        let s = fs.session()?;
        for i in 0..LONG_NAMES {
            let f = s.create(&name(i))?;
            f.write_all_at(&pattern(i, 0, 1000 + 700 * i as usize), 0)?;
        }
        // Every other block punched: a file of one-block extents, and
        // single free blocks for the checkpoint's frames.
        let frag = s.create("frag")?;
        frag.write_all_at(&pattern(99, 0, 40 * PAGE_SIZE), 0)?;
        frag.sync_data()?;
        for b in (1..40).step_by(2) {
            frag.punch_hole(b * PAGE_SIZE_U64, PAGE_SIZE_U64)?;
        }
        s.open(&name(2))?.set_len(100)?;
        s.open(&name(3))?.set_len(50_000)?;
        fs.rename(&name(4), "renamed")?;
        fs.remove(&name(1))?;
        fs.sync()?;
    }
    fs.unmount()?;
    let fs = Fs::mount(dev.clone(), config())?;
    {
        // Live log writes after the checkpoint, one commit each.
        let s = fs.session()?;
        let a = s.create("a")?;
        a.write_all_at(&pattern(1, 0, 10_000), 0)?;
        a.sync_all()?;
        a.set_len(5000)?;
        a.sync_all()?;
        fs.rename("a", "b")?;
        let c = s.create("c")?;
        c.write_all_at(&pattern(2, 0, 6 * PAGE_SIZE), 0)?;
        c.punch_hole(PAGE_SIZE_U64, 2 * PAGE_SIZE_U64)?;
        c.sync_all()?;
        fs.remove("frag")?;
        fs.rename(&name(6), &name(7))?;
        fs.sync()?;
        let r = s.open("renamed")?;
        r.write_all_at(&pattern(3, r.len(), 3000), r.len())?;
        r.sync_data()?;
    }
    drop(fs);
    let mut bytes = vec![0u8; DEV_BYTES as usize];
    dev.read_raw(0, &mut bytes);
    let sb = image::superblock(&dev);
    let log = image::live_frames(&dev);
    let (ckpt, stream) = chain(&bytes, &sb);
    let ckpt_records = Record::decode_all(&stream).expect("the checkpoint decodes");
    // The crafting encoder writes what the engine's does.
    for r in ckpt_records
        .iter()
        .chain(log.iter().flat_map(|f| &f.records))
    {
        let ours = values::encode(&[values::Rec::from(r)]);
        assert!(ours == Record::encode_all(std::slice::from_ref(r)), "{r:?}");
    }
    assert!(ckpt.len() >= 2, "the checkpoint spans several frames");
    assert!(log.len() >= 5, "several live log writes");
    Ok(Base {
        bytes,
        sb,
        log,
        ckpt,
        ckpt_records,
    })
}

/// The checkpoint chain the superblock names, and its payload stream.
fn chain(bytes: &[u8], sb: &Superblock) -> (Vec<CkptFrame>, Vec<u8>) {
    let mut out = Vec::new();
    let mut stream = Vec::new();
    let (mut block, mut blocks) = (sb.ckpt.block, u64::from(sb.ckpt.blocks));
    while blocks != 0 {
        let at = (block * PAGE_SIZE_U64) as usize;
        let raw = &bytes[at..at + blocks as usize * PAGE_SIZE];
        let (frame, crc) = Frame::header(raw).expect("a checkpoint frame header");
        stream.extend_from_slice(Frame::payload(raw, &frame, crc).expect("its checksum"));
        out.push(CkptFrame {
            block,
            blocks,
            frame,
        });
        (block, blocks) = (frame.next.block, u64::from(frame.next.blocks));
    }
    (out, stream)
}
