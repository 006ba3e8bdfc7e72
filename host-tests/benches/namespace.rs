//! Namespace operations on the engine, per operation, on a formatted RAM
//! device (so each change stages its log record, as on a real device):
//! create, lookup of a path 1 and 8 components deep, rename within and
//! across directories, and a listing of a directory of 100,000 entries.
//! Run with `just criterion --bench namespace`.
//!
//! Creates and renames grow what the next commit writes; each sample's
//! work is synced (and created files removed) outside the timed part.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pollfs_core::dev::ram::RamDevice;
use pollfs_core::persist::META_FRAMES;
use pollfs_core::{Fs, InodeId, NewInode, RenameFlags};
use pollfs_host_tests::setup::config;

const WHO: NewInode = NewInode {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
/// Entries beside the one looked up in every directory on the path, so
/// each step searches a directory of some size.
const SIBLINGS: usize = 1000;
const LISTED: usize = 100_000;

fn formatted() -> Fs<RamDevice> {
    let cache = 256;
    let ram = RamDevice::new(512 << 20, 4096, cache + META_FRAMES).unwrap();
    Fs::format(ram, config(cache), 1).unwrap()
}

/// Makes `n` empty files named `{prefix}{i}` in `dir`.
fn fill(fs: &Fs<RamDevice>, dir: InodeId, prefix: &str, n: usize) {
    for i in 0..n {
        drop(fs.create_in(dir, &format!("{prefix}{i}"), WHO).unwrap());
    }
}

fn create(c: &mut Criterion) {
    let mut g = c.benchmark_group("namespace");
    g.measurement_time(Duration::from_secs(3)).sample_size(20);
    let fs = formatted();
    let mut round = 0u64;
    g.bench_function("create", |b| {
        b.iter_custom(|iters| {
            round += 1;
            let dir = fs
                .mkdir_in(InodeId::ROOT, &format!("r{round}"), WHO)
                .unwrap();
            let names: Vec<String> = (0..iters).map(|i| format!("file{i}")).collect();
            let start = Instant::now();
            for n in &names {
                drop(black_box(fs.create_in(dir, n, WHO).unwrap()));
            }
            let took = start.elapsed();
            for n in &names {
                fs.unlink_in(dir, n).unwrap();
            }
            fs.rmdir_in(InodeId::ROOT, &format!("r{round}")).unwrap();
            fs.sync().unwrap();
            took
        })
    });
}

fn lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("namespace/lookup");
    g.measurement_time(Duration::from_secs(3)).sample_size(20);
    let fs = formatted();
    // d1/d2/.../d7/target, each directory with SIBLINGS other files.
    let mut dir = InodeId::ROOT;
    let mut path = String::new();
    for depth in 1..=8 {
        fill(&fs, dir, "sibling", SIBLINGS);
        if depth == 8 {
            drop(fs.create_in(dir, "target", WHO).unwrap());
            path.push_str("target");
        } else {
            let name = format!("d{depth}");
            dir = fs.mkdir_in(dir, &name, WHO).unwrap();
            path.push_str(&name);
            path.push('/');
        }
    }
    drop(fs.create_in(InodeId::ROOT, "target", WHO).unwrap());
    fs.sync().unwrap();
    for (depth, p) in [(1, "target".to_string()), (8, path)] {
        let expected = fs.lookup(&p).unwrap();
        g.bench_function(BenchmarkId::new("path_depth", depth), |b| {
            b.iter(|| assert_eq!(fs.lookup(black_box(&p)).unwrap(), expected))
        });
    }
}

fn rename(c: &mut Criterion) {
    let mut g = c.benchmark_group("namespace/rename");
    g.measurement_time(Duration::from_secs(3)).sample_size(20);
    let fs = formatted();
    let a = fs.mkdir_in(InodeId::ROOT, "a", WHO).unwrap();
    let b = fs.mkdir_in(InodeId::ROOT, "b", WHO).unwrap();
    fill(&fs, a, "sibling", SIBLINGS);
    fill(&fs, b, "sibling", SIBLINGS);
    drop(fs.create_in(a, "moving", WHO).unwrap());
    fs.sync().unwrap();
    let none = RenameFlags::default();
    for (label, to) in [("within_a_directory", a), ("across_directories", b)] {
        g.bench_function(label, |bench| {
            bench.iter_custom(|iters| {
                let start = Instant::now();
                for i in 0..iters {
                    // There and back: the name is in `a` after each pair.
                    let (from, from_name, dest, dest_name) = if i % 2 == 0 {
                        (a, "moving", to, "moved")
                    } else {
                        (to, "moved", a, "moving")
                    };
                    fs.rename_in(from, from_name, dest, dest_name, none)
                        .unwrap();
                }
                let took = start.elapsed();
                if iters % 2 == 1 {
                    fs.rename_in(to, "moved", a, "moving", none).unwrap();
                }
                fs.sync().unwrap();
                took
            })
        });
    }
}

fn read_dir(c: &mut Criterion) {
    let mut g = c.benchmark_group("namespace/read_dir");
    g.measurement_time(Duration::from_secs(5)).sample_size(10);
    g.throughput(Throughput::Elements(LISTED as u64));
    let fs = formatted();
    let dir = fs.mkdir_in(InodeId::ROOT, "big", WHO).unwrap();
    fill(&fs, dir, "entry-", LISTED);
    fs.sync().unwrap();
    // Steps of 64 are what the mount asks for per readdir reply.
    for step in [64usize, 1024] {
        g.bench_function(BenchmarkId::new("100k_entries_step", step), |b| {
            b.iter(|| {
                let (mut after, mut n) = (0, 0);
                loop {
                    let got = fs.read_dir(dir, after, step).unwrap();
                    let Some(last) = got.last() else { break };
                    after = last.cookie;
                    n += got.len();
                }
                assert_eq!(n, LISTED);
            })
        });
    }
}

criterion_group!(benches, create, lookup, rename, read_dir);
criterion_main!(benches);
