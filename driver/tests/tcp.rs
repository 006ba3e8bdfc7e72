//! The NVMe/TCP initiator end to end against the in-process test target
//! on 127.0.0.1: bring-up through properties, data at many sizes across
//! the in-capsule threshold with digests on and off, and every fault the
//! target can inject ending in an error and a reconnect, never a hang.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use pollfs_core::dev::{BlockDevice, Command, DevError, DeviceQueue};
use pollfs_core::units::{FrameId, Lba};
use pollfs_driver::tcp::net::{std_clock, TcpDevice};
use pollfs_driver::tcp::target::{Fault, TargetConfig, TestTarget};
use pollfs_driver::tcp::{LinkError, TcpError};
use pollfs_driver::{DriverConfig, TcpOptions};

use common::{pages, run_real as run, tcp_write_read_check as write_read_check};

fn pattern(dev: &TcpDevice, frames: &[FrameId], seed: u64) -> Vec<u8> {
    pages::fill(dev.frames(), frames, seed).unwrap()
}

fn contents(dev: &TcpDevice, frames: &[FrameId]) -> Vec<u8> {
    pages::contents(dev.frames(), frames).unwrap()
}

fn config() -> DriverConfig {
    DriverConfig {
        io_entries: 64,
        max_transfer: Some(1 << 20),
        ..DriverConfig::default()
    }
}

fn options(t: &TestTarget, hdgst: bool, ddgst: bool) -> TcpOptions {
    let mut o = t.options();
    o.header_digest = hdgst;
    o.data_digest = ddgst;
    o
}

#[test]
fn bring_up_reads_properties_and_identify_over_tcp() {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    let dev = t.device(t.options(), config(), 64).unwrap();
    let info = dev.controller().info();
    assert!(info.identify.model.starts_with(b"pollfs test target"));
    assert_eq!(info.version, 0x0001_0400);
    assert_eq!(info.mdts_bytes, 128 << 10);
    assert_eq!(dev.geometry().block_size, 512);
    let mut q = dev.open_nvme_queue().unwrap();
    write_read_check(&t, &dev, &mut q, 8, 1, 1);
    // Up to the target's in-capsule size (IOCCSZ, 8 KiB here) a write goes
    // in the capsule: Linux's nvmet-tcp never sends an R2T for such a
    // write.
    write_read_check(&t, &dev, &mut q, 16, 2, 2);
    let s = t.stats();
    assert_eq!((s.in_capsule_writes, s.r2ts), (2, 0));
    assert_eq!(s.connections, 2, "admin and one I/O queue");
    assert_eq!(s.connects, 2);
}

/// A target that splits everything: C2HData of 8 KiB, R2Ts of 16 KiB
/// answered by H2CData of at most 4 KiB, 8 KiB of in-capsule data.
fn splitting() -> TargetConfig {
    TargetConfig {
        c2h_chunk: 8 << 10,
        r2t_chunk: 16 << 10,
        maxh2cdata: 4 << 10,
        in_capsule: 8 << 10,
        ..TargetConfig::default()
    }
}

#[test]
fn data_reads_back_at_many_sizes_across_the_in_capsule_threshold_with_digests_on_and_off() {
    for (hdgst, ddgst) in [(false, false), (true, false), (false, true), (true, true)] {
        let t = TestTarget::start(splitting()).unwrap();
        let dev = t.device(options(&t, hdgst, ddgst), config(), 512).unwrap();
        let mut q = dev.open_nvme_queue().unwrap();
        let mut seed = 7;
        // 1-2 pages go in the capsule; 3 and more by R2T; 33 and more are
        // split beyond MDTS (128 KiB); odd LBAs on 512-byte blocks.
        for n in [1u32, 2, 3, 4, 5, 16, 32, 33, 64, 100, 256] {
            for lba in [0u64, 3, 4096 + 1] {
                write_read_check(&t, &dev, &mut q, lba, n, seed);
                seed += 1;
            }
        }
        let s = t.stats();
        assert!(
            s.in_capsule_writes > 0 && s.r2ts > 0 && s.h2c_pdus > s.r2ts,
            "{s:?}"
        );
        assert!(s.success_flag_reads > 0, "{s:?}");
        assert_eq!(dev.controller().resets(), 0);
        assert_eq!(q.stats().retries, 0);
    }
}

