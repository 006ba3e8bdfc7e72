//! perf on the emulated controller: every pattern completes, counts add
//! up per queue pair, `-d` stops at exactly that many commands, and the
//! table and the JSON say what ran.

use std::time::Duration;

use super::*;

fn settings(pattern: Pattern, mix: u8, qd: u32, pairs: u32) -> Settings {
    Settings {
        target: pollfs_device::DeviceSpec::One(pollfs_device::Leaf::Emu),
        io_depth: qd,
        io_size: 4096,
        io_pattern: pattern,
        rwmixread: mix,
        time: Duration::from_millis(150),
        warmup: Duration::ZERO,
        number_ios: 0,
        cores: vec![None],
        qpairs_per_worker: pairs,
    }
}

#[test]
fn every_pattern_completes_on_emu_and_the_rows_add_up() {
    for (p, mix) in [
        (Pattern::Read, 100),
        (Pattern::Write, 0),
        (Pattern::Randread, 100),
        (Pattern::Randwrite, 0),
        (Pattern::Rw, 50),
        (Pattern::Randrw, 70),
    ] {
        // Bounded by a count, not a time: a busy machine may complete
        // nothing in 150 ms.
        let mut s = settings(p, mix, 8, 2);
        s.number_ios = 400;
        s.time = Duration::from_secs(60);
        let r = measure(&s).unwrap();
        assert_eq!(r.ios(), 400, "{p:?}");
        assert_eq!(r.errors(), 0, "{p:?}");
        assert_eq!(r.queues.len(), 2);
        assert_eq!(r.latency.len(), r.ios());
        assert_eq!(
            r.queues.iter().map(|q| q.latency.len()).sum::<u64>(),
            r.ios()
        );
        let text = r.render(false);
        assert!(
            text.contains("emu qpair 0 from worker 0") && text.contains("emu qpair 1"),
            "{text}"
        );
        assert!(
            text.contains("Total") && text.contains("50.00000% :"),
            "{text}"
        );
    }
}

#[test]
fn number_ios_stops_each_worker_exactly() {
    let mut s = settings(Pattern::Randread, 100, 8, 2);
    s.number_ios = 1000;
    s.time = Duration::from_secs(60);
    let r = measure(&s).unwrap();
    assert_eq!(r.ios(), 1000);
    assert!(r.elapsed < Duration::from_secs(60));
}

#[test]
fn warmup_is_not_counted_and_workers_can_be_pinned() {
    let mut s = settings(Pattern::Randwrite, 0, 4, 1);
    s.warmup = Duration::from_millis(50);
    s.cores = vec![Some(0)];
    let r = measure(&s).unwrap();
    assert!(r.ios() > 0);
    assert!(r.elapsed >= s.time, "{:?}", r.elapsed);
    assert!(r.render(true).contains("from core 0"));
    assert!(r.render(true).contains("Range in us"));
}

#[test]
fn the_json_names_every_queue_pair_and_the_total() {
    let r = measure(&settings(Pattern::Randrw, 50, 4, 3)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.json().unwrap()).unwrap();
    let queues = v["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 3);
    let sum: u64 = queues
        .iter()
        .map(|q| q["figures"]["ios"].as_u64().unwrap())
        .sum();
    assert_eq!(v["total"]["ios"].as_u64().unwrap(), sum);
    assert_eq!(v["settings"]["io_pattern"], "randrw");
    assert_eq!(v["settings"]["rwmixread"], 50);
    assert!(v["latency_percentiles_us"]["99"].as_f64().unwrap() > 0.0);
}

#[test]
fn large_commands_beyond_mdts_work() {
    let mut s = settings(Pattern::Randwrite, 0, 4, 1);
    s.io_size = 1 << 20;
    let r = measure(&s).unwrap();
    assert!(r.ios() > 0);
    assert_eq!(r.errors(), 0);
}

#[test]
fn perf_over_nvme_tcp_completes_commands_without_errors() {
    use pollfs_driver::tcp::target::{TargetConfig, TestTarget};
    let t = TestTarget::start(TargetConfig::default()).unwrap();
    let mut s = settings(Pattern::Randrw, 50, 8, 2);
    s.target = t.url(false, false).parse().unwrap();
    s.io_size = 16384;
    let r = measure(&s).unwrap();
    assert!(r.ios() > 0);
    assert_eq!(r.errors(), 0);
    assert!(
        r.render(false).contains("TCP (nvme-tcp://"),
        "{}",
        r.render(false)
    );
}

#[test]
fn perf_runs_on_a_stripe_and_a_mirror_of_emu_legs() {
    for device in ["stripe:64k:(emu,emu)", "mirror:(emu,ram)"] {
        let mut s = settings(Pattern::Randrw, 50, 8, 2);
        s.target = device.parse().unwrap();
        s.io_size = 128 << 10;
        let r = measure(&s).unwrap();
        assert!(r.ios() > 0, "{device}");
        assert_eq!(r.errors(), 0, "{device}");
        let text = r.render(false);
        assert!(text.contains(&format!("{device} qpair 1")), "{text}");
    }
    let e = crate::nvme::parse_target("mirror:(emu,file:/x)").unwrap_err();
    assert!(
        e.to_string().contains("emu, ram, vfio: and nvme-tcp://"),
        "{e}"
    );
}
