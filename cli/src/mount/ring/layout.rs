//! What a FUSE-over-io_uring ring entry holds, byte by byte, and the
//! checks that stand between it and fuser's decoder.
//!
//! A ring entry is two buffers the server registers: the headers
//! (`struct fuse_uring_req_header`, include/uapi/linux/fuse.h: 128 bytes
//! for `fuse_in_header` in, `fuse_out_header` out; 128 bytes for the
//! request's first argument, its per-operation header; then
//! `struct fuse_uring_ent_in_out`) and the payload (every further argument,
//! `payload_sz` bytes). fuser decodes a request as a read of `/dev/fuse`
//! returns it: `fuse_in_header`, then every argument in order. So the entry
//! keeps a staging area right before its payload, and the in-header and the
//! operation header are copied to the end of it: the request is then one
//! contiguous run of bytes, and the payload (a write's data) is not copied.
//! The kernel sets `in.len` to the in-header plus every argument, so the
//! operation header's length is what remains after the payload.
//!
//! A reply comes back the way fuser writes it to `/dev/fuse` (a
//! `fuse_out_header`, then its arguments); the out-header goes in the first
//! 16 bytes of the headers, the rest in the payload, and `payload_sz` says
//! how much.
//!
//! FUSE's integers are in the host's byte order (the kernel and the server
//! share a machine), hence `from_ne_bytes` here.

use std::fmt;

/// `FUSE_URING_IN_OUT_HEADER_SZ`: the `fuse_in_header`/`fuse_out_header`
/// slot.
const IN_OUT_LEN: usize = 128;
/// `FUSE_URING_OP_IN_OUT_SZ`: the slot for the operation's header.
pub const OP_IN_LEN: usize = 128;
/// Where `struct fuse_uring_ent_in_out` starts.
const ENT_IN_OUT_AT: usize = IN_OUT_LEN + OP_IN_LEN;
/// `sizeof(struct fuse_uring_req_header)`.
pub const HEADER_LEN: usize = ENT_IN_OUT_AT + 32;
/// `sizeof(struct fuse_in_header)`.
pub const IN_HEADER_LEN: usize = 40;
/// `sizeof(struct fuse_out_header)`.
pub const OUT_HEADER_LEN: usize = 16;
/// The staging area before the payload: room for an in-header and the
/// largest operation header.
pub const STAGE_LEN: usize = IN_HEADER_LEN + OP_IN_LEN;

// fuser reads the in-header and every operation header in place: each
// must start 8-byte aligned, so the payload (right after the staging
// area, right after the headers) must too.
const _: () = assert!(HEADER_LEN == 288 && HEADER_LEN % 8 == 0 && STAGE_LEN % 8 == 0);

/// `fuse_uring_ent_in_out.commit_id`.
const COMMIT_ID_AT: usize = ENT_IN_OUT_AT + 8;
/// `fuse_uring_ent_in_out.payload_sz`.
const PAYLOAD_SZ_AT: usize = ENT_IN_OUT_AT + 16;

/// An entry's headers as the kernel filled them in.
pub type Header = [u8; HEADER_LEN];

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut v = [0; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(v)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(v)
}

/// The request's id (`fuse_in_header.unique`): what the reply names.
pub fn unique(header: &Header) -> u64 {
    u64_at(header, 8)
}

/// The id COMMIT_AND_FETCH names the request by (the kernel sets it to
/// the request's `unique`).
pub fn commit_id(header: &Header) -> u64 {
    u64_at(header, COMMIT_ID_AT)
}

/// Sets `fuse_uring_ent_in_out.payload_sz`: how much of the payload
/// buffer the reply fills.
pub fn set_payload_len(header: &mut Header, len: u32) {
    header[PAYLOAD_SZ_AT..PAYLOAD_SZ_AT + 4].copy_from_slice(&len.to_ne_bytes());
}

/// A ring entry that is not a request fuser can be given: answered with
/// EIO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Malformed {
    /// `in.len` is shorter than the in-header and payload together.
    Length { len: u32, payload: u32 },
    /// The payload is larger than the buffer the entry registered.
    Payload { payload: u32, capacity: usize },
    /// The operation header does not fit its 128-byte slot, or is not a
    /// whole number of 8-byte words (fuser needs each argument aligned).
    OpHeader { len: usize },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Malformed::Length { len, payload } => write!(
                f,
                "in-header length {len} is less than its own 40 bytes and the {payload}-byte payload"
            ),
            Malformed::Payload { payload, capacity } => write!(
                f,
                "payload of {payload} bytes is larger than the entry's {capacity}-byte buffer"
            ),
            Malformed::OpHeader { len } => write!(
                f,
                "operation header of {len} bytes (at most {OP_IN_LEN}, a multiple of 8)"
            ),
        }
    }
}

/// A request in a ring entry, checked: where its parts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    op_len: usize,
    payload_len: usize,
}

