//! Engine futures under an async runtime (tokio, multi-thread): a task
//! waiting for the device, a lock or a page sleeps until woken, instead of
//! polling in a loop that burns a core.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::Fs;
use pollfs_host_tests::delayed::DelayedDevice;
use pollfs_host_tests::model::pattern;

/// CPU time this process has used (user + system).
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn a_task_waiting_for_a_slow_device_does_not_burn_a_core() {
    let dev = DelayedDevice::new(RamDevice::new(32 << 20, 4096, 96).unwrap());
    let config = pollfs_core::Config {
        cache_pages: 64,
        ..pollfs_hosted::config()
    };
    let fs = Fs::format(dev.clone(), config, 0x70c10).unwrap();
    let f = fs.create("slow").unwrap();
    f.write_all_at(&pattern(1, 0, 64 << 10), 0).unwrap();
    f.sync_data().unwrap();
    fs.session().unwrap().drop_caches().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let delay = Duration::from_millis(400);
    dev.set_delay(delay);
    let f = Arc::new(f);
    let g = f.clone();
    let (wall, cpu, data) = rt.block_on(async move {
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        let read = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            g.read_exact_at_async(&mut buf, 8192).await.map(|()| buf)
        });
        let data = read.await.unwrap().unwrap();
        (t0.elapsed(), cpu_time() - cpu0, data)
    });
    assert_eq!(data, pattern(1, 0, 64 << 10)[8192..12288]);
    assert!(wall >= delay, "the device answered after {wall:?}");
    println!("waited {wall:?} for the device, using {cpu:?} of CPU");
    // Busy polling would use about `wall` of CPU (a whole core); the task
    // is woken from a timer at most every millisecond instead.
    assert!(
        cpu < wall / 5,
        "{cpu:?} of CPU during a {wall:?} wait: the task polled instead of sleeping"
    );
}

#[test]
fn tasks_waiting_for_a_lock_sleep_until_it_is_released() {
    // Two tasks write the same page under the runtime while a slow device
    // holds the first one's read (a partial-page write reads the page in):
    // the second waits on the page, not in a loop.
    let dev = DelayedDevice::new(RamDevice::new(32 << 20, 4096, 96).unwrap());
    let config = pollfs_core::Config {
        cache_pages: 64,
        ..pollfs_hosted::config()
    };
    let fs = Fs::format(dev.clone(), config, 0x70c11).unwrap();
    let f = Arc::new(fs.create("page").unwrap());
    f.write_all_at(&pattern(2, 0, 8192), 0).unwrap();
    f.sync_data().unwrap();
    fs.session().unwrap().drop_caches().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let delay = Duration::from_millis(300);
    dev.set_delay(delay);
    let (wall, cpu) = rt.block_on(async move {
        let cpu0 = cpu_time();
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..2u8)
            .map(|i| {
                let f = f.clone();
                tokio::spawn(async move { f.write_all_at_async(&[i; 10], 100).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        (t0.elapsed(), cpu_time() - cpu0)
    });
    println!("two writers of one page: {wall:?}, {cpu:?} of CPU");
    assert!(wall >= delay);
    assert!(cpu < wall / 5, "{cpu:?} of CPU during a {wall:?} wait");
}
