//! Deterministic race testing: concurrent engine operations on one thread,
//! with a schedule choosing which task runs next and when each device
//! command completes.
//!
//! - [`choice`]: where decisions come from (fuzzer bytes or a seed);
//! - [`device`]: a RAM device whose commands complete when told to, and
//!   whose frame copies are preemption points;
//! - [`exec`]: the executor and its logical clock;
//! - [`scenario`]: the operations of a run, with word-stamped data;
//! - [`oracle`]: the linearizability checks on what the run returned.
//!
//! [`run`] ties them together; a failure carries a readable trace, and the
//! same seed or bytes replay the same run.

pub mod choice;
pub mod device;
pub mod exec;
pub mod oracle;
pub mod scenario;
mod task;
mod trace;

use std::cell::RefCell;
use std::rc::Rc;

use pollfs_core::dev::ram::RamDevice;
use pollfs_core::{Config, Fs};

use choice::Choices;
use device::HeldDevice;
use exec::{Clock, Exec, Stuck};
use oracle::Record;
use scenario::{stamped, Op, Scenario, SPAN};
pub use trace::Failure;

/// Executor steps allowed before a run counts as hung.
const MAX_STEPS: usize = 200_000;
/// Bytes per page.
const PAGE: u64 = 4096;
/// Device size: far more than the files need, so writes never run out.
const DEVICE_BYTES: u64 = 1 << 20;

/// How strict the checks are.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Require every read's length to match one size the file had (on by
    /// default; off accepts a read that stops at the end of a page past a
    /// concurrent truncate's new EOF, the engine's behaviour before a fix
    /// that `tests/races.rs` keeps a seed for).
    pub strict_length: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            strict_length: true,
        }
    }
}

/// Runs the scenario drawn from `seed`, scheduled by the same generator.
pub fn run_seed(seed: u64, opts: Options) -> Result<(), Failure> {
    let mut c = Choices::from_seed(seed);
    let s = Scenario::generate(&mut c);
    run(&s, c, opts)
}

/// Runs the sync-heavy scenario drawn from `seed` (see
/// [`Scenario::generate_syncs`]), scheduled by the same generator.
pub fn run_sync_seed(seed: u64, opts: Options) -> Result<(), Failure> {
    let mut c = Choices::from_seed(seed);
    let s = Scenario::generate_syncs(&mut c);
    run(&s, c, opts)
}

/// Runs the namespace scenario drawn from `seed` (see
/// [`Scenario::generate_names`]), scheduled by the same generator.
pub fn run_names_seed(seed: u64, opts: Options) -> Result<(), Failure> {
    let mut c = Choices::from_seed(seed);
    let s = Scenario::generate_names(&mut c);
    run(&s, c, opts)
}

/// Runs the direct I/O scenario drawn from `seed` (see
/// [`Scenario::generate_direct`]), scheduled by the same generator.
pub fn run_direct_seed(seed: u64, opts: Options) -> Result<(), Failure> {
    let mut c = Choices::from_seed(seed);
    let s = Scenario::generate_direct(&mut c);
    run(&s, c, opts)
}

/// Runs the background scenario drawn from `seed` (see
/// [`Scenario::generate_background`]), scheduled by the same generator;
/// on success, the pages and checkpoints its background steps wrote (a
/// test sums them to show that the steps had work to race).
pub fn run_background_seed(seed: u64, opts: Options) -> Result<usize, Failure> {
    let mut c = Choices::from_seed(seed);
    let s = Scenario::generate_background(&mut c);
    let records = run_records(&s, c, opts)?;
    Ok(records
        .iter()
        .filter(|r| r.op == Op::Background)
        .filter_map(|r| r.result.as_ref().ok())
        .sum())
}

/// Runs the scenario drawn from `bytes`, scheduled by the rest of them.
pub fn run_bytes(bytes: &[u8], opts: Options) -> Result<(), Failure> {
    let mut c = Choices::from_bytes(bytes);
    let s = Scenario::generate(&mut c);
    run(&s, c, opts)
}

/// Runs `scenario` under the schedule `choices`, then checks the results.
pub fn run(scenario: &Scenario, choices: Choices, opts: Options) -> Result<(), Failure> {
    run_records(scenario, choices, opts).map(|_| ())
}