impl Request {
    /// Checks the lengths the kernel wrote in `header` against an entry
    /// whose payload buffer holds `capacity` bytes.
    pub fn parse(header: &Header, capacity: usize) -> Result<Request, Malformed> {
        let len = u32_at(header, 0);
        let payload = u32_at(header, PAYLOAD_SZ_AT);
        let payload_len = payload as usize;
        if payload_len > capacity {
            return Err(Malformed::Payload { payload, capacity });
        }
        let op_len = (len as usize)
            .checked_sub(IN_HEADER_LEN + payload_len)
            .ok_or(Malformed::Length { len, payload })?;
        if op_len > OP_IN_LEN || op_len % 8 != 0 {
            return Err(Malformed::OpHeader { len: op_len });
        }
        Ok(Request {
            op_len,
            payload_len,
        })
    }

    /// The request's length laid out for fuser: in-header, operation
    /// header, payload.
    pub fn len(&self) -> usize {
        IN_HEADER_LEN + self.op_len + self.payload_len
    }

    /// Where the request starts in the staging area, so that it runs on
    /// into the payload.
    pub fn stage_offset(&self) -> usize {
        STAGE_LEN - IN_HEADER_LEN - self.op_len
    }

    /// Fills the end of the staging area with the in-header and the
    /// operation header.
    pub fn stage(&self, header: &Header, stage: &mut [u8; STAGE_LEN]) {
        let at = self.stage_offset();
        stage[at..at + IN_HEADER_LEN].copy_from_slice(&header[..IN_HEADER_LEN]);
        stage[at + IN_HEADER_LEN..].copy_from_slice(&header[IN_OUT_LEN..IN_OUT_LEN + self.op_len]);
    }
}

/// A reply fuser wrote that the ring cannot carry: EIO goes instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadReply {
    /// Shorter than an out-header, or not as long as its header says.
    Length { len: usize },
    /// It answers another request.
    Unique { expected: u64, found: u64 },
    /// Its arguments do not fit the payload buffer.
    TooLarge { len: usize, capacity: usize },
}

impl fmt::Display for BadReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BadReply::Length { len } => {
                write!(f, "a {len}-byte reply that does not match its header")
            }
            BadReply::Unique { expected, found } => {
                write!(f, "a reply to request {found} given for request {expected}")
            }
            BadReply::TooLarge { len, capacity } => write!(
                f,
                "a reply of {len} bytes for a {capacity}-byte payload buffer"
            ),
        }
    }
}

/// Splits a whole reply to request `unique` into its out-header and the
/// arguments the payload buffer (`capacity` bytes) carries.
pub fn split_reply(
    reply: &[u8],
    unique: u64,
    capacity: usize,
) -> Result<(&[u8; OUT_HEADER_LEN], &[u8]), BadReply> {
    let (Some(out), Some(args)) = (
        reply.first_chunk::<OUT_HEADER_LEN>(),
        reply.get(OUT_HEADER_LEN..),
    ) else {
        return Err(BadReply::Length { len: reply.len() });
    };
    if u32_at(out, 0) as usize != reply.len() {
        return Err(BadReply::Length { len: reply.len() });
    }
    let found = u64_at(out, 8);
    if found != unique {
        return Err(BadReply::Unique {
            expected: unique,
            found,
        });
    }
    if args.len() > capacity {
        return Err(BadReply::TooLarge {
            len: args.len(),
            capacity,
        });
    }
    Ok((out, args))
}

