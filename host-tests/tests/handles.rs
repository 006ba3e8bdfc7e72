//! Owned handles: files shared by threads, the namespace on `Fs`, errors
//! as `std` sees them, the `std::io` cursor, and sessions lent per
//! operation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use pollfs_core::error::{ConfigError, NamespaceError, RangeError};
use pollfs_core::{Error, FileCursor};
use pollfs_host_tests::model::pattern;
use pollfs_host_tests::setup::ram_fs;

#[test]
fn one_handle_serves_many_threads() {
    let fs = ram_fs(32 << 20, 256);
    let f = Arc::new(fs.create("shared").unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..64u64 {
                    let off = (i * 4 + t) * 4096;
                    f.write_all_at(&pattern(t, off, 4096), off).unwrap();
                }
                f.sync_data().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut buf = vec![0; 4096];
    for t in 0..4u64 {
        for i in 0..64u64 {
            let off = (i * 4 + t) * 4096;
            f.read_exact_at(&mut buf, off).unwrap();
            assert_eq!(buf, pattern(t, off, 4096));
        }
    }
    assert_eq!(f.metadata().len, 256 * 4096);
    assert_eq!(f.metadata().blocks, 256);
}

#[test]
fn a_clone_keeps_an_unlinked_file_open() {
    let fs = ram_fs(16 << 20, 64);
    let f = fs.create("gone").unwrap();
    f.write_all_at(b"still here", 0).unwrap();
    let g = f.clone();
    drop(f);
    fs.remove("gone").unwrap();
    assert!(!fs.exists("gone"));
    let mut buf = [0u8; 10];
    g.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"still here");
    let again = fs.open_ino(g.ino()).unwrap();
    assert_eq!(again.len(), 10);
    let blocks = fs.free_blocks();
    drop((g, again));
    assert!(fs.free_blocks() > blocks, "the last close frees the blocks");
    assert!(fs.open_ino(pollfs_core::InodeId::ROOT).is_err());
}

#[test]
fn the_namespace_lives_on_fs() {
    let fs = ram_fs(16 << 20, 64);
    let a = fs.create("a").unwrap();
    fs.create("b").unwrap();
    assert_eq!(fs.lookup("a").unwrap(), a.ino());
    assert_eq!(
        fs.rename_noreplace("a", "b"),
        Err(NamespaceError::Exists.into())
    );
    fs.rename_noreplace("a", "c").unwrap();
    let names: Vec<String> = fs.entries().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["b", "c"]);
    assert_eq!(fs.open_or_create("d").unwrap().len(), 0);
    assert!(fs.exists("d"));
}

#[test]
fn errors_convert_to_io_errors_with_their_errno() {
    let fs = ram_fs(16 << 20, 64);
    let as_io = |e: Error| std::io::Error::from(e);
    let e = as_io(fs.open("nope").unwrap_err());
    assert_eq!((e.kind(), e.raw_os_error()), (ErrorKind::NotFound, Some(2)));
    fs.create("x").unwrap();
    let e = as_io(fs.create("x").unwrap_err());
    assert_eq!(
        (e.kind(), e.raw_os_error()),
        (ErrorKind::AlreadyExists, Some(17))
    );
    let e = as_io(fs.create(&"n".repeat(300)).unwrap_err());
    assert_eq!(e.raw_os_error(), Some(36));
    let f = fs.open("x").unwrap();
    let e = as_io(f.set_len(u64::MAX).unwrap_err());
    assert_eq!(e.raw_os_error(), Some(27));
    let mut buf = [0u8; 4];
    let e = f.read_exact_at(&mut buf, 0).unwrap_err();
    assert_eq!(e, Error::Range(RangeError::EndOfFile));
    assert_eq!(as_io(e).kind(), ErrorKind::UnexpectedEof);
    // readlink of a file is EINVAL; a link met on a path, which is not
    // followed, is ELOOP.
    let who = pollfs_core::NewInode::new(0o777, 0, 0);
    let link = fs
        .symlink_in(pollfs_core::InodeId::ROOT, "l", "x", who)
        .unwrap();
    let e = fs.readlink(f.ino()).unwrap_err();
    assert_eq!(e, Error::Namespace(NamespaceError::NotASymlink));
    assert_eq!(as_io(e).raw_os_error(), Some(22));
    assert_eq!(fs.readlink(link).unwrap(), "x");
    for path in ["l", "l/y"] {
        let e = fs.open(path).unwrap_err();
        assert_eq!(e, Error::Namespace(NamespaceError::IsASymlink), "{path}");
        assert_eq!(as_io(e).raw_os_error(), Some(40));
    }
    // `?` into a boxed error works.
    let boxed: Box<dyn std::error::Error> = Box::new(fs.open("nope").unwrap_err());
    assert_eq!(boxed.to_string(), "no such file");
}

