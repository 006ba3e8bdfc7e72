//! The valid image every `recovery` input starts from, built once per
//! process: a 2 MiB filesystem whose metadata index spans several pages
//! (long names) and holds nested directories, a hard link, a symbolic
//! link, odd attributes and extended attributes (every namespace, one
//! value at the limit); beside it the records of a commit too large for
//! a log write (an attribute of 64 KiB), carried in a chain of frames;
//! followed by several live log
//! writes (creates, truncates, punches, appends, renames across
//! directories, a directory moved, an exchange, a hard link, a symbolic
//! link, a removal, extended attributes set, replaced and removed, and a
//! file unlinked while open: an orphan that mount reclaims).

use std::sync::OnceLock;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::fs::{NewInode, RenameFlags, SetAttr};
use pollfs_core::persist::format::{Frame, Superblock};
use pollfs_core::persist::index::image::records_of;
use pollfs_core::persist::index::verify::Walk;
use pollfs_core::persist::index::Key;
use pollfs_core::persist::record::Record;
use pollfs_core::persist::shadow::Shadow;
use pollfs_core::persist::xattr::VALUE_MAX;
use pollfs_core::persist::META_FRAMES;
use pollfs_core::units::{PAGE_SIZE, PAGE_SIZE_U64};
use pollfs_core::{Config, Fs, InodeId, Result, XattrMode};
use pollfs_host_tests::crash::device_from;
use pollfs_host_tests::image;
use pollfs_host_tests::model::pattern;

use super::values;

/// Device size: two superblocks, the log's 64 blocks and a data area of
/// 446 blocks.
pub const DEV_BYTES: u64 = 2 << 20;
/// Page-cache pages of every mount.
pub const CACHE_PAGES: u32 = 16;
const UUID: u64 = 0x5EED_F00D_0000_0001;
/// Files with long names: enough to make the checkpoint span blocks.
const LONG_NAMES: u64 = 20;
/// The root directory's inode number, as records hold it.
pub const ROOT: u64 = pollfs_core::units::ROOT_INO;
/// An access ACL's value (u::rw-, u:1000:r--, g::r--, m::r--, o::---).
const ACL: [u8; 44] = [
    2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255, 2, 0, 4, 0, 232, 3, 0, 0, 4, 0, 4, 0, 255, 255,
    255, 255, 16, 0, 4, 0, 255, 255, 255, 255, 32, 0, 0, 0, 255, 255, 255, 255,
];

