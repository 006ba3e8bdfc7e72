//! Hot-path micro-benchmarks: cached 4 KiB reads against the kernel's page
//! cache and the memcpy limit, parallel overwrites against the file-lock
//! mode, and range-lock acquire/release. Run with `just criterion`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pollfs_core::lock::{Held, Level, Mode, RangeLock};
use pollfs_core::units::ByteRange;
use pollfs_host_tests::cached::{fs_with_file, overwrite};
use pollfs_host_tests::rng::Rng;

const BS: usize = 4096;

fn cached_read(c: &mut Criterion) {
    let mut g = c.benchmark_group("cached_read_4k");
    g.throughput(Throughput::Bytes(BS as u64));
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    for size in [4u64 << 20, 256 << 20] {
        let blocks = size / BS as u64;
        let label = format!("{}MiB", size >> 20);
        let fs = fs_with_file(size, false);
        let s = fs.session().unwrap();
        let f = fs.open("f").unwrap();
        let mut buf = vec![0u8; BS];
        let mut rng = Rng::new(1);
        g.bench_function(BenchmarkId::new("pollfs", &label), |b| {
            b.iter(|| {
                let off = rng.below(blocks) * BS as u64;
                black_box(f.read_at(&mut buf, off).unwrap());
            })
        });
        drop(f);
        drop(s);
        drop(fs);

        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm".into()
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!("pollfs-crit-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let chunk = vec![0xa5u8; 1 << 20];
        for off in (0..size).step_by(chunk.len()) {
            file.write_all_at(&chunk, off).unwrap();
        }
        g.bench_function(BenchmarkId::new("kernel_pread_tmpfs", &label), |b| {
            b.iter(|| {
                let off = rng.below(blocks) * BS as u64;
                black_box(file.read_at(&mut buf, off).unwrap());
            })
        });
        drop(file);
        let _ = std::fs::remove_file(&path);

        let src = vec![0xa5u8; size as usize];
        g.bench_function(BenchmarkId::new("memcpy", &label), |b| {
            b.iter(|| {
                let off = rng.below(blocks) as usize * BS;
                buf.copy_from_slice(&src[off..off + BS]);
                black_box(&buf);
            })
        });
    }
    g.finish();
}

fn parallel_overwrite(c: &mut Criterion) {
    let size = 64u64 << 20;
    let mut g = c.benchmark_group("overwrite_4k_64MiB");
    g.throughput(Throughput::Bytes(BS as u64));
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);
    for (name, threads, file_lock) in [
        ("pollfs_1_thread", 1, false),
        ("pollfs_2_threads", 2, false),
        ("file_lock_2_threads", 2, true),
    ] {
        let fs = fs_with_file(size, file_lock);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                overwrite(&fs, threads, iters.max(threads), false, |f, buf, off| {
                    f.write_at(buf, off).unwrap();
                })
            })
        });
    }
    g.finish();
}

fn range_lock(c: &mut Criterion) {
    let lock = RangeLock::new(Level::Extent);
    let held = Held::new();
    c.bench_function("range_lock_uncontended", |b| {
        b.iter(|| {
            let g = lock.try_lock(ByteRange::new(4096, 8192), Mode::Exclusive, &held);
            black_box(&g);
        })
    });
}

fn report_metadata(_: &mut Criterion) {
    println!(
        "page-cache metadata per cached 4 KiB page: {} bytes",
        pollfs_core::cache::PageCache::metadata_bytes_per_page()
    );
}

criterion_group!(
    benches,
    report_metadata,
    cached_read,
    parallel_overwrite,
    range_lock
);
criterion_main!(benches);
