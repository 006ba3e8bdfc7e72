//! Transport-neutral bookkeeping of one queue pair: command ids and the
//! protocol violations a controller can commit against a queue.
//!
//! A command id is the only thing a completion carries back to the host
//! on every transport, so the pool that hands them out is also where a
//! completion naming an id that is not in flight is caught.

use alloc::vec;
use alloc::vec::Vec;

use crate::transport::TransportError;

/// A device broke the queue protocol; the queue cannot be trusted until
/// the controller is reset. `E` is the transport's own error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError<E> {
    /// A completion named a command id that is not in flight.
    UnknownCid(u16),
    /// A completion's SQ head is outside the ring or the in-flight window.
    BadSqHead(u16),
    /// A completion came from another submission queue.
    WrongSqId(u16),
    /// What the controller sent could not be read (PCIe: ring memory out
    /// of reach).
    Unreadable,
    /// The transport failed under the queue (a connection failed, or its
    /// controller broke the transport's own protocol; the connection is
    /// closed).
    Transport(E),
}

impl<E: TransportError> core::fmt::Display for ProtocolError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ProtocolError::UnknownCid(c) => {
                write!(f, "completion for command id {c}, which is not in flight")
            }
            ProtocolError::BadSqHead(h) => write!(f, "completion with an impossible SQ head {h}"),
            ProtocolError::WrongSqId(q) => write!(f, "completion from submission queue {q}"),
            ProtocolError::Unreadable => write!(f, "completion queue memory could not be read"),
            ProtocolError::Transport(e) => write!(f, "{}: {e}", E::NAME),
        }
    }
}

impl<E: TransportError> core::error::Error for ProtocolError<E> {}

/// Free command ids of one queue, one bit per id. Ids are
/// `0..capacity`; a completion carrying an id that is not currently
/// allocated is caught here.
#[derive(Debug)]
pub struct CidPool {
    /// Bit set: the id is taken. Bits past `capacity` in the last word
    /// are set, so they are never handed out.
    taken: Vec<u64>,
    capacity: usize,
    in_use: usize,
}

impl CidPool {
    /// A pool of `capacity` ids (at most 65536).
    pub fn new(capacity: u16) -> CidPool {
        let capacity = usize::from(capacity);
        let mut taken = vec![0u64; capacity.div_ceil(64)];
        if let Some(last) = taken.last_mut() {
            if capacity % 64 != 0 {
                *last = !0u64 << (capacity % 64);
            }
        }
        CidPool {
            taken,
            capacity,
            in_use: 0,
        }
    }
    /// Takes the lowest free id, or `None` when all are in flight.
    #[inline]
    pub fn alloc(&mut self) -> Option<u16> {
        if self.in_use == self.capacity {
            return None;
        }
        let (i, w) = self.taken.iter_mut().enumerate().find(|(_, w)| **w != !0)?;
        let bit = w.trailing_ones();
        *w |= 1 << bit;
        self.in_use += 1;
        Some((i * 64) as u16 | bit as u16)
    }
    /// Takes `cid` if it is free; `false` if it is taken or out of range.
    #[inline]
    pub fn take(&mut self, cid: u16) -> bool {
        let (i, bit) = Self::split(cid);
        match self.taken.get_mut(i) {
            Some(w) if *w & bit == 0 => {
                *w |= bit;
                self.in_use += 1;
                true
            }
            _ => false,
        }
    }
    /// Returns `cid`; `false` if it was not allocated (an unknown or
    /// duplicate completion), in which case nothing changes.
    #[inline]
    pub fn release(&mut self, cid: u16) -> bool {
        let (i, bit) = Self::split(cid);
        if usize::from(cid) >= self.capacity {
            return false;
        }
        match self.taken.get_mut(i) {
            Some(w) if *w & bit != 0 => {
                *w &= !bit;
                self.in_use -= 1;
                true
            }
            _ => false,
        }
    }
    /// True if `cid` is allocated.
    #[inline]
    pub fn is_busy(&self, cid: u16) -> bool {
        let (i, bit) = Self::split(cid);
        usize::from(cid) < self.capacity && self.taken.get(i).is_some_and(|w| w & bit != 0)
    }
    #[inline]
    fn split(cid: u16) -> (usize, u64) {
        (usize::from(cid) / 64, 1 << (cid % 64))
    }
    /// Ids currently free.
    #[inline]
    pub fn available(&self) -> usize {
        self.capacity - self.in_use
    }
    /// Ids in flight.
    #[inline]
    pub fn in_use(&self) -> usize {
        self.in_use
    }
    /// Total ids.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cid_pool_exhausts_and_catches_bad_releases() {
        let mut pool = CidPool::new(3);
        let ids: Vec<u16> = (0..3).map(|_| pool.alloc().unwrap()).collect();
        assert_eq!(ids, [0, 1, 2]);
        assert_eq!(pool.alloc(), None);
        assert!(pool.release(1));
        assert!(!pool.release(1), "duplicate completion");
        assert!(!pool.release(7), "unknown id");
        assert_eq!(pool.alloc(), Some(1));
        assert_eq!(pool.in_use(), 3);
        assert!(pool.is_busy(0) && !pool.is_busy(9));
        assert!(!pool.release(3), "past the capacity, inside the word");
        assert!(!pool.take(2) && !pool.take(3) && !pool.take(700));
        assert!(pool.release(2) && pool.take(2));
    }

    #[test]
    fn ids_come_from_every_word_and_the_last_word_is_clipped() {
        let mut pool = CidPool::new(130);
        let ids: Vec<u16> = core::iter::from_fn(|| pool.alloc()).collect();
        assert_eq!(ids, (0..130).collect::<Vec<u16>>());
        assert_eq!(pool.available(), 0);
        assert!(pool.release(64) && pool.release(129));
        assert_eq!(pool.alloc(), Some(64));
        assert_eq!(pool.alloc(), Some(129));
        assert_eq!(pool.alloc(), None);
    }
}
