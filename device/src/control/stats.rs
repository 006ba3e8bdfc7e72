//! A filesystem's figures on the wire: the engine's counters
//! ([`pollfs_core::Stats`]) by name, and the gauges read beside them
//! (dirty pages, log fill, free blocks). [`super::Op::Stats`] asks for
//! them; `pollfs stat` prints them, and the differences between two.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pollfs_core::dev::BlockDevice;
use pollfs_core::hosted::monotonic_clock;
use pollfs_core::{DeviceCounts, Fs, Stats};
use serde::{Deserialize, Serialize};

use crate::{AnyDevice, LegKind};

/// One snapshot of a filesystem's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsStats {
    /// When it was taken: nanoseconds of the serving process's monotonic
    /// clock (only differences between two snapshots of one server mean
    /// anything).
    pub taken_ns: u64,
    /// Counters, by the names [`pollfs_core::Stats::fields`] gives: they
    /// only grow (until the process ends).
    pub counters: BTreeMap<String, u64>,
    /// Figures of the moment, which go up and down.
    pub gauges: Gauges,
    /// Times of requests, by kind (`read`, `write`, `sync`), as the
    /// server recorded them since it started: `[nanoseconds, count]` per
    /// histogram bucket that holds any (HdrHistogram's buckets, 3
    /// significant digits). Empty where the server times nothing.
    #[serde(default)]
    pub latency: BTreeMap<String, Vec<[u64; 2]>>,
    /// The control socket of the mirror under the filesystem, if it is
    /// on one: its legs' states and errors are asked there
    /// ([`super::Op::Status`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_socket: Option<PathBuf>,
    /// The device the filesystem is on, then each of its legs (a
    /// mirror's or a stripe's), by position: commands and errors, and
    /// what the driver counted of resets and recoveries.
    #[serde(default)]
    pub devices: Vec<DeviceStats>,
}

/// What a device is to the filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The device the filesystem is on.
    Device,
    /// A leg of the mirror it is on.
    MirrorLeg,
    /// A leg of the stripe it is on.
    StripeLeg,
    /// A leg of a volume the names do not say the kind of (a device no
    /// spec names).
    Leg,
}

impl Role {
    /// In a word or two, for people.
    pub fn label(self) -> &'static str {
        match self {
            Role::Device => "device",
            Role::MirrorLeg => "mirror leg",
            Role::StripeLeg => "stripe leg",
            Role::Leg => "leg",
        }
    }
}

/// One device's figures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// Its name, as the device spec gives it.
    pub name: String,
    /// What it is to the filesystem.
    pub role: Role,
    /// Its position among the legs, for a leg.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leg: Option<usize>,
    /// Counters by the names [`pollfs_core::DeviceCounts::fields`] gives
    /// (`reads`, `writes`, `errors`, `resets`, ...): they only grow. For
    /// the device the filesystem is on, its commands are the engine's
    /// (`dev_*`); a leg's are those its volume sent it.
    pub counters: BTreeMap<String, u64>,
}

impl DeviceStats {
    fn new(name: String, role: Role, leg: Option<usize>, counts: &DeviceCounts) -> DeviceStats {
        DeviceStats {
            name,
            role,
            leg,
            counters: counts
                .fields()
                .iter()
                .map(|&(n, v)| (n.to_string(), v))
                .collect(),
        }
    }

    /// Counter `name`, or 0 if the server does not count it.
    pub fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// The counters' growth from `earlier` (the same device) to `self`.
    pub fn since(&self, earlier: &DeviceStats) -> DeviceStats {
        DeviceStats {
            counters: self
                .counters
                .iter()
                .map(|(n, &v)| (n.clone(), v.wrapping_sub(earlier.counter(n))))
                .collect(),
            ..self.clone()
        }
    }
}

/// The names of a device and of its legs, for [`devices`].
#[derive(Clone, Debug)]
pub struct Names {
    /// The device's.
    pub device: String,
    /// Its legs' role and their names by position (a leg without a name
    /// here is called `leg N`; without these, its role is [`Role::Leg`]).
    pub legs: Option<(Role, Vec<String>)>,
}

