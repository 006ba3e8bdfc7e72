//! The shared library's soname: `libpollfs.so.0` (the C ABI's major
//! version), so programs linked against it keep finding a compatible one.

fn main() {
    let target = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpollfs.so.0");
    }
}
