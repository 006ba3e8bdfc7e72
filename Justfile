# pollfs: every check a developer or CI runs is a recipe here.

# List the recipes.
default:
    @just --list

# Format check and lints, as CI runs them: with every feature (TLS
# included: libssl-dev, pkg-config, and libsqlite3-dev for capi/crash),
# then with the default ones, which build the driver's stand-ins for a
# build without TLS (`driver/src/tls/no_channel.rs`).
pre:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --all-features -- -D warnings
    cargo clippy --workspace --all-targets -- -D warnings

# The test suite (the README's second command runs the same tests). It
# needs only a Rust toolchain, so it has no TLS: `just test-tls` has.
test:
    cargo test --workspace

# The TLS tests: NVMe/TCP inside TLS 1.3 with a PSK against the test
# target (driver/tests/tcp_tls.rs) and the driver's unit tests, with
# feature `tls` (the system's OpenSSL: libssl-dev, pkg-config).
test-tls:
    cargo test -p pollfs-driver --features tls --lib --test tcp_tls

# The engine and the driver's core build with no operating system at all.
check-no-std:
    cargo build -p pollfs-core --target x86_64-unknown-none
    cargo build -p pollfs-driver --no-default-features --target x86_64-unknown-none

# `pollfs bench` on a device: emu (default), ram, file:PATH.
bench DEVICE="emu" *ARGS="":
    cargo run --release -p pollfs-cli -- bench --device {{DEVICE}} {{ARGS}}

# libpollfs (the C ABI): the checked-in header against a fresh cbindgen
# run, the C test against the shared and the static library, the Python
# ctypes smoke test, an install whose pkg-config file builds the C test,
# and the SQLite VFS's crash images (libsqlite3-dev). About a minute after
# the debug build.
capi-test:
    cargo build -p pollfs-capi
    cargo test -p pollfs-capi
    cbindgen --quiet --config capi/cbindgen.toml --crate pollfs-capi --output target/pollfs.h.fresh capi
    diff -u capi/include/pollfs.h target/pollfs.h.fresh || (echo "capi/include/pollfs.h is stale: just capi-header" && exit 1)
    make -C capi/tests/c
    python3 capi/tests/smoke.py
    capi/scripts/install.sh target/capi-prefix debug
    cc -std=c11 -o target/capi-prefix/test_api capi/tests/c/test_api.c $(PKG_CONFIG_PATH=target/capi-prefix/lib/pkgconfig pkg-config --cflags --libs pollfs) -Wl,-rpath,$PWD/target/capi-prefix/lib -lpthread
    target/capi-prefix/test_api
    just capi-crash

# SQLite on the pollfs VFS at every write boundary of a transaction
# workload (rollback journal and WAL): integrity_check and exactly the
# committed transactions. N: transactions per workload.
capi-crash N="12":
    POLLFS_SQLITE_CRASH_TXNS={{N}} cargo test -p pollfs-capi-crash --features sqlite --test crash -- --nocapture

