//! `pollfs mirror`: a mirror's state, and taking legs out and back in.

use anyhow::{anyhow, bail};
use pollfs_core::dev::BlockDevice;
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::volume::{LegState, Mirror, MirrorStatus};
use pollfs_device::units::show_bytes;
use pollfs_device::{Access, DeviceJob, DeviceSpec, Leaf};

/// Options of `pollfs mirror`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Each leg's state as the mirror's headers record it.
    Status {
        /// The mirror: `mirror:(DEV,DEV,...)`, its legs in their order.
        device: DeviceSpec,
    },
    /// Take a failed or stale leg back: it is copied from the legs in
    /// sync (the command waits for the copy) and then serves reads again.
    Rejoin {
        /// The mirror.
        device: DeviceSpec,
        /// The leg's position, from 0.
        leg: usize,
    },
    /// Drop a leg (to repair or replace it). The last leg in sync cannot
    /// be dropped.
    Fail {
        /// The mirror.
        device: DeviceSpec,
        /// The leg's position, from 0.
        leg: usize,
    },
}

/// Frames the command's mirror I/O needs.
pub const FRAMES: u32 = 64;

/// Runs `pollfs mirror`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let (device, action) = match &args.action {
        Action::Status { device } => (device, Admin::Status),
        Action::Rejoin { device, leg } => (device, Admin::Rejoin(*leg)),
        Action::Fail { device, leg } => (device, Admin::Fail(*leg)),
    };
    let DeviceSpec::Mirror(legs) = device else {
        bail!("{device}: not a mirror: name one as mirror:(DEV,DEV,...)");
    };
    if let Some(l) = device.memory_leg() {
        bail!("{device}: leg {l} keeps nothing between commands");
    }
    let access = match action {
        Admin::Status => Access::Read,
        Admin::Rejoin(_) | Admin::Fail(_) => Access::Write,
    };
    let options = crate::device::options(access, FRAMES);
    let text = pollfs_device::run(device, &options, AdminJob { action, legs })?;
    print!("{text}");
    Ok(())
}

#[derive(Clone, Copy, Debug)]
enum Admin {
    Status,
    Rejoin(usize),
    Fail(usize),
}

struct AdminJob<'a> {
    action: Admin,
    legs: &'a [Leaf],
}

impl DeviceJob for AdminJob<'_> {
    type Output = String;
    type Error = anyhow::Error;
    fn run<D: BlockDevice>(self, _dev: D, what: &str) -> anyhow::Result<String> {
        bail!("{what}: not a mirror")
    }
    fn run_mirror<L: BlockDevice>(self, m: Mirror<L>, what: &str) -> anyhow::Result<String> {
        let err = |e| anyhow!("{what}: {e}");
        match self.action {
            Admin::Status => {}
            Admin::Rejoin(leg) => {
                m.rejoin(leg).map_err(err)?;
                m.settle(monotonic_clock, std::thread::yield_now)
                    .map_err(err)?;
            }
            Admin::Fail(leg) => m.fail_leg(leg).map_err(err)?,
        }
        if !matches!(self.action, Admin::Status) {
            // Before the status, so it shows the mirror clean.
            m.close(monotonic_clock, std::thread::yield_now)
                .map_err(err)?;
        }
        Ok(render(
            what,
            &m.status(),
            m.geometry().block_size,
            self.legs,
        ))
    }
}

/// The status, one line for the mirror and one per leg.
pub fn render(what: &str, s: &MirrorStatus, block_size: u32, legs: &[Leaf]) -> String {
    let bytes = s.data_blocks * u64::from(block_size);
    let mut out = format!(
        "{what}: mirror {:016x}, {} legs, {} ({} blocks of {block_size} bytes), generation {}, {}\n",
        s.uuid,
        s.legs.len(),
        show_bytes(bytes),
        s.data_blocks,
        s.generation,
        if s.dirty { "not closed cleanly" } else { "clean" },
    );
    out.push_str(&format!(
        "write-intent bitmap: {} of {} regions of {} dirty (a returning leg is copied there only)\n",
        s.dirty_regions,
        s.regions,
        show_bytes(s.region_bytes),
    ));
    if s.resync_copied > 0 {
        out.push_str(&format!(
            "resync copied {} of the mirror's {}\n",
            show_bytes(s.resync_copied * u64::from(block_size)),
            show_bytes(bytes),
        ));
    }
    for (i, ((state, errors), leaf)) in s.legs.iter().zip(legs).enumerate() {
        let note = match state {
            LegState::Stale if s.dirty => " (copied from a leg in sync at the next writable open)",
            LegState::Stale => " (copied at the next writable open)",
            LegState::Failed => " (`pollfs mirror rejoin` takes it back)",
            _ => "",
        };
        out.push_str(&format!("leg {i} {leaf}: {state}{note}"));
        if errors.reads + errors.writes > 0 {
            out.push_str(&format!(
                "; {} read and {} write errors",
                errors.reads, errors.writes
            ));
        }
        out.push('\n');
    }
    out
}
