/*
 * SQLite VFS "pollfs": SQLite databases in files of a pollfs filesystem,
 * through libpollfs, with no kernel on the I/O path.
 *
 * Use it
 * - From a program (C, or Rust through its SQLite bindings): link this file
 *   (compiled with -DSQLITE_CORE) and libpollfs, mount a filesystem and call
 *   pollfs_sqlite_register(fs, make_default); open databases with the vfs
 *   name "pollfs" (sqlite3_open_v2(.., "pollfs")) or make it the default.
 * - From the sqlite3 shell: `.load PATH/libpollfs_sqlite` (this file built
 *   as a loadable extension), then `.open --vfs pollfs app.db`. The
 *   extension mounts the device POLLFS_DEV names (default `emu`, which
 *   starts empty and is formatted), formatting it if POLLFS_FORMAT=1 (of
 *   POLLFS_SIZE_MB MiB if it is made), with a page cache of
 *   POLLFS_CACHE_MB MiB (default 256).
 *
 * Durability
 * - xSync: SQLITE_SYNC_DATAONLY is pollfs_fdatasync, otherwise pollfs_fsync;
 *   either makes the file's data, size and extents durable. The first sync
 *   of a file this connection created, and xDelete with syncDir, also sync
 *   the directory's entries (pollfs_sync_dir), as a journal's creation and
 *   removal must be durable for recovery to find or forget it.
 * - xDeviceCharacteristics, and why each flag is claimed or not:
 *   SQLITE_IOCAP_POWERSAFE_OVERWRITE: pollfs writes pages whole from its
 *     cache, so bytes outside a write are rewritten with their own values;
 *     a torn block can only mix old and new bytes of the written range.
 *   SQLITE_IOCAP_SAFE_APPEND: a file's size becomes durable only in the
 *     commit of a sync, after the data it covers is on the device, so after
 *     a crash a file never ends in bytes that were not written.
 *   Not claimed: ATOMIC* (a write of several blocks is not atomic across a
 *   crash unless synced), SEQUENTIAL (written-back pages reach the device
 *   in any order), UNDELETABLE_WHEN_OPEN (an open file can be removed),
 *   BATCH_ATOMIC (no atomic batch writes).
 * - xSectorSize: 4096, the block pollfs writes and the page it caches.
 *
 * Locking and WAL
 * - Locks and WAL shared memory work between connections of one process
 *   (a table of open database names; shared memory is process memory).
 *   Access to one pollfs filesystem from several processes is not
 *   supported: the filesystem itself is mounted by one process at a time.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include "pollfs.h"
#include "pollfs_sqlite.h"

#define POLLFS_SECTOR 4096

static PollfsFs *vfs_fs;

/* A database name's state shared by every connection of the process that
 * has it open: its locks and its WAL index. */
struct node {
	struct node *next;
	char *path;
	int refs;
	/* Database file locks. */
	int shared;             /* connections holding SHARED or more */
	struct conn *reserved;  /* holder of RESERVED, if any */
	struct conn *pending;   /* holder of PENDING, if any */
	struct conn *exclusive; /* holder of EXCLUSIVE, if any */
	/* WAL index: regions, and its lock slots. */
	void **regions;
	int nregions;
	int shm_shared[SQLITE_SHM_NLOCK];
	struct conn *shm_exclusive[SQLITE_SHM_NLOCK];
};

struct conn {
	sqlite3_file base;
	PollfsFile *file;
	struct node *node; /* main databases only */
	char *delete_path; /* delete on close */
	int lock;          /* SQLITE_LOCK_* held */
	int need_dirsync;  /* created here, directory not synced yet */
	unsigned short shm_shared_mask, shm_excl_mask;
};

static pthread_mutex_t nodes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct node *nodes;

static struct node *node_get(const char *path)
{
	pthread_mutex_lock(&nodes_lock);
	struct node *n = nodes;
	while (n && strcmp(n->path, path) != 0)
		n = n->next;
	if (!n) {
		n = sqlite3_malloc(sizeof(*n));
		if (n) {
			memset(n, 0, sizeof(*n));
			n->path = sqlite3_mprintf("%s", path);
			n->next = nodes;
			nodes = n;
		}
	}
	if (n)
		n->refs++;
	pthread_mutex_unlock(&nodes_lock);
	return n;
}

