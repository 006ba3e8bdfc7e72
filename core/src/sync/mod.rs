//! Synchronisation building blocks: spin locks for short sections, wait
//! queues for await points, and a minimal executor for synchronous callers.
//!
//! Spin locks are held only for a few instructions and never across an
//! await. Everything that can wait for a long time (a range lock, a locked
//! page, a device command) is a future that parks its waker in a
//! [`WaitQueue`].

mod exec;
mod wait;

pub use exec::{block_on, yield_now, Idle};
pub use wait::{WaitQueue, WaitQueues};

pub use spin::{Mutex, RwLock};