#[test]
fn the_cursor_reads_writes_and_seeks_like_a_std_file() {
    let fs = ram_fs(16 << 20, 64);
    let mut c = FileCursor::new(fs.create("c").unwrap());
    c.write_all(b"hello, world").unwrap();
    assert_eq!(c.seek(SeekFrom::Current(-5)).unwrap(), 7);
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    assert_eq!(s, "world");
    c.seek(SeekFrom::End(2)).unwrap();
    c.write_all(b"!").unwrap();
    assert_eq!(c.file().len(), 15);
    assert!(c.seek(SeekFrom::Current(-100)).is_err());
    c.rewind().unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).unwrap();
    assert_eq!(all, b"hello, world\0\0!");
}

#[test]
fn explicit_sessions_and_lent_ones_see_the_same_file() {
    let fs = ram_fs(16 << 20, 64);
    let other = ram_fs(16 << 20, 64);
    let s = fs.session().unwrap();
    let f = fs.create("f").unwrap();
    s.write_all_at(&f, b"explicit", 0).unwrap();
    let mut buf = [0u8; 8];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"explicit");
    // A session works only on its own filesystem's files.
    let stranger = other.create("f").unwrap();
    assert!(matches!(
        s.read_at(&stranger, &mut buf, 0),
        Err(Error::Config(ConfigError::ForeignFile))
    ));
}

#[test]
fn the_last_handle_closes_the_device_while_threads_that_used_it_live_on() {
    use pollfs_core::Fs;
    use pollfs_driver::emu::StdClock;
    use pollfs_driver::PcieTransport;
    use pollfs_driver::{DriverConfig, EmuConfig, EmuController, EmuMemory, NvmeDevice};
    use std::sync::mpsc::channel;

    let memory = EmuMemory::new();
    let emu = EmuConfig {
        block_size: 4096,
        ..EmuConfig::default()
    };
    let ctrl = EmuController::new(emu, memory.clone());
    let open = || {
        let transport = PcieTransport::new(ctrl.clone(), memory.clone());
        NvmeDevice::new(transport, StdClock::new(), DriverConfig::default(), 128).unwrap()
    };
    let config = pollfs_host_tests::setup::config(96);
    let fs = Fs::format(open(), config, 7).unwrap();
    let used = channel();
    // Each thread waits on `quit` until its sender drops.
    let (quit_send, quit) = channel::<()>();
    let quit = Arc::new(std::sync::Mutex::new(quit));
    let mut threads = Vec::new();
    for t in 0..4u64 {
        let f = fs.create(&format!("f{t}")).unwrap();
        let (used, quit) = (used.0.clone(), quit.clone());
        threads.push(std::thread::spawn(move || {
            f.write_all_at(&pattern(t, 0, 8192), 0).unwrap();
            f.sync_data().unwrap();
            drop(f);
            used.send(()).unwrap();
            // Lives on, its session adopted, while the mount goes.
            let _ = quit.lock().unwrap().recv();
        }));
    }
    for _ in 0..4 {
        used.1.recv().unwrap();
    }
    assert!(ctrl.io_queues() >= 4, "each thread had a queue of its own");
    fs.unmount().unwrap();
    // The threads still run: every queue pair and DMA region is back all
    // the same, and the driver holds the controller no more.
    assert_eq!(ctrl.io_queues(), 0);
    assert_eq!(memory.regions(), 0);
    assert_eq!(Arc::strong_count(&ctrl), 1);
    let fs = Fs::mount(open(), config).unwrap();
    let mut buf = vec![0; 8192];
    for t in 0..4u64 {
        let f = fs.open(&format!("f{t}")).unwrap();
        f.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(buf, pattern(t, 0, 8192));
    }
    drop(quit_send);
    for t in threads {
        t.join().unwrap();
    }
}
