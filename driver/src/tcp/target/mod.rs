//! An NVMe/TCP target for tests (feature `tcp-target`): listens on 127.0.0.1 at an
//! ephemeral port and serves one subsystem with one namespace in memory,
//! so the initiator is tested end to end over real sockets without a
//! kernel target.
//!
//! It speaks what the initiator needs: ICReq/ICResp with digests and
//! CPDA, Fabrics Connect (a controller per admin connection, I/O queues
//! joining it by controller id), Property Get/Set (CC.EN drives
//! CSTS.RDY, CC.SHN completes at once), Identify, Set Features (queue
//! count), Keep Alive, Abort, Get Log Page, and Read (C2HData PDUs of at
//! most `c2h_chunk` bytes, the SUCCESS flag when the queue asked for it),
//! Write (in-capsule data up to IOCCSZ, otherwise R2Ts of at most
//! `r2t_chunk` bytes), Flush, Write Zeroes and Dataset Management; with
//! [`TargetAuth`], DH-HMAC-CHAP on every queue after Connect; with a TLS
//! PSK ([`TargetConfig::tls`]), TLS 1.3 on every connection before
//! ICReq.
//!
//! Faults come on demand ([`Fault`], one per injection, taken by the next
//! I/O command on any queue) and the whole target can refuse connections
//! (a port taken away) or stall (accept and read, never answer). One
//! thread per connection: this is test scaffolding, not the initiator.

mod auth;
mod conn;
mod tls;

pub use auth::TargetAuth;

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::Duration;

use spin::Mutex;

use super::address::TcpAddress;
use super::net::{NetConnector, TcpDevice};
use super::transport::TcpOptions;
use crate::controller::DriverConfig;
use crate::device::NvmeDevice;
use crate::error::DriverError;
use crate::spec::fabrics::Nqn;
use crate::tcp::TcpError;
use crate::tls::psk::TlsPsk;

/// What the target offers.
#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// Subsystem NQN.
    pub nqn: String,
    /// Logical block size (512 or 4096).
    pub block_size: u32,
    /// Namespace size in blocks.
    pub blocks: u64,
    /// Identify MDTS (0: no limit).
    pub mdts: u8,
    /// In-capsule data accepted on I/O queues (IOCCSZ = 4 + this / 16).
    pub in_capsule: u32,
    /// MAXH2CDATA offered in ICResp.
    pub maxh2cdata: u32,
    /// Largest data of one C2HData PDU.
    pub c2h_chunk: u32,
    /// Largest range one R2T asks for.
    pub r2t_chunk: u32,
    /// CPDA offered in ICResp.
    pub cpda: u8,
    /// Honour a Connect that disables SQ flow control by eliding the
    /// response of successful reads.
    pub success_flag: bool,
    /// CAP.MQES + 1.
    pub max_entries: u16,
    /// I/O queues granted by Set Features.
    pub queues: u16,
    /// Authentication every queue must pass after Connect (none: none).
    pub auth: Option<TargetAuth>,
    /// TLS with this PSK required on every connection (none: in the
    /// clear).
    pub tls: Option<TlsPsk>,
}

impl Default for TargetConfig {
    /// 64 MiB of 512-byte blocks, MDTS 128 KiB, 8 KiB in-capsule, data in
    /// 64 KiB PDUs, MAXH2CDATA 32 KiB, R2Ts of 64 KiB.
    fn default() -> Self {
        TargetConfig {
            nqn: String::from("nqn.2024-01.io.pollfs:test"),
            block_size: 512,
            blocks: (64 << 20) / 512,
            mdts: 5,
            in_capsule: 8192,
            maxh2cdata: 32 << 10,
            c2h_chunk: 64 << 10,
            r2t_chunk: 64 << 10,
            cpda: 0,
            success_flag: true,
            max_entries: 128,
            queues: 8,
            auth: None,
            tls: None,
        }
    }
}

/// A misbehaviour, applied to the next I/O command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Close the connection instead of answering.
    DropConnection,
    /// Send half of the answer's first PDU, then close.
    Truncate,
    /// Corrupt the header digest of the answer (with header digests on).
    HeaderDigest,
    /// Corrupt the data digest of a read's data (with data digests on).
    DataDigest,
    /// Ask a write for data beyond its buffer (R2T out of range).
    R2tOutOfRange,
    /// Never answer this command; the connection stays up.
    Stall,
    /// Send the response capsule twice.
    Duplicate,
    /// Answer with a command id that is not in flight.
    UnknownCid,
    /// Send a PDU of an unknown type.
    BadPduType,
    /// Send a C2HTermReq and close.
    Terminate,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// TCP connections accepted.
    pub connections: u64,
    /// Fabrics Connect commands accepted.
    pub connects: u64,
    /// Keep Alive commands.
    pub keep_alives: u64,
    /// Writes whose data came in the capsule.
    pub in_capsule_writes: u64,
    /// R2T PDUs sent.
    pub r2ts: u64,
    /// H2CData PDUs received.
    pub h2c_pdus: u64,
    /// C2HData PDUs sent.
    pub c2h_pdus: u64,
    /// Reads completed by the SUCCESS flag alone.
    pub success_flag_reads: u64,
    /// Faults applied.
    pub faults: u64,
    /// Queues that passed authentication.
    pub auths: u64,
    /// Queues that failed it (the target's check or the host's).
    pub auth_failures: u64,
    /// Connections that completed the TLS handshake.
    pub tls_sessions: u64,
    /// Connections that failed it.
    pub tls_failures: u64,
}

/// A controller's property state and the I/O queues connected to it.
#[derive(Debug, Default, Clone)]
struct Ctrl {
    cc: u32,
    csts: u32,
    /// I/O queue ids held by a connection; an id is released only when
    /// its connection's thread has seen the connection end (as Linux's
    /// target releases it asynchronously).
    qids: alloc::collections::BTreeSet<u16>,
}