impl Names {
    /// As `dev`'s spec gives them.
    pub fn of(dev: &AnyDevice) -> Names {
        Names {
            device: dev.name().to_string(),
            legs: dev.legs().map(|(kind, names)| {
                let role = match kind {
                    LegKind::Mirror => Role::MirrorLeg,
                    LegKind::Stripe => Role::StripeLeg,
                };
                (role, names)
            }),
        }
    }
}

/// The figures of the device `fs` is on and of its legs, named by
/// `names`: summed over every queue when asked, nothing counted on the
/// way for this.
pub fn devices<D: BlockDevice>(fs: &Fs<D>, stats: &Stats, names: &Names) -> Vec<DeviceStats> {
    let dev = fs.device();
    let whole = DeviceCounts::of_engine(stats, dev.health());
    let mut out = vec![DeviceStats::new(
        names.device.clone(),
        Role::Device,
        None,
        &whole,
    )];
    let role = names.legs.as_ref().map_or(Role::Leg, |(r, _)| *r);
    for (i, counts) in dev.leg_counts().iter().enumerate() {
        let name = names
            .legs
            .as_ref()
            .and_then(|(_, n)| n.get(i).cloned())
            .unwrap_or_else(|| format!("leg {i}"));
        out.push(DeviceStats::new(name, role, Some(i), counts));
    }
    out
}

/// Figures of the moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gauges {
    /// Dirty pages in the cache (written, not yet on the device at home).
    pub dirty_pages: u64,
    /// The cache's size in pages.
    pub cache_pages: u64,
    /// Log blocks in use since the last checkpoint.
    pub log_used_blocks: u64,
    /// The log's size in blocks (a checkpoint is written past half).
    pub log_blocks: u64,
    /// Blocks (4 KiB) of the data area ([`pollfs_core::StatFs`]).
    pub data_blocks: u64,
    /// Of those, free.
    pub free_blocks: u64,
    /// Live inodes.
    pub inodes: u64,
}

impl Gauges {
    /// The gauges of `fs` now (also what libpollfs's `pollfs_fs_stats`
    /// reports).
    pub fn of<D: BlockDevice>(fs: &Fs<D>) -> Gauges {
        let (log_used_blocks, log_blocks) = fs.log_fill();
        let space = fs.statfs();
        Gauges {
            dirty_pages: fs.dirty_pages(),
            cache_pages: u64::from(fs.cache_pages()),
            log_used_blocks,
            log_blocks,
            data_blocks: space.blocks,
            free_blocks: space.free,
            inodes: space.inodes,
        }
    }
}

impl FsStats {
    /// The figures of `fs` now, its device and legs named by position
    /// (`device`, `leg 0`, ...; [`FsStats::of_named`] names them).
    pub fn of<D: BlockDevice>(fs: &Fs<D>) -> FsStats {
        FsStats::of_named(
            fs,
            &Names {
                device: "device".into(),
                legs: None,
            },
        )
    }

    /// The figures of `fs` now, its device and legs called `names`.
    pub fn of_named<D: BlockDevice>(fs: &Fs<D>, names: &Names) -> FsStats {
        let stats = fs.stats();
        FsStats {
            devices: devices(fs, &stats, names),
            taken_ns: monotonic_clock().0,
            counters: stats
                .fields()
                .iter()
                .map(|&(name, value)| (name.to_string(), value))
                .collect(),
            gauges: Gauges::of(fs),
            latency: BTreeMap::new(),
            mirror_socket: None,
        }
    }

    /// The figures of the device in `role` at position `leg`.
    pub fn device(&self, role: Role, leg: Option<usize>) -> Option<&DeviceStats> {
        self.devices.iter().find(|d| d.role == role && d.leg == leg)
    }

