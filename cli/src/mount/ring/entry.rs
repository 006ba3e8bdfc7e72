//! A ring entry's memory, which the kernel writes requests into, and the
//! two commands that hand it to the kernel (FUSE_IO_URING_CMD_REGISTER,
//! FUSE_IO_URING_CMD_COMMIT_AND_FETCH): the ring layer's only unsafe code.
//!
//! The memory is one allocation: the headers ([`layout::HEADER_LEN`]), the
//! staging area ([`layout::STAGE_LEN`]), the payload buffer. The kernel
//! knows the headers and the payload (two iovecs, read at REGISTER) and
//! may write them while a command naming the entry is in its hands: from
//! the submission until the completion is reaped. In that time this side
//! neither reads nor writes them ([`Entry`]'s methods refuse), and the
//! allocation is not freed: an entry dropped while the kernel holds it is
//! leaked, never freed under the kernel.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;

use io_uring::squeue::{Entry128, SubmissionQueue};
use io_uring::{opcode, types};

use super::layout::{self, Header, Request, HEADER_LEN, OUT_HEADER_LEN, STAGE_LEN};

/// `enum fuse_uring_cmd` (include/uapi/linux/fuse.h).
const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// Where the payload buffer starts in an entry's memory.
const PAYLOAD_AT: usize = HEADER_LEN + STAGE_LEN;

/// `io_uring_sqe.len` (include/uapi/linux/io_uring.h): for the FUSE
/// commands, the number of iovecs at `addr`. The io-uring crate's
/// `UringCmd80` leaves it zero.
const SQE_LEN_AT: usize = 24;
const _: () = assert!(std::mem::size_of::<Entry128>() == 128);

/// One ring entry: its memory and whether the kernel holds it.
#[derive(Debug)]
pub struct Entry {
    /// Headers, staging area, payload buffer, as 8-byte words (fuser reads
    /// arguments in place, 8-byte aligned); from `Box<[u64]>::into_raw`.
    mem: NonNull<[u64]>,
    /// The payload buffer's size in bytes.
    capacity: usize,
    /// The headers and the payload buffer, for REGISTER: the kernel reads
    /// them during that command.
    iov: Box<[libc::iovec; 2]>,
    /// A command naming this entry is in the kernel's hands.
    in_kernel: bool,
}

/// The kernel holds the entry: its memory is not this side's to touch.
fn held() -> io::Error {
    io::Error::other("the ring entry is in the kernel's hands")
}

impl Entry {
    /// An entry whose payload buffer holds `capacity` bytes (rounded up to
    /// a whole word).
    pub fn new(capacity: usize) -> Entry {
        let capacity = capacity.next_multiple_of(8);
        let words = (PAYLOAD_AT + capacity) / 8;
        let mem = NonNull::from(Box::leak(vec![0u64; words].into_boxed_slice()));
        let base = mem.as_ptr().cast::<u8>();
        let iov = Box::new([
            libc::iovec {
                iov_base: base.cast(),
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                // SAFETY: PAYLOAD_AT + capacity bytes were allocated, so
                // the payload buffer lies inside the allocation.
                iov_base: unsafe { base.add(PAYLOAD_AT) }.cast(),
                iov_len: capacity,
            },
        ]);
        Entry {
            mem,
            capacity,
            iov,
            in_kernel: false,
        }
    }

