//! NVMe tools on the pollfs driver: `identify`, `perf` and `setup`.
//!
//! `identify` and `perf` take a DEVICE: `emu` for the emulated controller
//! (no hardware needed, useful to check the tools and the driver's own CPU
//! cost), `vfio:<pci-address>` for a controller bound to vfio-pci (see
//! `setup`), or `nvme-tcp://HOST:PORT/NQN` for an NVMe/TCP subsystem
//! (`?hdgst=1&ddgst=1` asks for header and data digests, `&kato=MS` sets
//! the Keep Alive Timeout, `&reconnect=MS` how long a reset keeps trying
//! to reach the target, `&hostnqn=NQN&dhchap_key_file=PATH` the host's
//! name and the file with its DH-HMAC-CHAP secret for a target that
//! requires authentication, `&dhchap_ctrl_key_file=PATH` the controller's
//! for checking the target too, `&tls_key_file=PATH` the file with the
//! TLS pre-shared key for a target that requires TLS, with
//! `&tls_derivation=compat` when the target's key was derived by
//! nvme-cli 2.13 or before; TLS is in a build with feature `tls` only,
//! which needs the system's OpenSSL, and a build without it refuses such
//! a name by saying so), or a stripe or mirror of such devices. The
//! device is named and opened by `pollfs_device` as everywhere else, and
//! the tools run generic code over it, so what is tested on `emu` is what
//! runs on hardware.

pub mod identify;
pub mod perf;
pub mod setup;
#[cfg(test)]
mod setup_tests;
mod sysfs;

use pollfs_device::{DeviceSpec, Leaf};

/// Namespace size of an `emu` device (and of `ram` legs).
pub const EMU_BYTES: u64 = 256 << 20;

/// A device the NVMe tools take: any but a `file:` (which has no
/// controller, and which they would write over).
pub fn parse_target(s: &str) -> anyhow::Result<DeviceSpec> {
    let spec = DeviceSpec::parse(s)?;
    if let Some(l) = spec.legs().iter().find(|l| matches!(l, Leaf::File(_))) {
        anyhow::bail!("{s}: {l}: the NVMe tools take emu, ram, vfio: and nvme-tcp:// devices");
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::parse_target;
    use pollfs_device::{DeviceSpec, Leaf, SpecProblem};

    #[test]
    fn targets_parse() {
        assert_eq!(parse_target("emu").unwrap(), DeviceSpec::One(Leaf::Emu));
        assert_eq!(
            parse_target("vfio:0000:01:00.0").unwrap(),
            DeviceSpec::One(Leaf::Vfio("0000:01:00.0".to_string()))
        );
        let problem = |s: &str| {
            parse_target(s)
                .unwrap_err()
                .downcast::<pollfs_device::SpecError>()
                .unwrap()
                .problem
        };
        assert_eq!(problem("vfio:01:00.0"), SpecProblem::PciAddress);
        assert_eq!(problem("/dev/nvme0n1"), SpecProblem::Unknown);
        assert!(matches!(
            problem("nvme-tcp://127.0.0.1:4420"),
            SpecProblem::Tcp(_)
        ));
        let e = parse_target("mirror:(emu,file:/x)")
            .unwrap_err()
            .to_string();
        assert!(e.contains("emu, ram, vfio: and nvme-tcp://"), "{e}");
    }
}
