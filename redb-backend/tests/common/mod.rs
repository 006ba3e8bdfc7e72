//! What the redb tests share: the table, values, a model check, and a
//! device handle that outlives a mount.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use pollfs_core::dev::{BlockDevice, DevError, Geometry};
use pollfs_host_tests::rng::Rng;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

/// The table every test writes.
pub const TABLE: TableDefinition<u64, &[u8]> = TableDefinition::new("kv");

/// What the table should hold.
pub type Model = BTreeMap<u64, Vec<u8>>;

/// One device shared by successive mounts: `Fs::unmount` consumes the
/// filesystem and the device with it, and an NVMe device is not `Clone`.
#[derive(Debug)]
pub struct SharedDevice<D>(pub Arc<D>);

impl<D> Clone for SharedDevice<D> {
    fn clone(&self) -> Self {
        SharedDevice(self.0.clone())
    }
}

impl<D: BlockDevice> BlockDevice for SharedDevice<D> {
    type Queue = D::Queue;
    type Frames = D::Frames;
    fn geometry(&self) -> Geometry {
        self.0.geometry()
    }
    fn frames(&self) -> &D::Frames {
        self.0.frames()
    }
    fn open_queue(&self) -> Result<D::Queue, DevError> {
        self.0.open_queue()
    }
}

/// A value for `key` written by transaction `txn`: mostly small, now and
/// then several pages (redb stores those out of the leaf).
pub fn value(rng: &mut Rng, key: u64, txn: u64) -> Vec<u8> {
    let len = if rng.chance(4) {
        1000 + rng.below(9000)
    } else {
        rng.below(80)
    };
    pollfs_host_tests::model::pattern(txn ^ key.rotate_left(32), key, len as usize)
}

/// Everything in the table, in key order.
pub fn contents(db: &Database) -> Model {
    let txn = db.begin_read().expect("begin_read");
    let table = txn.open_table(TABLE).expect("open_table");
    table
        .iter()
        .expect("iter")
        .map(|e| {
            let (k, v) = e.expect("entry");
            (k.value(), v.value().to_vec())
        })
        .collect()
}

/// The table holds exactly `model` (reported by first difference).
pub fn assert_matches(db: &Database, model: &Model, ctx: &str) {
    let got = contents(db);
    if &got != model {
        let diff = got
            .iter()
            .zip(model.iter())
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("first difference: db key {} vs model key {}", a.0, b.0))
            .unwrap_or_else(|| format!("db has {} keys, model {}", got.len(), model.len()));
        panic!("{ctx}: table differs from the model: {diff}");
    }
}
