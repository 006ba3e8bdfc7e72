/* libpollfs's C API from C: the namespace, synchronous I/O, syncs, sizes,
 * errors, threads sharing handles, and the asynchronous queue at depth 32,
 * each result checked. Built and run by `make -C capi/tests/c` (`just
 * capi-test`), against the shared and the static library. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "pollfs.h"

static int failures;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n",      \
                    __FILE__, __LINE__, #cond, pollfs_last_error());           \
            failures++;                                                        \
        }                                                                      \
    } while (0)

#define MUST(call) CHECK((call) == 0)

static PollfsFs *fs;

static void test_namespace(void) {
    PollfsFile *f = NULL;
    CHECK(pollfs_open(fs, "missing", 0, 0, &f) == -ENOENT);
    CHECK(strstr(pollfs_last_error(), "pollfs_open") != NULL);
    MUST(pollfs_mkdir(fs, "/dir", 0750));
    CHECK(pollfs_mkdir(fs, "/dir", 0755) == -EEXIST);
    MUST(pollfs_open(fs, "/dir/a", O_CREAT | O_RDWR, 0600, &f));
    CHECK(pollfs_pwrite(f, "hello", 5, 0) == 5);
    PollfsFile *g = NULL;
    CHECK(pollfs_open(fs, "/dir/a", O_CREAT | O_EXCL, 0600, &g) == -EEXIST);
    CHECK(pollfs_open(fs, "/dir", 0, 0, &g) == -EISDIR);

    PollfsStat st;
    MUST(pollfs_stat(fs, "/dir/a", &st));
    CHECK(S_ISREG(st.mode) && (st.mode & 07777) == 0600 && st.size == 5);
    MUST(pollfs_stat(fs, "/dir", &st));
    CHECK(S_ISDIR(st.mode) && (st.mode & 07777) == 0750);

    MUST(pollfs_rename(fs, "/dir/a", "/dir/b"));
    MUST(pollfs_sync_dir(fs, "/dir"));
    CHECK(pollfs_sync_dir(fs, "/nodir") == -ENOENT);
    CHECK(pollfs_stat(fs, "/dir/a", &st) == -ENOENT);
    MUST(pollfs_open(fs, "/dir/c", O_CREAT, 0644, &g));
    MUST(pollfs_close(g));

    uint64_t cookie = 0;
    PollfsDirent e;
    int seen = 0, r;
    while ((r = pollfs_readdir(fs, "/dir", &cookie, &e)) == 1) {
        CHECK(S_ISREG(e.type_));
        CHECK(strcmp(e.name, "b") == 0 || strcmp(e.name, "c") == 0);
        seen++;
    }
    CHECK(r == 0 && seen == 2);

    CHECK(pollfs_rmdir(fs, "/dir") == -ENOTEMPTY);
    MUST(pollfs_remove(fs, "/dir/b"));
    /* Removed while open: the handle still reads its data. */
    char buf[8] = {0};
    CHECK(pollfs_pread(f, buf, sizeof buf, 0) == 5 && memcmp(buf, "hello", 5) == 0);
    MUST(pollfs_close(f));
    MUST(pollfs_remove(fs, "/dir/c"));
    MUST(pollfs_rmdir(fs, "/dir"));
    CHECK(pollfs_readdir(fs, "/dir", &cookie, &e) == -ENOENT);
}