/// The out-header of an error reply to request `unique` (`errno`
/// positive; FUSE sends it negated).
pub fn error_reply(unique: u64, errno: i32) -> [u8; OUT_HEADER_LEN] {
    let mut out = [0; OUT_HEADER_LEN];
    out[..4].copy_from_slice(&(OUT_HEADER_LEN as u32).to_ne_bytes());
    out[4..8].copy_from_slice(&(-errno).to_ne_bytes());
    out[8..].copy_from_slice(&unique.to_ne_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header as the kernel writes it for a request with an
    /// `op_len`-byte operation header and a `payload`-byte payload.
    fn header(op_len: usize, payload: u32, unique: u64) -> Header {
        let mut h = [0u8; HEADER_LEN];
        let len = (IN_HEADER_LEN + op_len) as u32 + payload;
        h[..4].copy_from_slice(&len.to_ne_bytes());
        h[4..8].copy_from_slice(&16u32.to_ne_bytes()); // FUSE_WRITE
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        for (i, b) in h[IN_OUT_LEN..IN_OUT_LEN + op_len].iter_mut().enumerate() {
            *b = 0x80 | i as u8;
        }
        h[COMMIT_ID_AT..COMMIT_ID_AT + 8].copy_from_slice(&unique.to_ne_bytes());
        h[PAYLOAD_SZ_AT..PAYLOAD_SZ_AT + 4].copy_from_slice(&payload.to_ne_bytes());
        h
    }

    #[test]
    fn a_request_is_staged_to_run_into_its_payload() {
        let h = header(40, 4096, 7);
        let r = Request::parse(&h, 1 << 20).unwrap();
        assert_eq!(r.len(), 40 + 40 + 4096);
        assert_eq!(r.stage_offset(), STAGE_LEN - 80);
        assert_eq!((unique(&h), commit_id(&h)), (7, 7));
        let mut stage = [0xEEu8; STAGE_LEN];
        r.stage(&h, &mut stage);
        let at = r.stage_offset();
        assert!(stage[..at].iter().all(|&b| b == 0xEE), "nothing before");
        assert_eq!(&stage[at..at + IN_HEADER_LEN], &h[..IN_HEADER_LEN]);
        assert_eq!(
            &stage[at + IN_HEADER_LEN..],
            &h[IN_OUT_LEN..IN_OUT_LEN + 40]
        );
    }

    #[test]
    fn empty_and_largest_operation_headers_fit() {
        let r = Request::parse(&header(0, 6, 1), 4096).unwrap();
        assert_eq!((r.len(), r.stage_offset()), (46, OP_IN_LEN));
        let r = Request::parse(&header(OP_IN_LEN, 0, 1), 4096).unwrap();
        assert_eq!((r.len(), r.stage_offset()), (STAGE_LEN, 0));
        // The payload may fill its buffer exactly.
        assert!(Request::parse(&header(8, 4096, 1), 4096).is_ok());
    }

    #[test]
    fn malformed_lengths_are_errors_not_panics() {
        // The payload larger than the buffer.
        assert_eq!(
            Request::parse(&header(8, 4097, 1), 4096),
            Err(Malformed::Payload {
                payload: 4097,
                capacity: 4096
            })
        );
        // in.len shorter than the in-header and the payload.
        let mut h = header(0, 100, 1);
        h[..4].copy_from_slice(&120u32.to_ne_bytes());
        assert_eq!(
            Request::parse(&h, 4096),
            Err(Malformed::Length {
                len: 120,
                payload: 100
            })
        );
        h[..4].copy_from_slice(&0u32.to_ne_bytes());
        assert!(Request::parse(&h, 4096).is_err());
        // An operation header beyond its slot, or not word-sized.
        let mut h = header(0, 0, 1);
        h[..4].copy_from_slice(&((IN_HEADER_LEN + 136) as u32).to_ne_bytes());
        assert_eq!(
            Request::parse(&h, 4096),
            Err(Malformed::OpHeader { len: 136 })
        );
        h[..4].copy_from_slice(&((IN_HEADER_LEN + 12) as u32).to_ne_bytes());
        assert_eq!(
            Request::parse(&h, 4096),
            Err(Malformed::OpHeader { len: 12 })
        );
        // Every error says what was wrong.
        assert!(Malformed::OpHeader { len: 12 }.to_string().contains("12"));
    }

    #[test]
    fn any_header_bytes_parse_or_fail_without_panicking() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..10_000 {
            let mut h = [0u8; HEADER_LEN];
            for b in h.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            // Small lengths too, where most requests live.
            h[0] = (seed >> 8) as u8;
            h[1..4].fill(0);
            h[PAYLOAD_SZ_AT] = (seed >> 16) as u8 & 0x7f;
            h[PAYLOAD_SZ_AT + 1..PAYLOAD_SZ_AT + 4].fill(0);
            if let Ok(r) = Request::parse(&h, 64) {
                let mut stage = [0; STAGE_LEN];
                r.stage(&h, &mut stage);
                assert!(r.len() - (STAGE_LEN - r.stage_offset()) <= 64);
            }
        }
    }

    #[test]
    fn replies_split_into_out_header_and_payload() {
        let mut reply = error_reply(9, 0).to_vec();
        reply.extend_from_slice(b"0123456789abcdef");
        reply[..4].copy_from_slice(&32u32.to_ne_bytes());
        let (out, args) = split_reply(&reply, 9, 16).unwrap();
        assert_eq!(out, &reply[..16]);
        assert_eq!(args, b"0123456789abcdef");
        assert_eq!(
            split_reply(&reply, 9, 15),
            Err(BadReply::TooLarge {
                len: 16,
                capacity: 15
            })
        );
        assert_eq!(
            split_reply(&reply, 10, 16),
            Err(BadReply::Unique {
                expected: 10,
                found: 9
            })
        );
        assert_eq!(
            split_reply(&reply[..20], 9, 16),
            Err(BadReply::Length { len: 20 })
        );
        assert_eq!(
            split_reply(&reply[..3], 9, 16),
            Err(BadReply::Length { len: 3 })
        );
    }

    #[test]
    fn an_error_reply_is_a_bare_out_header_with_the_negated_errno() {
        let out = error_reply(0x0102_0304_0506_0708, libc::EIO);
        assert_eq!(u32_at(&out, 0), 16);
        assert_eq!(u32_at(&out, 4) as i32, -libc::EIO);
        assert_eq!(u64_at(&out, 8), 0x0102_0304_0506_0708);
        let mut h = [0u8; HEADER_LEN];
        set_payload_len(&mut h, 77);
        assert_eq!(u32_at(&h, PAYLOAD_SZ_AT), 77);
    }
}
