//! The open rules, on devices this process can make: `emu`, `ram`,
//! `file:` and volumes of them.

use std::path::PathBuf;

use pollfs_core::dev::BlockDevice;
use pollfs_core::hosted::config;

use crate::error::{Arenas, OpenErrorKind};
use crate::open::{open, open_fs, Access, OpenOptions};
use crate::signature::Found;
use crate::spec::DeviceSpec;

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pollfs-device-{}-{name}", std::process::id()))
}

fn spec(s: &str) -> DeviceSpec {
    DeviceSpec::parse(s).unwrap()
}

fn options(access: Access) -> OpenOptions {
    OpenOptions {
        size: 64 << 20,
        create: true,
        ..OpenOptions::new(access, 256)
    }
}

fn kind(r: Result<impl std::fmt::Debug, crate::OpenError>) -> OpenErrorKind {
    r.unwrap_err().kind
}

#[test]
fn every_single_device_and_volume_opens_as_one_type() {
    let a = temp("one-a");
    let b = temp("one-b");
    for name in [
        "emu".to_string(),
        "ram".to_string(),
        format!("file:{}", a.display()),
        format!("mirror:(file:{},file:{})", a.display(), b.display()),
        "stripe:64k:(ram,ram)".to_string(),
        "mirror:(emu,emu)".to_string(),
        format!("stripe:(emu,file:{})", b.display()),
    ] {
        let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
        let fs = open_fs(
            &spec(&name),
            &options(Access::Format { force: false }),
            config(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        fs.create("x").unwrap().write_all_at(b"hello", 0).unwrap();
        fs.unmount().unwrap();
    }
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
}

#[test]
fn a_file_formatted_then_mounts_with_its_data() {
    let p = temp("remount");
    let _ = std::fs::remove_file(&p);
    let name = spec(&format!("file:{}", p.display()));
    let fs = open_fs(&name, &options(Access::Format { force: false }), config()).unwrap();
    fs.create("kept").unwrap().write_all_at(b"data", 0).unwrap();
    fs.unmount().unwrap();
    let fs = open_fs(&name, &options(Access::Write), config()).unwrap();
    let mut buf = [0u8; 4];
    fs.open("kept").unwrap().read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"data");
    // A second opener is shut out while the first has it.
    assert!(matches!(
        kind(open(&name, &options(Access::Read))),
        OpenErrorKind::InUse
    ));
    fs.unmount().unwrap();
    // And the format refuses to overwrite it, unless forced.
    assert!(matches!(
        kind(open(&name, &options(Access::Format { force: false }))),
        OpenErrorKind::HoldsData(Found::Pollfs)
    ));
    assert!(open(&name, &options(Access::Format { force: true })).is_ok());
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn each_mistake_is_its_own_kind() {
    let missing = spec(&format!("file:{}", temp("missing").display()));
    let read = OpenOptions::new(Access::Read, 64);
    assert!(matches!(
        kind(open(&missing, &read)),
        OpenErrorKind::NoSuchFile
    ));
    assert!(matches!(
        kind(open_fs(
            &spec("mirror:(emu,file:/nonexistent)"),
            &read,
            config()
        )),
        OpenErrorKind::NothingThere
    ));
    assert!(matches!(
        kind(open(
            &spec("mirror:(emu,nvme-tcp://127.0.0.1:1/nqn.x)"),
            &read
        )),
        OpenErrorKind::Arenas(Arenas::TcpWithDma)
    ));
    assert!(matches!(
        kind(open(&spec("mirror:(vfio:0000:01:00.0,emu)"), &read)),
        OpenErrorKind::Arenas(Arenas::EmuWithVfio)
    ));
    #[cfg(target_os = "linux")]
    assert!(matches!(
        kind(open(
            &spec("stripe:(vfio:0000:01:00.0,vfio:0000:01:00.0)"),
            &read
        )),
        OpenErrorKind::NamedTwice
    ));
    let small = OpenOptions {
        size: 64 << 10,
        ..options(Access::Format { force: false })
    };
    assert!(matches!(
        kind(open(&spec("ram"), &small)),
        OpenErrorKind::TooSmall { .. }
    ));
    let dir = spec(&format!("file:{}", std::env::temp_dir().display()));
    assert!(matches!(kind(open(&dir, &read)), OpenErrorKind::File(_)));
}

#[test]
fn a_failed_format_removes_the_files_it_made() {
    let a = temp("failed-a");
    let b = temp("failed-b");
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
    std::fs::write(&b, vec![1u8; 64 << 20]).unwrap();
    let name = spec(&format!(
        "mirror:(file:{},file:{})",
        a.display(),
        b.display()
    ));
    assert!(matches!(
        kind(open(&name, &options(Access::Format { force: false }))),
        OpenErrorKind::HoldsData(Found::Data { offset: 0 })
    ));
    assert!(!a.exists(), "the new leg is gone again");
    assert!(b.exists(), "the leg that was there stays");
    std::fs::remove_file(&b).unwrap();
}

#[test]
fn a_single_controller_tells_its_queues() {
    let dev = open(&spec("emu"), &options(Access::Write)).unwrap();
    assert!(dev.io_queues().unwrap() > 0);
    assert_eq!(dev.geometry().capacity_pages(), (64 << 20) / 4096);
    assert_eq!(dev.name(), "emu");
}

/// Reads a mirror's dirty flag.
struct Dirty;

impl crate::DeviceJob for Dirty {
    type Output = bool;
    type Error = crate::OpenError;
    fn run<D: BlockDevice>(self, _dev: D, what: &str) -> Result<bool, crate::OpenError> {
        panic!("{what}: opened as a mirror")
    }
    fn run_mirror<L: BlockDevice>(
        self,
        m: pollfs_core::volume::Mirror<L>,
        _what: &str,
    ) -> Result<bool, crate::OpenError> {
        Ok(m.status().dirty)
    }
}

#[test]
fn a_writable_mirror_is_closed_clean_when_the_device_goes() {
    let a = temp("clean-a");
    let b = temp("clean-b");
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
    let name = spec(&format!(
        "mirror:(file:{},file:{})",
        a.display(),
        b.display()
    ));
    let fs = open_fs(&name, &options(Access::Format { force: false }), config()).unwrap();
    fs.create("x").unwrap().write_all_at(b"kept", 0).unwrap();
    fs.unmount().unwrap();
    let read = OpenOptions::new(Access::Read, 64);
    assert!(!crate::run(&name, &read, Dirty).unwrap(), "closed on drop");
    // Taken, the closer is the caller's to call, and says how it went.
    let mut dev = open(&name, &options(Access::Write)).unwrap();
    let closer = dev.take_closer();
    let fs = pollfs_core::Fs::mount(dev, config()).unwrap();
    fs.unmount().unwrap();
    assert!(crate::run(&name, &read, Dirty).unwrap(), "not closed yet");
    closer.close().unwrap();
    assert!(!crate::run(&name, &read, Dirty).unwrap());
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
}

#[test]
fn the_figures_name_the_device_and_each_leg_and_count_what_each_was_sent() {
    use crate::control::stats::{FsStats, Names, Role};
    let fs = open_fs(
        &spec("mirror:(emu,ram)"),
        &options(Access::Format { force: false }),
        config(),
    )
    .unwrap();
    let before = FsStats::of_named(&fs, &Names::of(fs.device()));
    let f = fs.create("x").unwrap();
    f.write_all_at(&[1; 16384], 0).unwrap();
    f.sync_data().unwrap();
    let after = FsStats::of_named(&fs, &Names::of(fs.device()));
    let names: Vec<(&str, Role, Option<usize>)> = after
        .devices
        .iter()
        .map(|d| (d.name.as_str(), d.role, d.leg))
        .collect();
    assert_eq!(
        names,
        [
            ("mirror:(emu,ram)", Role::Device, None),
            ("emu", Role::MirrorLeg, Some(0)),
            ("ram", Role::MirrorLeg, Some(1)),
        ]
    );
    let d = after.since(&before);
    // The whole device's commands are the engine's; each leg got every
    // write (and the mirror's own header writes on top).
    assert_eq!(
        d.devices[0].counter("write_bytes"),
        d.counter("dev_write_bytes")
    );
    for leg in &d.devices[1..] {
        assert!(
            leg.counter("write_bytes") >= d.counter("dev_write_bytes"),
            "{leg:?} {d:?}"
        );
        assert_eq!(leg.counter("errors"), 0);
        assert_eq!(leg.counter("resets"), 0);
    }
    assert!(after.devices[1].counters.contains_key("reconnects"));
    fs.unmount().unwrap();
}