/* Drops a reference; frees the node (and its WAL index) with the last. */
static void node_put(struct node *n)
{
	pthread_mutex_lock(&nodes_lock);
	if (--n->refs == 0) {
		struct node **p = &nodes;
		while (*p != n)
			p = &(*p)->next;
		*p = n->next;
		for (int i = 0; i < n->nregions; i++)
			sqlite3_free(n->regions[i]);
		sqlite3_free(n->regions);
		sqlite3_free(n->path);
		sqlite3_free(n);
	}
	pthread_mutex_unlock(&nodes_lock);
}

/* A pollfs path for a SQLite name: absolute, as xFullPathname makes it. */
static int full_path(const char *name, int out_len, char *out)
{
	int n = snprintf(out, (size_t)out_len, "%s%s", name[0] == '/' ? "" : "/", name);
	return n < 0 || n >= out_len ? SQLITE_CANTOPEN : SQLITE_OK;
}

static int sync_dir(void)
{
	return pollfs_sync_dir(vfs_fs, "/") < 0 ? SQLITE_IOERR_DIR_FSYNC : SQLITE_OK;
}

/* --- file methods ------------------------------------------------------ */

static int x_close(sqlite3_file *f)
{
	struct conn *c = (struct conn *)f;
	int rc = SQLITE_OK;
	if (c->node) {
		/* Any lock this connection held goes with it. */
		pthread_mutex_lock(&nodes_lock);
		if (c->lock >= SQLITE_LOCK_SHARED)
			c->node->shared--;
		if (c->node->reserved == c)
			c->node->reserved = NULL;
		if (c->node->pending == c)
			c->node->pending = NULL;
		if (c->node->exclusive == c)
			c->node->exclusive = NULL;
		pthread_mutex_unlock(&nodes_lock);
		node_put(c->node);
	}
	if (pollfs_close(c->file) < 0)
		rc = SQLITE_IOERR_CLOSE;
	if (c->delete_path) {
		pollfs_remove(vfs_fs, c->delete_path);
		sqlite3_free(c->delete_path);
	}
	return rc;
}

static int x_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
	struct conn *c = (struct conn *)f;
	ptrdiff_t n = pollfs_pread(c->file, buf, (size_t)amt, (uint64_t)off);
	if (n < 0)
		return SQLITE_IOERR_READ;
	if (n < amt) {
		memset((char *)buf + n, 0, (size_t)(amt - n));
		return SQLITE_IOERR_SHORT_READ;
	}
	return SQLITE_OK;
}

static int x_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
	struct conn *c = (struct conn *)f;
	ptrdiff_t n = pollfs_pwrite(c->file, buf, (size_t)amt, (uint64_t)off);
	if (n == -ENOSPC)
		return SQLITE_FULL;
	return n == amt ? SQLITE_OK : SQLITE_IOERR_WRITE;
}

static int x_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	struct conn *c = (struct conn *)f;
	return pollfs_ftruncate(c->file, (uint64_t)size) < 0 ? SQLITE_IOERR_TRUNCATE : SQLITE_OK;
}

static int x_sync(sqlite3_file *f, int flags)
{
	struct conn *c = (struct conn *)f;
	int r = (flags & SQLITE_SYNC_DATAONLY) ? pollfs_fdatasync(c->file) : pollfs_fsync(c->file);
	if (r < 0)
		return SQLITE_IOERR_FSYNC;
	if (c->need_dirsync) {
		c->need_dirsync = 0;
		return sync_dir();
	}
	return SQLITE_OK;
}

static int x_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	struct conn *c = (struct conn *)f;
	PollfsStat st;
	if (pollfs_fstat(c->file, &st) < 0)
		return SQLITE_IOERR_FSTAT;
	*size = (sqlite3_int64)st.size;
	return SQLITE_OK;
}

/* Database locks between the connections of this process (see the top). */
static int x_lock(sqlite3_file *f, int level)
{
	struct conn *c = (struct conn *)f;
	struct node *n = c->node;
	if (!n || c->lock >= level)
		return SQLITE_OK;
	int rc = SQLITE_OK;
	pthread_mutex_lock(&nodes_lock);
	switch (level) {
	case SQLITE_LOCK_SHARED:
		if ((n->pending && n->pending != c) || (n->exclusive && n->exclusive != c)) {
			rc = SQLITE_BUSY;
		} else {
			n->shared++;
			c->lock = SQLITE_LOCK_SHARED;
		}
		break;
	case SQLITE_LOCK_RESERVED:
		if (n->reserved && n->reserved != c) {
			rc = SQLITE_BUSY;
		} else {
			n->reserved = c;
			c->lock = SQLITE_LOCK_RESERVED;
		}
		break;
	case SQLITE_LOCK_EXCLUSIVE:
		/* PENDING first, so no new reader comes in while the others
		 * leave; EXCLUSIVE once this is the only reader. */
		if (n->pending && n->pending != c) {
			rc = SQLITE_BUSY;
			break;
		}
		n->pending = c;
		c->lock = SQLITE_LOCK_PENDING;
		if (n->shared > 1) {
			rc = SQLITE_BUSY;
		} else {
			n->exclusive = c;
			c->lock = SQLITE_LOCK_EXCLUSIVE;
		}
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&nodes_lock);
	return rc;
}

