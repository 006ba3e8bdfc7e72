/*
 * The pollfs SQLite VFS between two connections of one process: a writer
 * holding the database keeps the other from writing (SQLITE_BUSY) until it
 * commits, in rollback-journal mode; in WAL mode a reader keeps its
 * snapshot while the other connection commits, and sees the commit after
 * its transaction ends. Exits non-zero on the first difference.
 * Built by capi/scripts/sqlite.sh; run by `just speedtest`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "pollfs_sqlite.h"

static int failures;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            failures++;                                                                \
        }                                                                              \
    } while (0)

static sqlite3 *open_db(const char *path) {
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, "pollfs");
    if (rc != SQLITE_OK) {
        fprintf(stderr, "open %s: %s\n", path, sqlite3_errmsg(db));
        exit(1);
    }
    return db;
}

static int exec(sqlite3 *db, const char *sql) {
    return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

static long count(sqlite3 *db) {
    sqlite3_stmt *st;
    long n = -1;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

static void two_connections(const char *path, const char *mode) {
    sqlite3 *a = open_db(path), *b = open_db(path);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA journal_mode=%s", mode);
    CHECK(exec(a, sql) == SQLITE_OK);
    CHECK(exec(a, "CREATE TABLE t(x)") == SQLITE_OK);
    CHECK(exec(a, "INSERT INTO t VALUES(1)") == SQLITE_OK);

    /* A writer keeps the other from writing until it commits. */
    CHECK(exec(a, "BEGIN IMMEDIATE; INSERT INTO t VALUES(2)") == SQLITE_OK);
    CHECK(exec(b, "BEGIN IMMEDIATE") == SQLITE_BUSY);
    CHECK(exec(b, "INSERT INTO t VALUES(3)") == SQLITE_BUSY);
    CHECK(exec(a, "COMMIT") == SQLITE_OK);
    CHECK(exec(b, "INSERT INTO t VALUES(3)") == SQLITE_OK);
    CHECK(count(a) == 3 && count(b) == 3);

    if (strcmp(mode, "wal") == 0) {
        /* A reader keeps its snapshot while the other commits. */
        CHECK(exec(b, "BEGIN") == SQLITE_OK);
        CHECK(count(b) == 3);
        CHECK(exec(a, "INSERT INTO t VALUES(4)") == SQLITE_OK);
        CHECK(count(b) == 3);
        CHECK(exec(b, "COMMIT") == SQLITE_OK);
        CHECK(count(b) == 4);
    } else {
        /* A reader keeps a writer from committing (it cannot get
         * EXCLUSIVE) until the reader's transaction ends. */
        CHECK(exec(b, "BEGIN") == SQLITE_OK);
        CHECK(count(b) == 3);
        CHECK(exec(a, "INSERT INTO t VALUES(4)") == SQLITE_BUSY);
        CHECK(exec(b, "COMMIT") == SQLITE_OK);
        CHECK(exec(a, "INSERT INTO t VALUES(4)") == SQLITE_OK);
        CHECK(count(b) == 4);
    }
    CHECK(sqlite3_close(a) == SQLITE_OK);
    CHECK(sqlite3_close(b) == SQLITE_OK);
}

int main(void) {
    if (pollfs_sqlite_register_env(NULL) != SQLITE_OK)
        return 1;
    two_connections("/delete.db", "delete");
    two_connections("/wal.db", "wal");
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("pollfs VFS: two connections, rollback journal and WAL: ok\n");
    return 0;
}