static void test_io(void) {
    PollfsFile *f = NULL;
    MUST(pollfs_open(fs, "io", O_CREAT | O_TRUNC | O_RDWR, 0644, &f));
    char a[6000], b[3000], out[9000];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);
    PollfsIovec wv[2] = {{a, sizeof a}, {b, sizeof b}};
    CHECK(pollfs_pwritev(f, wv, 2, 100) == 9000);
    memset(out, 0, sizeof out);
    char head[100];
    PollfsIovec rv[2] = {{head, sizeof head}, {out, sizeof out}};
    CHECK(pollfs_preadv(f, rv, 2, 0) == 9100);
    int zeros = 1;
    for (size_t i = 0; i < sizeof head; i++)
        zeros &= head[i] == 0;
    CHECK(zeros); /* a hole reads as zeros */
    CHECK(out[0] == 'a' && out[5999] == 'a' && out[6000] == 'b' && out[8999] == 'b');
    CHECK(pollfs_pread(f, out, 10, 9100) == 0);
    MUST(pollfs_fdatasync(f));
    MUST(pollfs_fsync(f));

    MUST(pollfs_ftruncate(f, 50));
    PollfsStat st;
    MUST(pollfs_fstat(f, &st));
    CHECK(st.size == 50);
    MUST(pollfs_fallocate(f, 0, 0, 20000));
    MUST(pollfs_fstat(f, &st));
    CHECK(st.size == 20000);
    MUST(pollfs_fallocate(f, FALLOC_FL_KEEP_SIZE, 0, 90000));
    MUST(pollfs_fstat(f, &st));
    CHECK(st.size == 20000);
    CHECK(pollfs_pwrite(f, a, 4096, 8192) == 4096);
    MUST(pollfs_fallocate(f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8192, 4096));
    CHECK(pollfs_pread(f, out, 4096, 8192) == 4096 && out[0] == 0 && out[4095] == 0);
    CHECK(pollfs_fallocate(f, FALLOC_FL_COLLAPSE_RANGE, 0, 4096) == -EOPNOTSUPP);
    CHECK(pollfs_pwrite(NULL, a, 1, 0) == -EBADF);
    MUST(pollfs_close(f));
    MUST(pollfs_sync(fs));
}

#define THREAD_PAGES 64

static void *reader(void *arg) {
    PollfsFile *f = arg;
    char page[4096];
    long bad = 0;
    for (int round = 0; round < 50; round++)
        for (int p = 0; p < THREAD_PAGES; p++) {
            if (pollfs_pread(f, page, sizeof page, (uint64_t)p * 4096) != 4096 ||
                page[0] != (char)p || page[4095] != (char)p)
                bad++;
        }
    return (void *)bad;
}

static void test_threads(void) {
    PollfsFile *f = NULL;
    MUST(pollfs_open(fs, "shared", O_CREAT | O_RDWR, 0644, &f));
    char page[4096];
    for (int p = 0; p < THREAD_PAGES; p++) {
        memset(page, p, sizeof page);
        CHECK(pollfs_pwrite(f, page, sizeof page, (uint64_t)p * 4096) == 4096);
    }
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, reader, f) == 0);
    for (int i = 0; i < 4; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        CHECK(bad == NULL);
    }
    MUST(pollfs_close(f));
}

#define DEPTH 32
#define PAGES 256

static void test_queue(void) {
    PollfsFile *f = NULL;
    MUST(pollfs_open(fs, "async", O_CREAT | O_TRUNC | O_RDWR, 0644, &f));
    PollfsQueue *q = NULL;
    CHECK(pollfs_queue_new(fs, 0, &q) == -EINVAL);
    MUST(pollfs_queue_new(fs, DEPTH, &q));
    static char bufs[PAGES][4096];
    PollfsCompletion done[DEPTH];

    /* Writes: every page, at most DEPTH in flight. */
    int next = 0, finished = 0;
    while (finished < PAGES) {
        while (next < PAGES && pollfs_queue_in_flight(q) < DEPTH) {
            memset(bufs[next], next ^ 0x5a, 4096);
            PollfsIo io = {POLLFS_OP_WRITE, f, bufs[next], 4096, (uint64_t)next * 4096,
                           (uint64_t)next};
            int r = pollfs_submit(q, &io, 1);
            CHECK(r == 1);
            if (r != 1)
                return;
            next++;
        }
        int n = pollfs_complete(q, done, DEPTH);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++)
            CHECK(done[i].result == 4096 && done[i].user_data < PAGES);
        finished += n;
    }
    CHECK(pollfs_queue_in_flight(q) == 0);

    /* A batch beyond the depth is accepted in part. */
    PollfsIo batch[DEPTH + 8];
    for (int i = 0; i < DEPTH + 8; i++) {
        memset(bufs[i], 0, 4096);
        batch[i] = (PollfsIo){POLLFS_OP_READ, f, bufs[i], 4096, (uint64_t)i * 4096, (uint64_t)i};
    }
    CHECK(pollfs_submit(q, batch, DEPTH + 8) == DEPTH);
    CHECK(pollfs_queue_free(q) == -EBUSY);
    finished = 0;
    while (finished < DEPTH) {
        int n = pollfs_complete(q, done, DEPTH);
        CHECK(n >= 0);
        for (int i = 0; i < n; i++) {
            uint64_t p = done[i].user_data;
            CHECK(done[i].result == 4096);
            CHECK(bufs[p][0] == (char)(p ^ 0x5a) && bufs[p][4095] == (char)(p ^ 0x5a));
        }
        finished += n;
    }

    /* A sync through the queue, and a bad opcode. */
    PollfsIo sync = {POLLFS_OP_FDATASYNC, f, NULL, 0, 0, 77};
    CHECK(pollfs_submit(q, &sync, 1) == 1);
    int n = 0;
    while ((n = pollfs_complete(q, done, 1)) == 0) {
    }
    CHECK(n == 1 && done[0].user_data == 77 && done[0].result == 0);
    PollfsIo bad = {99, f, NULL, 0, 0, 0};
    CHECK(pollfs_submit(q, &bad, 1) == -EINVAL);
    MUST(pollfs_queue_free(q));
    MUST(pollfs_close(f));
}