/// What connection threads share.
#[derive(Debug)]
struct Shared {
    config: TargetConfig,
    nqn: Nqn,
    medium: Mutex<Vec<u8>>,
    ctrls: Mutex<BTreeMap<u16, Ctrl>>,
    next_cntlid: Mutex<u16>,
    faults: Mutex<VecDeque<Fault>>,
    /// What new connections must pass (from `config.auth`, changed by
    /// [`TestTarget::set_auth`]).
    auth: Mutex<Option<TargetAuth>>,
    /// The TLS PSK new connections need (from `config.tls`, changed by
    /// [`TestTarget::set_tls`]).
    tls: Mutex<Option<TlsPsk>>,
    refusing: AtomicBool,
    stalled: AtomicBool,
    stop: AtomicBool,
    stats: Mutex<TargetStats>,
}

/// A running target; stops when dropped.
#[derive(Debug)]
pub struct TestTarget {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl TestTarget {
    /// Starts a target with `config` on 127.0.0.1 at a port the system
    /// picks.
    pub fn start(config: TargetConfig) -> io::Result<TestTarget> {
        let nqn = Nqn::new(&config.nqn)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "invalid NQN"))?;
        let bytes = usize::try_from(config.blocks.saturating_mul(u64::from(config.block_size)))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "namespace too large"))?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            auth: Mutex::new(config.auth.clone()),
            tls: Mutex::new(config.tls.clone()),
            config,
            nqn,
            medium: Mutex::new(vec![0u8; bytes]),
            ctrls: Mutex::new(BTreeMap::new()),
            next_cntlid: Mutex::new(1),
            faults: Mutex::new(VecDeque::new()),
            refusing: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            stats: Mutex::new(TargetStats::default()),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("nvmet-test-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(TestTarget {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Its device name, with digests as asked.
    pub fn url(&self, hdgst: bool, ddgst: bool) -> String {
        TcpAddress {
            host: self.addr.ip().to_string(),
            port: self.addr.port(),
            subnqn: self.shared.nqn.clone(),
            header_digest: hdgst,
            data_digest: ddgst,
            kato_ms: None,
            reconnect_ms: None,
            hostnqn: None,
            dhchap_key_file: None,
            dhchap_ctrl_key_file: None,
            tls: false,
            tls_key_file: None,
            tls_derivation: Default::default(),
        }
        .to_string()
    }
    /// Transport options for it: the defaults with short timeouts.
    pub fn options(&self) -> TcpOptions {
        let mut o = TcpOptions::new(self.shared.nqn.clone());
        o.setup_timeout = 2_000_000_000;
        o.reconnect_timeout = 5_000_000_000;
        o
    }
    /// A connector for it.
    pub fn connector(&self) -> NetConnector {
        NetConnector::to(self.addr, Duration::from_secs(2))
    }
    /// A device on it.
    pub fn device(
        &self,
        options: TcpOptions,
        config: DriverConfig,
        frames: u32,
    ) -> Result<TcpDevice, DriverError<TcpError>> {
        let clock = super::net::std_clock();
        let connector = self
            .connector()
            .with_tls(options.tls.clone())
            .map_err(|e| {
                DriverError::Protocol(crate::qpair::ProtocolError::Transport(TcpError::Link(
                    super::LinkError::Tls(e),
                )))
            })?;
        let transport = super::TcpTransport::new(connector, options, clock.clone());
        NvmeDevice::new(transport, clock, config, frames)
    }

    /// Queues a fault for the next I/O command.
    pub fn inject(&self, fault: Fault) {
        self.shared.faults.lock().push_back(fault);
    }
    /// Faults injected and not yet applied.
    pub fn pending_faults(&self) -> usize {
        self.shared.faults.lock().len()
    }
    /// What connections made from now on must pass to authenticate.
    pub fn set_auth(&self, auth: Option<TargetAuth>) {
        *self.shared.auth.lock() = auth;
    }
    /// What connections made from now on must pass for TLS (none: they
    /// talk in the clear).
    pub fn set_tls(&self, tls: Option<TlsPsk>) {
        *self.shared.tls.lock() = tls;
    }
    /// While set, new connections are closed at once (the port is gone).
    pub fn set_refusing(&self, on: bool) {
        self.shared.refusing.store(on, Ordering::Relaxed);
    }
    /// While set, no connection answers anything.
    pub fn set_stalled(&self, on: bool) {
        self.shared.stalled.store(on, Ordering::Relaxed);
    }
    /// Counters.
    pub fn stats(&self) -> TargetStats {
        *self.shared.stats.lock()
    }
    /// Copies `dst.len()` bytes of the namespace from byte `at`.
    pub fn read_medium(&self, at: usize, dst: &mut [u8]) -> bool {
        let m = self.shared.medium.lock();
        match m.get(at..at + dst.len()) {
            Some(s) => {
                dst.copy_from_slice(s);
                true
            }
            None => false,
        }
    }
}

impl Drop for TestTarget {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

static THREADS: AtomicU64 = AtomicU64::new(0);

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((sock, _)) => {
                if shared.refusing.load(Ordering::Relaxed) {
                    drop(sock);
                    continue;
                }
                shared.stats.lock().connections += 1;
                let s = shared.clone();
                let n = THREADS.fetch_add(1, Ordering::Relaxed);
                let spawned = std::thread::Builder::new()
                    .name(alloc::format!("nvmet-test-{n}"))
                    .spawn(move || conn::serve(sock, s));
                if let Ok(h) = spawned {
                    workers.push(h);
                }
                workers.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    for w in workers {
        let _ = w.join();
    }
}
