# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_pollfs_global_optspecs
    string join \n h/help V/version
end

function __fish_pollfs_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_pollfs_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_pollfs_using_subcommand
    set -l cmd (__fish_pollfs_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c pollfs -n "__fish_pollfs_needs_command" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_needs_command" -s V -l version -d 'Print version'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "bench" -d 'fio-style jobs on pollfs; with --compare (the default suite) also on pollfs with a file-wide lock, the kernel\'s page cache and memcpy'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "mkfs" -d 'Write an empty pollfs filesystem on a device'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "mount" -d 'Serve a pollfs filesystem to the kernel over FUSE: returns once it is mounted. `pollfs umount MOUNTPOINT` unmounts it and returns once the server has synced and written its checkpoint; a plain umount(2) (or SIGTERM/SIGINT to the server) unmounts too, but returns before that'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "umount" -d 'Unmount a `pollfs mount` and wait until everything is durable (the server has synced and written its checkpoint, and exited)'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "stat" -d 'The figures of a mounted pollfs filesystem: operations and bytes, latency percentiles of reads, writes and fsyncs, cache hits and misses, dirty pages, log fill, checkpoints, write-home, and for the device and each mirror or stripe leg its commands, errors, resets, timeouts and reconnects; a snapshot, or with `-i SECS` per interval like iostat'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "fsck" -d 'Check a pollfs filesystem: superblocks, checkpoint, log, and every metadata invariant; exits non-zero if anything is wrong'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "identify" -d 'Controller and namespace facts (model, version, MDTS, LBA format, capacity, queues) of `emu`, `vfio:<pci-address>` or `nvme-tcp://HOST:PORT/NQN`'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "perf" -d 'spdk_nvme_perf-style load: IOPS, MiB/s and latency percentiles'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "mirror" -d 'A mirror\'s state (`status`), and taking a leg out (`fail`) and back in (`rejoin`, which copies it from the legs in sync)'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "setup" -d 'Bind a controller to vfio-pci and reserve hugepages (`--reset` gives it back to the kernel\'s nvme driver)'
complete -c pollfs -n "__fish_pollfs_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l preset -d 'A named preset instead of a job file: default, reads, writes, quick, syncs (small syncs with their data in the log against pollfs-sync-home and pollfs-in-place-sync), seed-xfs-reads, seed-btrfs-readahead, seed-btrfs-fsync, or seeds (the three seed presets)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l device -d 'Device: `emu` (NVMe controller emulated in memory, driven by the real driver; at most 64 threads, one I/O queue each), `ram` (memory, no driver), `file:PATH` (created if missing and kept after a successful run, grown if smaller than a job needs), `vfio:PCI_ADDR`, `nvme-tcp://HOST:PORT/NQN` (`?hdgst=1&ddgst=1` for digests), or a volume of them: `stripe:CHUNK:(DEV,DEV,...)` (RAID-0) or `mirror:(DEV,DEV,...)` (RAID-1, made anew for each run). The bench formats the device: a file or controller that holds anything (a filesystem, a partition table, swap, any non-zero byte in its first 68 KiB) is refused unless --force is given' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l kernel-dir -d 'Directory for the kernel baseline\'s files; it must exist [default: /dev/shm (tmpfs), or the temporary directory where there is none]. Direct jobs open them with O_DIRECT' -r -F
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l output-format -d 'normal, json or terse, as fio writes them; several joined by commas (`normal,json`) print one after another' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l plot -d 'Draw each job\'s latency percentiles (log axes) and throughput over time into an SVG file' -r -F
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l name -d 'Start a new job with this name; options after it set that job (a job file\'s section name)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l description -d 'Free text describing the job (shown in the JSON output)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l rw -d 'Access pattern: read, write, rw (alias readwrite: sequential mix), randread, randwrite, randrw' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l rwmixread -d 'Percent reads for rw and randrw, 0 to 100' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l rwmixwrite -d 'Percent writes for rw and randrw, 0 to 100 (100 - rwmixread)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l bs -d 'Bytes per I/O, 1 byte to 16 MiB (a multiple of 4 KiB with direct=1)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l size -d 'Bytes per job, split over nrfiles files; with the device and the cache it must fit in memory (and, for file:, on disk), checked before anything is allocated' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l offset -d 'Where in each file the job\'s I/O starts (files are made long enough)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l numjobs -d 'Threads running the job, 1 to the device\'s I/O queues (64 on emu; 1024 on ram and file:), counted over every job that runs at the same time' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l iodepth -d 'I/Os in flight per thread, 1 to 65536' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l runtime -d 'How long to measure: seconds, or with a unit (500ms, 2m); at most 1d with ramp_time' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l ramp_time -d 'Run this long before measuring (seconds, or with a unit)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l number_ios -d 'Stop each thread after this many measured reads and writes (at least iodepth; 0: no limit)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l fsync -d 'sync_all after every N writes (0: never)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l fdatasync -d 'sync_data after every N writes (0: never)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l filename -d 'File name prefix (files are PREFIX.0, PREFIX.1, ...; default: the job\'s name); jobs running at the same time with the same prefix share the files' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l nrfiles -d 'Files per job' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l direct -d '1: bypass the page cache; reads and writes go to the device through the driver (bs and offset multiples of 4 KiB)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l buffered -d 'The opposite of direct (buffered=0 is direct=1)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l ioengine -d 'Only pollfs (the engine\'s own futures at iodepth); any other engine is refused' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l cold -d 'Start with the files out of the cache (1) or cached (0)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l append -d 'Files start empty, so sequential writes append' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l cache -d 'Page-cache size, whole 4 KiB pages, at least 16 KiB, e.g. 256m (default: room for every file); jobs that run at the same time share one cache of their sizes added up' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l stonewall -d 'Wait for the jobs before this one to finish, and start a new reporting group' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l new_group -d 'Start a new reporting group; the job still runs with the jobs before it' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l exec_prerun -d 'Shell command (sh -c) run by each engine just before the job\'s I/O starts, after its files are made and filled; its output goes to stderr, and its failure fails the bench (in a job file, \';\' and \'#\' start a comment)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l exec_postrun -d 'Shell command run by each engine just after the job\'s I/O ends (every thread done), before the engine touches the device again; as exec_prerun' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l time_based -d 'Accepted as 1 only: every job runs for runtime (or number_ios)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l thread -d 'Accepted as 1 only: every job runs on threads' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l compare -d 'Run pollfs-locked, the kernel and (for cached reads) memcpy too, and print ratios. On for the default suite and the seed presets'
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l json -d 'The same as --output-format=json'
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l force -d 'Write over a file or vfio device that holds data or a filesystem'
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -l control -d 'Serve a mirror\'s control socket while the bench runs on it, so `pollfs mirror status|fail|rejoin` administer it from another process'
complete -c pollfs -n "__fish_pollfs_using_subcommand bench" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand mkfs" -l size -d 'Size of a new device file, e.g. `1g` (k/m/g/t suffixes, powers of 1024) [default: 256m]. Only for a file that does not exist yet' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand mkfs" -l force -d 'Write over a device that holds data or another filesystem'
complete -c pollfs -n "__fish_pollfs_using_subcommand mkfs" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -l cache -d 'pollfs\'s page cache, e.g. `256m` (k/m/g suffixes, powers of 1024)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -l threads -d 'Threads reading the kernel\'s requests from /dev/fuse (each has its own device queue). With io_uring, one thread per CPU serves the ring\'s queues instead, and one reads /dev/fuse (forgets and interrupts come only that way)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -l cache-mode -d 'Where file data is cached: `kernel` (the kernel\'s page cache answers cached reads and gathers buffered writes; fsync sends them, then syncs) or `direct` (every read and write is a request to pollfs, and the data is cached once, in pollfs). docs/design/mount.md, "Cache modes", says what each costs' -r -f -a "kernel\t'The kernel\'s page cache answers cached reads and gathers buffered writes (FUSE\'s writeback cache); fsync sends the dirty pages, then one pollfs sync'
direct\t'Every read and write is a request to pollfs (`FOPEN_DIRECT_IO`): one copy of the data, in pollfs\'s cache'"
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -l uring -d 'Requests over io_uring (FUSE_OVER_IO_URING, Linux 6.14 and later, switched on by root with `echo Y > /sys/module/fuse/parameters/enable_uring`): `auto` uses the ring where the kernel offers it and /dev/fuse elsewhere, `on` fails the mount without it, `off` reads /dev/fuse only. The mount says on stderr which one serves it' -r -f -a "auto\t'The ring where the kernel offers it, else `/dev/fuse`'
on\t'The ring, or the mount fails'
off\t'`/dev/fuse` only'"
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -l emu-size -d 'Size of an `emu` or `ram` device' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -s o -d 'Mount options, comma-separated, as mount(8) takes them: `ro`, `rw`, `remount` (change the flags of the pollfs mount on MOUNTPOINT: `ro`, `rw`, `suid`, `dev`, `noexec`, `sync`, `dirsync`), `allow_other` (every user may use the mount; the kernel checks modes, owners and groups, `default_permissions` being always on), `noatime` (the default: access times are not recorded on reads), `nosuid` (the default) or `suid`, `nodev` (the default) or `dev` (device nodes open their devices), `noexec`, `sync`, `dirsync`, `cache=SIZE`, `threads=N`, `cache_mode=kernel|direct`, `uring=auto|on|off`, `log=LEVEL` (what the log on stderr shows: `error`, `warn`, `info`, the default, `debug` or `trace`; over `POLLFS_LOG`, which takes `RUST_LOG`\'s filters); fstab\'s `defaults`, `noauto`, `nofail`, `_netdev` and `x-*` are ignored' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -l wait-device -d 'How long to wait for a `file:` device another pollfs process holds (a mount just unmounted holds it until it has written its checkpoint), in seconds' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -s f -l foreground -d 'Stay in the foreground and report there. Without it, `pollfs mount` returns once the filesystem is mounted, and serves it from a background process that exits when the filesystem is unmounted'
complete -c pollfs -n "__fish_pollfs_using_subcommand mount" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c pollfs -n "__fish_pollfs_using_subcommand umount" -s l -l lazy -d 'Detach now (umount -l): the mount goes away once nothing on it is in use, and this does not wait for the server'
complete -c pollfs -n "__fish_pollfs_using_subcommand umount" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand stat" -s i -l interval -d 'Print the growth of every counter in each interval of SECS seconds (per second, like `iostat -x SECS`), until interrupted or COUNT intervals' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand stat" -s c -l count -d 'With --interval: stop after this many intervals' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand stat" -l prometheus -d 'Serve the figures in Prometheus\'s text format at http://ADDR/metrics (e.g. `127.0.0.1:9437`; port 0 picks one and says which on stderr) until interrupted, instead of printing them. Off unless asked for' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand stat" -l json -d 'One JSON object a line: the snapshot, or each interval'
complete -c pollfs -n "__fish_pollfs_using_subcommand stat" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand fsck" -l repair -d 'Repair what can be repaired: a log with a damaged write in its middle (what precedes the damage is kept), extents outside the data area or past EOF, blocks owned twice, a damaged superblock copy. Without it, fsck only checks and changes nothing'
complete -c pollfs -n "__fish_pollfs_using_subcommand fsck" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand identify" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s r -l transport -d 'The controller as spdk_nvme_perf names it: \'trtype:PCIe traddr:0000:01:00.0\' or \'trtype:TCP adrfam:IPv4 traddr:HOST trsvcid:4420 subnqn:NQN\'' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s q -l io-depth -d 'Commands kept in flight per queue pair' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s o -l io-size -d 'Bytes per command, a multiple of 4 KiB (4k, 64k, 1m)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s w -l io-pattern -d 'Access pattern' -r -f -a "read\t'Sequential reads'
write\t'Sequential writes'
randread\t'Uniformly random reads'
randwrite\t'Uniformly random writes'
rw\t'Sequential reads and writes, -M percent reads'
randrw\t'Random reads and writes, -M percent reads'"
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s M -l rwmixread -d 'Percent reads, 0 to 100: required for rw and randrw, refused for the others' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s t -l time -d 'How long to measure (seconds, or with a unit)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s a -l warmup-time -d 'Run this long before measuring' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s d -l number-ios -d 'Stop each worker after this many commands (at least -q; not with -a)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s c -l core-mask -d 'Workers: one thread per set bit, pinned to that CPU (hex, 0x3 is CPUs 0 and 1). Without it, one worker that is not pinned' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s P -l num-qpairs -d 'Queue pairs per worker, polled in turn by its thread' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s L -l enable-sw-latency-tracking -d 'Latency tracking is always on; -LL also prints the histogram'
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -l json -d 'Print the results as JSON'
complete -c pollfs -n "__fish_pollfs_using_subcommand perf" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and not __fish_seen_subcommand_from status rejoin fail replace help" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and not __fish_seen_subcommand_from status rejoin fail replace help" -f -a "status" -d 'Each leg\'s state: from the process that has the mirror open, or as the mirror\'s headers record it'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and not __fish_seen_subcommand_from status rejoin fail replace help" -f -a "rejoin" -d 'Take a failed or stale leg back: it is copied from the legs in sync and then serves reads again. On a mirror that is not open the command waits for the copy; on one that is, it returns at once (`status` shows the copy\'s progress) unless `--wait`, which also waits for a copy an earlier `rejoin` started and, on a live mirror, returns at once when the leg is in sync already'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and not __fish_seen_subcommand_from status rejoin fail replace help" -f -a "fail" -d 'Drop a leg (to repair or replace it). The last leg in sync cannot be dropped'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and not __fish_seen_subcommand_from status rejoin fail replace help" -f -a "replace" -d 'Put a new device in place of a failed (or stale) leg, and copy the mirror onto it. The mirror must not be open; the new device must hold nothing (unless `--force`), a missing file is made at the size of the first `file:` leg'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and not __fish_seen_subcommand_from status rejoin fail replace help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from rejoin" -l wait -d 'Wait for the copy to finish'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from rejoin" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from fail" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from replace" -l force -d 'Overwrite what the new device holds'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from replace" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from help" -f -a "status" -d 'Each leg\'s state: from the process that has the mirror open, or as the mirror\'s headers record it'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from help" -f -a "rejoin" -d 'Take a failed or stale leg back: it is copied from the legs in sync and then serves reads again. On a mirror that is not open the command waits for the copy; on one that is, it returns at once (`status` shows the copy\'s progress) unless `--wait`, which also waits for a copy an earlier `rejoin` started and, on a live mirror, returns at once when the leg is in sync already'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from help" -f -a "fail" -d 'Drop a leg (to repair or replace it). The last leg in sync cannot be dropped'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from help" -f -a "replace" -d 'Put a new device in place of a failed (or stale) leg, and copy the mirror onto it. The mirror must not be open; the new device must hold nothing (unless `--force`), a missing file is made at the size of the first `file:` leg'
complete -c pollfs -n "__fish_pollfs_using_subcommand mirror; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pollfs -n "__fish_pollfs_using_subcommand setup" -l hugepages -d '2 MiB hugepages to have reserved (the pool only grows)' -r
complete -c pollfs -n "__fish_pollfs_using_subcommand setup" -l root -d 'Root of the sysfs/procfs tree (for tests)' -r -F
complete -c pollfs -n "__fish_pollfs_using_subcommand setup" -l reset -d 'Give the controller back to the kernel\'s nvme driver'
complete -c pollfs -n "__fish_pollfs_using_subcommand setup" -s h -l help -d 'Print help'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "bench" -d 'fio-style jobs on pollfs; with --compare (the default suite) also on pollfs with a file-wide lock, the kernel\'s page cache and memcpy'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "mkfs" -d 'Write an empty pollfs filesystem on a device'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "mount" -d 'Serve a pollfs filesystem to the kernel over FUSE: returns once it is mounted. `pollfs umount MOUNTPOINT` unmounts it and returns once the server has synced and written its checkpoint; a plain umount(2) (or SIGTERM/SIGINT to the server) unmounts too, but returns before that'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "umount" -d 'Unmount a `pollfs mount` and wait until everything is durable (the server has synced and written its checkpoint, and exited)'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "stat" -d 'The figures of a mounted pollfs filesystem: operations and bytes, latency percentiles of reads, writes and fsyncs, cache hits and misses, dirty pages, log fill, checkpoints, write-home, and for the device and each mirror or stripe leg its commands, errors, resets, timeouts and reconnects; a snapshot, or with `-i SECS` per interval like iostat'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "fsck" -d 'Check a pollfs filesystem: superblocks, checkpoint, log, and every metadata invariant; exits non-zero if anything is wrong'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "identify" -d 'Controller and namespace facts (model, version, MDTS, LBA format, capacity, queues) of `emu`, `vfio:<pci-address>` or `nvme-tcp://HOST:PORT/NQN`'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "perf" -d 'spdk_nvme_perf-style load: IOPS, MiB/s and latency percentiles'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "mirror" -d 'A mirror\'s state (`status`), and taking a leg out (`fail`) and back in (`rejoin`, which copies it from the legs in sync)'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "setup" -d 'Bind a controller to vfio-pci and reserve hugepages (`--reset` gives it back to the kernel\'s nvme driver)'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and not __fish_seen_subcommand_from bench mkfs mount umount stat fsck identify perf mirror setup help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and __fish_seen_subcommand_from mirror" -f -a "status" -d 'Each leg\'s state: from the process that has the mirror open, or as the mirror\'s headers record it'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and __fish_seen_subcommand_from mirror" -f -a "rejoin" -d 'Take a failed or stale leg back: it is copied from the legs in sync and then serves reads again. On a mirror that is not open the command waits for the copy; on one that is, it returns at once (`status` shows the copy\'s progress) unless `--wait`, which also waits for a copy an earlier `rejoin` started and, on a live mirror, returns at once when the leg is in sync already'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and __fish_seen_subcommand_from mirror" -f -a "fail" -d 'Drop a leg (to repair or replace it). The last leg in sync cannot be dropped'
complete -c pollfs -n "__fish_pollfs_using_subcommand help; and __fish_seen_subcommand_from mirror" -f -a "replace" -d 'Put a new device in place of a failed (or stale) leg, and copy the mirror onto it. The mirror must not be open; the new device must hold nothing (unless `--force`), a missing file is made at the size of the first `file:` leg'
