#!/usr/bin/env bash
# The pollfs SQLite VFS from Debian's sqlite3 shell: load the extension,
# fill a table in rollback-journal mode, switch to WAL, write a second
# database attached to the same connection, check the sums and
# integrity_check; any difference from the expected output fails.
#   sqlite-shell.sh PATH/libpollfs_sqlite.so
set -euo pipefail
ext=${1:?usage: sqlite-shell.sh PATH/libpollfs_sqlite.so}
ext=${ext%.so}
sql=$(mktemp)
trap 'rm -f "$sql"' EXIT
cat > "$sql" <<EOF
.load $ext
.open file:app.db?vfs=pollfs
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<5000)
  INSERT INTO t SELECT x, hex(randomblob(40)) FROM c;
SELECT count(*), sum(a) FROM t;
PRAGMA journal_mode=WAL;
BEGIN; UPDATE t SET b = 'w' WHERE a % 2 = 0; COMMIT;
ATTACH 'file:other.db?vfs=pollfs' AS o;
CREATE TABLE o.u AS SELECT * FROM t WHERE b = 'w';
SELECT count(*) FROM o.u;
PRAGMA wal_checkpoint(TRUNCATE);
PRAGMA integrity_check;
PRAGMA o.integrity_check;
SELECT file FROM pragma_database_list WHERE name = 'main';
EOF
got=$(sqlite3 -batch < "$sql")
want='5000|12502500
wal
2500
0|0|0
ok
ok
/app.db'
if [ "$got" != "$want" ]; then
    printf 'sqlite3 shell on the pollfs VFS:\n--- got\n%s\n--- want\n%s\n' "$got" "$want" >&2
    exit 1
fi
echo "sqlite3 shell on the pollfs VFS: ok"
