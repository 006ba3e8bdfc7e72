//! `pollfs mirror`: a mirror's state, and taking legs out, back in, and
//! replacing them.
//!
//! When a process has the mirror open (a mount, a bench or a library user
//! that serves its control socket, [`pollfs_device::control`]), the
//! command asks it; otherwise it opens the mirror itself and acts through
//! the headers on the legs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail};
use pollfs_core::dev::BlockDevice;
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::volume::{LegState, Mirror, VolumeError};
use pollfs_device::control::client::{Client, ClientError};
use pollfs_device::control::{LegWire, Op, Status};
use pollfs_device::units::show_bytes;
use pollfs_device::{Access, DeviceJob, DeviceSpec, Leaf, OpenErrorKind};

use crate::progress::CopyBar;

/// Options of `pollfs mirror`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Each leg's state: from the process that has the mirror open, or
    /// as the mirror's headers record it.
    Status {
        /// The mirror: `mirror:(DEV,DEV,...)`, its legs in their order.
        device: DeviceSpec,
    },
    /// Take a failed or stale leg back: it is copied from the legs in
    /// sync and then serves reads again. On a mirror that is not open the
    /// command waits for the copy; on one that is, it returns at once
    /// (`status` shows the copy's progress) unless `--wait`, which also
    /// waits for a copy an earlier `rejoin` started and, on a live mirror,
    /// returns at once when the leg is in sync already.
    Rejoin {
        /// The mirror.
        device: DeviceSpec,
        /// The leg's position, from 0.
        leg: usize,
        /// Wait for the copy to finish.
        #[arg(long)]
        wait: bool,
    },
    /// Drop a leg (to repair or replace it). The last leg in sync cannot
    /// be dropped.
    Fail {
        /// The mirror.
        device: DeviceSpec,
        /// The leg's position, from 0.
        leg: usize,
    },
    /// Put a new device in place of a failed (or stale) leg, and copy the
    /// mirror onto it. The mirror must not be open; the new device must
    /// hold nothing (unless `--force`), a missing file is made at the
    /// size of the first `file:` leg.
    Replace {
        /// The mirror, with the leg to replace as it was.
        device: DeviceSpec,
        /// The leg's position, from 0.
        leg: usize,
        /// The new device (`file:PATH`, `vfio:...`, ...).
        new: DeviceSpec,
        /// Overwrite what the new device holds.
        #[arg(long)]
        force: bool,
    },
}

/// Frames the command's mirror I/O needs.
pub const FRAMES: u32 = 64;

/// How often `rejoin --wait` asks how far the copy is.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, Debug)]
enum Admin {
    Status,
    Rejoin { leg: usize, wait: bool },
    Fail(usize),
    Replace { leg: usize, force: bool },
}

/// Runs `pollfs mirror`.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let (device, admin, new) = match &args.action {
        Action::Status { device } => (device, Admin::Status, None),
        Action::Rejoin { device, leg, wait } => (
            device,
            Admin::Rejoin {
                leg: *leg,
                wait: *wait,
            },
            None,
        ),
        Action::Fail { device, leg } => (device, Admin::Fail(*leg), None),
        Action::Replace {
            device,
            leg,
            new,
            force,
        } => (
            device,
            Admin::Replace {
                leg: *leg,
                force: *force,
            },
            Some(new),
        ),
    };
    let DeviceSpec::Mirror(legs) = device else {
        bail!("{device}: not a mirror: name one as mirror:(DEV,DEV,...)");
    };
    if let Some(l) = device.memory_leg() {
        bail!("{device}: leg {l} keeps nothing between commands");
    }
    let text = match Client::connect(legs) {
        Ok(client) => live(client, device, admin)?,
        Err(ClientError::NotServed) => match (admin, new) {
            (Admin::Replace { leg, force }, Some(new)) => replace(legs, leg, new, force)?,
            _ => offline(device, legs, admin)?,
        },
        Err(e) => bail!("{device}: {e}"),
    };
    print!("{text}");
    Ok(())
}

