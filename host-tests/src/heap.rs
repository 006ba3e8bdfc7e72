//! What the C allocator holds for this process: the one unsafe call of
//! the crate, for the scale bench's memory figures.

/// Bytes the allocator has handed out and not had back (glibc's
/// `mallinfo2`: small blocks in use plus mapped large ones). Unlike
/// resident memory, this falls when memory is freed but not returned to
/// the system.
pub fn in_use_bytes() -> u64 {
    // SAFETY: mallinfo2 takes no arguments and only reads the
    // allocator's counters into the struct it returns.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}