/// [`run`], returning what every operation did.
fn run_records(
    scenario: &Scenario,
    choices: Choices,
    opts: Options,
) -> Result<Vec<Record>, Failure> {
    let fail = |msg: String, trace: String| Failure::new(scenario, msg, trace);
    // A formatted filesystem keeps its metadata frames beside the cache's.
    let frames = scenario.cache_pages
        + if scenario.journal {
            pollfs_core::persist::META_FRAMES
        } else {
            0
        };
    let ram = RamDevice::new(DEVICE_BYTES, scenario.block_size, frames)
        .map_err(|e| fail(format!("device: {e}"), String::new()))?;
    let dev = HeldDevice::new(ram);
    let ctl = dev.controller();
    ctl.set_pass_through(true);
    let config = Config {
        cache_pages: scenario.cache_pages,
        readahead_pages: scenario.readahead_pages,
        ..Config::default()
    };
    let fs = if scenario.journal {
        Fs::format(dev, config, 0x5eed)
    } else {
        Fs::new(dev, config)
    }
    .map_err(|e| fail(format!("mount: {e:?}"), String::new()))?;
    let names: Vec<String> = (0..scenario.initial.len())
        .map(|i| format!("f{i}"))
        .collect();
    let mut records = setup(&fs, scenario, &names).map_err(|e| fail(e, String::new()))?;
    // Handles on the initial files, opened before any task runs: renames
    // and unlinks of their names leave them working.
    let files = names
        .iter()
        .map(|n| fs.open(n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(format!("open: {e:?}"), String::new()))?;

    ctl.set_pass_through(false);
    let clock = Clock::default();
    clock.tick();
    let log = Rc::new(RefCell::new(task::Log::new(scenario.tasks.len())));
    let numbered = scenario.numbered();
    let tasks = (0..scenario.tasks.len())
        .map(|t| {
            let ops = numbered
                .iter()
                .filter(|(_, tt, _)| *tt == t)
                .map(|&(id, _, op)| (id, op))
                .collect();
            task::spawn(&fs, &files, t, ops, &log, &clock)
        })
        .collect();
    let exec = Exec::new(
        tasks,
        choices,
        ctl.clone(),
        clock.clone(),
        u64::from(scenario.preempt_percent),
    );
    let outcome = exec.run(MAX_STEPS);
    exec.clear();
    // Rendered only when a check fails: formatting every step would
    // dominate the cost of a passing run.
    let trace = || trace::render(&exec.trace.borrow(), &log.borrow().records);
    if let Err(stuck) = outcome {
        let what = match stuck {
            Stuck::Deadlock => "deadlock: no task is woken and no command is pending",
            Stuck::Budget => "no progress within the step budget",
        };
        let stuck_ops = log.borrow().running_ops();
        return Err(fail(format!("{what}; stuck: {stuck_ops}"), trace()));
    }
    records.extend(log.borrow().records.iter().cloned());
    // A namespace operation may fail (a name taken, or gone): the
    // namespace oracle judges those.
    if let Some(r) = records
        .iter()
        .find(|r| r.result.is_err() && !r.op.is_namespace())
    {
        return Err(fail(
            format!("op #{} {} failed: {:?}", r.id, r.op, r.result),
            trace(),
        ));
    }
    if let Some(r) = records.iter().find(
        |r| matches!((r.op.plain(), &r.result), (Op::Write { len, .. }, Ok(n)) if *n as u64 != len),
    ) {
        return Err(fail(
            format!("op #{} {} was short: {:?}", r.id, r.op, r.result),
            trace(),
        ));
    }

    ctl.set_pass_through(true);
    records.extend(final_reads(&files, &clock).map_err(|e| fail(e, trace()))?);
    fs.check_invariants()
        .map_err(|e| fail(format!("invariant: {e:?}"), trace()))?;
    oracle::check_names(&records, &fs, &files).map_err(|e| fail(e, trace()))?;
    for (file, &initial) in scenario.initial.iter().enumerate() {
        oracle::check_file(&records, file, initial, opts.strict_length)
            .map_err(|e| fail(e, trace()))?;
    }
    Ok(records)
}

/// Creates the files and writes their initial stamped contents (at time 1,
/// after the zeros of time 0), synced unless the scenario starts dirty.
fn setup(fs: &Fs<HeldDevice>, s: &Scenario, names: &[String]) -> Result<Vec<Record>, String> {
    let session = fs.session().map_err(|e| format!("session: {e:?}"))?;
    let mut records = Vec::new();
    for (i, (name, &size)) in names.iter().zip(&s.initial).enumerate() {
        let f = fs.create(name).map_err(|e| format!("create: {e:?}"))?;
        let op = Op::Write {
            file: i,
            off: 0,
            len: size,
        };
        let n = session
            .write_at(&f, &stamped(i, 0, size), 0)
            .map_err(|e| format!("setup write: {e:?}"))?;
        if !s.dirty_start {
            session
                .sync_data(&f)
                .map_err(|e| format!("setup sync: {e:?}"))?;
        }
        records.push(Record {
            id: i,
            task: usize::MAX,
            op,
            start: 1,
            end: 1,
            result: Ok(n),
            data: Vec::new(),
        });
    }
    Ok(records)
}

/// Reads every file once everything has finished: page by page from the
/// end first (a stale page left in the cache is read before the reads of
/// lower pages can evict it), then whole.
fn final_reads(
    files: &[pollfs_core::File<HeldDevice>],
    clock: &Clock,
) -> Result<Vec<Record>, String> {
    let Some(first) = files.first() else {
        return Ok(Vec::new());
    };
    let session = first
        .fs()
        .session()
        .map_err(|e| format!("session: {e:?}"))?;
    let mut out = Vec::new();
    for (file, f) in files.iter().enumerate() {
        let pages = SPAN.div_ceil(PAGE) + 1;
        let reads = (0..pages)
            .rev()
            .map(|p| (p * PAGE, PAGE))
            .chain([(0, 2 * SPAN)]);
        for (off, len) in reads {
            let mut data = vec![0u8; len as usize];
            let n = session
                .read_at(f, &mut data, off)
                .map_err(|e| format!("final read: {e:?}"))?;
            let t = clock.tick();
            out.push(Record {
                id: usize::MAX,
                task: usize::MAX,
                op: Op::Read { file, off, len },
                start: t,
                end: t,
                result: Ok(n),
                data,
            });
        }
    }
    Ok(out)
}
