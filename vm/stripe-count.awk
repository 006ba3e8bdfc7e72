# The table of vm/stripe-bench.sh, on top of vm/trace-count.awk (awk -f
# vm/trace-count.awk -f vm/stripe-count.awk WINDOWS TRACE). Input: the
# guest's `LEGID k name` lines and `WINDOW w kind layout job MiB/s round`
# lines (kind vfio or tcp, layout one or stripe), then QEMU's trace log.
# Exits non-zero if a window lacks a marker, a figure or device commands.

# "394.0", or "1.2k" as the bench writes large figures.
function number(s,    m) {
    m = 1
    if (s ~ /k$/) { m = 1000; sub(/k$/, "", s) }
    return s * m
}

END {
    if (windows == 0 || windows % 16 != 0) problem("expected 16 windows a round, the guest reported " windows)
    check_windows()
    legs = ""
    for (k = 0; k in leg_name; k++) legs = legs " " leg_name[k]
    n_legs = split(legs " ?", leg_list, " ")
    for (w = 0; w < windows; w++) {
        what = win[w, 3] " " win[w, 4] " " win[w, 5]
        mibs[w] = number(win[w, 6])
        if (mibs[w] <= 0) problem(what ": no MiB/s from the bench")
        if (reads[w] + writes[w] <= 0) problem(what ": no device reads or writes in the trace")
        k = win[w, 3] SUBSEP win[w, 4] SUBSEP win[w, 5]
        sum[k] += mibs[w]
        n[k]++
        round_mibs[k, win[w, 7] + 0] = mibs[w]
        rounds = win[w, 7] + 0 > rounds ? win[w, 7] + 0 : rounds
    }
    if (failed) exit 1
    print ""
    print "pollfs bench, direct I/O at QD 32 (128 KiB sequential, 4 KiB random), one device"
    print "against a stripe of two (64 KiB chunks) of the same kind, one boot. MiB/s: the"
    print "bench's. R, W: device commands (QEMU's pci_nvme_read, pci_nvme_write NVME_NVM_CMD_WRITE)"
    print "over the window, all legs. Per leg: requests each leg's drive received (QEMU's"
    print "blk_co_preadv/pwritev) and their MiB. window s: marker to marker."
    print ""
    printf "%-5s %5s %-7s %-10s %9s %8s %8s   %s\n", "kind", "round", "layout", "job", "MiB/s", "R", "W", "per leg: requests (MiB)       window s"
    for (w = 0; w < windows; w++) {
        per = ""
        for (i = 1; i <= n_legs; i++) {
            l = leg_list[i]
            cnt = leg_reads[w, l] + leg_writes[w, l]
            if (cnt > 0) per = per sprintf("%s %d (%.0f)  ", l, cnt, leg_bytes[w, l] / 1048576)
        }
        printf "%-5s %5d %-7s %-10s %9.1f %8d %8d   %-30s %6.1f\n", win[w, 3], win[w, 7], win[w, 4], win[w, 5], mibs[w], reads[w], writes[w], per, secs[w]
    }
    print ""
    print "stripe / one: the mean MiB/s of the stripe over that of one device (each round's"
    print "ratio after it)."
    printf "%-5s %-10s %22s   %s\n", "kind", "job", "stripe / one (MiB/s)", "per round"
    n_jobs = split("seqwrite seqread randwrite randread", jobs, " ")
    for (kk = 1; kk <= 2; kk++) {
        kind = kk == 1 ? "vfio" : "tcp"
        for (j = 1; j <= n_jobs; j++) {
            one = kind SUBSEP "one" SUBSEP jobs[j]
            two = kind SUBSEP "stripe" SUBSEP jobs[j]
            per = ""
            for (r = 1; r <= rounds; r++)
                per = per sprintf(" %.2f", round_mibs[two, r] / round_mibs[one, r])
            printf "%-5s %-10s %21.2fx  %s\n", kind, jobs[j], (sum[two] / n[two]) / (sum[one] / n[one]), per
        }
    }
}
