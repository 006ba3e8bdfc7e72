//! The SQLite VFS's crash test (`tests/crash.rs`, feature `sqlite`, run by
//! `just capi-crash`), in a crate of its own so that libpollfs itself has
//! no test feature: the test mounts pollfs on host-tests' recording device,
//! passes it to the library as a `pollfs_device::AnyDevice`
//! (`AnyDevice::from_device`), and hands the filesystem to the VFS with
//! `pollfs::embed::into_handle`. Nothing here is linked by anything else.