    /// The payload buffer's size.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn base(&self) -> *mut u8 {
        self.mem.as_ptr().cast::<u8>()
    }

    /// The completion of the command that named this entry was reaped: it
    /// is this side's again.
    pub fn completed(&mut self) {
        self.in_kernel = false;
    }

    /// A copy of the headers the kernel wrote.
    pub fn header(&self) -> io::Result<Header> {
        if self.in_kernel {
            return Err(held());
        }
        let mut h = [0u8; HEADER_LEN];
        // SAFETY: the headers are the first HEADER_LEN bytes of the
        // allocation; the kernel does not write them while no command is
        // in its hands (checked above), and `h` is a separate local.
        unsafe { std::ptr::copy_nonoverlapping(self.base(), h.as_mut_ptr(), HEADER_LEN) };
        Ok(h)
    }

    /// Lays `request` out for fuser (in-header and operation header
    /// copied from `header` to the staging area, just before the payload)
    /// and returns it, 8-byte aligned.
    pub fn request(&mut self, header: &Header, request: &Request) -> io::Result<&[u8]> {
        if self.in_kernel {
            return Err(held());
        }
        let mut stage = [0u8; STAGE_LEN];
        request.stage(header, &mut stage);
        let start = HEADER_LEN + request.stage_offset();
        let end = start + request.len();
        if end > PAYLOAD_AT + self.capacity {
            return Err(io::Error::other(
                "a ring request longer than its entry (checked at parse)",
            ));
        }
        // SAFETY: the staging area lies inside the allocation and the
        // kernel never touches it (it is in neither iovec); no reference
        // to it is alive (`&mut self`).
        unsafe {
            std::ptr::copy_nonoverlapping(stage.as_ptr(), self.base().add(HEADER_LEN), STAGE_LEN)
        };
        // SAFETY: start..end lies inside the allocation (checked above);
        // the kernel does not write it while no command is in its hands,
        // and none can be submitted while the returned slice borrows
        // `self`.
        Ok(unsafe { std::slice::from_raw_parts(self.base().add(start), end - start) })
    }

    /// Puts a reply in the entry: `out` in the in/out slot, `args` in the
    /// payload buffer, their length in `payload_sz`.
    pub fn put_reply(&mut self, out: &[u8; OUT_HEADER_LEN], args: &[u8]) -> io::Result<()> {
        if self.in_kernel {
            return Err(held());
        }
        let len = u32::try_from(args.len())
            .ok()
            .filter(|_| args.len() <= self.capacity)
            .ok_or_else(|| io::Error::other("a reply larger than the payload buffer"))?;
        let mut header = self.header()?;
        header[..OUT_HEADER_LEN].copy_from_slice(out);
        layout::set_payload_len(&mut header, len);
        // SAFETY: the headers and `args.len()` <= capacity bytes of the
        // payload buffer lie inside the allocation; the kernel does not
        // read or write them while no command is in its hands (checked
        // above), and `args` is not inside it (the reply was gathered
        // elsewhere).
        unsafe {
            std::ptr::copy_nonoverlapping(header.as_ptr(), self.base(), HEADER_LEN);
            std::ptr::copy_nonoverlapping(args.as_ptr(), self.base().add(PAYLOAD_AT), args.len());
        }
        Ok(())
    }

    /// Queues FUSE_IO_URING_CMD_REGISTER: the entry joins queue `qid`,
    /// ready for a request.
    pub fn register(
        &mut self,
        sq: &mut SubmissionQueue<'_, Entry128>,
        fuse: RawFd,
        qid: u16,
        user_data: u64,
    ) -> io::Result<()> {
        self.submit(sq, fuse, FUSE_IO_URING_CMD_REGISTER, qid, 0, user_data)
    }

    /// Queues FUSE_IO_URING_CMD_COMMIT_AND_FETCH: the reply in the entry
    /// answers request `commit_id`, and the entry waits for the next one.
    pub fn commit_and_fetch(
        &mut self,
        sq: &mut SubmissionQueue<'_, Entry128>,
        fuse: RawFd,
        qid: u16,
        commit_id: u64,
        user_data: u64,
    ) -> io::Result<()> {
        self.submit(
            sq,
            fuse,
            FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
            qid,
            commit_id,
            user_data,
        )
    }

    fn submit(
        &mut self,
        sq: &mut SubmissionQueue<'_, Entry128>,
        fuse: RawFd,
        cmd_op: u32,
        qid: u16,
        commit_id: u64,
        user_data: u64,
    ) -> io::Result<()> {
        if self.in_kernel {
            return Err(held());
        }
        let sqe = sqe(
            fuse,
            cmd_op,
            qid,
            commit_id,
            self.iov.as_ptr() as u64,
            user_data,
        );
        // SAFETY: the iovecs and the memory they describe belong to this
        // entry and stay allocated while the kernel holds it: `in_kernel`
        // is set before the push, cleared only when the completion is
        // reaped, and Drop leaks the memory while it is set. The iovec
        // array is boxed, so it does not move with the entry.
        unsafe { sq.push(&sqe) }
            .map_err(|_| io::Error::other("the ring's submission queue is full"))?;
        self.in_kernel = true;
        Ok(())
    }
}

