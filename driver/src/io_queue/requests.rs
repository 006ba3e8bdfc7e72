//! The table of engine requests in flight on one queue, keyed by the tag
//! handed to the engine. A slab: slots are reused, so the hot path does not
//! allocate once the table has grown to the queue's working depth.

use alloc::vec::Vec;

use super::Request;

#[derive(Debug, Default)]
pub(super) struct Requests {
    slots: Vec<Option<Request>>,
    free: Vec<u32>,
    live: usize,
}

impl Requests {
    /// Stores a request and returns its tag.
    pub fn insert(&mut self, r: Request) -> u32 {
        self.live += 1;
        if let Some(tag) = self.free.pop() {
            if let Some(slot) = self.slots.get_mut(tag as usize) {
                *slot = Some(r);
                return tag;
            }
        }
        self.slots.push(Some(r));
        (self.slots.len() - 1) as u32
    }
    pub fn get(&self, tag: &u32) -> Option<&Request> {
        self.slots.get(*tag as usize).and_then(Option::as_ref)
    }
    pub fn get_mut(&mut self, tag: &u32) -> Option<&mut Request> {
        self.slots.get_mut(*tag as usize).and_then(Option::as_mut)
    }
    pub fn remove(&mut self, tag: &u32) -> Option<Request> {
        let r = self.slots.get_mut(*tag as usize)?.take()?;
        self.live -= 1;
        self.free.push(*tag);
        Some(r)
    }
    pub fn len(&self) -> usize {
        self.live
    }
}