/// Through the control socket of the process that has the mirror open.
fn live(mut client: Client, device: &DeviceSpec, admin: Admin) -> anyhow::Result<String> {
    let err = |e: ClientError| anyhow!("{device}: {e}");
    let op = match admin {
        Admin::Status => Op::Status,
        Admin::Fail(leg) => Op::Fail { leg },
        Admin::Rejoin { leg, .. } => Op::Rejoin { leg },
        Admin::Replace { .. } => bail!(
            "{device}: is open in another process (it serves {}): a leg is replaced while \
             the mirror is closed; unmount it (or stop that process) and run this again",
            client.path().display()
        ),
    };
    if let Admin::Rejoin { leg, wait: true } = admin {
        // What `--wait` asks for is a leg in sync: one that is (an earlier
        // `rejoin` whose copy has finished) needs no second rejoin.
        let status = client.call(Op::Status).map_err(err)?;
        if status.legs.get(leg).map(|l| l.state) == Some(LegWire::InSync) {
            return Ok(render(&format!("{device} (open, live)"), &status));
        }
    }
    let mut status = client.call(op).map_err(err)?;
    if let Admin::Rejoin { leg, wait: true } = admin {
        let bar = CopyBar::new(&format!("copying to leg {leg}"), status.data_blocks);
        while let Some(l) = status
            .legs
            .get(leg)
            .filter(|l| matches!(l.state, LegWire::Stale | LegWire::Resyncing { .. }))
        {
            if let LegWire::Resyncing { copied_blocks } = l.state {
                bar.set(copied_blocks);
            }
            std::thread::sleep(PROGRESS_EVERY);
            status = client.call(Op::Status).map_err(err)?;
        }
        drop(bar);
        if status.legs.get(leg).map(|l| l.state) != Some(LegWire::InSync) {
            bail!(
                "{device}: the copy to leg {leg} stopped before the end:\n{}",
                render(&device.to_string(), &status)
            );
        }
    }
    Ok(render(&format!("{device} (open, live)"), &status))
}

/// By opening the mirror (nobody else has it open).
fn offline(device: &DeviceSpec, legs: &[Leaf], admin: Admin) -> anyhow::Result<String> {
    let access = match admin {
        Admin::Status => Access::Read,
        _ => Access::Write,
    };
    let options = crate::device::options(access, FRAMES);
    pollfs_device::run(device, &options, AdminJob { admin, legs })
        .map_err(|e| in_use_hint(e, device))
}

/// Opens the mirror with leg `leg` replaced by `new`, and copies onto it.
fn replace(legs: &[Leaf], leg: usize, new: &DeviceSpec, force: bool) -> anyhow::Result<String> {
    let old = DeviceSpec::Mirror(legs.to_vec());
    let DeviceSpec::One(newcomer) = new else {
        bail!("{new}: a leg is one device, not a volume");
    };
    if leg >= legs.len() {
        bail!("{old}: it has no leg {leg} (legs 0 to {})", legs.len() - 1);
    }
    if newcomer.in_memory() {
        bail!("{new}: keeps nothing between commands");
    }
    for (i, l) in legs.iter().enumerate() {
        if same_device(l, newcomer) {
            if i == leg {
                bail!("{new} is leg {leg} itself: `pollfs mirror rejoin` takes a leg back");
            }
            bail!("{new} is leg {i} of this mirror already: name a new device");
        }
    }
    let mut replaced = legs.to_vec();
    replaced[leg] = newcomer.clone();
    let spec = DeviceSpec::Mirror(replaced.clone());
    let size = legs.iter().find_map(|l| match l {
        Leaf::File(p) => std::fs::metadata(p).ok().map(|m| m.len()),
        _ => None,
    });
    let mut options = crate::device::options(Access::Write, FRAMES);
    options.replace = Some(leg);
    options.force_replace = force;
    if let Some(size) = size {
        options.size = size;
        options.create = true;
    }
    let admin = Admin::Replace { leg, force };
    pollfs_device::run(
        &spec,
        &options,
        AdminJob {
            admin,
            legs: &replaced,
        },
    )
    .map_err(|e| replace_error(e, &spec, leg, new))
}

/// Why a replace was refused, in the terms of the replace.
fn replace_error(
    e: anyhow::Error,
    spec: &DeviceSpec,
    leg: usize,
    new: &DeviceSpec,
) -> anyhow::Error {
    let kind = e
        .downcast_ref::<pollfs_device::OpenError>()
        .map(|o| &o.kind);
    match kind {
        Some(OpenErrorKind::HoldsData(found)) => {
            anyhow!("{new} holds {found}: it may belong to another volume; --force overwrites it")
        }
        Some(OpenErrorKind::Volume(VolumeError::LegState { state, .. })) => anyhow!(
            "{spec}: leg {leg} is {state}: only a failed or stale leg is replaced \
             (`pollfs mirror fail` drops it first)"
        ),
        Some(OpenErrorKind::Volume(VolumeError::Foreign { leg: l, field })) if *l == leg => {
            match *field {
                "position" => anyhow!("{new} is another leg of this mirror: name a new device"),
                "mirror id" => anyhow!(
                    "{new} is a leg of another mirror: it belongs to another volume (wipe its \
                     last two pages to reuse it)"
                ),
                _ => anyhow!("{new}: {e}"),
            }
        }
        _ => in_use_hint(e, spec),
    }
}

