/* What libpollfs costs per cached 4 KiB read, without fio: random reads of
 * a file of PAGES pages (all cached) through the queue at DEPTH, then
 * through pollfs_pread, on `emu`.
 *   bench_queue [DEPTH [PAGES [READS]]]   (defaults 32, 32768, 2000000)
 * Built by `make -C capi/tests/c bench` (LIB=target/release for figures). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pollfs.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static int fail(const char *what, int r) {
    fprintf(stderr, "%s: %d (%s)\n", what, r, pollfs_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 32;
    long pages = argc > 2 ? atol(argv[2]) : 32768;
    long reads = argc > 3 ? atol(argv[3]) : 2000000;
    if (depth < 1 || pages < 1 || reads < depth)
        return fprintf(stderr, "usage: bench_queue [DEPTH [PAGES [READS]]]\n"), 2;
    PollfsFs *fs;
    PollfsOptions o = {.cache_pages = (uint32_t)(pages + pages / 2 + 1024),
                       .size_bytes = (uint64_t)pages * 8192 + (64 << 20)};
    int r = pollfs_format("emu", &o, &fs);
    if (r < 0)
        return fail("pollfs_format", r);
    PollfsFile *f;
    if ((r = pollfs_open(fs, "f", O_CREAT | O_RDWR, 0644, &f)) < 0)
        return fail("pollfs_open", r);
    static char page[4096];
    for (long p = 0; p < pages; p++)
        if ((r = (int)pollfs_pwrite(f, page, sizeof page, (uint64_t)p * 4096)) < 0)
            return fail("pollfs_pwrite", r);
    char *bufs = aligned_alloc(4096, 4096 * (size_t)depth);
    PollfsIo *ios = calloc((size_t)depth, sizeof *ios);
    PollfsCompletion *c = calloc((size_t)depth, sizeof *c);
    PollfsQueue *q;
    if (!bufs || !ios || !c)
        return fail("allocation", -12);
    if ((r = pollfs_queue_new(fs, (uint32_t)depth, &q)) < 0)
        return fail("pollfs_queue_new", r);
    uint64_t x = 88172645463325252ull;
    double t = now();
    for (long done = 0; done + depth <= reads; done += depth) {
        for (int i = 0; i < depth; i++)
            ios[i] = (PollfsIo){POLLFS_OP_READ, f, bufs + 4096 * i, 4096,
                                (next(&x) % (uint64_t)pages) * 4096, (uint64_t)i};
        if ((r = pollfs_submit(q, ios, (uint32_t)depth)) != depth)
            return fail("pollfs_submit", r);
        for (int got = 0; got < depth;) {
            int k = pollfs_complete(q, c, (uint32_t)depth);
            if (k < 0)
                return fail("pollfs_complete", k);
            for (int i = 0; i < k; i++)
                if (c[i].result != 4096)
                    return fail("a read", (int)c[i].result);
            got += k;
        }
    }
    double queued = (now() - t) / (double)(reads / depth * depth) * 1e9;
    t = now();
    for (long i = 0; i < reads; i++)
        if ((r = (int)pollfs_pread(f, bufs, 4096, (next(&x) % (uint64_t)pages) * 4096)) != 4096)
            return fail("pollfs_pread", r);
    double sync = (now() - t) / (double)reads * 1e9;
    printf("%ld cached pages: queue at depth %d %.0f ns per read, pollfs_pread %.0f ns\n", pages,
           depth, queued, sync);
    pollfs_queue_free(q);
    pollfs_close(f);
    pollfs_unmount(fs);
    return 0;
}
