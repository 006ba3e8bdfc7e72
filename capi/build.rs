//! The shared library's soname: `libpollfs.so.0` (the C ABI's major
//! version), so programs linked against it keep finding a compatible one.
//! With the `crash-test` feature, also the SQLite VFS (C), for the crash
//! test to drive through the system's libsqlite3.

fn main() {
    let target = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpollfs.so.0");
    }
    #[cfg(feature = "crash-test")]
    {
        println!("cargo:rerun-if-changed=sqlite/pollfs_vfs.c");
        cc::Build::new()
            .file("sqlite/pollfs_vfs.c")
            .include("include")
            .include("sqlite")
            .define("SQLITE_CORE", None)
            .warnings_into_errors(true)
            .compile("pollfs_sqlite_vfs");
        println!("cargo:rustc-link-lib=sqlite3");
    }
}