/* A file: device keeps what was synced across an unmount and a mount, and
 * a format refuses it afterwards unless forced. */
static void test_file_device(void) {
    char spec[128], path[96];
    snprintf(path, sizeof path, "/tmp/pollfs-capi-test-%d.img", (int)getpid());
    snprintf(spec, sizeof spec, "file:%s", path);
    unlink(path);
    CHECK(pollfs_mount(spec, NULL, &fs) == -ENOENT);
    PollfsOptions opts = {.cache_pages = 1024, .size_bytes = 64 << 20};
    MUST(pollfs_format(spec, &opts, &fs));
    PollfsFile *f = NULL;
    MUST(pollfs_open(fs, "kept", O_CREAT | O_RDWR, 0644, &f));
    CHECK(pollfs_pwrite(f, "durable", 7, 4096) == 7);
    MUST(pollfs_fsync(f));
    MUST(pollfs_close(f));
    MUST(pollfs_unmount(fs));

    opts.size_bytes = 0;
    MUST(pollfs_mount(spec, &opts, &fs));
    char buf[8] = {0};
    MUST(pollfs_open(fs, "kept", 0, 0, &f));
    CHECK(pollfs_pread(f, buf, sizeof buf, 4096) == 7 && memcmp(buf, "durable", 7) == 0);
    MUST(pollfs_close(f));
    MUST(pollfs_unmount(fs));
    CHECK(pollfs_format(spec, &opts, &fs) == -EEXIST);
    opts.force = 1;
    MUST(pollfs_format(spec, &opts, &fs));
    CHECK(pollfs_open(fs, "kept", 0, 0, &f) == -ENOENT);
    MUST(pollfs_unmount(fs));
    unlink(path);
}

/* The counters move with a write and a sync; a struct of an older,
   shorter header gets its prefix only. */
static void test_stats(void) {
    PollfsStats before, after;
    MUST(pollfs_fs_stats(fs, &before, sizeof before));
    PollfsFile *f = NULL;
    MUST(pollfs_open(fs, "/counted", O_CREAT | O_RDWR, 0644, &f));
    CHECK(pollfs_pwrite(f, "abc", 3, 0) == 3);
    MUST(pollfs_fsync(f));
    MUST(pollfs_close(f));
    MUST(pollfs_fs_stats(fs, &after, sizeof after));
    CHECK(after.writes == before.writes + 1);
    CHECK(after.write_bytes == before.write_bytes + 3);
    CHECK(after.syncs == before.syncs + 1);
    CHECK(after.cache_pages > 0 && after.log_blocks > 0);
    /* The device's commands are the engine's; one device has no legs. */
    CHECK(after.device.writes == after.dev_writes);
    CHECK(after.device.write_bytes == after.dev_write_bytes);
    CHECK(after.device.errors == after.dev_errors && after.device.resets == 0);
    CHECK(after.legs == 0 && after.leg[0].writes == 0);
    PollfsStats prefix;
    memset(&prefix, 0, sizeof prefix);
    MUST(pollfs_fs_stats(fs, &prefix, offsetof(PollfsStats, writes)));
    CHECK(prefix.reads == after.reads && prefix.writes == 0);
    CHECK(pollfs_fs_stats(fs, &prefix, sizeof prefix + 1) == -EINVAL);
}

