//! The `log_record` fuzz input: arbitrary bytes through every parser of
//! on-disk metadata. Records that decode must re-encode to exactly the
//! input (so decoding is canonical, and never builds more than the input
//! describes: a huge allocation would need a huge input), and the durable
//! view they build must survive its own checkpoint image. Frame headers,
//! frame payloads and superblocks must parse or refuse, never panic.
//!
//! Shared with host-tests (by path), which replays the committed corpus.

use pollfs_core::persist::format::{Frame, Layout, Superblock};
use pollfs_core::persist::record::{Record, Shadow};

/// Runs one input; panics if a parser does, or if a check fails.
pub fn run(bytes: &[u8]) {
    records(bytes);
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
    // The durable view, as mount builds it (the first record that does
    // not apply ends it), and its checkpoint image.
    let mut shadow = Shadow::default();
    for r in &records {
        if shadow.apply(r).is_err() {
            break;
        }
    }
    if let Some(layout) = Layout::for_blocks(512) {
        let _ = shadow.problems(&layout, &[(layout.data_start, 1)]);
    }
    let image = shadow.image();
    assert_eq!(image.len() as u64, shadow.image_len(), "image length");
    let mut again = Shadow::default();
    match Record::decode_all(&image) {
        Ok(rs) => {
            for r in &rs {
                if let Err(d) = again.apply(r) {
                    panic!("a checkpoint image record does not apply: {d:?}");
                }
            }
        }
        Err(d) => panic!("a checkpoint image does not decode: {d:?}"),
    }
    assert!(again == shadow, "a checkpoint image rebuilds another view");
}
