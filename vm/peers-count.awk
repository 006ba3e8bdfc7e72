# Counts the test namespace's commands per workload window of vm/peers.sh
# and prints the table. Input: the guest's `WINDOW w engine workload syncs`
# lines, then QEMU's trace log (`-msg timestamp=on`: PID@SECONDS:event ...).
#
# Window w lies between marker 2w and 2w + 1: a read at LBA 0x400000 +
# k * 0x800 (512-byte blocks) of the marker controller, which the 1 GiB
# test namespace cannot issue. Inside a window: pci_nvme_write with opname
# NVME_NVM_CMD_WRITE is a write (its count, the bytes), pci_nvme_io_cmd
# with opc 0x0 a flush, any other I/O opcode than 0x0-0x2 "other", and
# pci_nvme_read (not a marker) a read. blk_co_pwritev is the write as
# QEMU's block layer receives it: its flags carry BDRV_REQ_FUA (0x10) when
# the device model passes the command's FUA bit on. Exits non-zero if any
# window lacks a marker, a sync or a write.

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
    print "peers: FAILED: " msg > "/dev/stderr"
    failed = 1
}

BEGIN { cur = -1 }

NR == FNR {
    engine[$2] = $3
    workload[$2] = $4
    syncs[$2] = $5 + 0
    windows = $2 + 1 > windows ? $2 + 1 : windows
    next
}

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
        if (m % 2 == 0) { start[w] = ts; cur = w; seen_start[w] = 1 }
        else { stop[w] = ts; seen_stop[w] = 1; cur = -1 }
        next
    }
    if (cur >= 0) reads[cur]++
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

event == "blk_co_pwritev" {
    pwritev[cur]++
    flags = hex(field("flags"))
    if (int(flags / 16) % 2 == 1) fua[cur]++
    next
}

END {
    if (windows != 12) problem("expected 12 windows, the guest reported " windows)
    for (w = 0; w < windows; w++) {
        what = engine[w] " " workload[w]
        if (!seen_start[w] || !seen_stop[w]) problem(what ": a marker is missing from the trace")
        if (syncs[w] <= 0) problem(what ": no syncs counted")
        if (writes[w] <= 0) problem(what ": no device writes in the trace")
        if (start[w] == "" || stop[w] == "") problem(what ": the trace has no timestamps")
        secs[w] = stop[w] - start[w]
        if (secs[w] <= 0) problem(what ": an empty window")
        rate[w] = secs[w] > 0 ? syncs[w] / secs[w] : 0
        if (engine[w] == "ext4") ext4[workload[w]] = rate[w]
        all_pw += pwritev[w]
        all_fua += fua[w]
    }
    if (failed) exit 1
    print ""
    print "Device commands per sync, counted from QEMU's trace events between each"
    print "workload's markers. W: writes (pci_nvme_write NVME_NVM_CMD_WRITE), F: flushes"
    print "(pci_nvme_io_cmd opc 0x0), KiB: the writes' bytes, R: reads, other: any other I/O"
    print "command (in total). ops/s: syncs over the window, relative to ext4 on the same"
    print "workload in the same boot (window s: marker to marker)."
    print ""
    printf "%-21s %-7s %6s %7s %7s %9s %7s %6s %8s %8s %9s %14s\n", "workload", "engine", "syncs", "W/sync", "F/sync", "KiB/sync", "R/sync", "other", "W total", "F total", "window s", "ops/s vs ext4"
    n = split("overwrite-fdatasync append-fdatasync append-fsync", order, " ")
    for (k = 1; k <= n; k++) {
        for (w = 0; w < windows; w++) {
            if (workload[w] != order[k]) continue
            s = syncs[w]
            printf "%-21s %-7s %6d %7.2f %7.2f %9.1f %7.2f %6d %8d %8d %9.1f %14.2f\n", workload[w], engine[w], s, writes[w] / s, flushes[w] / s, bytes[w] / 1024 / s, reads[w] / s, other[w], writes[w], flushes[w], secs[w], rate[w] / ext4[workload[w]]
        }
    }
    print ""
    printf "FUA: QEMU's trace does not show the command's FUA bit; of the %d writes QEMU's block\n", all_pw
    printf "layer received in these windows (blk_co_pwritev), %d carried BDRV_REQ_FUA.\n", all_fua
}
