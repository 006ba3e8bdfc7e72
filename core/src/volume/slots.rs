//! The table of a volume queue's operations, keyed by the tag handed to
//! the caller. Entries are kept when freed, with whatever buffers they
//! grew, so the hot path stops allocating once the table has grown to the
//! queue's working depth. A tag stays taken until its completion has been
//! handed out, so two operations the caller can see never share one.

use alloc::vec::Vec;

#[derive(Debug)]
pub(crate) struct Slots<T> {
    entries: Vec<(bool, T)>,
    free: Vec<u32>,
    used: usize,
}

impl<T: Default> Slots<T> {
    pub(crate) fn new() -> Slots<T> {
        Slots {
            entries: Vec::new(),
            free: Vec::new(),
            used: 0,
        }
    }
    /// Takes a free entry (as it was left: the caller resets it).
    pub(crate) fn take(&mut self) -> (u32, &mut T) {
        self.used += 1;
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.entries.push((false, T::default()));
                (self.entries.len() - 1) as u32
            }
        };
        let e = &mut self.entries[id as usize];
        e.0 = true;
        (id, &mut e.1)
    }
    /// The live entry `id`.
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        match self.entries.get_mut(id as usize) {
            Some((true, t)) => Some(t),
            _ => None,
        }
    }
    /// Gives entry `id` back.
    pub(crate) fn release(&mut self, id: u32) {
        if let Some(e) = self.entries.get_mut(id as usize) {
            if e.0 {
                e.0 = false;
                self.used -= 1;
                self.free.push(id);
            }
        }
    }
    /// Entries taken and not given back.
    pub(crate) fn used(&self) -> usize {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_reused_only_after_release_and_keep_their_buffers() {
        let mut s: Slots<Vec<u8>> = Slots::new();
        let (a, buf) = s.take();
        buf.extend_from_slice(&[1, 2, 3]);
        let (b, _) = s.take();
        assert_ne!(a, b);
        s.release(a);
        s.release(a);
        assert_eq!(s.used(), 1);
        assert!(s.get_mut(a).is_none());
        let (c, buf) = s.take();
        assert_eq!(c, a);
        assert!(buf.capacity() >= 3, "the buffer is kept");
        assert!(s.get_mut(99).is_none());
    }
}