# The manual pages (docs/man, section 8) and the bash, zsh and fish
# completions (docs/completions), written from the commands' clap
# definitions; `cargo test` fails when the checked-in ones are stale.
# docs/man/libpollfs.3 is written by hand and left alone.
man:
    cargo build -q -p pollfs-cli
    rm -f docs/man/*.8 docs/completions/*
    target/debug/pollfs generate man docs/man
    target/debug/pollfs generate completions docs/completions

# vendor/fuser against the published crate of the version its Cargo.toml
# names (fetched from crates.io into target/fuser-upstream once): every
# difference shown is one vendor/fuser/PATCHES.md lists. Packaging files
# (.cargo_vcs_info.json, Cargo.toml.orig, Cargo.lock) and PATCHES.md are
# left out; "Only in" lines name what the vendored copy dropped or added.
fuser-diff:
    #!/usr/bin/env bash
    set -euo pipefail
    version=$(sed -n 's/^version = "\(.*\)"$/\1/p' vendor/fuser/Cargo.toml | head -n 1)
    upstream=target/fuser-upstream/fuser-$version
    if [ ! -d "$upstream" ]; then
        mkdir -p target/fuser-upstream
        curl -sSfL "https://static.crates.io/crates/fuser/fuser-$version.crate" | tar xz -C target/fuser-upstream
    fi
    diff -ru -x .cargo_vcs_info.json -x Cargo.toml.orig -x Cargo.lock -x PATCHES.md "$upstream" vendor/fuser || test $? -eq 1

# Regenerates capi/include/pollfs.h from capi/src.
capi-header:
    cbindgen --quiet --config capi/cbindgen.toml --crate pollfs-capi --output capi/include/pollfs.h capi

# fio 3.33 built from Debian's source with the pollfs ioengine against the
# same tree, then fio's crc32c verification of random writes from two job
# threads and of a mixed job with fsyncs (capi/fio/verify.fio). About a
# minute with fio already built, 3 more to build it.
fio-pollfs:
    capi/scripts/fio.sh
    cd "$(mktemp -d)" && {{justfile_directory()}}/target/fio/fio-3.33/fio --ioengine=external:{{justfile_directory()}}/target/release/libpollfs_fio.so {{justfile_directory()}}/capi/fio/verify.fio

# fio 4 KiB random reads and writes, QD1 and QD32, 1 and 2 jobs: the pollfs
# ioengine on `emu` against io_uring and psync on tmpfs, engines taking
# turns, medians of ROUNDS (about 8 minutes for 4 s runs and 3 rounds).
fio-bench SECS="5" ROUNDS="3":
    capi/scripts/fio-bench.sh {{SECS}} {{ROUNDS}}

# The SQLite VFS: two connections of a process (locks, WAL snapshots), the
# loadable extension in the sqlite3 shell (rollback journal and WAL,
# integrity_check), then speedtest1 with --vfs pollfs.
speedtest:
    capi/scripts/sqlite.sh
    target/release/sqlite-test-vfs
    bash capi/tests/sqlite-shell.sh target/release/libpollfs_sqlite.so
    cd "$(mktemp -d)" && POLLFS_CACHE_MB=512 {{justfile_directory()}}/target/release/speedtest1 --vfs pollfs --size 25 speedtest.db

# speedtest1 on the pollfs VFS against the unix VFS on tmpfs and on ext4
# over a loop device (root), per test line, and SQLite commits per second
# with synchronous=FULL (about 2 minutes).
speedtest-bench SIZE="50" COMMITS="2000":
    capi/scripts/speedtest-bench.sh {{SIZE}} {{COMMITS}}

# Real programs on `pollfs mount` (root, /dev/fuse; fio, sqlite3,
# util-linux, python3, jq, tar, gzip, git, make, acl, attr): fio with crc32c
# verification beside a truncation checker, sqlite3 across a remount,
# kill -9 under fsyncs, fallocate(1) and truncate(1), and a source tree
# (libc's .crate from cargo's cache) unpacked, compared with tmpfs, put
# under git and make, linked, moved and remounted; POSIX rules against
# tmpfs in the same run, as root and as another user (the known gaps
# listed in tests/mount/conformance.py), extended attributes and ACLs
# round-tripped by cp -a, tar --xattrs --acls, getfacl/setfacl and
# getfattr/setfattr against tmpfs, mount(8) through the
# mount.fuse.pollfs helper and an fstab line, and `pollfs umount`; all of
# it once in each cache mode (kernel, direct) reading /dev/fuse, then
# again over FUSE over io_uring where the kernel has it (the `fuse`
# module's enable_uring is turned on here; a mount that would not use the
# ring fails), with a check that the requests went over the ring
# (tests/mount/uring.sh). About four minutes after the build.
mount-test:
    cargo build --release -p pollfs-cli
    CACHE_MODE=kernel URING=off bash tests/mount/run.sh target/release/pollfs
    CACHE_MODE=direct URING=off bash tests/mount/run.sh target/release/pollfs
    if echo Y 2>/dev/null >/sys/module/fuse/parameters/enable_uring; then \
        CACHE_MODE=kernel URING=on bash tests/mount/run.sh target/release/pollfs && \
        CACHE_MODE=direct URING=on bash tests/mount/run.sh target/release/pollfs; \
    else \
        echo "mount-test: no FUSE over io_uring in this kernel (Linux 6.14+): the uring=on runs are not run"; \
    fi

# What one FUSE round trip costs reading /dev/fuse and over io_uring:
# 100,000 1-byte preads in direct cache mode, wall and CPU time (caller,
# server) per request, 3 runs of each (under a minute).
mount-roundtrip:
    cargo build --release -p pollfs-cli
    bash tests/mount/roundtrip.sh target/release/pollfs

# stress-ng's metadata stressors (dir, dentry, rename, link, chmod, chown,
# utime, filename, iomix, fallocate, xattr) on `pollfs mount`, 2 workers
# for 1 s each, each followed by a clean unmount, fsck, a remount and the
# tree's checksum (attributes included) compared, in each cache mode
# (root, /dev/fuse, stress-ng, python3; about 90 s after the build).
mount-stress:
    cargo build --release -p pollfs-cli
    bash tests/mount/stress.sh target/release/pollfs

# What the mount costs against ext4 on a loop device and tmpfs, ratios
# in one run, with both images on a disk (DISK, /var/tmp) and on
# /dev/shm: the default configuration (no options) first, then each cache
# mode; fio random, cached, sequential and fsync'd I/O, a 1-byte pread,
# sqlite3 WAL commits, tar x / find / git status on a source tree,
# stress-ng's metadata stressors (PLACES, MODES, ONLY pick fewer). Not in
# CI: measurements never are.
mount-bench:
    cargo build --release -p pollfs-cli
    bash tests/mount/bench.sh target/release/pollfs

# Where a sync through the mount goes, in counts: the FUSE requests the
# kernel sends (its fuse tracepoints) and the server's system calls
# (strace -c) per sync, beside ext4 on a loop device's writes and flushes
# per sync, both images on a disk (DIR, /var/tmp). Not in CI.
mount-sync-trace:
    cargo build --release -p pollfs-cli
    bash tests/mount/sync_trace.sh target/release/pollfs

# What the mount costs for a tree and a big directory against tmpfs:
# `tar x` of libc's .crate, and a directory of 100,000 files made and
# listed (ls -f, os.scandir), medians of 5 (under a minute).
mount-bench-tree:
    cargo build --release -p pollfs-cli
    bash tests/mount/bench_tree.sh target/release/pollfs

# Debian packages of the release build in target/deb: pollfs (command,
# mount helpers in /sbin, manual pages, completions, a systemd unit
# template; built with TLS, so it needs libssl-dev to build and depends
# on libssl), libpollfs0 and libpollfs-dev.
deb:
    bash packaging/deb.sh

# Installs the packages and uses them (root): man, a C program through
# pkg-config, an fstab mount, pollfs stat, pollfs umount, fsck, dpkg -r.
deb-test:
    bash packaging/deb-test.sh

# How costs grow with the number of files, at the library (no FUSE): for
# each count, create rate and memory, mount, a sync-heavy job's latency
# tail, checkpoints and bytes per sync, unmount, fsck time and memory, and
# lookup/create in one directory of that many entries; then the same
# workload on ext4 and xfs over loop devices (root). `just scale 1000
# 100000 1000000`; minutes per 100,000 files on 2 cores.
scale *COUNTS="1000 100000":
    cargo build --release -p pollfs-host-tests --bin scale
    bash tests/scale/run.sh target/release/scale {{COUNTS}}

# Longer model and thread runs (minutes).
soak:
    cargo test --release -p pollfs-host-tests --features soak

# Many more crash states: 200 generated workloads instead of 12.
crash-soak:
    cargo test --release -p pollfs-host-tests --features soak --test crash -- --nocapture

# The crash tests as CI runs them: `n` generated workloads, release build.
crash n="200":
    POLLFS_CRASH_WORKLOADS={{n}} cargo test --release -p pollfs-host-tests --test crash --test crash_tree -- --nocapture

# Criterion micro-benchmarks of the hot paths.
criterion *ARGS="":
    cargo bench -p pollfs-host-tests {{ARGS}}

# The driver against QEMU's NVMe controller through VFIO, in a VM (a few
# minutes under software emulation; installs its Debian packages).
vm-test:
    bash vm/test.sh

# pollfs perf against fio (io_uring, and io_uring on polled queues) on the
# guest kernel's nvme driver, same namespace, one VM run.
vm-perf:
    bash vm/bench.sh

# The driver's instructions per 4 KiB I/O (submit + reap) under callgrind:
# `just io-cost` on the emulated controller, `just io-cost emu-split` there
# with completions read as on VFIO memory, `just io-cost tcp` over NVMe/TCP
# to the test target on loopback.
io-cost MODE="emu" IOS="100000" QD="32":
    bash vm/io-cost.sh {{IOS}} {{QD}} {{MODE}}

# Instructions per cached 4 KiB read and per cached 4 KiB overwrite through
# the file API under callgrind (`just read-cost read`, `... write`, or both).
# `just read-cost both 100000 words` over DMA memory accessed as VFIO
# memory is (a real controller's page copy).
read-cost WHAT="both" OPS="100000" MEMORY="locked":
    bash vm/read-write-cost.sh {{WHAT}} {{OPS}} {{MEMORY}}

# The NVMe/TCP initiator against the Linux kernel's nvmet-tcp in the VM:
# identify, data at many sizes with and without digests, a reconnect under
# I/O, mkfs/fsck, a killed writer's synced data after a remount.
vm-tcp-test:
    bash vm/tcp-test.sh

# DH-HMAC-CHAP against nvmet-tcp in the VM (Debian 13's 6.12 kernel, which
# has NVME_TARGET_AUTH): one- and two-way, three hashes, the NULL group and
# FFDHE groups, a reconnect that authenticates again; no key, a wrong key
# and an impostor target refused; no secret in any output.
vm-tcp-auth-test:
    bash vm/tcp-auth-test.sh

# End-to-end protection information in the VM: QEMU's namespace formatted
# with 8 bytes of type 1 PI per 4096-byte block (`ms=8,pi=1`), the device
# test through VFIO with PRACT and PRCHK on every command (counted by
# QEMU's trace events), the PI on the medium checked from the host, then
# a flipped bit and a misdirected block caught by name in a second boot;
# the engine (bench, fsck, mkfs, fsck) on a fresh PI namespace in a third.
vm-pi-test:
    bash vm/pi-test.sh

# TLS 1.3 with a PSK against nvmet-tcp in the VM (Debian 13's kernel, with
# nvme-cli 2.13 putting the PSK in the .nvme keyring and tlshd doing the
# target's handshake): identify, data on every queue, mkfs, fsck, a
# reconnect; the other derivation, a wrong key and no TLS refused. Builds
# with feature `tls`, OpenSSL linked statically (libssl-dev).
vm-tcp-tls-test:
    bash vm/tcp-tls-test.sh

# A mirror over two nvmet-tcp targets in the VM: one taken away under a
# syncing writer, which goes on; every synced chunk read back from each
# leg alone; `pollfs mirror rejoin` leaves the legs byte-equal.
vm-mirror-test:
    bash vm/mirror-test.sh

# Two vfio legs in one volume (one VFIO container): stripe and mirror over
# two QEMU NVMe controllers in the VM; write, read back, fsck; a mirror leg
# whose controller loses bus mastering under a syncing writer, rejoined.
vm-vfio-volume-test:
    bash vm/vfio-volume-test.sh

# A mounted mirror administered through its control socket in the VM: a
# leg failed and rejoined (`pollfs mirror`) under a syncing writer; every
# synced chunk read back from each leg alone.
vm-mirror-live-test:
    nice -n 10 bash vm/mirror-live-test.sh

# `pollfs perf` over NVMe/TCP against fio on the guest kernel's nvme-tcp
# initiator (io_uring, psync), same nvmet target, one VM run.
vm-tcp-perf:
    bash vm/tcp-bench.sh

# `pollfs bench` inside the VM, through VFIO on QEMU's NVMe controller.
vm-bench PRESET="quick":
    POLLFS_VM_PRESET={{PRESET}} bash vm/bench-suite.sh

# `pollfs perf` on one emulated namespace and on a stripe of two: sequential
# (128 KiB) and random (4 KiB) reads, QD 32, alternating rounds of one run,
# medians and ratios. ARGS: seconds per run, rounds, workers (threads).
stripe-bench *ARGS="":
    bash cli/scripts/stripe-bench.sh {{ARGS}}

# The stripe's gain in the VM, one boot: `pollfs bench` (direct, QD 32,
# sequential and random reads and writes) on one device and on a stripe of
# two, through VFIO (two QEMU controllers, one container) and over two
# nvmet-tcp targets; commands per leg counted by QEMU's trace events.
vm-stripe-bench:
    bash vm/stripe-bench.sh

# Device commands per sync, counted by QEMU's trace events in one VM boot:
# ext4, xfs and btrfs (fio) and pollfs (`pollfs bench` through VFIO) on the
# same NVMe namespace; overwrite+fdatasync, append+fdatasync, append+fsync.
vm-peers:
    bash vm/peers.sh

# ---- Race safety ----
# Deterministic race runs: seeds, the committed corpus, then the planted
# mutants.
races:
    cargo test -p pollfs-host-tests --test races
    just mutants

# The planted bugs (core/src/mutants.rs) each found by the race or crash
# harness. They exist only under `--cfg pollfs_mutants` (no feature can
# turn them on in a product), built in a target directory of their own so
# the flag does not rebuild the main one; debug build only.
mutants:
    RUSTFLAGS="--cfg pollfs_mutants" CARGO_TARGET_DIR=target/mutants cargo test -p pollfs-host-tests --test mutants

# Long race campaign over many seeds (prints every failing seed).
races-soak n="100000":
    POLLFS_RACE_SURVEY={{n}} cargo test -p pollfs-host-tests --release --test races survey -- --nocapture

# Replay one race failure: a seed, or a fuzz input file.
race-replay seed:
    POLLFS_RACE_SEED={{seed}} cargo test -p pollfs-host-tests --test races replay -- --nocapture
race-replay-file path:
    POLLFS_RACE_FILE={{absolute_path(path)}} cargo test -p pollfs-host-tests --test races replay -- --nocapture

# Fuzz the race harness (nightly + cargo-fuzz), then minimise into the
# committed corpus that `cargo test` replays.
fuzz-races secs="600":
    mkdir -p fuzz/corpus/races
    cd fuzz && cargo +nightly fuzz run races corpus/races ../host-tests/tests/corpus/races -- -max_total_time={{secs}} -timeout=10 -len_control=0 -max_len=1024
fuzz-races-cmin:
    cd fuzz && cargo +nightly fuzz cmin races corpus/races && mkdir -p ../host-tests/tests/corpus/races && cp corpus/races/* ../host-tests/tests/corpus/races/

# Hostile NVMe completions through the real driver (emulated controller).
fuzz-nvme secs="300":
    mkdir -p fuzz/corpus/nvme_completions
    cd fuzz && cargo +nightly fuzz run nvme_completions corpus/nvme_completions ../host-tests/tests/corpus/nvme_completions -- -max_total_time={{secs}} -timeout=10 -len_control=0 -max_len=256
fuzz-nvme-cmin:
    cd fuzz && cargo +nightly fuzz cmin nvme_completions corpus/nvme_completions && mkdir -p ../host-tests/tests/corpus/nvme_completions && cp corpus/nvme_completions/* ../host-tests/tests/corpus/nvme_completions/

# Hostile byte streams into the NVMe/TCP initiator's receive path.
fuzz-tcp secs="300":
    mkdir -p fuzz/corpus/tcp_receive
    cd fuzz && cargo +nightly fuzz run tcp_receive corpus/tcp_receive ../driver/tests/corpus/tcp_receive -- -max_total_time={{secs}} -timeout=10 -max_len=20000
fuzz-tcp-cmin:
    rm -rf fuzz/corpus/tcp_receive.min && mkdir -p fuzz/corpus/tcp_receive.min
    cd fuzz && cargo +nightly fuzz run tcp_receive corpus/tcp_receive.min corpus/tcp_receive ../driver/tests/corpus/tcp_receive -- -merge=1 && cp corpus/tcp_receive.min/* ../driver/tests/corpus/tcp_receive/

# DH-HMAC-CHAP messages from a controller into the host's parsers and
# exchange, and text into the DHHC-1 secret parser; the committed corpus
# is driver/tests/corpus/auth_messages (replayed by `cargo test`).
fuzz-auth secs="300":
    mkdir -p fuzz/corpus/auth_messages
    cd fuzz && cargo +nightly fuzz run auth_messages corpus/auth_messages ../driver/tests/corpus/auth_messages -- -max_total_time={{secs}} -timeout=10 -max_len=4096
fuzz-auth-cmin:
    rm -rf fuzz/corpus/auth_messages.min && mkdir -p fuzz/corpus/auth_messages.min
    cd fuzz && cargo +nightly fuzz run auth_messages corpus/auth_messages.min corpus/auth_messages ../driver/tests/corpus/auth_messages -- -merge=1 && cp corpus/auth_messages.min/* ../driver/tests/corpus/auth_messages/

# Targets: races, nvme_completions, recovery (damaged and crafted images),
# log_record (metadata parsers). New inputs go to fuzz/corpus/TARGET, and
# `just fuzz-cmin TARGET` minimises them into the committed corpus.
# A fuzz campaign on nightly: `just fuzz races 600`, `just fuzz recovery 600`.
fuzz TARGET="races" SECONDS="60":
    mkdir -p fuzz/corpus/{{TARGET}}
    cd fuzz && cargo +nightly fuzz run {{TARGET}} corpus/{{TARGET}} ../host-tests/tests/corpus/{{TARGET}} -- -max_total_time={{SECONDS}} -timeout=10 -len_control=0 -max_len=1024

# The campaign's corpus and the committed one, reduced to a greedy set
# cover of their coverage, become the committed corpus `cargo test` replays.
# Minimise a corpus: `just fuzz-cmin recovery`, `just fuzz-cmin log_record`.
fuzz-cmin TARGET:
    rm -rf fuzz/corpus/{{TARGET}}.min
    mkdir -p fuzz/corpus/{{TARGET}} fuzz/corpus/{{TARGET}}.min host-tests/tests/corpus/{{TARGET}}
    cd fuzz && cargo +nightly fuzz run {{TARGET}} corpus/{{TARGET}}.min corpus/{{TARGET}} ../host-tests/tests/corpus/{{TARGET}} -- -set_cover_merge=1 -use_counters=0 -timeout=10 -max_len=1024
    rm -rf host-tests/tests/corpus/{{TARGET}} && mv fuzz/corpus/{{TARGET}}.min host-tests/tests/corpus/{{TARGET}}

# Replay one `recovery` or `log_record` input (a crash artifact or a corpus file).
recovery-replay path:
    POLLFS_RECOVERY_FILE={{absolute_path(path)}} cargo test -p pollfs-host-tests --test recovery replay -- --nocapture
log-record-replay path:
    POLLFS_LOG_RECORD_FILE={{absolute_path(path)}} cargo test -p pollfs-host-tests --test recovery replay -- --nocapture

# loom models of the primitives (range lock, wait queue, write drain, page
# state word): every interleaving of their atomics and mutexes.
loom:
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p pollfs-core --lib --release loom

# Miri over the engine's and the driver's unit tests (the driver's VFIO
# unsafe code needs a real device; this covers everything else).
miri:
    rustup component add miri rust-src --toolchain nightly
    cargo +nightly miri test -p pollfs-core --lib
    # The VFIO backend's tests (built here through the dev-dependencies'
    # features) map memory with mmap, which Miri does not have.
    MIRIFLAGS=-Zmiri-disable-isolation cargo +nightly miri test -p pollfs-driver --lib --no-default-features --features emu -- --skip random_host_commands --skip pcie::vfio::

# ---- redb on pollfs ----
# redb on pollfs (emulated NVMe) against redb's file backend on tmpfs and on
# ext4 (an image on a loop device: needs root). ARGS go to the example:
# --commit-secs S, --bulk KEYS, --bulk-txns N, --reads N, --redb-cache BYTES,
# --spin (pollfs waits for the device by spinning instead of yielding).
redb-bench *ARGS="":
    bash redb-backend/bench.sh {{ARGS}}

# The redb workload against its model with many more transactions, release build.
redb-soak txns="100000":
    POLLFS_REDB_TXNS={{txns}} cargo test --release -p pollfs-redb --test workload -- --nocapture

# redb's crash states with longer workloads (write transactions each), release build.
redb-crash txns="200":
    POLLFS_REDB_CRASH_TXNS={{txns}} cargo test --release -p pollfs-redb --test crash -- --nocapture
