//! With feature `sqlite`: the SQLite VFS (C, `capi/sqlite`) compiled into
//! the crash test, which links the system's libsqlite3 and libpollfs's
//! Rust library (the VFS calls its C functions).

fn main() {
    if std::env::var_os("CARGO_FEATURE_SQLITE").is_none() {
        return;
    }
    println!("cargo:rerun-if-changed=../sqlite/pollfs_vfs.c");
    println!("cargo:rerun-if-changed=../sqlite/pollfs_sqlite.h");
    println!("cargo:rerun-if-changed=../include/pollfs.h");
    cc::Build::new()
        .file("../sqlite/pollfs_vfs.c")
        .include("../include")
        .include("../sqlite")
        .define("SQLITE_CORE", None)
        .warnings_into_errors(true)
        .compile("pollfs_sqlite_vfs");
    println!("cargo:rustc-link-lib=sqlite3");
}