/// A FUSE ring command: `struct fuse_uring_cmd_req` (flags, commit_id,
/// qid) in the SQE's command area, `addr` the iovec pair, `len` 2.
fn sqe(fuse: RawFd, cmd_op: u32, qid: u16, commit_id: u64, iov: u64, user_data: u64) -> Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    let sqe = opcode::UringCmd80::new(types::Fd(fuse), cmd_op)
        .cmd(cmd)
        .addr(Some(iov))
        .build()
        .user_data(user_data);
    // SAFETY: Entry128 is repr(C), 128 bytes (asserted above) of integers
    // with no padding (the kernel's io_uring_sqe and 64 command bytes), so
    // every byte is initialised and any bytes make a valid value.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    bytes[SQE_LEN_AT..SQE_LEN_AT + 4].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: as above, in the other direction.
    unsafe { std::mem::transmute::<[u8; 128], Entry128>(bytes) }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if self.in_kernel {
            // The kernel may still write here: leave it allocated.
            return;
        }
        // SAFETY: `mem` came from Box::into_raw (Box::leak) in `new`, is
        // freed only here, and the kernel holds no command naming it.
        drop(unsafe { Box::from_raw(self.mem.as_ptr()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(sqe: Entry128) -> [u8; 128] {
        // SAFETY: as in `sqe`: plain bytes of a repr(C) integer struct.
        unsafe { std::mem::transmute(sqe) }
    }

    #[test]
    fn the_command_carries_the_iovec_pair_and_the_fuse_request() {
        let b = bytes(sqe(
            7,
            FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
            3,
            0xAB,
            0x1000,
            42,
        ));
        assert_eq!(b[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(i32::from_ne_bytes(b[4..8].try_into().unwrap()), 7);
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(b[16..24].try_into().unwrap()), 0x1000);
        assert_eq!(u32::from_ne_bytes(b[24..28].try_into().unwrap()), 2);
        assert_eq!(u64::from_ne_bytes(b[32..40].try_into().unwrap()), 42);
        // fuse_uring_cmd_req at the command area (offset 48).
        assert_eq!(u64::from_ne_bytes(b[48..56].try_into().unwrap()), 0);
        assert_eq!(u64::from_ne_bytes(b[56..64].try_into().unwrap()), 0xAB);
        assert_eq!(u16::from_ne_bytes(b[64..66].try_into().unwrap()), 3);
    }

    #[test]
    fn an_entry_stages_a_request_and_takes_a_reply() {
        let mut e = Entry::new(4096);
        assert_eq!(e.capacity(), 4096);
        assert_eq!(e.iov[1].iov_len, 4096);
        let mut h = e.header().unwrap();
        // A 40-byte operation header, no payload.
        h[..4].copy_from_slice(&80u32.to_ne_bytes());
        h[8..16].copy_from_slice(&5u64.to_ne_bytes());
        h[128..168].fill(0x11);
        let r = Request::parse(&h, e.capacity()).unwrap();
        let req = e.request(&h, &r).unwrap();
        assert_eq!(req.len(), 80);
        assert_eq!(req.as_ptr() as usize % 8, 0);
        assert_eq!(&req[..40], &h[..40]);
        assert!(req[40..].iter().all(|&b| b == 0x11));
        let out = layout::error_reply(5, 0);
        e.put_reply(&out, b"abc").unwrap();
        let h = e.header().unwrap();
        assert_eq!(&h[..16], &out);
        assert_eq!(u32::from_ne_bytes(h[272..276].try_into().unwrap()), 3);
        assert!(e.put_reply(&out, &[0; 4097]).is_err());
    }
}
