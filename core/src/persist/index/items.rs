//! What the index holds: the filesystem's metadata as keys and values,
//! each decoded through a checked constructor (docs/design/format.md, "The
//! metadata index", has the byte tables).
//!
//! Every item of an inode shares its inode number, so an inode and all it
//! owns are one run of keys; the kind orders them within it:
//!
//! | kind | offset | value |
//! | --- | --- | --- |
//! | 1 inode | 0 | attributes, link count, parent, size, times, device number, generation |
//! | 2 extent | file block | device block, length in blocks |
//! | 3 link target | chunk (0..4) | up to [`CHUNK`] bytes of the target |
//! | 4 directory entries | name bucket | the entries whose names hash to it |
//! | 5 extended attribute | name bucket × 256 + chunk | first chunk: name and total length, then bytes; later chunks: bytes |
//! | 6 live data | file page | the page's block and the block holding its synced bytes |
//!
//! Names are placed by a 55-bit SipHash-2-4 of the name under a key
//! chosen at mkfs (so nobody can make names collide without reading the
//! superblock). A directory bucket holds up to its value's room of
//! entries, each with a slot number of its own within the bucket; a
//! listing's cookie is bucket × 256 + slot, so it names one entry and
//! stays valid while other entries come and go.

use alloc::string::String;
use alloc::vec::Vec;

use super::{Key, MAX_VALUE};
use crate::persist::format::{Dec, Enc};
use crate::persist::record::Kind;

/// An inode's attributes.
pub const INODE: u8 = 1;
/// A run of a file's blocks.
pub const EXTENT: u8 = 2;
/// A piece of a symbolic link's target.
pub const TARGET: u8 = 3;
/// A bucket of a directory's entries.
pub const ENTRIES: u8 = 4;
/// A piece of an extended attribute.
pub const XATTR: u8 = 5;
/// A page whose synced bytes are not in its block yet.
pub const LIVE: u8 = 6;

/// Bytes of a link target or attribute value per item.
pub const CHUNK: usize = 1000;
/// Bits of a name's hash that place it.
pub const BUCKET_BITS: u32 = 55;
/// Longest name, in bytes.
pub const NAME_MAX: usize = 255;
/// Longest extended attribute value, in bytes.
pub const XATTR_VALUE_MAX: usize = 65536;

/// Why an item does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ItemDamage {
    /// Cut short, or bytes left over.
    Length,
    /// A kind this code does not know.
    Kind,
    /// A field out of range (named).
    Field(&'static str),
}

/// An inode's own item (kind 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InodeItem {
    /// What it is.
    pub kind: Kind,
    /// Permission bits.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Links.
    pub nlink: u32,
    /// A directory's parent; 0 for anything else.
    pub parent: u64,
    /// Size in bytes.
    pub size: u64,
    /// Access time (ns since the epoch, two's complement).
    pub atime: u64,
    /// Modification time.
    pub mtime: u64,
    /// Change time.
    pub ctime: u64,
    /// A device node's number; 0 for anything else.
    pub rdev: u64,
    /// Which life of this inode number it is: a file handle names it, so
    /// a handle to a removed file does not open the next file to take
    /// the number, across mounts too.
    pub generation: u64,
}

/// Bytes of an encoded [`InodeItem`].
pub const INODE_LEN: usize = 1 + 2 + 4 * 3 + 8 * 7;

/// Largest file size (16 TiB), as the log's records allow.
const MAX_SIZE: u64 = 16 << 40;