#[test]
fn without_the_success_flag_every_read_gets_a_response_capsule() {
    let t = TestTarget::start(splitting()).unwrap();
    let mut o = t.options();
    o.success_flag = false;
    let dev = t.device(o, config(), 64).unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    for n in [1, 3, 9] {
        write_read_check(&t, &dev, &mut q, 100, n, u64::from(n));
    }
    assert_eq!(t.stats().success_flag_reads, 0);
}

#[test]
fn flush_deallocate_and_write_zeroes_reach_the_target() {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    let dev = t.device(t.options(), config(), 64).unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    write_read_check(&t, &dev, &mut q, 0, 8, 3);
    run(&mut q, Command::Flush).unwrap();
    run(
        &mut q,
        Command::Deallocate {
            lba: Lba(0),
            blocks: 8,
        },
    )
    .unwrap();
    run(
        &mut q,
        Command::WriteZeroes {
            lba: Lba(16),
            blocks: 16,
        },
    )
    .unwrap();
    let mut medium = vec![0xffu8; 32 * 512];
    t.read_medium(0, &mut medium);
    assert!(medium[..4096].iter().all(|&b| b == 0), "deallocated");
    assert!(medium[4096..8192].iter().any(|&b| b != 0), "kept");
    assert!(medium[8192..].iter().all(|&b| b == 0), "zeroed");
}

#[test]
fn keep_alive_follows_the_callers_clock() {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    let mut o = t.options();
    o.kato_ms = 100;
    let dev = t.device(o, config(), 16).unwrap();
    let clock = std_clock();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(400) {
        dev.tick(clock());
        std::thread::sleep(Duration::from_millis(5));
    }
    let ka = t.stats().keep_alives;
    assert!((3..=10).contains(&ka), "one Keep Alive per 50 ms: {ka}");
    // An I/O queue's polls tick too.
    let mut q = dev.open_nvme_queue().unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        q.poll(clock(), usize::MAX, &mut |_| {});
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(t.stats().keep_alives >= ka + 2);
    assert_eq!(dev.controller().resets(), 0);
}

/// A device whose commands time out quickly, for the stall tests.
fn impatient() -> DriverConfig {
    DriverConfig {
        command_timeout: 300_000_000,
        abort_timeout: 200_000_000,
        admin_timeout: 500_000_000,
        health_interval: 50_000_000,
        ..config()
    }
}

/// Injects `fault`, runs a write of `pages` (in the capsule for one or two
/// pages, by R2T beyond) and a read of it, and checks that the fault was
/// hit, cost exactly one reconnect, and lost no data.
fn fault_then_recover(
    fault: Fault,
    hdgst: bool,
    ddgst: bool,
    on_write: bool,
    pages: u32,
    expect: fn(TcpError) -> bool,
) {
    let t = TestTarget::start(splitting()).unwrap();
    let dev = t
        .device(options(&t, hdgst, ddgst), impatient(), 64)
        .unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    let before = t.stats().connections;
    let src: Vec<FrameId> = (0..pages).map(FrameId).collect();
    let dst: Vec<FrameId> = (pages..2 * pages).map(FrameId).collect();
    let want = pattern(&dev, &src, 99);
    if on_write {
        t.inject(fault);
    }
    run(
        &mut q,
        Command::Write {
            lba: Lba(64),
            frames: &src,
            fua: false,
        },
    )
    .unwrap_or_else(|e| panic!("{fault:?}: write failed: {e:?}"));
    if !on_write {
        t.inject(fault);
    }
    run(
        &mut q,
        Command::Read {
            lba: Lba(64),
            frames: &dst,
        },
    )
    .unwrap_or_else(|e| panic!("{fault:?}: read failed: {e:?}"));
    assert_eq!(t.pending_faults(), 0, "{fault:?} was applied");
    assert_eq!(contents(&dev, &dst), want, "{fault:?}: data");
    // A fault after the command's completion (a duplicate response) may
    // still be on its way: poll until the queue has recovered from it.
    let clock = std_clock();
    let until = Instant::now() + Duration::from_secs(10);
    while q.stats().resyncs == 0 && Instant::now() < until {
        q.poll(clock(), usize::MAX, &mut |_| {});
        std::thread::yield_now();
    }
    let seen = q.qpair().last_error();
    assert!(
        seen.is_some_and(expect),
        "{fault:?}: the error seen was {seen:?}"
    );
    assert_eq!(dev.controller().resets(), 1, "{fault:?}: one reset");
    let h = dev.health();
    assert_eq!(
        (h.resets, h.reconnects, h.queue_recoveries),
        (1, 1, 1),
        "{fault:?}: the device's figures {h:?}"
    );
    assert!(q.stats().protocol_errors >= 1, "{fault:?}: {:?}", q.stats());
    assert_eq!(q.stats().resyncs, 1, "{fault:?}: reconnected");
    assert_eq!(
        t.stats().connections,
        before + 2,
        "{fault:?}: admin and I/O queue connected again"
    );
    // And the queue keeps working.
    write_read_check(&t, &dev, &mut q, 200, 3, 5);
}