/* An ACL attribute's value: version 2, then (tag, perm, id) entries,
 * little-endian (acl(5)); returns its length. */
static size_t acl_value(unsigned char *out, const unsigned (*entries)[3], int n) {
    size_t len = 0;
    uint32_t version = 2;
    memcpy(out, &version, 4);
    len = 4;
    for (int i = 0; i < n; i++) {
        uint16_t tag = (uint16_t)entries[i][0], perm = (uint16_t)entries[i][1];
        uint32_t id = entries[i][2];
        memcpy(out + len, &tag, 2);
        memcpy(out + len + 2, &perm, 2);
        memcpy(out + len + 4, &id, 4);
        len += 8;
    }
    return len;
}

#define NO_ID 0xffffffffu

static void as_user(uint32_t uid, uint32_t gid, uint32_t umask_) {
    MUST(pollfs_set_creds(fs, uid, gid, NULL, 0, umask_));
}

static void as_root(void) { as_user(0, 0, 0); }

struct race {
    const char *path;
    int flags;
    int result;
    uint64_t ino;
};

static void *creator(void *arg) {
    struct race *r = arg;
    PollfsFile *f = NULL;
    r->result = pollfs_open(fs, r->path, r->flags, 0600, &f);
    if (r->result == 0) {
        PollfsStat st;
        r->ino = pollfs_fstat(f, &st) == 0 ? st.ino : 0;
        pollfs_close(f);
    }
    return NULL;
}

