# The table of vm/peers.sh: the test namespace's commands per workload
# window, counted by vm/trace-count.awk (awk -f vm/trace-count.awk -f
# vm/peers-count.awk WINDOWS TRACE). Input: the guest's `WINDOW w engine
# workload syncs` lines, then QEMU's trace log. Exits non-zero if any
# window lacks a marker, a sync or a write.

END {
    if (windows != 12) problem("expected 12 windows, the guest reported " windows)
    check_windows()
    for (w = 0; w < windows; w++) {
        engine[w] = win[w, 3]
        workload[w] = win[w, 4]
        syncs[w] = win[w, 5] + 0
        what = engine[w] " " workload[w]
        if (syncs[w] <= 0) problem(what ": no syncs counted")
        if (writes[w] <= 0) problem(what ": no device writes in the trace")
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