impl InodeItem {
    /// The item's value.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(INODE_LEN));
        e.u8(self.kind.code());
        e.u16(self.perm);
        e.u32(self.uid);
        e.u32(self.gid);
        e.u32(self.nlink);
        e.u64(self.parent);
        e.u64(self.size);
        e.u64(self.atime);
        e.u64(self.mtime);
        e.u64(self.ctime);
        e.u64(self.rdev);
        e.u64(self.generation);
        e.0
    }

    /// Decodes and checks a value.
    pub fn decode(v: &[u8]) -> Result<InodeItem, ItemDamage> {
        let mut d = Dec::new(v);
        let s = |_| ItemDamage::Length;
        let kind = Kind::from_code(d.u8().map_err(s)?).ok_or(ItemDamage::Field("inode kind"))?;
        let item = InodeItem {
            kind,
            perm: d.u16().map_err(s)?,
            uid: d.u32().map_err(s)?,
            gid: d.u32().map_err(s)?,
            nlink: d.u32().map_err(s)?,
            parent: d.u64().map_err(s)?,
            size: d.u64().map_err(s)?,
            atime: d.u64().map_err(s)?,
            mtime: d.u64().map_err(s)?,
            ctime: d.u64().map_err(s)?,
            rdev: d.u64().map_err(s)?,
            generation: d.u64().map_err(s)?,
        };
        if d.remaining() != 0 {
            return Err(ItemDamage::Length);
        }
        if item.perm > 0o7777 {
            return Err(ItemDamage::Field("permission bits"));
        }
        if (item.parent != 0) != (item.kind == Kind::Dir) {
            return Err(ItemDamage::Field("parent"));
        }
        if item.size > MAX_SIZE
            || (!matches!(item.kind, Kind::File | Kind::Symlink) && item.size != 0)
        {
            return Err(ItemDamage::Field("size"));
        }
        if item.rdev != 0 && !matches!(item.kind, Kind::CharDev | Kind::BlockDev) {
            return Err(ItemDamage::Field("device number"));
        }
        Ok(item)
    }
}

/// A run of a file's blocks (kind 2; the key's offset is its first file
/// block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentItem {
    /// First device block.
    pub block: u64,
    /// Blocks.
    pub len: u64,
}

impl ExtentItem {
    /// The item's value.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(16));
        e.u64(self.block);
        e.u64(self.len);
        e.0
    }

    /// Decodes and checks a value under `key` (a file block below 2^32,
    /// a run of at least one block that ends inside both spaces).
    pub fn decode(key: &Key, v: &[u8]) -> Result<ExtentItem, ItemDamage> {
        let mut d = Dec::new(v);
        let s = |_| ItemDamage::Length;
        let x = ExtentItem {
            block: d.u64().map_err(s)?,
            len: d.u64().map_err(s)?,
        };
        if d.remaining() != 0 {
            return Err(ItemDamage::Length);
        }
        let in_file = key.off.checked_add(x.len).is_some_and(|end| end <= 1 << 32);
        if x.len == 0 || !in_file || x.block.checked_add(x.len).is_none() {
            return Err(ItemDamage::Field("extent"));
        }
        Ok(x)
    }
}

/// The keys and values that hold `bytes` in chunks of [`CHUNK`] under
/// (`ino`, `kind`, `first` + i): a link target, or an attribute's bytes.
pub fn chunks(ino: u64, kind: u8, first: u64, bytes: &[u8]) -> impl Iterator<Item = (Key, &[u8])> {
    bytes
        .chunks(CHUNK)
        .enumerate()
        .map(move |(i, c)| (Key::new(ino, kind, first + i as u64), c))
}

/// One directory entry in a bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its slot in the bucket: the low byte of its cookie.
    pub slot: u8,
    /// The inode it names.
    pub ino: u64,
    /// Its name.
    pub name: String,
}

impl Entry {
    /// Its cookie in a listing: bucket × 256 + slot (below 2^63).
    pub fn cookie(&self, bucket: u64) -> u64 {
        (bucket << 8) | u64::from(self.slot)
    }
}

/// Bytes one entry takes in a bucket.
fn entry_len(name: &str) -> usize {
    1 + 8 + 1 + name.len()
}

/// The entries of one bucket (kind 4), in slot order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket(pub Vec<Entry>);

