//! Frame copies outside a frame are errors, never clipped or skipped (the
//! `FrameArena` methods return `Result`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::dev::{BlockDevice, FrameArena};
use pollfs_core::units::{FrameId, PAGE_SIZE};

fn device() -> RamDevice {
    RamDevice::new(1 << 20, 4096, 8).unwrap()
}

/// A copy out of a frame that does not exist is reported, not skipped.
#[test]
fn frame_arena_read_of_a_frame_past_the_end_is_an_error() {
    let dev = device();
    let frames = dev.frames();
    let n = frames.frame_count();
    let mut buf = [0xaa_u8; 16];
    assert!(frames.read(FrameId(n), 0, &mut buf).is_err());
    assert!(frames.read(FrameId(u32::MAX), 0, &mut buf).is_err());
    assert!(frames.read(FrameId(n - 1), 0, &mut buf).is_ok());
}

/// A copy that runs past the end of its frame is reported, not clipped.
#[test]
fn frame_arena_copies_past_the_end_of_a_frame_are_errors() {
    let dev = device();
    let frames = dev.frames();
    let mut buf = [0u8; 16];
    assert!(frames.read(FrameId(0), PAGE_SIZE - 8, &mut buf).is_err());
    assert!(frames.read(FrameId(0), usize::MAX, &mut buf).is_err());
    assert!(frames.write(FrameId(0), PAGE_SIZE - 8, &buf).is_err());
    assert!(frames.fill(FrameId(0), PAGE_SIZE - 8, 16, 0).is_err());
    assert!(frames.read(FrameId(0), PAGE_SIZE - 16, &mut buf).is_ok());
}

/// Writes and fills aimed at a frame that does not exist are reported.
#[test]
fn frame_arena_write_and_fill_of_a_frame_past_the_end_are_errors() {
    let dev = device();
    let frames = dev.frames();
    let n = frames.frame_count();
    assert!(frames.write(FrameId(n), 0, &[1, 2, 3]).is_err());
    assert!(frames.fill(FrameId(n), 0, PAGE_SIZE, 0xff).is_err());
}