/// The engine settings of every mount: a small cache, no readahead, and a
/// polling loop that needs no clock (the RAM device completes at once).
pub fn config() -> Config {
    Config {
        cache_pages: CACHE_PAGES,
        readahead_pages: 0,
        // Idle inodes are looked at after every other use, so inodes built
        // from a crafted image's durable view also leave memory and come
        // back from it.
        idle_inodes: 2,
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
    /// The carried chain, in chain order.
    pub ckpt: Vec<CkptFrame>,
    /// The carried records.
    pub ckpt_records: Vec<Record>,
    /// The records the index holds, as recovery loads them.
    pub tree_records: Vec<Record>,
    /// The index.
    pub tree: super::tree::TreeModel,
    /// The durable view the checkpoint and the log build.
    pub shadow: Shadow,
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

/// A long name (so the checkpoint spans blocks), in one of the four
/// nested directories.
fn path(i: u64) -> String {
    let dir = ["", "d1/", "d1/d2/", "d1/d2/d3/"][i as usize % 4];
    format!("{dir}{i:02}-{}", "n".repeat(240))
}

fn build() -> Result<Base> {
    let dev = device(&vec![0; DEV_BYTES as usize]);
    let fs = Fs::format(dev.clone(), config(), UUID)?;
    {
        fs.mkdir("d1")?;
        fs.mkdir("d1/d2")?;
        fs.mkdir("d1/d2/d3")?;
        for i in 0..LONG_NAMES {
            let f = fs.create(&path(i))?;
            f.write_all_at(&pattern(i, 0, 1000 + 700 * i as usize), 0)?;
        }
        // Every other block punched: a file of one-block extents, and
        // single free blocks for the checkpoint's frames.
        let frag = fs.create("d1/frag")?;
        frag.write_all_at(&pattern(99, 0, 40 * PAGE_SIZE), 0)?;
        frag.sync_data()?;
        for b in (1..40).step_by(2) {
            frag.punch_hole(b * PAGE_SIZE_U64, PAGE_SIZE_U64)?;
        }
        fs.open(&path(2))?.set_len(100)?;
        fs.open(&path(3))?.set_len(50_000)?;
        fs.rename(&path(4), "d1/d2/renamed")?;
        fs.remove(&path(1))?;
        let d3 = fs.lookup("d1/d2/d3")?;
        fs.link_in(fs.lookup(&path(5))?, d3, "hard")?;
        fs.symlink_in(
            InodeId::ROOT,
            "sym",
            "d1/d2/renamed",
            NewInode::new(0o777, 1000, 100),
        )?;
        fs.set_attr(
            fs.lookup(&path(6))?,
            SetAttr {
                perm: Some(0o4750),
                uid: Some(u32::MAX),
                gid: Some(7),
                atime: Some(u64::MAX),
                mtime: Some(0),
            },
        )?;
        // Extended attributes in the checkpoint: every namespace, on a
        // file, a directory and a symbolic link, one value at the limit.
        let p7 = fs.lookup(&path(7))?;
        fs.set_xattr(p7, "user.a", b"checkpointed", XattrMode::Create)?;
        fs.set_xattr(p7, "trusted.b", &pattern(5, 0, VALUE_MAX), XattrMode::Any)?;
        fs.set_xattr(p7, "system.posix_acl_access", &ACL, XattrMode::Any)?;
        let d1 = fs.lookup("d1")?;
        fs.set_xattr(d1, "security.c", b"", XattrMode::Any)?;
        fs.set_xattr(d1, "system.posix_acl_default", &ACL, XattrMode::Any)?;
        fs.set_xattr(fs.lookup("sym")?, "trusted.l", b"on a link", XattrMode::Any)?;
        fs.sync()?;
    }
    fs.unmount()?;
    let fs = Fs::mount(dev.clone(), config())?;
    // A commit too large for a log write: a checkpoint carries it.
    let big = fs.lookup(&path(9))?;
    fs.set_xattr(big, "user.big", &pattern(6, 0, VALUE_MAX), XattrMode::Any)?;
    fs.sync()?;
    // Live log writes after the checkpoint, one commit each.
    let a = fs.create("d1/a")?;
    a.write_all_at(&pattern(1, 0, 10_000), 0)?;
    a.sync_all()?;
    a.set_len(5000)?;
    a.sync_all()?;
    fs.rename("d1/a", "d1/d2/b")?;
    let c = fs.create("c")?;
    c.write_all_at(&pattern(2, 0, 6 * PAGE_SIZE), 0)?;
    c.punch_hole(PAGE_SIZE_U64, 2 * PAGE_SIZE_U64)?;
    c.sync_all()?;
    let e = fs.mkdir("e")?;
    fs.link_in(c.ino(), e, "c-link")?;
    fs.symlink_in(e, "up", "../c", NewInode::new(0o777, 0, 0))?;
    fs.remove("d1/frag")?;
    fs.rename("d1/d2/d3", "e/d3")?;
    let exchange = RenameFlags {
        exchange: true,
        ..RenameFlags::default()
    };
    fs.rename_in(InodeId::ROOT, "sym", e, "up", exchange)?;
    fs.rename_noreplace(&path(8), "e/moved")?;
    // Attributes set, replaced and removed in the log.
    fs.set_xattr(c.ino(), "user.log", b"set in the log", XattrMode::Create)?;
    fs.set_xattr(c.ino(), "user.log", b"replaced", XattrMode::Replace)?;
    // (d1/d2/d3 is e/d3 now.)
    let p7 = fs.lookup(&path(7).replacen("d1/d2/d3", "e/d3", 1))?;
    fs.remove_xattr(p7, "user.a")?;
    fs.set_xattr(e, "user.dir", b"", XattrMode::Any)?;
    fs.sync()?;
    // Unlinked while open, and durable so: an orphan mount reclaims.
    let orphan = fs.create("e/orphan")?;
    orphan.write_all_at(&pattern(4, 0, 3 * PAGE_SIZE), 0)?;
    orphan.sync_all()?;
    fs.remove("e/orphan")?;
    fs.sync()?;
    let r = fs.open("d1/d2/renamed")?;
    r.write_all_at(&pattern(3, r.len(), 3000), r.len())?;
    r.sync_data()?;
    // The image as a crash now would leave it (the orphan still open).
    let mut bytes = vec![0u8; DEV_BYTES as usize];
    dev.read_raw(0, &mut bytes);
    drop((orphan, r, a, c, fs));
    let dev = device(&bytes);
    let sb = image::superblock(&dev);
    let log = image::live_frames(&dev);
    let (ckpt, stream) = chain(&bytes, &sb).expect("the carried chain reads");
    let ckpt_records = Record::decode_all(&stream).expect("the carried records decode");
    let (mut tree, tree_records) = tree_of(&bytes, &sb);
    // The crafting encoders write what the engine's do.
    for r in tree_records
        .iter()
        .chain(&ckpt_records)
        .chain(log.iter().flat_map(|f| &f.records))
    {
        let ours = values::encode(&[values::Rec::from(r)]);
        assert!(ours == Record::encode_all(std::slice::from_ref(r)), "{r:?}");
    }
    let shadow = durable(&tree_records, &ckpt_records, &log).expect("the records load and apply");
    // One frame here; `CkptMove` writes it again as a chain of several.
    assert!(!ckpt.is_empty(), "a carried chain");
    assert!(tree.pages.len() >= 3, "the index spans several pages");
    // Room for a tree built again with more items than the base's.
    let mut used: std::collections::BTreeSet<u64> = tree.blocks.iter().copied().collect();
    used.extend(ckpt.iter().flat_map(|f| f.block..f.block + f.blocks));
    for m in shadow.inodes.values() {
        used.extend(m.extents.iter().flat_map(|x| x.dev.0..x.dev.0 + x.len));
    }
    let layout = sb.layout;
    tree.blocks.extend(
        (layout.data_start..layout.blocks)
            .filter(|b| !used.contains(b))
            .take(32),
    );
    assert!(log.len() >= 5, "several live log writes");
    assert!(
        shadow.orphans().len() == 1,
        "one file unlinked while open: {:?}",
        shadow.orphans()
    );
    Ok(Base {
        bytes,
        sb,
        log,
        ckpt,
        ckpt_records,
        tree_records,
        tree,
        shadow,
    })
}

/// The durable view: the index's image, then the records the checkpoint
/// carried and the log replayed, as mount builds it; `None` if a record
/// does not load or apply.
pub fn durable(tree: &[Record], carried: &[Record], log: &[image::LogFrame]) -> Option<Shadow> {
    let mut shadow = Shadow::default();
    let end = tree.iter().position(|r| *r == Record::ImageEnd)?;
    for r in &tree[..end] {
        shadow.load(r).ok()?;
    }
    for r in tree[end + 1..]
        .iter()
        .chain(carried)
        .chain(log.iter().flat_map(|f| &f.records))
    {
        shadow.apply(r).ok()?;
    }
    Some(shadow)
}

/// The index the superblock names in `bytes`, and the records it holds;
/// the blocks a tree built again may use are its own, then the data
/// blocks nothing in the image uses.
fn tree_of(bytes: &[u8], sb: &Superblock) -> (super::tree::TreeModel, Vec<Record>) {
    let block = |b: u64| {
        let at = b as usize * PAGE_SIZE;
        bytes[at..at + PAGE_SIZE].to_vec()
    };
    let mut walk = Walk::new(sb.uuid, sb.root).expect("the root is in range");
    let mut pages = Vec::new();
    let mut items: Vec<(Key, Vec<u8>)> = Vec::new();
    while let Some(b) = walk.next_block() {
        let page = block(b);
        walk.feed(&page, &mut |k, v| items.push((k, v.to_vec())))
            .expect("the index is sound");
        pages.push((b, page));
    }
    let records = records_of(items.iter().map(|(k, v)| (*k, v.as_slice())), &mut |b| {
        Some(block(b))
    })
    .expect("the index's items make records");
    let recs: Vec<values::Rec> = records.iter().map(values::Rec::from).collect();
    assert!(
        super::tree::items(&recs, sb.hash_key) == items,
        "the crafting encoder of items writes what the engine's does"
    );
    let mut blocks: Vec<u64> = pages.iter().map(|p| p.0).collect();
    blocks.sort_unstable();
    (
        super::tree::TreeModel {
            uuid: sb.uuid,
            hash_key: sb.hash_key,
            root: sb.root,
            pages,
            recs,
            blocks,
            dirty: false,
        },
        records,
    )
}

/// The checkpoint chain the superblock names, and its payload stream.
fn chain(bytes: &[u8], sb: &Superblock) -> Option<(Vec<CkptFrame>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stream = Vec::new();
    let (mut block, mut blocks) = (sb.carry.block, u64::from(sb.carry.blocks));
    while blocks != 0 && out.len() < bytes.len() / PAGE_SIZE {
        let at = usize::try_from(block).ok()?.checked_mul(PAGE_SIZE)?;
        let raw = bytes.get(at..at.checked_add(blocks as usize * PAGE_SIZE)?)?;
        let (frame, crc) = Frame::header(raw)?;
        stream.extend_from_slice(Frame::payload(raw, &frame, crc)?);
        out.push(CkptFrame {
            block,
            blocks,
            frame,
        });
        (block, blocks) = (frame.next.block, u64::from(frame.next.blocks));
    }
    Some((out, stream))
}