impl Bucket {
    /// The item's value.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::new());
        for x in &self.0 {
            e.u8(x.slot);
            e.u64(x.ino);
            e.u8(x.name.len() as u8);
            e.bytes(x.name.as_bytes());
        }
        e.0
    }

    /// Decodes and checks a value: slots increasing, names valid (UTF-8,
    /// 1..255 bytes, no NUL or `/`, not `.` or `..`) and distinct,
    /// inode numbers non-zero.
    pub fn decode(v: &[u8]) -> Result<Bucket, ItemDamage> {
        let mut d = Dec::new(v);
        let s = |_| ItemDamage::Length;
        let mut out: Vec<Entry> = Vec::new();
        while d.remaining() > 0 {
            let slot = d.u8().map_err(s)?;
            let ino = d.u64().map_err(s)?;
            let n = usize::from(d.u8().map_err(s)?);
            let name = core::str::from_utf8(d.bytes(n).map_err(s)?)
                .map_err(|_| ItemDamage::Field("entry name"))?;
            if !valid_name(name) {
                return Err(ItemDamage::Field("entry name"));
            }
            if ino == 0 {
                return Err(ItemDamage::Field("entry inode"));
            }
            if out.last().is_some_and(|l| l.slot >= slot) || out.iter().any(|e| e.name == name) {
                return Err(ItemDamage::Field("entry slot"));
            }
            out.push(Entry {
                slot,
                ino,
                name: String::from(name),
            });
        }
        Ok(Bucket(out))
    }

    /// The entry named `name`.
    pub fn find(&self, name: &str) -> Option<&Entry> {
        self.0.iter().find(|e| e.name == name)
    }

    /// Adds `name` -> `ino` in the lowest free slot; its slot, or `None`
    /// if the bucket has no room left (its names all hash alike: a
    /// directory refuses the name rather than grow a value past a page's
    /// share).
    pub fn add(&mut self, name: &str, ino: u64) -> Option<u8> {
        let used: usize = self.0.iter().map(|e| entry_len(&e.name)).sum();
        if used + entry_len(name) > MAX_VALUE {
            return None;
        }
        let slot = (0..=u8::MAX).find(|s| self.0.iter().all(|e| e.slot != *s))?;
        let at = self.0.partition_point(|e| e.slot < slot);
        self.0.insert(
            at,
            Entry {
                slot,
                ino,
                name: String::from(name),
            },
        );
        Some(slot)
    }

    /// Removes `name`; the inode it named.
    pub fn remove(&mut self, name: &str) -> Option<u64> {
        let at = self.0.iter().position(|e| e.name == name)?;
        Some(self.0.remove(at).ino)
    }
}

/// A directory entry's name as the log's records allow it.
pub fn valid_name(name: &str) -> bool {
    (1..=NAME_MAX).contains(&name.len())
        && name != "."
        && name != ".."
        && !name.bytes().any(|b| b == 0 || b == b'/')
}

/// The bucket of `name` under the filesystem's hash key.
pub fn bucket(hash_key: (u64, u64), name: &str) -> u64 {
    use core::hash::Hasher;
    #[allow(deprecated)]
    let mut h = core::hash::SipHasher::new_with_keys(hash_key.0, hash_key.1);
    h.write(name.as_bytes());
    h.finish() >> (64 - BUCKET_BITS)
}

/// The first piece of an extended attribute (kind 5, offset bucket × 256):
/// its name, the value's whole length, and the value's first bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XattrHead {
    /// Its name.
    pub name: String,
    /// The value's length; the bytes past this piece's are in the items
    /// that follow it (offsets + 1, + 2, ...).
    pub len: u32,
    /// The value's first bytes.
    pub first: Vec<u8>,
}

impl XattrHead {
    /// Pieces an attribute of `len` bytes takes, this one included.
    pub fn pieces(len: usize, name: &str) -> usize {
        let first_room = CHUNK - 1 - name.len() - 4;
        if len <= first_room {
            1
        } else {
            1 + (len - first_room).div_ceil(CHUNK)
        }
    }

    /// Splits `value` into this head and the later pieces' bytes.
    pub fn split<'a>(name: &str, value: &'a [u8]) -> (XattrHead, &'a [u8]) {
        let first_room = CHUNK - 1 - name.len() - 4;
        let cut = value.len().min(first_room);
        (
            XattrHead {
                name: String::from(name),
                len: value.len() as u32,
                first: value[..cut].to_vec(),
            },
            &value[cut..],
        )
    }

    /// The item's value.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::new());
        e.u8(self.name.len() as u8);
        e.bytes(self.name.as_bytes());
        e.u32(self.len);
        e.bytes(&self.first);
        e.0
    }

    /// Decodes and checks a value.
    pub fn decode(v: &[u8]) -> Result<XattrHead, ItemDamage> {
        let mut d = Dec::new(v);
        let s = |_| ItemDamage::Length;
        let n = usize::from(d.u8().map_err(s)?);
        let name = core::str::from_utf8(d.bytes(n).map_err(s)?)
            .map_err(|_| ItemDamage::Field("attribute name"))?;
        if name.is_empty() || name.bytes().any(|b| b == 0) {
            return Err(ItemDamage::Field("attribute name"));
        }
        let len = d.u32().map_err(s)?;
        let first = d.bytes(d.remaining()).map_err(s)?.to_vec();
        let first_room = CHUNK - 1 - name.len() - 4;
        let whole = len as usize;
        if whole > XATTR_VALUE_MAX || first.len() != whole.min(first_room) {
            return Err(ItemDamage::Field("attribute length"));
        }
        Ok(XattrHead {
            name: String::from(name),
            len,
            first,
        })
    }
}

