//! The kernel baseline at `iodepth` > 1: `iodepth` reads and writes in
//! flight on one thread through an io_uring (fio's `io_uring` engine), on
//! the kernel baseline's files (`O_DIRECT` for direct jobs). Each I/O's
//! latency runs from its submission to its completion. A write whose
//! completion makes a sync due (`fsync`/`fdatasync` = N) is followed by
//! the sync call on the thread, as the other engines do, while the rest
//! stay in flight.
//!
//! The one unsafe step is handing the kernel a buffer address; it lives
//! here, beside the slots that keep each buffer alive and untouched until
//! its completion is reaped.
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Instant;

use anyhow::anyhow;
use io_uring::{opcode, types, IoUring};

use super::baseline::sync_after_write;
use super::direct::Buf;
use super::job::Job;
use super::run::Window;
use super::sample::Recorder;
use super::workload::{Op, Picker};

/// An I/O in flight: its buffer (owned until the completion is reaped),
/// what it is and when it was submitted.
struct Slot {
    buf: Buf,
    busy: Option<(Op, Instant)>,
}

/// Runs one thread of `job` until its window closes, with up to
/// `job.iodepth` I/Os in flight on `handles` (indexed like `Op::file`).
pub fn run(
    job: &Job,
    handles: &[&File],
    pick: &mut Picker,
    rec: &mut Recorder,
    window: Window,
) -> anyhow::Result<()> {
    let depth = job.iodepth.max(1);
    let bs = u32::try_from(job.bs).map_err(|_| anyhow!("bs={}: too large for io_uring", job.bs))?;
    let mut ring = IoUring::new(depth.next_power_of_two())
        .map_err(|e| anyhow!("io_uring with {depth} entries: {e}"))?;
    let mut slots: Vec<Slot> = (0..depth)
        .map(|_| Slot {
            buf: Buf::new(bs as usize),
            busy: None,
        })
        .collect();
    let mut in_flight = 0u64;
    loop {
        for (i, slot) in slots.iter_mut().enumerate() {
            if slot.busy.is_some() || !window.open(rec, in_flight) {
                continue;
            }
            let op = pick.next_op();
            let fd = types::Fd(handles[op.file].as_raw_fd());
            let entry = if op.read {
                let at = slot.buf.as_mut_slice().as_mut_ptr();
                opcode::Read::new(fd, at, bs).offset(op.offset).build()
            } else {
                let at = slot.buf.as_slice().as_ptr();
                opcode::Write::new(fd, at, bs).offset(op.offset).build()
            };
            let entry = entry.user_data(i as u64);
            // SAFETY: the entry points into `slot.buf`, whose heap bytes
            // neither move nor are touched until this slot's completion is
            // reaped below (`busy` marks it), and every submitted entry is
            // reaped before `slots` is dropped (the loop ends only with
            // nothing in flight).
            unsafe { ring.submission().push(&entry) }
                .map_err(|_| anyhow!("io_uring submission queue full"))?;
            slot.busy = Some((op, Instant::now()));
            in_flight += 1;
            rec.submitted(in_flight);
        }
        if in_flight == 0 {
            return Ok(());
        }
        ring.submit_and_wait(1)
            .map_err(|e| anyhow!("io_uring_enter: {e}"))?;
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (i, result) in done {
            in_flight = in_flight.saturating_sub(1);
            if let Err(e) = complete(&mut slots, i, result, bs, job, handles, pick, rec) {
                drain(&mut ring, &mut slots, &mut in_flight);
                return Err(e);
            }
        }
    }
}

/// Records the completion of slot `i` with `result` (bytes, or a negated
/// errno), and runs the sync it makes due.
#[allow(clippy::too_many_arguments)]
fn complete(
    slots: &mut [Slot],
    i: u64,
    result: i32,
    bs: u32,
    job: &Job,
    handles: &[&File],
    pick: &mut Picker,
    rec: &mut Recorder,
) -> anyhow::Result<()> {
    let (op, began) = usize::try_from(i)
        .ok()
        .and_then(|i| slots.get_mut(i))
        .and_then(|slot| slot.busy.take())
        .ok_or_else(|| anyhow!("io_uring completion for a slot with nothing in flight ({i})"))?;
    let what = if op.read { "read" } else { "write" };
    let Ok(n) = u32::try_from(result) else {
        let e = std::io::Error::from_raw_os_error(result.saturating_neg());
        return Err(anyhow!("{what} at {}: {e}", op.offset));
    };
    // Short reads happen past EOF of a file that starts empty.
    if !op.read && n != bs {
        return Err(anyhow!("short write at {}: {n} of {bs} bytes", op.offset));
    }
    rec.io(began, op.read, job.bs);
    if op.read {
        return Ok(());
    }
    sync_after_write(handles[op.file], pick, rec)
}

/// Waits for every I/O still in flight, so no buffer is freed under the
/// kernel; if the ring cannot be waited on, the buffers are leaked instead.
fn drain(ring: &mut IoUring, slots: &mut Vec<Slot>, in_flight: &mut u64) {
    while *in_flight > 0 {
        if ring.submit_and_wait(1).is_err() {
            std::mem::forget(std::mem::take(slots));
            return;
        }
        let reaped = ring.completion().count() as u64;
        *in_flight = in_flight.saturating_sub(reaped);
    }
}
