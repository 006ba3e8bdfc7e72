//! The few SQLite calls the crash test makes, through the system's
//! libsqlite3 (the C declarations written out here), and the pollfs VFS's
//! registration. Each `unsafe` block is one C call with the pointers this
//! module made.
#![allow(clippy::unwrap_used)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use pollfs::PollfsFs;

#[repr(C)]
#[derive(Debug)]
struct Sqlite3 {
    _private: [u8; 0],
}
#[repr(C)]
#[derive(Debug)]
struct Stmt {
    _private: [u8; 0],
}

const SQLITE_OK: c_int = 0;
const SQLITE_ROW: c_int = 100;
const SQLITE_DONE: c_int = 101;
const SQLITE_OPEN_READWRITE: c_int = 0x2;
const SQLITE_OPEN_CREATE: c_int = 0x4;

extern "C" {
    fn sqlite3_open_v2(
        name: *const c_char,
        db: *mut *mut Sqlite3,
        flags: c_int,
        vfs: *const c_char,
    ) -> c_int;
    fn sqlite3_close(db: *mut Sqlite3) -> c_int;
    fn sqlite3_exec(
        db: *mut Sqlite3,
        sql: *const c_char,
        cb: *const c_void,
        arg: *mut c_void,
        err: *mut *mut c_char,
    ) -> c_int;
    fn sqlite3_errmsg(db: *mut Sqlite3) -> *const c_char;
    fn sqlite3_prepare_v2(
        db: *mut Sqlite3,
        sql: *const c_char,
        n: c_int,
        stmt: *mut *mut Stmt,
        tail: *mut *const c_char,
    ) -> c_int;
    fn sqlite3_step(stmt: *mut Stmt) -> c_int;
    fn sqlite3_column_int64(stmt: *mut Stmt, i: c_int) -> i64;
    fn sqlite3_column_text(stmt: *mut Stmt, i: c_int) -> *const u8;
    fn sqlite3_column_count(stmt: *mut Stmt) -> c_int;
    fn sqlite3_finalize(stmt: *mut Stmt) -> c_int;
    fn pollfs_sqlite_register(fs: *mut c_void, make_default: c_int) -> c_int;
    fn pollfs_sqlite_unregister() -> c_int;
    fn pollfs_unmount(fs: *mut c_void) -> c_int;
}

/// The VFS registered on a filesystem handle; unregistered (and the handle
/// freed, without a sync: what a crash would leave stays as it is) on drop.
#[derive(Debug)]
pub struct Registered(*mut PollfsFs);

impl Registered {
    pub fn new(fs: *mut PollfsFs) -> Registered {
        // SAFETY: `fs` is a live handle from `into_handle`.
        let rc = unsafe { pollfs_sqlite_register(fs.cast(), 0) };
        assert_eq!(rc, SQLITE_OK, "registering the pollfs VFS");
        Registered(fs)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: no database is open (each `Db` drops before this).
        let rc = unsafe { pollfs_sqlite_unregister() };
        assert_eq!(rc, SQLITE_OK, "unregistering the pollfs VFS");
        // Free the handle; its unmount syncs, which only matters to the
        // workload, whose recording has ended by then or which unmounts
        // its own clone after.
        // SAFETY: the handle is ours and not used again.
        unsafe { pollfs_unmount(self.0.cast()) };
    }
}

/// An open database on the pollfs VFS.
#[derive(Debug)]
pub struct Db(*mut Sqlite3);

impl Db {
    pub fn open(path: &str) -> Result<Db, String> {
        let name = CString::new(path).unwrap();
        let mut db = std::ptr::null_mut();
        // SAFETY: valid strings and an out pointer.
        let rc = unsafe {
            sqlite3_open_v2(
                name.as_ptr(),
                &mut db,
                SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                c"pollfs".as_ptr(),
            )
        };
        let db = Db(db);
        if rc != SQLITE_OK {
            return Err(db.error());
        }
        Ok(db)
    }

    fn error(&self) -> String {
        // SAFETY: `errmsg` takes any handle (NULL included) and returns a
        // string that lives until the next call.
        unsafe { CStr::from_ptr(sqlite3_errmsg(self.0)) }
            .to_string_lossy()
            .into_owned()
    }

    pub fn exec(&self, sql: &str) -> Result<(), String> {
        let sql = CString::new(sql).unwrap();
        // SAFETY: an open handle and a valid string; no callback.
        let rc = unsafe {
            sqlite3_exec(
                self.0,
                sql.as_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if rc == SQLITE_OK {
            Ok(())
        } else {
            Err(self.error())
        }
    }

    /// Rows of (integer, text) of a query of one or two columns: a single
    /// column is read as text, with 0 as its integer.
    pub fn rows(&self, sql: &str) -> Result<Vec<(i64, String)>, String> {
        let sql = CString::new(sql).unwrap();
        let mut stmt = std::ptr::null_mut();
        // SAFETY: an open handle, a valid string, out pointers.
        let rc = unsafe {
            sqlite3_prepare_v2(self.0, sql.as_ptr(), -1, &mut stmt, std::ptr::null_mut())
        };
        if rc != SQLITE_OK {
            return Err(self.error());
        }
        let mut out = Vec::new();
        let result = loop {
            // SAFETY: a prepared statement.
            match unsafe { sqlite3_step(stmt) } {
                SQLITE_ROW => {
                    // SAFETY: a statement on a row; text stays valid until
                    // the next step, and is copied before it.
                    let row = unsafe {
                        let two = sqlite3_column_count(stmt) > 1;
                        let (k, col) = if two {
                            (sqlite3_column_int64(stmt, 0), 1)
                        } else {
                            (0, 0)
                        };
                        let t = sqlite3_column_text(stmt, col);
                        let v = if t.is_null() {
                            String::new()
                        } else {
                            CStr::from_ptr(t.cast()).to_string_lossy().into_owned()
                        };
                        (k, v)
                    };
                    out.push(row);
                }
                SQLITE_DONE => break Ok(out),
                _ => break Err(self.error()),
            }
        };
        // SAFETY: the statement is not used again.
        unsafe { sqlite3_finalize(stmt) };
        result
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // SAFETY: the handle is not used again.
        unsafe { sqlite3_close(self.0) };
    }
}