static int x_unlock(sqlite3_file *f, int level)
{
	struct conn *c = (struct conn *)f;
	struct node *n = c->node;
	if (!n || c->lock <= level)
		return SQLITE_OK;
	pthread_mutex_lock(&nodes_lock);
	if (n->exclusive == c)
		n->exclusive = NULL;
	if (n->pending == c)
		n->pending = NULL;
	if (n->reserved == c)
		n->reserved = NULL;
	if (level == SQLITE_LOCK_NONE && c->lock >= SQLITE_LOCK_SHARED)
		n->shared--;
	c->lock = level;
	pthread_mutex_unlock(&nodes_lock);
	return SQLITE_OK;
}

static int x_check_reserved(sqlite3_file *f, int *out)
{
	struct conn *c = (struct conn *)f;
	*out = 0;
	if (c->node) {
		pthread_mutex_lock(&nodes_lock);
		*out = c->node->reserved != NULL || c->node->pending != NULL ||
		       c->node->exclusive != NULL;
		pthread_mutex_unlock(&nodes_lock);
	}
	return SQLITE_OK;
}

static int x_file_control(sqlite3_file *f, int op, void *arg)
{
	(void)f;
	if (op == SQLITE_FCNTL_VFSNAME) {
		*(char **)arg = sqlite3_mprintf("pollfs");
		return SQLITE_OK;
	}
	return SQLITE_NOTFOUND;
}

static int x_sector_size(sqlite3_file *f)
{
	(void)f;
	return POLLFS_SECTOR;
}

static int x_device_characteristics(sqlite3_file *f)
{
	(void)f;
	return SQLITE_IOCAP_POWERSAFE_OVERWRITE | SQLITE_IOCAP_SAFE_APPEND;
}

/* WAL index in process memory, shared by the connections of a node. */
static int x_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **out)
{
	struct conn *c = (struct conn *)f;
	struct node *n = c->node;
	*out = NULL;
	if (!n)
		return SQLITE_IOERR_SHMMAP;
	int rc = SQLITE_OK;
	pthread_mutex_lock(&nodes_lock);
	if (region >= n->nregions && extend) {
		void **more = sqlite3_realloc(n->regions, (region + 1) * (int)sizeof(void *));
		if (!more) {
			rc = SQLITE_NOMEM;
		} else {
			n->regions = more;
			while (n->nregions <= region) {
				void *r = sqlite3_malloc(size);
				if (!r) {
					rc = SQLITE_NOMEM;
					break;
				}
				memset(r, 0, (size_t)size);
				n->regions[n->nregions++] = r;
			}
		}
	}
	if (rc == SQLITE_OK && region < n->nregions)
		*out = n->regions[region];
	pthread_mutex_unlock(&nodes_lock);
	return rc;
}

static int x_shm_lock(sqlite3_file *f, int offset, int count, int flags)
{
	struct conn *c = (struct conn *)f;
	struct node *n = c->node;
	unsigned short mask = (unsigned short)(((1u << count) - 1) << offset);
	int rc = SQLITE_OK;
	pthread_mutex_lock(&nodes_lock);
	if (flags & SQLITE_SHM_UNLOCK) {
		for (int i = offset; i < offset + count; i++) {
			if (c->shm_excl_mask & (1u << i))
				n->shm_exclusive[i] = NULL;
			if (c->shm_shared_mask & (1u << i))
				n->shm_shared[i]--;
		}
		c->shm_excl_mask &= (unsigned short)~mask;
		c->shm_shared_mask &= (unsigned short)~mask;
	} else if (flags & SQLITE_SHM_SHARED) {
		/* SQLite takes shared locks one slot at a time. */
		if (!(c->shm_shared_mask & mask)) {
			if (n->shm_exclusive[offset]) {
				rc = SQLITE_BUSY;
			} else {
				n->shm_shared[offset]++;
				c->shm_shared_mask |= mask;
			}
		}
	} else {
		for (int i = offset; i < offset + count; i++) {
			int others = n->shm_shared[i] - ((c->shm_shared_mask >> i) & 1);
			if ((n->shm_exclusive[i] && n->shm_exclusive[i] != c) || others > 0)
				rc = SQLITE_BUSY;
		}
		if (rc == SQLITE_OK) {
			for (int i = offset; i < offset + count; i++)
				n->shm_exclusive[i] = c;
			c->shm_excl_mask |= mask;
		}
	}
	pthread_mutex_unlock(&nodes_lock);
	return rc;
}