fn closed(e: TcpError) -> bool {
    matches!(e, TcpError::Link(LinkError::Closed | LinkError::Reset))
}

fn unknown(e: TcpError) -> bool {
    matches!(e, TcpError::UnknownCid { .. })
}

#[test]
fn a_dropped_connection_is_an_error_and_a_reconnect() {
    fault_then_recover(Fault::DropConnection, false, false, true, 1, closed);
    fault_then_recover(Fault::DropConnection, false, false, false, 4, closed);
}

#[test]
fn a_truncated_pdu_is_an_error_and_a_reconnect() {
    fault_then_recover(Fault::Truncate, false, false, true, 4, closed);
    fault_then_recover(Fault::Truncate, true, true, false, 2, closed);
}

#[test]
fn a_bad_header_digest_is_an_error_and_a_reconnect() {
    fault_then_recover(Fault::HeaderDigest, true, false, true, 1, |e| {
        matches!(e, TcpError::HeaderDigest { pdu: 5, .. })
    });
    fault_then_recover(Fault::HeaderDigest, true, true, false, 3, |e| {
        matches!(e, TcpError::HeaderDigest { pdu: 7, .. })
    });
}

#[test]
fn an_r2t_beyond_the_buffer_is_an_error_and_a_reconnect() {
    fault_then_recover(Fault::R2tOutOfRange, false, false, true, 5, |e| {
        matches!(e, TcpError::OutOfRange { .. })
    });
}

#[test]
fn a_duplicate_response_is_an_error_and_a_reconnect() {
    fault_then_recover(Fault::Duplicate, false, false, true, 1, unknown);
    fault_then_recover(Fault::Duplicate, false, false, false, 2, unknown);
}

#[test]
fn an_unknown_command_id_a_bad_pdu_type_and_a_termreq_are_errors_and_reconnects() {
    fault_then_recover(Fault::UnknownCid, false, false, true, 1, unknown);
    fault_then_recover(Fault::UnknownCid, false, false, false, 3, unknown);
    fault_then_recover(Fault::BadPduType, true, true, false, 1, |e| {
        e == TcpError::HeaderField { pdu: 8, offset: 0 }
    });
    fault_then_recover(Fault::Terminate, false, false, true, 6, |e| {
        e == TcpError::Terminated { fes: 1 }
    });
}

#[test]
fn a_bad_data_digest_fails_only_its_command_which_is_retried() {
    let t = TestTarget::start(splitting()).unwrap();
    let dev = t.device(options(&t, false, true), config(), 64).unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    let src = [FrameId(0), FrameId(1), FrameId(2)];
    let want = pattern(&dev, &src, 4);
    run(
        &mut q,
        Command::Write {
            lba: Lba(0),
            frames: &src,
            fua: false,
        },
    )
    .unwrap();
    t.inject(Fault::DataDigest);
    let dst = [FrameId(3), FrameId(4), FrameId(5)];
    run(
        &mut q,
        Command::Read {
            lba: Lba(0),
            frames: &dst,
        },
    )
    .unwrap();
    assert_eq!(contents(&dev, &dst), want);
    // 3.5: a data digest error is not fatal; the command gets a transient
    // transport error and is resubmitted on the same connection.
    assert_eq!(q.stats().retries, 1);
    assert_eq!(dev.controller().resets(), 0);
}

