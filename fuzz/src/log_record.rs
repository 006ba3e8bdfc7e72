//! The `log_record` fuzz input: arbitrary bytes through every parser of
//! on-disk metadata. Records that decode must re-encode to exactly the
//! input (so decoding is canonical, and never builds more than the input
//! describes: a huge allocation would need a huge input). The durable view
//! they build (an image up to its end marker, then records applied, as
//! recovery does) must survive its own checkpoint image, before and after
//! its orphans are reclaimed; its problems and paths are computed without
//! a panic. Frame headers, frame payloads and superblocks must parse or
//! refuse, never panic. The bytes, cut into 4 KiB metadata-index pages and
//! resealed (so the checksum passes and the structure is what is tested),
//! must decode to a page that re-encodes to them or be refused, and a
//! tree of them must verify or be refused, never panic, each item in it
//! decode or be refused, and the items together become image records or
//! an error.
//!
//! Shared with host-tests (by path), which replays the committed corpus.

use std::collections::BTreeMap;

use pollfs_core::persist::format::{crc32c, Frame, Layout, Superblock};
use pollfs_core::persist::index::page::{self, Stamp, HEADER};
use pollfs_core::persist::index::{image, items, verify, Root};
use pollfs_core::persist::record::Record;
use pollfs_core::persist::shadow::Shadow;

/// Runs one input; panics if a parser does, or if a check fails.
pub fn run(bytes: &[u8]) {
    records(bytes);
    index_pages(bytes);
    let _ = Superblock::decode(bytes);
    if let Some((frame, crc)) = Frame::header(bytes) {
        if let Some(payload) = Frame::payload(bytes, &frame, crc) {
            records(payload);
        }
    }
}

fn records(bytes: &[u8]) {
    let Ok(records) = Record::decode_all(bytes) else {
        return;
    };
    assert!(
        Record::encode_all(&records) == bytes,
        "decoded records re-encode to other bytes: {records:?}"
    );
    // The durable view, as recovery builds it from a checkpoint stream:
    // the image up to its end marker taken as it is, then the records
    // after it applied (the first record that does not load or apply ends
    // it). Without an end marker, the records are applied as a log.
    let mut shadow = Shadow::default();
    let end = records.iter().position(|r| *r == Record::ImageEnd);
    let (image, rest) = match end {
        Some(at) => (&records[..at], &records[at + 1..]),
        None => (&records[..0], &records[..]),
    };
    let loaded = image.iter().try_for_each(|r| shadow.load(r));
    if loaded.is_ok() {
        for r in rest {
            if shadow.apply(r).is_err() {
                break;
            }
        }
    }
    if let Some(layout) = Layout::for_blocks(512) {
        let _ = shadow.problems(&layout, &[(layout.data_start, 1)]);
    }
    let _ = shadow.paths();
    let mut reclaimed = shadow.clone();
    for ino in reclaimed.orphans() {
        reclaimed.reclaim(ino);
    }
    assert!(reclaimed.orphans().is_empty(), "orphans left after reclaim");
    rebuilds(&shadow);
    rebuilds(&reclaimed);
}

/// `shadow`'s checkpoint image decodes to an image that loads, ends with
/// its one end marker, and rebuilds exactly `shadow`.
fn rebuilds(shadow: &Shadow) {
    let image = shadow.image();
    assert_eq!(image.len() as u64, shadow.image_len(), "image length");
    let rs = Record::decode_all(&image)
        .unwrap_or_else(|d| panic!("a checkpoint image does not decode: {d:?}"));
    assert!(
        rs.iter().position(|r| *r == Record::ImageEnd) == Some(rs.len() - 1),
        "a checkpoint image's end marker is not its last record, once"
    );
    let mut again = Shadow::default();
    for r in &rs[..rs.len() - 1] {
        if let Err(d) = again.load(r) {
            panic!("a checkpoint image record does not load: {d:?}");
        }
    }
    assert!(again == *shadow, "a checkpoint image rebuilds another view");
}

/// `bytes` as 4 KiB index pages at blocks 1, 2, ...: each resealed and
/// decoded with its own stamp (a decoded page re-encodes to itself), then
/// the whole as a tree rooted at block 1 with the root's level and
/// generation, verified.
fn index_pages(bytes: &[u8]) {
    let mut pages = BTreeMap::new();
    for (i, chunk) in bytes.chunks(HEADER + 200).enumerate() {
        let mut p = vec![0u8; 4096];
        p[..chunk.len()].copy_from_slice(chunk);
        p[12..16].fill(0);
        let crc = crc32c(&[&p]);
        p[12..16].copy_from_slice(&crc.to_le_bytes());
        let field = |at: usize| u64::from_le_bytes(p[at..at + 8].try_into().unwrap_or([0; 8]));
        let stamp = Stamp {
            uuid: field(16),
            generation: field(24),
            block: field(32),
        };
        if let Ok(node) = page::decode(&p, stamp) {
            assert!(
                page::encode(&node, stamp) == p,
                "a decoded index page re-encodes to other bytes"
            );
        }
        pages.insert(i as u64 + 1, p);
    }
    let Some(first) = pages.get(&1) else { return };
    let field = |at: usize| u64::from_le_bytes(first[at..at + 8].try_into().unwrap_or([0; 8]));
    let root = Root {
        block: 1,
        generation: field(24),
        level: first[4],
    };
    let mut seen = Vec::new();
    let _ = verify(
        field(16),
        root,
        &mut |b| pages.get(&b).cloned().ok_or(()),
        &mut |k, v| {
            let _ = items::check(&k, v);
            seen.push((k, v.to_vec()));
        },
    );
    // Whatever items a tree held become image records or an error.
    let _ = image::records_of(seen.iter().map(|(k, v)| (*k, v.as_slice())), &mut |_| None);
}