static void x_shm_barrier(sqlite3_file *f)
{
	(void)f;
	__sync_synchronize();
}

static int x_shm_unmap(sqlite3_file *f, int delete_flag)
{
	/* Regions live as long as the node (the last connection to close
	 * frees them); nothing of the WAL index is on the device. */
	struct conn *c = (struct conn *)f;
	(void)delete_flag;
	if (c->shm_excl_mask || c->shm_shared_mask)
		x_shm_lock(f, 0, SQLITE_SHM_NLOCK, SQLITE_SHM_UNLOCK);
	return SQLITE_OK;
}

static const sqlite3_io_methods io_methods = {
	.iVersion = 2,
	.xClose = x_close,
	.xRead = x_read,
	.xWrite = x_write,
	.xTruncate = x_truncate,
	.xSync = x_sync,
	.xFileSize = x_file_size,
	.xLock = x_lock,
	.xUnlock = x_unlock,
	.xCheckReservedLock = x_check_reserved,
	.xFileControl = x_file_control,
	.xSectorSize = x_sector_size,
	.xDeviceCharacteristics = x_device_characteristics,
	.xShmMap = x_shm_map,
	.xShmLock = x_shm_lock,
	.xShmBarrier = x_shm_barrier,
	.xShmUnmap = x_shm_unmap,
};

/* --- VFS methods ------------------------------------------------------- */

static int x_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out_flags)
{
	static int temp_counter;
	struct conn *c = (struct conn *)f;
	char path[512];
	(void)vfs;
	memset(c, 0, sizeof(*c));
	if (name) {
		if (full_path(name, sizeof path, path) != SQLITE_OK)
			return SQLITE_CANTOPEN;
	} else {
		snprintf(path, sizeof path, "/.sqlite-temp-%d", __sync_fetch_and_add(&temp_counter, 1));
	}
	/* libpollfs refuses a write through a handle opened read-only. */
	int oflags = (flags & SQLITE_OPEN_READONLY) ? O_RDONLY : O_RDWR;
	if (flags & SQLITE_OPEN_CREATE)
		oflags |= O_CREAT;
	if (flags & SQLITE_OPEN_EXCLUSIVE)
		oflags |= O_EXCL;
	PollfsStat st;
	int existed = pollfs_stat(vfs_fs, path, &st) == 0;
	if (pollfs_open(vfs_fs, path, oflags, 0644, &c->file) < 0)
		return SQLITE_CANTOPEN;
	if (!existed && (flags & (SQLITE_OPEN_MAIN_JOURNAL | SQLITE_OPEN_SUPER_JOURNAL |
				  SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_DB)))
		c->need_dirsync = 1;
	if (flags & SQLITE_OPEN_DELETEONCLOSE || !name)
		c->delete_path = sqlite3_mprintf("%s", path);
	if (flags & SQLITE_OPEN_MAIN_DB) {
		c->node = node_get(path);
		if (!c->node) {
			pollfs_close(c->file);
			sqlite3_free(c->delete_path);
			return SQLITE_NOMEM;
		}
	}
	if (out_flags)
		*out_flags = flags;
	c->base.pMethods = &io_methods;
	return SQLITE_OK;
}

static int x_delete(sqlite3_vfs *vfs, const char *name, int sync)
{
	char path[512];
	(void)vfs;
	if (full_path(name, sizeof path, path) != SQLITE_OK)
		return SQLITE_IOERR_DELETE;
	int r = pollfs_remove(vfs_fs, path);
	if (r == -ENOENT)
		return SQLITE_IOERR_DELETE_NOENT;
	if (r < 0)
		return SQLITE_IOERR_DELETE;
	return sync ? sync_dir() : SQLITE_OK;
}

static int x_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	char path[512];
	PollfsStat st;
	(void)vfs;
	(void)flags; /* pollfs checks no permissions: what exists is readable and writable */
	*out = full_path(name, sizeof path, path) == SQLITE_OK && pollfs_stat(vfs_fs, path, &st) == 0;
	return SQLITE_OK;
}

static int x_full_pathname(sqlite3_vfs *vfs, const char *name, int out_len, char *out)
{
	(void)vfs;
	return full_path(name, out_len, out);
}

/* Loading libraries, randomness, time: the default VFS's. */
static sqlite3_vfs *base_vfs;

