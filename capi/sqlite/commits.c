/*
 * SQLite commits per second with synchronous=FULL: N transactions of one
 * small insert each, on a VFS and a journal mode.
 *   commits VFS DB N [delete|wal]
 * VFS `pollfs` registers the pollfs VFS first (see pollfs_sqlite.h for its
 * environment); any other is a VFS SQLite has (unix). Prints one line:
 * vfs, journal mode, commits, seconds, commits per second.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "pollfs_sqlite.h"

static void check(int rc, sqlite3 *db, const char *what)
{
	if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
		fprintf(stderr, "%s: %s\n", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: commits VFS DB N [delete|wal]\n");
		return 2;
	}
	const char *vfs = argv[1], *path = argv[2];
	int n = atoi(argv[3]);
	const char *mode = argc > 4 ? argv[4] : "delete";
	if (strcmp(vfs, "pollfs") == 0)
		check(pollfs_sqlite_register_env(NULL), NULL, "registering the pollfs VFS");
	sqlite3 *db = NULL;
	check(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs), db, "open");
	char sql[128];
	snprintf(sql, sizeof sql, "PRAGMA journal_mode=%s", mode);
	check(sqlite3_exec(db, sql, 0, 0, 0), db, sql);
	check(sqlite3_exec(db, "PRAGMA synchronous=FULL; CREATE TABLE IF NOT EXISTS t(a INTEGER PRIMARY KEY, b BLOB)", 0, 0, 0), db, "setup");
	sqlite3_stmt *ins;
	check(sqlite3_prepare_v2(db, "INSERT INTO t(b) VALUES(randomblob(100))", -1, &ins, 0), db, "prepare");
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++) {
		check(sqlite3_step(ins), db, "insert");
		sqlite3_reset(ins);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	sqlite3_finalize(ins);
	sqlite3_stmt *count;
	check(sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &count, 0), db, "count");
	check(sqlite3_step(count), db, "count");
	int rows = sqlite3_column_int(count, 0);
	sqlite3_finalize(count);
	check(sqlite3_close(db), NULL, "close");
	if (rows < n) {
		fprintf(stderr, "only %d rows after %d commits\n", rows, n);
		return 1;
	}
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	printf("%-7s %-7s %7d %8.3f %10.0f\n", vfs, mode, n, s, n / s);
	return 0;
}