/// True if `a` and `b` name one device (the same file, however named).
fn same_device(a: &Leaf, b: &Leaf) -> bool {
    match (a, b) {
        (Leaf::File(x), Leaf::File(y)) => {
            match (std::fs::canonicalize(x), std::fs::canonicalize(y)) {
                (Ok(x), Ok(y)) => x == y,
                _ => x == y,
            }
        }
        _ => a == b,
    }
}

/// An open refused because another process has a leg: it serves no
/// control socket, so nothing can be done from here.
fn in_use_hint(e: anyhow::Error, device: &DeviceSpec) -> anyhow::Error {
    let in_use = matches!(
        e.downcast_ref::<pollfs_device::OpenError>()
            .map(|o| &o.kind),
        Some(OpenErrorKind::InUse)
    );
    if in_use {
        return e.context(format!(
            "{device} is open in another process that serves no control socket (fsck, or a \
             bench or library user that did not ask for one): wait for it to finish"
        ));
    }
    e
}

struct AdminJob<'a> {
    admin: Admin,
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
        // The copy runs in `settle`; a second thread reads how far it is
        // from the mirror's status for the bar.
        let settle = |m: &Mirror<L>| {
            let leg = match self.admin {
                Admin::Rejoin { leg, .. } | Admin::Replace { leg, .. } => leg,
                _ => usize::MAX,
            };
            let bar = CopyBar::new(&format!("copying to leg {leg}"), m.status().data_blocks);
            let done = AtomicBool::new(false);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        if let Some(LegState::Resyncing { copied }) =
                            m.status().legs.get(leg).map(|l| l.0)
                        {
                            bar.set(copied);
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                });
                let settled = m.settle(monotonic_clock, std::thread::yield_now);
                done.store(true, Ordering::Relaxed);
                settled
            })
        };
        match self.admin {
            Admin::Status => {}
            Admin::Rejoin { leg, .. } => {
                m.rejoin(leg).map_err(err)?;
                settle(&m).map_err(err)?;
            }
            Admin::Replace { .. } => settle(&m).map_err(err)?,
            Admin::Fail(leg) => m.fail_leg(leg).map_err(err)?,
        }
        if !matches!(self.admin, Admin::Status) {
            // Before the status, so it shows the mirror clean.
            m.close(monotonic_clock, std::thread::yield_now)
                .map_err(err)?;
        }
        let names: Vec<String> = self.legs.iter().map(ToString::to_string).collect();
        let status = Status::new(&m.status(), m.geometry().block_size, &names);
        Ok(render(what, &status))
    }
}

/// The status, one line for the mirror and one per leg.
pub fn render(what: &str, s: &Status) -> String {
    let block_size = s.block_size;
    let bytes = s.data_blocks * u64::from(block_size);
    let mut out = format!(
        "{what}: mirror {:016x}, {} legs, {} ({} blocks of {block_size} bytes), generation {}, {}\n",
        s.uuid,
        s.legs.len(),
        show_bytes(bytes),
        s.data_blocks,
        s.generation,
        if s.dirty { "open or not closed cleanly" } else { "clean" },
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
    for (i, leg) in s.legs.iter().enumerate() {
        let state = match leg.state {
            LegWire::InSync => "in sync".to_string(),
            LegWire::Stale if s.dirty => {
                "stale (copied from a leg in sync as the mirror is polled, or at its next \
                 writable open)"
                    .to_string()
            }
            LegWire::Stale => "stale (copied at the next writable open)".to_string(),
            LegWire::Resyncing { copied_blocks } => format!(
                "resyncing, {} of {} copied",
                show_bytes(copied_blocks * u64::from(block_size)),
                show_bytes(bytes)
            ),
            LegWire::Failed => {
                "failed (`pollfs mirror rejoin` takes it back, `replace` puts a new device in \
                 its place)"
                    .to_string()
            }
        };
        out.push_str(&format!("leg {i} {}: {state}", leg.name));
        if leg.read_errors + leg.write_errors > 0 {
            out.push_str(&format!(
                "; {} read and {} write errors",
                leg.read_errors, leg.write_errors
            ));
        }
        out.push('\n');
    }
    out
}