static void *x_dlopen(sqlite3_vfs *v, const char *p)
{
	(void)v;
	return base_vfs->xDlOpen(base_vfs, p);
}
static void x_dlerror(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	base_vfs->xDlError(base_vfs, n, out);
}
static void (*x_dlsym(sqlite3_vfs *v, void *h, const char *s))(void)
{
	(void)v;
	return base_vfs->xDlSym(base_vfs, h, s);
}
static void x_dlclose(sqlite3_vfs *v, void *h)
{
	(void)v;
	base_vfs->xDlClose(base_vfs, h);
}
static int x_randomness(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	return base_vfs->xRandomness(base_vfs, n, out);
}
static int x_sleep(sqlite3_vfs *v, int us)
{
	(void)v;
	return base_vfs->xSleep(base_vfs, us);
}
static int x_current_time(sqlite3_vfs *v, double *t)
{
	(void)v;
	return base_vfs->xCurrentTime(base_vfs, t);
}
static int x_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *t)
{
	(void)v;
	return base_vfs->xCurrentTimeInt64(base_vfs, t);
}
static int x_get_last_error(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	if (n > 0)
		snprintf(out, (size_t)n, "%s", pollfs_last_error());
	return 0;
}

static sqlite3_vfs pollfs_vfs = {
	.iVersion = 2,
	.szOsFile = sizeof(struct conn),
	.mxPathname = 511,
	.zName = "pollfs",
	.xOpen = x_open,
	.xDelete = x_delete,
	.xAccess = x_access,
	.xFullPathname = x_full_pathname,
	.xDlOpen = x_dlopen,
	.xDlError = x_dlerror,
	.xDlSym = x_dlsym,
	.xDlClose = x_dlclose,
	.xRandomness = x_randomness,
	.xSleep = x_sleep,
	.xCurrentTime = x_current_time,
	.xGetLastError = x_get_last_error,
	.xCurrentTimeInt64 = x_current_time_int64,
};

int pollfs_sqlite_register(PollfsFs *fs, int make_default)
{
	if (vfs_fs)
		return vfs_fs == fs ? SQLITE_OK : SQLITE_MISUSE;
	base_vfs = sqlite3_vfs_find(NULL);
	if (!base_vfs)
		return SQLITE_ERROR;
	vfs_fs = fs;
	return sqlite3_vfs_register(&pollfs_vfs, make_default);
}

int pollfs_sqlite_unregister(void)
{
	if (!vfs_fs)
		return SQLITE_OK;
	pthread_mutex_lock(&nodes_lock);
	int busy = nodes != NULL;
	pthread_mutex_unlock(&nodes_lock);
	if (busy)
		return SQLITE_BUSY;
	int rc = sqlite3_vfs_unregister(&pollfs_vfs);
	if (rc == SQLITE_OK)
		vfs_fs = NULL;
	return rc;
}

int pollfs_sqlite_register_env(const char *unused)
{
	(void)unused;
	if (vfs_fs)
		return SQLITE_OK;
	const char *dev = getenv("POLLFS_DEV");
	const char *cache = getenv("POLLFS_CACHE_MB");
	const char *size = getenv("POLLFS_SIZE_MB");
	const char *format = getenv("POLLFS_FORMAT");
	if (!dev || !*dev)
		dev = "emu";
	PollfsOptions opts = {
		.cache_pages = (uint32_t)(cache ? atoi(cache) : 256) * 256,
		.size_bytes = (uint64_t)(size ? atoi(size) : 0) << 20,
	};
	PollfsFs *fs = NULL;
	int fresh = format && strcmp(format, "1") == 0;
	/* A device in memory starts empty: pollfs_mount formats it. */
	int r = fresh ? pollfs_format(dev, &opts, &fs) : pollfs_mount(dev, &opts, &fs);
	if (r < 0) {
		fprintf(stderr, "pollfs vfs: %s\n", pollfs_last_error());
		return SQLITE_CANTOPEN;
	}
	return pollfs_sqlite_register(fs, 0);
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_pollfssqlite_init(sqlite3 *db, char **err, const sqlite3_api_routines *api)
{
	SQLITE_EXTENSION_INIT2(api);
	(void)db;
	int rc = pollfs_sqlite_register_env(NULL);
	if (rc != SQLITE_OK) {
		*err = sqlite3_mprintf("pollfs vfs: %s", pollfs_last_error());
		return rc;
	}
	/* Stay loaded after this connection closes: the VFS is registered. */
	return SQLITE_OK_LOAD_PERMANENTLY;
}
