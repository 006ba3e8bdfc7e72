# pollfs: every check a developer or CI runs is a recipe here.

# List the recipes.
default:
    @just --list

# Format check and lints, as CI runs them.
pre:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --all-features -- -D warnings

# The test suite (the README's second command runs the same tests).
test:
    cargo test --workspace

# The engine and the driver's core build with no operating system at all.
check-no-std:
    cargo build -p pollfs-core --target x86_64-unknown-none
    cargo build -p pollfs-driver --no-default-features --target x86_64-unknown-none

# `pollfs bench` on a device: emu (default), ram, file:PATH.
bench DEVICE="emu" *ARGS="":
    cargo run --release -p pollfs-cli -- bench --device {{DEVICE}} {{ARGS}}

# Longer model and thread runs (minutes).
soak:
    cargo test --release -p pollfs-host-tests --features soak

# Many more crash states: 200 generated workloads instead of 12.
crash-soak:
    cargo test --release -p pollfs-host-tests --features soak --test crash -- --nocapture

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

# The driver's instructions per 4 KiB I/O (submit + reap) under callgrind.
io-cost:
    bash vm/io-cost.sh

# `pollfs bench` inside the VM, through VFIO on QEMU's NVMe controller.
vm-bench PRESET="quick":
    POLLFS_VM_PRESET={{PRESET}} bash vm/bench-suite.sh
