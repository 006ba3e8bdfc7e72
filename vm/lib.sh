# Shared pieces of the NVMe test VM, sourced by every vm/*.sh that boots it
# (the guest's side is in guest-common.sh and guest-writer.sh).
#
# The guest is Debian 12's 6.1 kernel booted straight into a busybox
# initramfs under software emulation (TCG), with QEMU's NVMe controller
# behind an emulated Intel IOMMU, so the driver runs through VFIO exactly
# as it would on a host. Everything downloaded or generated lives under
# target/vm/ (never committed) and is reused by the next run.

set -euo pipefail
set -E
trap 'echo "vm: FAILED at ${BASH_SOURCE[0]}:$LINENO: $BASH_COMMAND" >&2' ERR

vm_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$vm_dir/.." && pwd)"
cache="${POLLFS_VM_CACHE:-$repo/target/vm}"
# Static binaries are built with --target, so they land in their own
# folder and switching RUSTFLAGS never throws away the normal build.
static_target="${CARGO_TARGET_DIR:-$repo/target}"
mkdir -p "$cache"

# Module parameters by module name, for make_initramfs (busybox insmod
# does not read them from the kernel command line).
declare -A module_args=()

log() { echo "vm: $*" >&2; }
die() { echo "vm: FAILED: $*" >&2; exit 1; }

