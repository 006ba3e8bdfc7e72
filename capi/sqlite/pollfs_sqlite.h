/* The pollfs SQLite VFS (pollfs_vfs.c). */
#ifndef POLLFS_SQLITE_H
#define POLLFS_SQLITE_H

#include "pollfs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the VFS "pollfs" on the mounted filesystem `fs` (which must
 * stay mounted while databases are open), as the default VFS if
 * `make_default`. One filesystem per process: a second call with another
 * returns SQLITE_MISUSE. Returns a SQLite result code. */
int pollfs_sqlite_register(PollfsFs *fs, int make_default);

/* Unregisters the VFS, so that another filesystem may be registered; the
 * filesystem stays mounted (the caller unmounts it). SQLITE_BUSY while a
 * database is open on it. Returns a SQLite result code. */
int pollfs_sqlite_unregister(void);

/* Mounts the device POLLFS_DEV names (default `emu`, formatted as it starts
 * empty; another is formatted if POLLFS_FORMAT=1, of POLLFS_SIZE_MB MiB if
 * it is made, else mounted) with a cache of POLLFS_CACHE_MB MiB (default
 * 256) and registers the VFS on it.
 * The argument is unused. Returns a SQLite result code. */
int pollfs_sqlite_register_env(const char *unused);

#ifdef __cplusplus
}
#endif

#endif
