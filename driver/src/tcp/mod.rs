//! NVMe over TCP (NVMe/TCP Transport Specification 1.0, NVMe over Fabrics
//! 1.1): the [`Transport`](crate::Transport) for a controller reached over
//! TCP connections, one per queue pair, polled by their owners (no
//! interrupts, no thread per connection, no blocking on the I/O path).
//!
//! Layers, bottom up:
//!
//! - [`stream`]: the byte stream and connector traits the rest runs on,
//!   non-blocking; [`net`] (std) implements them over
//!   `std::net::TcpStream`, its data moved by `sys` (std), the TCP
//!   transport's one leaf module with unsafe code: `readv` and `sendmsg`.
//! - [`pdu`]: PDU formats, each header defined once with its size checked
//!   at compile time, parsed through checked constructors; [`digest`]:
//!   CRC-32C header and data digests; [`error`]: the fatal errors of a
//!   connection.
//! - [`qpair`]: [`TcpQpair`], one connection: ICReq/ICResp, command
//!   capsules with in-capsule data, R2T and H2CData, C2HData straight into
//!   page-cache frames ([`frames`]), response capsules; transmit (`tx`)
//!   and receive (`rx`) state machines that every received PDU passes
//!   through its checks.
//! - [`TcpTransport`]: properties by Fabrics Property Get/Set on the admin
//!   queue, queues by connection and Fabrics Connect (and DH-HMAC-CHAP
//!   after it when the controller asks, [`crate::auth`]), reconnection
//!   after a reset, Keep Alive.
//! - [`address`]: the `nvme-tcp://HOST:PORT/NQN?hdgst=1&ddgst=1` device
//!   form (with `hostnqn`, `dhchap_key_file`, `dhchap_ctrl_key_file`).
//! - `target` (feature `emu`): an NVMe/TCP target on loopback with faults
//!   on demand, for tests.
//!
//! Everything but [`net`] and `target` is `no_std`.

pub mod address;
pub mod digest;
pub mod error;
pub mod frames;
pub mod pdu;
pub mod qpair;
mod rx;
pub mod stream;
mod transport;
mod tx;

#[cfg(test)]
mod tests;

#[cfg(feature = "std")]
pub mod net;
#[cfg(feature = "std")]
mod sys;
#[cfg(feature = "tcp-target")]
pub mod target;

pub use address::TcpAddress;
pub use error::TcpError;
pub use frames::TcpFrames;
pub use qpair::{TcpQpair, TcpStats};
pub use stream::{Connector, LinkError, Stream};
pub use transport::{TcpOptions, TcpTransport, ADMIN_IN_CAPSULE};