/* The POSIX rules the mount gets from the engine, through the C API. */
static void test_posix(void) {
    PollfsStat st;
    PollfsFile *f = NULL;
    as_root();
    /* A set-group-ID directory gives its group, and subdirectories the bit. */
    MUST(pollfs_mkdir(fs, "/sg", 0777));
    MUST(pollfs_chown(fs, "/sg", POLLFS_ID_KEEP, 50));
    MUST(pollfs_chmod(fs, "/sg", 02777));
    as_user(1000, 100, 022);
    MUST(pollfs_open(fs, "/sg/f", O_CREAT | O_EXCL | O_RDWR, 0666, &f));
    MUST(pollfs_close(f));
    MUST(pollfs_stat(fs, "/sg/f", &st));
    CHECK(st.uid == 1000 && st.gid == 50 && (st.mode & 07777) == 0644);
    MUST(pollfs_mkdir(fs, "/sg/sub", 0777));
    MUST(pollfs_stat(fs, "/sg/sub", &st));
    CHECK(st.gid == 50 && (st.mode & 07777) == 02755);
    /* Set-group-ID in a group the caller is not in is not kept. */
    MUST(pollfs_open(fs, "/sg/x", O_CREAT | O_EXCL | O_RDWR, 02775, &f));
    MUST(pollfs_close(f));
    MUST(pollfs_stat(fs, "/sg/x", &st));
    CHECK((st.mode & 07777) == 0755);

    /* chmod by anyone but the owner or root is refused. */
    as_user(2000, 100, 0);
    CHECK(pollfs_chmod(fs, "/sg/f", 0777) == -EPERM);
    CHECK(pollfs_chown(fs, "/sg/f", 2000, POLLFS_ID_KEEP) == -EPERM);
    CHECK(pollfs_utimens(fs, "/sg/f", 0, 0) == -EPERM);
    /* Not writable by uid 2000 (0644): not even the times to now. */
    CHECK(pollfs_utimens(fs, "/sg/f", POLLFS_UTIME_NOW, POLLFS_UTIME_NOW) == -EACCES);
    CHECK(pollfs_open(fs, "/sg/f", O_RDWR, 0, &f) == -EACCES);
    MUST(pollfs_open(fs, "/sg/f", O_RDONLY, 0, &f));
    CHECK(pollfs_pwrite(f, "x", 1, 0) == -EBADF);
    MUST(pollfs_close(f));
    CHECK(pollfs_access(fs, "/sg/f", R_OK) == 0);
    CHECK(pollfs_access(fs, "/sg/f", W_OK) == -EACCES);
    as_user(1000, 100, 0);
    MUST(pollfs_chmod(fs, "/sg/f", 0640));
    MUST(pollfs_utimens(fs, "/sg/f", 1000000000, POLLFS_UTIME_OMIT));
    MUST(pollfs_stat(fs, "/sg/f", &st));
    CHECK((st.mode & 07777) == 0640 && st.atime_ns == 1000000000);

    /* Set-id bits go on chown, even root's. */
    as_root();
    MUST(pollfs_chmod(fs, "/sg/f", 06755));
    MUST(pollfs_chown(fs, "/sg/f", 3000, POLLFS_ID_KEEP));
    MUST(pollfs_stat(fs, "/sg/f", &st));
    CHECK(st.uid == 3000 && (st.mode & 07777) == 0755);
    /* And on a write by someone else (not in the group). */
    MUST(pollfs_chmod(fs, "/sg/f", 04777));
    as_user(2000, 100, 0);
    MUST(pollfs_open(fs, "/sg/f", O_WRONLY, 0, &f));
    CHECK(pollfs_pwrite(f, "x", 1, 0) == 1);
    MUST(pollfs_close(f));
    MUST(pollfs_stat(fs, "/sg/f", &st));
    CHECK((st.mode & 07777) == 0777);

    /* A default ACL is inherited instead of the umask. */
    as_root();
    MUST(pollfs_mkdir(fs, "/acl", 0777));
    const unsigned def[5][3] = {
        {0x01, 7, NO_ID}, {0x02, 7, 1000}, {0x04, 5, NO_ID}, {0x10, 7, NO_ID}, {0x20, 5, NO_ID}};
    unsigned char value[64], got[64];
    size_t len = acl_value(value, def, 5);
    MUST(pollfs_setxattr(fs, "/acl", "system.posix_acl_default", value, len, 0));
    as_user(1000, 100, 077);
    MUST(pollfs_open(fs, "/acl/f", O_CREAT | O_RDWR, 0666, &f));
    MUST(pollfs_close(f));
    MUST(pollfs_stat(fs, "/acl/f", &st));
    CHECK((st.mode & 07777) == 0664);
    const unsigned access[5][3] = {
        {0x01, 6, NO_ID}, {0x02, 7, 1000}, {0x04, 5, NO_ID}, {0x10, 6, NO_ID}, {0x20, 4, NO_ID}};
    len = acl_value(value, access, 5);
    CHECK(pollfs_getxattr(fs, "/acl/f", "system.posix_acl_access", NULL, 0) == (ssize_t)len);
    CHECK(pollfs_getxattr(fs, "/acl/f", "system.posix_acl_access", got, sizeof got) ==
              (ssize_t)len &&
          memcmp(got, value, len) == 0);
    CHECK(pollfs_getxattr(fs, "/acl/f", "system.posix_acl_access", got, 4) == -ERANGE);
    /* A malformed ACL is EINVAL; a default ACL on a file EACCES. */
    CHECK(pollfs_setxattr(fs, "/acl/f", "system.posix_acl_access", "bad", 3, 0) == -EINVAL);
    CHECK(pollfs_setxattr(fs, "/acl/f", "system.posix_acl_default", value, len, 0) == -EACCES);

    /* User attributes, links, and trusted names for root only. */
    MUST(pollfs_setxattr(fs, "/acl/f", "user.k", "v", 1, XATTR_CREATE));
    CHECK(pollfs_setxattr(fs, "/acl/f", "user.k", "v", 1, XATTR_CREATE) == -EEXIST);
    CHECK(pollfs_setxattr(fs, "/acl/f", "trusted.t", "v", 1, 0) == -EPERM);
    char names[128];
    ssize_t n = pollfs_listxattr(fs, "/acl/f", names, sizeof names);
    CHECK(n == (ssize_t)sizeof "system.posix_acl_access" + (ssize_t)sizeof "user.k");
    MUST(pollfs_removexattr(fs, "/acl/f", "user.k"));
    CHECK(pollfs_removexattr(fs, "/acl/f", "user.k") == -ENODATA);
    MUST(pollfs_symlink(fs, "f", "/acl/l"));
    char target[8] = {0};
    CHECK(pollfs_readlink(fs, "/acl/l", target, sizeof target) == 1 && target[0] == 'f');
    CHECK(pollfs_readlink(fs, "/acl/f", target, sizeof target) == -EINVAL);
    MUST(pollfs_stat(fs, "/acl/l", &st));
    CHECK(S_ISLNK(st.mode) && st.uid == 1000 && (st.mode & 07777) == 0777);
    MUST(pollfs_link(fs, "/acl/f", "/acl/g"));
    MUST(pollfs_stat(fs, "/acl/g", &st));
    CHECK(st.nlink == 2);
    CHECK(pollfs_link(fs, "/acl", "/acl/d") == -EPERM);

    /* In a sticky directory only the owner of an entry (or of the
     * directory, or root) removes or renames it. */
    as_root();
    MUST(pollfs_mkdir(fs, "/tmpd", 0777));
    MUST(pollfs_chmod(fs, "/tmpd", 01777));
    as_user(1000, 100, 0);
    MUST(pollfs_open(fs, "/tmpd/a", O_CREAT | O_EXCL | O_RDWR, 0666, &f));
    MUST(pollfs_close(f));
    as_user(2000, 100, 0);
    CHECK(pollfs_remove(fs, "/tmpd/a") == -EPERM);
    CHECK(pollfs_rename(fs, "/tmpd/a", "/tmpd/b") == -EPERM);
    as_user(1000, 100, 0);
    MUST(pollfs_rename(fs, "/tmpd/a", "/tmpd/b"));
    MUST(pollfs_remove(fs, "/tmpd/b"));

    /* Two threads creating one name: with O_EXCL exactly one makes it;
     * without, both open the one file. */
    as_root();
    for (int round = 0; round < 50; round++) {
        char path[32];
        snprintf(path, sizeof path, "/race%d", round);
        for (int excl = 0; excl < 2; excl++) {
            struct race r[2];
            pthread_t t[2];
            for (int i = 0; i < 2; i++) {
                r[i] = (struct race){.path = path, .flags = O_CREAT | O_RDWR | (excl ? O_EXCL : 0)};
                CHECK(pthread_create(&t[i], NULL, creator, &r[i]) == 0);
            }
            for (int i = 0; i < 2; i++)
                pthread_join(t[i], NULL);
            if (excl)
                CHECK((r[0].result == 0) + (r[1].result == 0) == 1 &&
                      (r[0].result == -EEXIST || r[1].result == -EEXIST));
            else
                CHECK(r[0].result == 0 && r[1].result == 0 && r[0].ino == r[1].ino);
            MUST(pollfs_remove(fs, path));
        }
    }
}

int main(void) {
    CHECK(strcmp(pollfs_version(), "") != 0);
    CHECK(pollfs_format("nonsense:spec", NULL, &fs) == -EINVAL);
    CHECK(strstr(pollfs_last_error(), "nonsense") != NULL);
    test_file_device();
    PollfsOptions opts = {.cache_pages = 4096};
    MUST(pollfs_format("emu", &opts, &fs));
    if (!fs)
        return 1;
    test_namespace();
    test_io();
    test_threads();
    test_queue();
    test_stats();
    test_posix();
    MUST(pollfs_unmount(fs));
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("libpollfs %s: C API checks passed\n", pollfs_version());
    return 0;
}
