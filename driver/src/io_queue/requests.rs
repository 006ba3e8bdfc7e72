//! The table of engine requests on one queue, keyed by the tag handed to
//! the engine. A slab, so the hot path does not allocate once the table has
//! grown to the queue's working depth. A tag stays reserved from `submit`
//! until its completion has been handed to the engine by `poll`, so two
//! requests the engine can see never share a tag.

use alloc::vec::Vec;

use pollfs_core::dev::Completion;

use super::Request;

#[derive(Debug)]
enum Entry {
    Free,
    Live(Request),
    /// Finished; its completion waits in the done queue.
    Done,
}

#[derive(Debug, Default)]
pub(super) struct Requests {
    slots: Vec<Entry>,
    free: Vec<u32>,
    live: usize,
}

impl Requests {
    /// Stores a request and returns its tag.
    #[inline]
    pub fn insert(&mut self, r: Request) -> u32 {
        self.live += 1;
        if let Some(tag) = self.free.pop() {
            if let Some(slot) = self.slots.get_mut(tag as usize) {
                *slot = Entry::Live(r);
                return tag;
            }
        }
        self.slots.push(Entry::Live(r));
        (self.slots.len() - 1) as u32
    }
    #[inline]
    pub fn get(&self, tag: &u32) -> Option<&Request> {
        match self.slots.get(*tag as usize) {
            Some(Entry::Live(r)) => Some(r),
            _ => None,
        }
    }
    #[inline]
    pub fn get_mut(&mut self, tag: &u32) -> Option<&mut Request> {
        match self.slots.get_mut(*tag as usize) {
            Some(Entry::Live(r)) => Some(r),
            _ => None,
        }
    }
    /// Takes a finished request out; its tag stays reserved until
    /// [`release`](Self::release).
    #[inline]
    pub fn remove(&mut self, tag: &u32) -> Option<Request> {
        let slot = self.slots.get_mut(*tag as usize)?;
        if !matches!(slot, Entry::Live(_)) {
            return None;
        }
        let Entry::Live(r) = core::mem::replace(slot, Entry::Done) else {
            return None;
        };
        self.live -= 1;
        Some(r)
    }
    /// Frees a tag whose completion the engine has received (or that was
    /// never handed out).
    #[inline]
    pub fn release(&mut self, tag: u32) {
        if let Some(slot) = self.slots.get_mut(tag as usize) {
            if matches!(slot, Entry::Done) {
                *slot = Entry::Free;
                self.free.push(tag);
            }
        }
    }
    /// Requests not yet finished.
    #[inline]
    pub fn len(&self) -> usize {
        self.live
    }
}

/// Finished requests waiting to be handed to the engine, oldest first: a
/// vector read from a cursor. A poll usually hands back everything it
/// finished, so this costs a push and a read per request; the read part is
/// dropped whenever the cursor has passed half of it.
#[derive(Debug, Default)]
pub(super) struct DoneQueue {
    items: Vec<Completion>,
    next: usize,
}

impl DoneQueue {
    #[inline]
    pub fn push(&mut self, c: Completion) {
        self.items.push(c);
    }
    #[inline]
    pub fn pop(&mut self) -> Option<Completion> {
        let c = *self.items.get(self.next)?;
        self.next += 1;
        Some(c)
    }
    /// Forgets what has been read, once that is at least half the queue.
    #[inline]
    pub fn compact(&mut self) {
        if self.next == self.items.len() {
            self.items.clear();
            self.next = 0;
        } else if self.next >= self.items.len() / 2 {
            self.items.drain(..self.next);
            self.next = 0;
        }
    }
    pub fn len(&self) -> usize {
        self.items.len() - self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request {
            outstanding: 0,
            error: None,
            rest: None,
        }
    }

    #[test]
    fn tags_are_not_reused_before_release() {
        let mut t = Requests::default();
        let a = t.insert(req());
        assert!(t.remove(&a).is_some());
        assert!(t.remove(&a).is_none());
        let b = t.insert(req());
        assert_ne!(a, b, "a's completion has not been handed out yet");
        t.release(a);
        t.release(a);
        assert_eq!(t.insert(req()), a);
        assert_eq!(t.len(), 2);
        assert!(t.get(&99).is_none());
    }

    #[test]
    fn done_queue_is_first_in_first_out_across_compaction() {
        use pollfs_core::dev::Tag;
        let c = |t| Completion {
            tag: Tag(t),
            result: Ok(()),
        };
        let mut q = DoneQueue::default();
        for t in 0..4 {
            q.push(c(t));
        }
        assert_eq!(q.pop(), Some(c(0)));
        q.compact();
        assert_eq!(q.len(), 3, "one of four read: kept");
        assert_eq!(q.pop(), Some(c(1)));
        assert_eq!(q.pop(), Some(c(2)));
        q.compact();
        q.push(c(4));
        let rest: Vec<_> = core::iter::from_fn(|| q.pop()).collect();
        assert_eq!(rest, [c(3), c(4)]);
        q.compact();
        assert_eq!((q.len(), q.items.len()), (0, 0));
    }
}