    /// Counter `name`, or 0 if this server does not count it (an older
    /// one).
    pub fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    /// The counters' growth from `earlier` to `self`, and `self`'s gauges
    /// and time: what happened in the interval between the two.
    pub fn since(&self, earlier: &FsStats) -> FsStats {
        FsStats {
            taken_ns: self.taken_ns,
            counters: self
                .counters
                .iter()
                .map(|(name, &v)| (name.clone(), v.wrapping_sub(earlier.counter(name))))
                .collect(),
            gauges: self.gauges,
            mirror_socket: self.mirror_socket.clone(),
            devices: self
                .devices
                .iter()
                .map(|d| match earlier.device(d.role, d.leg) {
                    Some(e) => d.since(e),
                    None => d.clone(),
                })
                .collect(),
            latency: self
                .latency
                .iter()
                .map(|(kind, later)| {
                    let earlier = earlier.latency.get(kind).map_or(&[][..], Vec::as_slice);
                    (kind.clone(), bucket_growth(earlier, later))
                })
                .collect(),
        }
    }
}

/// Each bucket's growth from `earlier` to `later` (both sorted by value,
/// as a histogram lists them), the empty ones left out.
fn bucket_growth(earlier: &[[u64; 2]], later: &[[u64; 2]]) -> Vec<[u64; 2]> {
    let before: BTreeMap<u64, u64> = earlier.iter().map(|&[v, n]| (v, n)).collect();
    later
        .iter()
        .map(|&[v, n]| [v, n.saturating_sub(before.get(&v).copied().unwrap_or(0))])
        .filter(|&[_, n]| n > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pollfs_core::dev::ram::RamDevice;

    #[test]
    fn a_snapshot_names_every_counter_and_the_difference_is_per_counter() {
        let fs = Fs::format(
            RamDevice::new(16 << 20, 4096, 64).unwrap(),
            pollfs_core::Config::default(),
            3,
        )
        .unwrap();
        let before = FsStats::of(&fs);
        assert_eq!(before.counters.len(), fs.stats().fields().len());
        let f = fs.create("a").unwrap();
        f.write_all_at(&[1; 8192], 0).unwrap();
        f.sync_data().unwrap();
        let after = FsStats::of(&fs);
        let d = after.since(&before);
        assert_eq!(d.counter("writes"), 1);
        assert_eq!(d.counter("write_bytes"), 8192);
        assert_eq!(d.counter("syncs"), 1);
        assert_eq!(
            d.counter("log_writes"),
            after.counter("log_writes") - before.counter("log_writes")
        );
        assert_eq!(d.gauges, after.gauges, "gauges are the later ones");
        assert!(after.gauges.log_used_blocks > 0);
        assert!(after.taken_ns >= before.taken_ns);
        let mut earlier = after.clone();
        earlier
            .latency
            .insert("read".into(), vec![[10, 2], [20, 1]]);
        let mut later = earlier.clone();
        later
            .latency
            .insert("read".into(), vec![[10, 2], [20, 4], [30, 1]]);
        assert_eq!(later.since(&earlier).latency["read"], [[20, 3], [30, 1]]);
        let json = serde_json::to_string(&after).unwrap();
        assert_eq!(serde_json::from_str::<FsStats>(&json).unwrap(), after);
    }

    #[test]
    fn legs_no_spec_names_are_called_by_position() {
        use pollfs_core::dev::ram::RamFrames;
        use pollfs_core::volume::Stripe;
        let arena = std::sync::Arc::new(RamFrames::new(256));
        let legs = (0..2)
            .map(|_| RamDevice::with_arena(16 << 20, 4096, arena.clone()).unwrap())
            .collect();
        let stripe = Stripe::new(legs, 65536).unwrap();
        let fs = Fs::format(stripe, pollfs_core::Config::default(), 3).unwrap();
        let f = fs.create("a").unwrap();
        f.write_all_at(&[1; 1 << 17], 0).unwrap();
        f.sync_data().unwrap();
        let s = FsStats::of(&fs);
        let who: Vec<(&str, Role, Option<usize>)> = s
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.role, d.leg))
            .collect();
        assert_eq!(
            who,
            [
                ("device", Role::Device, None),
                ("leg 0", Role::Leg, Some(0)),
                ("leg 1", Role::Leg, Some(1)),
            ]
        );
        // 128 KiB in 64 KiB chunks: each leg was sent a share.
        for leg in &s.devices[1..] {
            assert!(leg.counter("write_bytes") >= 65536, "{leg:?}");
        }
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""role":"leg","leg":1"#), "{json}");
    }
}