/// A page whose synced bytes are in another block until they are written
/// home (kind 6; the key's offset is the file page).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveItem {
    /// The block the file maps the page to.
    pub home: u64,
    /// The block holding the page's synced bytes.
    pub copy: u64,
}

impl LiveItem {
    /// The item's value.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(16));
        e.u64(self.home);
        e.u64(self.copy);
        e.0
    }

    /// Decodes and checks a value.
    pub fn decode(v: &[u8]) -> Result<LiveItem, ItemDamage> {
        let mut d = Dec::new(v);
        let s = |_| ItemDamage::Length;
        let x = LiveItem {
            home: d.u64().map_err(s)?,
            copy: d.u64().map_err(s)?,
        };
        if d.remaining() != 0 {
            return Err(ItemDamage::Length);
        }
        if x.home == 0 || x.copy == 0 || x.home == x.copy {
            return Err(ItemDamage::Field("live data blocks"));
        }
        Ok(x)
    }
}

/// Decodes any item under `key`, for fsck and the fuzz targets: `Ok` if
/// it is well formed for its kind.
pub fn check(key: &Key, v: &[u8]) -> Result<(), ItemDamage> {
    match key.kind {
        INODE if key.off == 0 => InodeItem::decode(v).map(drop),
        EXTENT => ExtentItem::decode(key, v).map(drop),
        TARGET if key.off < 5 && !v.is_empty() && v.len() <= CHUNK => Ok(()),
        ENTRIES if key.off < 1 << BUCKET_BITS => Bucket::decode(v).map(drop),
        XATTR if key.off & 0xff == 0 => XattrHead::decode(v).map(drop),
        XATTR if !v.is_empty() && v.len() <= CHUNK => Ok(()),
        LIVE if key.off < 1 << 32 => LiveItem::decode(v).map(drop),
        _ => Err(ItemDamage::Kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn inode(kind: Kind) -> InodeItem {
        InodeItem {
            kind,
            perm: 0o4755,
            uid: 1000,
            gid: 100,
            nlink: 1,
            parent: if kind == Kind::Dir { 1 } else { 0 },
            size: if kind == Kind::File { 12345 } else { 0 },
            atime: 1,
            mtime: (-5i64) as u64,
            ctime: 3,
            rdev: if kind == Kind::CharDev { 0x0103 } else { 0 },
            generation: 7,
        }
    }

    #[test]
    fn items_decode_to_what_was_encoded() {
        for kind in [Kind::File, Kind::Dir, Kind::CharDev, Kind::Fifo] {
            let i = inode(kind);
            let v = i.encode();
            assert_eq!(v.len(), INODE_LEN);
            assert_eq!(InodeItem::decode(&v), Ok(i));
            assert_eq!(check(&Key::new(5, INODE, 0), &v), Ok(()));
        }
        let x = ExtentItem { block: 900, len: 3 };
        assert_eq!(
            ExtentItem::decode(&Key::new(5, EXTENT, 10), &x.encode()),
            Ok(x)
        );
        let l = LiveItem { home: 4, copy: 9 };
        assert_eq!(LiveItem::decode(&l.encode()), Ok(l));
        let value: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let name = "user.a-long-attribute-name";
        let (head, rest) = XattrHead::split(name, &value);
        assert_eq!(XattrHead::decode(&head.encode()), Ok(head.clone()));
        let pieces: Vec<_> = chunks(5, XATTR, 1, rest).collect();
        assert_eq!(1 + pieces.len(), XattrHead::pieces(value.len(), name));
        let mut joined = head.first.clone();
        for (_, c) in pieces {
            joined.extend_from_slice(c);
        }
        assert_eq!(joined, value);
    }

    #[test]
    fn fields_out_of_range_are_named() {
        let mut v = inode(Kind::File).encode();
        v[0] = 99;
        assert_eq!(InodeItem::decode(&v), Err(ItemDamage::Field("inode kind")));
        let mut i = inode(Kind::Fifo);
        i.size = 1;
        assert_eq!(
            InodeItem::decode(&i.encode()),
            Err(ItemDamage::Field("size"))
        );
        let mut i = inode(Kind::File);
        i.parent = 2;
        assert_eq!(
            InodeItem::decode(&i.encode()),
            Err(ItemDamage::Field("parent"))
        );
        let v = inode(Kind::File).encode();
        assert_eq!(
            InodeItem::decode(&v[..v.len() - 1]),
            Err(ItemDamage::Length)
        );
        let x = ExtentItem { block: 1, len: 0 };
        assert!(ExtentItem::decode(&Key::new(5, EXTENT, 0), &x.encode()).is_err());
        let x = ExtentItem { block: 1, len: 2 };
        assert!(ExtentItem::decode(&Key::new(5, EXTENT, (1 << 32) - 1), &x.encode()).is_err());
        let x = ExtentItem {
            block: u64::MAX,
            len: 2,
        };
        assert!(ExtentItem::decode(&Key::new(5, EXTENT, 0), &x.encode()).is_err());
        assert_eq!(check(&Key::new(5, 9, 0), &[]), Err(ItemDamage::Kind));
    }

    /// Names that share a bucket each keep a slot of their own, and so a
    /// cookie, while others come and go; a full bucket refuses.
    #[test]
    fn a_bucket_keeps_each_name_its_slot() {
        let mut b = Bucket::default();
        assert_eq!(b.add("a", 10), Some(0));
        assert_eq!(b.add("b", 11), Some(1));
        assert_eq!(b.add("c", 12), Some(2));
        assert_eq!(b.remove("b"), Some(11));
        assert_eq!(b.find("c").map(|e| e.cookie(3)), Some(3 << 8 | 2));
        assert_eq!(b.add("d", 13), Some(1));
        assert_eq!(Bucket::decode(&b.encode()), Ok(b.clone()));
        let long = |c: char| core::iter::repeat_n(c, 255).collect::<String>();
        let mut full = Bucket::default();
        assert!(full.add(&long('x'), 1).is_some());
        assert!(full.add(&long('y'), 2).is_some());
        assert!(full.add(&long('z'), 3).is_some());
        assert_eq!(full.add(&long('w'), 4), None);
        // A bucket whose slots go backwards or repeat a name is damage.
        let mut twice = b.encode();
        twice.extend_from_slice(&b.encode());
        assert_eq!(Bucket::decode(&twice), Err(ItemDamage::Field("entry slot")));
    }

    #[test]
    fn buckets_spread_and_depend_on_the_key() {
        let a = bucket((1, 2), "file");
        assert!(a < 1 << BUCKET_BITS);
        assert_ne!(a, bucket((1, 3), "file"));
        assert_ne!(a, bucket((1, 2), "file2"));
    }

    /// Random bytes under every kind decode or are refused, and what
    /// decodes encodes back to the same bytes.
    #[test]
    fn crafted_values_never_panic() {
        let mut rng = SplitMix64::new(11);
        let seeds = [
            inode(Kind::Dir).encode(),
            ExtentItem { block: 5, len: 5 }.encode(),
            {
                let mut b = Bucket::default();
                b.add("name", 3);
                b.add("other", 4);
                b.encode()
            },
            XattrHead::split("user.x", &[1, 2, 3]).0.encode(),
            LiveItem { home: 1, copy: 2 }.encode(),
        ];
        for _ in 0..50_000 {
            let mut v = seeds[rng.below(seeds.len() as u64) as usize].clone();
            for _ in 0..rng.below(4) {
                if v.is_empty() {
                    break;
                }
                let at = rng.below(v.len() as u64) as usize;
                match rng.below(3) {
                    0 => v[at] = rng.next_u64() as u8,
                    1 => v.truncate(at),
                    _ => v.insert(at, rng.next_u64() as u8),
                }
            }
            let key = Key::new(5, 1 + rng.below(6) as u8, rng.below(3));
            let _ = check(&key, &v);
            if let Ok(i) = InodeItem::decode(&v) {
                assert_eq!(i.encode(), v);
            }
            if let Ok(b) = Bucket::decode(&v) {
                assert_eq!(b.encode(), v);
            }
            if let Ok(h) = XattrHead::decode(&v) {
                assert_eq!(h.encode(), v);
            }
        }
    }
}