# Installs the host packages the VM needs, only when something is missing.
ensure_packages() {
    local missing=()
    command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
    [ -f /usr/share/qemu/qboot.rom ] || missing+=(qemu-system-data)
    [ -x /bin/busybox ] || missing+=(busybox-static)
    command -v modinfo >/dev/null || missing+=(kmod)
    command -v cpio >/dev/null || missing+=(cpio)
    command -v xz >/dev/null || missing+=(xz-utils)
    command -v zstd >/dev/null || missing+=(zstd)
    # OpenSSL's static libraries and pkg-config, for build_static.
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    [ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
    # Each argument is a command, or COMMAND:PACKAGE when they differ.
    for p in "$@"; do
        command -v "${p%%:*}" >/dev/null || missing+=("${p#*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Debian's kernel package, unpacked (not installed) under the cache, and an
# uncompressed vmlinux cut out of its bzImage: QEMU boots that ELF through
# its PVH note with qboot in a couple of seconds instead of ~12 s with
# SeaBIOS and the compressed image.
#
# $vm_kernel picks the kernel: "bookworm" (the default, Debian 12's
# linux-image-amd64, 6.1) or "trixie" (Debian 13's 6.12, built with
# NVME_TARGET_AUTH, NVMe/TCP TLS and the RFC 7919 groups, which 6.1 is
# not), fetched with a temporary sources list that leaves the system's
# apt lists alone.
trixie_kernel=linux-image-6.12.117+deb13-amd64

# Debian 13's archive through a temporary sources list in
# $cache/trixie-apt, updated here: apt-get and apt-cache with
# "${trixie_opts[@]}" use it and leave the system's lists and caches
# alone.
trixie_apt_begin() {
    trixie_apt="$cache/trixie-apt"
    rm -rf "$trixie_apt" && mkdir -p "$trixie_apt/lists/partial"
    echo 'deb [trusted=yes] http://deb.debian.org/debian trixie main' > "$trixie_apt/sources.list"
    trixie_opts=(-o "Dir::Etc::SourceList=$trixie_apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$trixie_apt/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
    apt-get "${trixie_opts[@]}" update >/dev/null 2>&1 || die "apt-get update (trixie)"
}

# Debian 13's packages $@ unpacked (not installed) into $trixie_root
# (under the cache, reused while the list is the same), with every
# library package (lib*, zlib*) among their dependencies, so their programs run in
# the guest with Debian 13's own libraries (trixie_program).
ensure_trixie_packages() {
    trixie_root="$cache/trixie-root"
    local stamp="$trixie_root/.done-$(echo "$*" | tr ' ' '+')" deb
    [ -f "$stamp" ] && return 0
    rm -rf "$trixie_root" && mkdir -p "$trixie_root"
    log "downloading $* and their libraries (trixie)"
    trixie_apt_begin
    local all
    all="$(apt-cache "${trixie_opts[@]}" depends --recurse --no-recommends --no-suggests \
        --no-conflicts --no-breaks --no-replaces --no-enhances "$@" |
        awk '/^[a-z0-9]/ && ($0 ~ /^(lib|zlib)/ || index(" '"$*"' ", " " $0 " "))' | sort -u)"
    [ -n "$all" ] || die "no trixie packages for $*"
    # shellcheck disable=SC2086
    (cd "$trixie_apt" && apt-get "${trixie_opts[@]}" download $all >/dev/null 2>&1) ||
        die "apt-get download (trixie): $all"
    for deb in "$trixie_apt"/*.deb; do dpkg -x "$deb" "$trixie_root"; done
    rm -rf "$trixie_apt"
    touch "$stamp"
}

# Prints "src:dest" pairs for $extra: the program $1 (its path in the
# guest, e.g. usr/sbin/tlshd) from $trixie_root, every library it needs
# (its ELF NEEDED entries, recursively, found in $trixie_root) and
# Debian 13's loader. A library no fetched package holds fails the run.
trixie_program() {
    local todo=("$1") seen=" " f so lib dir
    echo "$trixie_root/$1:$1"
    while [ ${#todo[@]} -gt 0 ]; do
        f="${todo[0]}"
        todo=("${todo[@]:1}")
        for so in $(readelf -d "$trixie_root/$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            case "$seen" in *" $so "*) continue ;; esac
            seen="$seen$so "
            lib=""
            for dir in usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu; do
                if [ -e "$trixie_root/$dir/$so" ]; then lib="$dir/$so" && break; fi
            done
            [ -n "$lib" ] || die "$so, needed by $f, is in no trixie package fetched"
            echo "$trixie_root/$lib:$lib"
            todo+=("$lib")
        done
    done
    echo "$trixie_root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2:lib64/ld-linux-x86-64.so.2"
}

ensure_kernel() {
    local kdir="$cache/kernel" pkg
    [ "${vm_kernel:-bookworm}" = trixie ] && kdir="$cache/kernel-trixie"
    if [ ! -f "$kdir/.done" ]; then
        rm -rf "$kdir"
        if [ "${vm_kernel:-bookworm}" = trixie ]; then
            pkg="$trixie_kernel"
            log "downloading $pkg (trixie)"
            trixie_apt_begin
            (cd "$trixie_apt" && apt-get "${trixie_opts[@]}" download "$pkg" >/dev/null 2>&1) ||
                die "apt-get download $pkg"
            dpkg -x "$trixie_apt/$pkg"_*.deb "$kdir"
            rm -rf "$trixie_apt"
        else
            rm -f "$cache"/linux-image-*.deb
            pkg="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2}' | head -n1 || true)"
            [ -n "$pkg" ] || die "no linux-image dependency of linux-image-amd64 (apt-get update?)"
            log "downloading $pkg"
            (cd "$cache" && apt-get download "$pkg" >/dev/null 2>&1) || die "apt-get download $pkg"
            dpkg -x "$cache/$pkg"_*.deb "$kdir"
        fi
        touch "$kdir/.done"
    fi
    # trixie keeps its modules under /usr/lib.
    local mroot="$kdir/lib/modules"
    [ -d "$mroot" ] || mroot="$kdir/usr/lib/modules"
    kver="$(ls "$mroot" | head -n1)"
    mods="$mroot/$kver"
    vmlinux="$cache/vmlinux-$kver"
    if [ ! -f "$vmlinux" ]; then
        local bz="$kdir/boot/vmlinuz-$kver" off
        # The payload is the first XZ (bookworm) or zstd (trixie) stream
        # inside the bzImage.
        off="$( (LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bz" || true) | head -n1 | cut -d: -f1)"
        if [ -n "$off" ]; then
            tail -c +"$((off + 1))" "$bz" | xz -dc --single-stream > "$vmlinux.tmp" 2>/dev/null || true
        else
            off="$( (LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$bz" || true) | head -n1 | cut -d: -f1)"
            [ -n "$off" ] || die "no XZ or zstd payload in $bz"
            command -v zstd >/dev/null || die "zstd is needed to unpack $bz"
            tail -c +"$((off + 1))" "$bz" | zstd -dc 2>/dev/null > "$vmlinux.tmp" || true
        fi
        [ "$(head -c 4 "$vmlinux.tmp" | od -An -c | tr -d ' ')" = "177ELF" ] || die "could not extract vmlinux"
        mv "$vmlinux.tmp" "$vmlinux"
    fi
}

# The module file called `name` (dashes and underscores are the same to
# the kernel), or nothing.
find_module() {
    local name="$1" alt="${1//_/-}" alt2="${1//-/_}"
    find "$mods/kernel" \( -name "$name.ko" -o -name "$name.ko.xz" -o -name "$alt.ko" \
        -o -name "$alt.ko.xz" -o -name "$alt2.ko" -o -name "$alt2.ko.xz" \) -print | sort | head -n1 || true
}

# Prints the module files `name` needs, dependencies first, each once.
# Soft dependencies ("pre:") are included when this kernel has them as
# modules: busybox insmod ignores them.
module_closure() {
    local name="$1" f dep soft
    f="$(find_module "$name")"
    [ -n "$f" ] || die "module $name not found in $mods"
    case " $seen_modules " in *" $f "*) return 0 ;; esac
    for dep in $(modinfo -F depends "$f" | tr ',' ' '); do
        module_closure "$dep"
    done
    for soft in $(modinfo -F softdep "$f" | sed -n 's/.*pre: *//p'); do
        [ -n "$(find_module "$soft")" ] && module_closure "$soft"
    done
    case " $seen_modules " in *" $f "*) return 0 ;; esac
    seen_modules="$seen_modules $f"
    echo "$f"
}

# Builds an initramfs at $1 from: busybox, the modules named in $modules
# (with their dependencies, loaded in order by /load-modules with
# ${module_args[name]}), the files
# given as "src:dest" pairs in $extra, and the init script on stdin, with
# the host's values in $init_vars ("name=value" words) set right after its
# first line (so the script itself can be a quoted here-document).
make_initramfs() {
    local out="$1" root="$cache/initramfs" m f n=0 pair
    rm -rf "$root"
    mkdir -p "$root"/{bin,dev,proc,sys,tmp,modules}
    cp /bin/busybox "$root/bin/busybox"
    local order=() list="$cache/modules.list"
    # One subshell for all, so each module is listed once.
    (
        seen_modules=""
        for m in $modules; do module_closure "$m"; done
    ) > "$list" || die "could not resolve modules: $modules"
    while read -r f; do [ -n "$f" ] && order+=("$f"); done < "$list"
    : > "$root/load-modules"
    for f in "${order[@]}"; do
        n=$((n + 1))
        local dst
        dst="$(printf '%02d-%s' "$n" "$(basename "${f%.xz}")")"
        case "$f" in *.xz) xz -dc "$f" > "$root/modules/$dst" ;; *) cp "$f" "$root/modules/$dst" ;; esac
        local base="${dst#*-}"
        base="${base%.ko}"
        echo "insmod /modules/$dst ${module_args[$base]:-} || echo 'insmod $dst failed'" >> "$root/load-modules"
    done
    for pair in ${extra:-}; do
        mkdir -p "$root/$(dirname "${pair#*:}")"
        cp -L "${pair%%:*}" "$root/${pair#*:}"
    done
    {
        IFS= read -r line
        echo "$line"
        for pair in ${init_vars:-}; do echo "$pair"; done
        cat
    } > "$root/init"
    chmod +x "$root/init"
    # ${compress:-gzip -1}: "cat" for big images, which TCG is slow to gunzip.
    (cd "$root" && find . | cpio -o -H newc 2>/dev/null | ${compress:-gzip -1}) > "$out"
}

# Prints "src:dest" pairs for a dynamically linked program and every
# shared library it loads (and the loader), for $extra.
with_libraries() {
    local prog="$1" lib
    echo "$prog:${prog#/}"
    for lib in $(ldd "$prog" | awk '/=> \//{print $3} /^\t\//{print $1}'); do
        echo "$lib:${lib#/}"
    done
}

# Builds the binaries the guest runs, statically linked (a busybox
# initramfs has no libc) and for the baseline x86-64 CPU (TCG's CPU has
# no AVX-512, so target-cpu=native would trap).
build_static() {
    log "building static binaries"
    # Every VM script builds the same packages with the same features (TLS
    # on NVMe/TCP too, which the TLS test needs) and asks for its own
    # examples and binaries in "$@": one set of artifacts serves them all,
    # where a different package or feature set would rebuild the driver
    # and everything above it. OpenSSL comes from its static libraries: a
    # static binary cannot load libssl.so in the busybox guest. Line
    # tables only: a panic in the guest still names its line, and the
    # build is quicker than with the release profile's full debuginfo.
    OPENSSL_STATIC=1 RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR="$static_target" \
        CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
        cargo build --release -q --manifest-path "$repo/Cargo.toml" \
        --target x86_64-unknown-linux-gnu \
        -p pollfs-driver -p pollfs-device -p pollfs-cli --features pollfs-cli/tls "$@"
    bin_dir="$static_target/x86_64-unknown-linux-gnu/release"
}

# More QEMU arguments for boot() (another controller, trace events).
qemu_extra=()
# Properties of the namespace for boot(), with a leading comma: when set,
# the namespace is a device of its own (`-device nvme-ns`, which takes the
# format's metadata and protection information: ms=, mset=, pi=, pil=)
# instead of the controller's drive.
nvme_ns=""

# Boots the VM. $1: initramfs, $2: backing image, $3: console log, $4:
# extra -device nvme properties, $5: extra kernel command line; also
# ${qemu_extra[@]} and $nvme_ns. Fails on timeout; the guest's own
# verdict is read from the log by the caller. Says how long the VM ran.
boot() {
    local initrd="$1" img="$2" out="$3" props="${4:-}" cmdline="${5:-}" t0=$SECONDS
    local nvme=(-device "nvme,serial=deadbeef,drive=nvm$props")
    if [ -n "$nvme_ns" ]; then
        nvme=(-device "nvme,serial=deadbeef,id=nvme0$props"
            -device "nvme-ns,drive=nvm,bus=nvme0,nsid=1$nvme_ns")
    fi
    timeout "${POLLFS_VM_TIMEOUT:-600}" qemu-system-x86_64 -nographic -no-reboot \
        -m 1G -smp 2 -nic none -bios /usr/share/qemu/qboot.rom \
        -kernel "$vmlinux" -initrd "$initrd" \
        -drive "file=$img,if=none,id=nvm,format=raw" \
        "${nvme[@]}" \
        -accel tcg -cpu max -machine q35,kernel-irqchip=split \
        -device intel-iommu,intremap=on,caching-mode=on \
        "${qemu_extra[@]}" \
        -append "console=ttyS0 panic=-1 quiet intel_iommu=on iommu=pt $cmdline" \
        < /dev/null > "$out" 2>&1 || {
        local rc=$?
        tail -n 30 "$out" >&2
        [ $rc -eq 124 ] && die "VM timed out (log: $out)"
        die "qemu exited with status $rc (log: $out)"
    }
    log "the VM ran for $((SECONDS - t0)) s"
}

# Shows the guest's own lines of the console log $1 (not the kernel's),
# indented, on stderr.
show_console() {
    grep -v '^\[' "$1" | grep -v '^$' | sed 's/^/    /' >&2 || true
}

# After boot(): shows the guest's lines of the console log $1 and fails
# unless the guest printed its verdict $2 and `VM-RESULT rc=0`; $3 names
# the test.
verdict() {
    show_console "$1"
    grep -q "$2" "$1" || die "$3 failed (console: $1)"
    grep -q "VM-RESULT rc=0" "$1" || die "$3 failed (console: $1)"
}

# After boot() of a bench: shows the guest's lines of the console log $1
# and fails unless the guest printed $2, its last line.
finished() {
    show_console "$1"
    grep -q "$2" "$1" || die "the guest did not finish (console: $1)"
}

# The IOPS table of a bench's `RESULT NAME QD IOPS` lines in the console
# log $1, titled $2: each engine in $3 (pollfs first) at QD1 and QD32,
# pollfs run once and each other engine twice (before and after it), and
# pollfs's ratio to each other engine. Fails when a run is missing.
iops_table() {
    local out="$1" title="$2" names="$3" name qd want
    for name in $names; do
        for qd in 1 32; do
            want=2
            [ "$name" = pollfs ] && want=1
            [ "$(grep -Ec "^RESULT $name $qd [0-9]" "$out")" -eq $want ] || die "missing results for $name at QD$qd"
        done
    done
    awk -v title="$title" -v engines="$names" '/^RESULT/ {k = $2 " " $3; sum[k] += $4; n[k]++; runs[k] = runs[k] " " $4}
END {
    for (k in sum) iops[k] = sum[k] / n[k]
    printf "%-22s %12s %12s   %s\n", title, "QD1 IOPS", "QD32 IOPS", "(each run, QD1 then QD32)"
    m = split(engines, names, " ")
    for (i = 1; i <= m; i++)
        printf "%-22s %12d %12d   %s /%s\n", names[i], iops[names[i] " 1"], iops[names[i] " 32"], runs[names[i] " 1"], runs[names[i] " 32"]
    for (i = 2; i <= m; i++)
        printf "pollfs/%-15s %11.2fx %11.2fx\n", names[i], iops["pollfs 1"] / iops[names[i] " 1"], iops["pollfs 32"] / iops[names[i] " 32"]
}' "$out"
}