#[test]
fn a_stalled_command_times_out_is_aborted_and_the_controller_reconnects() {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    let dev = t.device(t.options(), impatient(), 64).unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    t.inject(Fault::Stall);
    let started = Instant::now();
    let r = run(
        &mut q,
        Command::Read {
            lba: Lba(0),
            frames: &[FrameId(0)],
        },
    );
    assert_eq!(r, Err(DevError::Timeout));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(q.stats().timeouts, 1);
    assert_eq!(dev.controller().resets(), 1);
    write_read_check(&t, &dev, &mut q, 8, 2, 8);
}

#[test]
fn a_target_that_stops_answering_fails_the_io_without_hanging() {
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    let mut o = t.options();
    o.setup_timeout = 200_000_000;
    o.reconnect_timeout = 300_000_000;
    let dev = t.device(o, impatient(), 64).unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    write_read_check(&t, &dev, &mut q, 8, 1, 8);
    t.set_stalled(true);
    let started = Instant::now();
    let r = run(
        &mut q,
        Command::Read {
            lba: Lba(0),
            frames: &[FrameId(0)],
        },
    );
    assert!(r.is_err(), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    assert!(dev.controller().is_dead());
    assert_eq!(
        run(
            &mut q,
            Command::Read {
                lba: Lba(0),
                frames: &[FrameId(0)]
            }
        ),
        Err(DevError::ControllerFailed)
    );
}

#[test]
fn a_target_away_for_a_while_is_reconnected_when_it_comes_back() {
    let t = std::sync::Arc::new(TestTarget::start(TargetConfig::default()).unwrap());
    let dev = t.device(t.options(), impatient(), 64).unwrap();
    let mut q = dev.open_nvme_queue().unwrap();
    let src = [FrameId(0), FrameId(1)];
    let want = pattern(&dev, &src, 12);
    // The port goes away with the connection; it is back 400 ms later.
    t.set_refusing(true);
    t.inject(Fault::DropConnection);
    let back = {
        let t = t.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            t.set_refusing(false);
        })
    };
    run(
        &mut q,
        Command::Write {
            lba: Lba(0),
            frames: &src,
            fua: false,
        },
    )
    .unwrap();
    back.join().unwrap();
    let dst = [FrameId(2), FrameId(3)];
    run(
        &mut q,
        Command::Read {
            lba: Lba(0),
            frames: &dst,
        },
    )
    .unwrap();
    assert_eq!(contents(&dev, &dst), want);
    assert_eq!(dev.controller().resets(), 1);
    assert!(!dev.controller().is_dead());
}

#[test]
fn a_queue_id_freed_a_moment_ago_connects_once_the_target_lets_it_go() {
    // One I/O queue: the next queue gets the id just freed, which the
    // target holds until it has seen the old connection end.
    let t = TestTarget::start(TargetConfig {
        queues: 1,
        ..TargetConfig::default()
    })
    .unwrap();
    let dev = t.device(t.options(), config(), 16).unwrap();
    for round in 0..5 {
        let mut q = dev.open_nvme_queue().unwrap();
        write_read_check(&t, &dev, &mut q, 8, 1, round);
        drop(q);
    }
    assert_eq!(dev.controller().resets(), 0);
}

#[test]
fn queues_on_several_threads_share_the_controller() {
    let t = TestTarget::start(splitting()).unwrap();
    let dev = t.device(options(&t, true, true), config(), 256).unwrap();
    std::thread::scope(|s| {
        for i in 0..4u64 {
            let (t, dev) = (&t, &dev);
            s.spawn(move || {
                let mut q = dev.open_nvme_queue().unwrap();
                let base = i * 64;
                let src: Vec<FrameId> = (base as u32..base as u32 + 16).map(FrameId).collect();
                let dst: Vec<FrameId> = (base as u32 + 16..base as u32 + 32).map(FrameId).collect();
                for round in 0..20 {
                    let lba = (i * 1000 + round) * 8;
                    let want = pattern(dev, &src, i * 100 + round);
                    run(
                        &mut q,
                        Command::Write {
                            lba: Lba(lba),
                            frames: &src,
                            fua: round % 2 == 0,
                        },
                    )
                    .unwrap();
                    run(
                        &mut q,
                        Command::Read {
                            lba: Lba(lba),
                            frames: &dst,
                        },
                    )
                    .unwrap();
                    assert_eq!(contents(dev, &dst), want);
                }
                let _ = t;
            });
        }
    });
    assert_eq!(t.stats().connects, 5);
}
