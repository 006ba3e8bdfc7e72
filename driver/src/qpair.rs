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

/// Free command ids of one queue. Ids are `0..capacity`; a completion
/// carrying an id that is not currently allocated is caught here.
#[derive(Debug)]
pub struct CidPool {
    free: Vec<u16>,
    busy: Vec<bool>,
}

impl CidPool {
    /// A pool of `capacity` ids (at most 65536).
    pub fn new(capacity: u16) -> CidPool {
        CidPool {
            free: (0..capacity).rev().collect(),
            busy: vec![false; usize::from(capacity)],
        }
    }
    /// Takes a free id, or `None` when all are in flight.
    #[inline]
    pub fn alloc(&mut self) -> Option<u16> {
        let cid = self.free.pop()?;
        if let Some(b) = self.busy.get_mut(usize::from(cid)) {
            *b = true;
        }
        Some(cid)
    }
    /// Returns `cid`; `false` if it was not allocated (an unknown or
    /// duplicate completion), in which case nothing changes.
    #[inline]
    pub fn release(&mut self, cid: u16) -> bool {
        match self.busy.get_mut(usize::from(cid)) {
            Some(b) if *b => {
                *b = false;
                self.free.push(cid);
                true
            }
            _ => false,
        }
    }
    /// True if `cid` is allocated.
    #[inline]
    pub fn is_busy(&self, cid: u16) -> bool {
        self.busy.get(usize::from(cid)).copied().unwrap_or(false)
    }
    /// Ids currently free.
    pub fn available(&self) -> usize {
        self.free.len()
    }
    /// Ids in flight.
    pub fn in_use(&self) -> usize {
        self.busy.len() - self.free.len()
    }
    /// Total ids.
    pub fn capacity(&self) -> usize {
        self.busy.len()
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
    }
}
