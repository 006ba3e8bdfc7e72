# The device-command counter of the VM benches (vm/peers.sh,
# vm/stripe-bench.sh): counts QEMU's NVMe trace events between marker
# reads, per workload window and per leg. A script's own table goes in a
# second file: awk -f vm/trace-count.awk -f TABLE.awk GUEST-LINES TRACE.
#
# First input: the guest's lines. `WINDOW w ...` names window w (its
# fields are kept as win[w, i], i >= 3; `windows` is the highest w + 1);
# `LEGID k name`: the drive whose block backend received a read at byte
# 960 MiB + k MiB (a read the guest made through the kernel's nvme driver
# before the first marker) is leg `name`.
# Second input: QEMU's trace log (`-msg timestamp=on`: PID@SECONDS:event).
#
# Window w lies between marker 2w and 2w + 1: a read at LBA 0x400000 +
# k * 0x800 (512-byte blocks) of the marker controller, which the 1 GiB
# test namespaces cannot issue; start[w] and stop[w] are their times.
# Inside a window: pci_nvme_write with opname NVME_NVM_CMD_WRITE is a
# write (writes[w], its bytes in bytes[w]), pci_nvme_io_cmd with opc 0x0 a
# flush (flushes[w]), any other I/O opcode than 0x0-0x2 other[w], and
# pci_nvme_read (not a marker) a read (reads[w]): these count every
# controller but the marker's together. blk_co_pwritev is a write as
# QEMU's block layer receives it (pwritev[w]; fua[w] when its flags carry
# BDRV_REQ_FUA, 0x10, which the device model passes on from the command's
# FUA bit). Per leg, from the block layer (QEMU's NVMe trace does not say
# which controller): leg_reads[w, name], leg_writes[w, name] and
# leg_bytes[w, name] from blk_co_preadv and blk_co_pwritev (traced only
# where a script asks for per-leg counts).

function hex(s,    n, i, c) {
    n = 0
    s = tolower(s)
    sub(/^0x/, "", s)
    for (i = 1; i <= length(s); i++) {
        c = index("0123456789abcdef", substr(s, i, 1))
        if (c == 0) return -1
        n = n * 16 + c - 1
    }
    return n
}

# The value after the word `key` in the current line.
function field(key,    i) {
    for (i = 2; i < NF; i++) if ($i == key) return $(i + 1)
    return ""
}

function problem(msg) {
    print "vm: FAILED: " msg > "/dev/stderr"
    failed = 1
}

BEGIN { cur = -1; marked = 0 }

NR == FNR && $1 == "WINDOW" {
    for (i = 3; i <= NF; i++) win[$2, i] = $i
    windows = $2 + 1 > windows ? $2 + 1 : windows
    next
}

NR == FNR && $1 == "LEGID" {
    leg_name[$2 + 0] = $3
    next
}

NR == FNR { next }

{
    split($1, head, ":")
    if (head[2] == "") { event = head[1]; ts = "" } else { event = head[2]; ts = head[1] }
    sub(/^[0-9]+@/, "", ts)
}

event == "pci_nvme_read" {
    lba = hex(field("lba"))
    if (lba >= 4194304 && lba < 4194304 + 1024 * 2048 && (lba - 4194304) % 2048 == 0) {
        m = (lba - 4194304) / 2048
        w = int(m / 2)
        marked = 1
        if (m % 2 == 0) { start[w] = ts; cur = w; seen_start[w] = 1 }
        else { stop[w] = ts; seen_stop[w] = 1; cur = -1 }
        next
    }
    if (cur >= 0) reads[cur]++
    next
}

# Before the first marker: the guest's reads that name the legs.
event == "blk_co_preadv" && !marked {
    k = (field("offset") - 960 * 2^20) / 2^20
    if (k >= 0 && k == int(k) && (k in leg_name)) leg_of[field("blk")] = leg_name[k]
    next
}

cur < 0 { next }

event == "pci_nvme_write" {
    # Write Zeroes traces here too; its io_cmd counts it as other.
    if (field("opname") == "'NVME_NVM_CMD_WRITE'") {
        writes[cur]++
        bytes[cur] += field("count")
    }
    next
}

event == "pci_nvme_io_cmd" {
    opc = hex(field("opc"))
    if (opc == 0) flushes[cur]++
    else if (opc > 2) other[cur]++
    next
}

# The marker's own read (at 2 GiB and up) is no leg's.
event == "blk_co_preadv" && field("offset") + 0 < 2^31 {
    leg = field("blk") in leg_of ? leg_of[field("blk")] : "?"
    leg_reads[cur, leg]++
    leg_bytes[cur, leg] += field("bytes")
    next
}

event == "blk_co_preadv" { next }

event == "blk_co_pwritev" {
    pwritev[cur]++
    flags = hex(field("flags"))
    if (int(flags / 16) % 2 == 1) fua[cur]++
    leg = field("blk") in leg_of ? leg_of[field("blk")] : "?"
    leg_writes[cur, leg]++
    leg_bytes[cur, leg] += field("bytes")
    next
}

# Checks every window has both markers and a positive length (secs[w]).
function check_windows(    w) {
    for (w = 0; w < windows; w++) {
        if (!seen_start[w] || !seen_stop[w]) problem("window " w ": a marker is missing from the trace")
        if (start[w] == "" || stop[w] == "") problem("window " w ": the trace has no timestamps")
        secs[w] = stop[w] - start[w]
        if (secs[w] <= 0) problem("window " w ": an empty window")
    }
}
