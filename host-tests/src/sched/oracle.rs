//! The checker: every read and the final contents must be explained by some
//! order of the operations that respects real time (an operation that ended
//! before another began comes first).
//!
//! Sizes are checked exactly: every order of the size-changing operations
//! allowed by real time is explored, and a read's length must match a size
//! the file can have at some point of its interval. Data is checked per word,
//! as the thread stress test does per page: a word read must come from a
//! write (or zeroing) that started before the read ended and was not
//! certainly overwritten before the read began; and two reads of one word
//! must not see data vanish and come back.

use std::collections::HashSet;

use super::scenario::{stamp, Op, WORD};

const PAGE: u64 = 4096;

/// What one operation did, on the executor's clock.
#[derive(Clone, Debug)]
pub struct Record {
    /// Global operation id (setup writes: the file index).
    pub id: usize,
    /// The task that ran it (`usize::MAX` for setup and final reads).
    pub task: usize,
    /// The operation.
    pub op: Op,
    /// Clock at its first poll.
    pub start: u64,
    /// Clock when it returned.
    pub end: u64,
    /// Bytes read or written, or the error.
    pub result: Result<usize, String>,
    /// For reads: the bytes returned.
    pub data: Vec<u8>,
}

/// One operation's effect on one word: the value it leaves there.
#[derive(Clone, Copy, Debug)]
struct Effect {
    value: u64,
    start: u64,
    end: u64,
}

fn effect(r: &Record, word: u64) -> Option<Effect> {
    let b = word * WORD;
    let value = match (r.op.plain(), &r.result) {
        (Op::Write { off, .. }, Ok(n)) if b >= off && b < off + *n as u64 => stamp(r.id, word),
        (Op::SetLen { size, .. }, Ok(_)) if b >= size => 0,
        (Op::Punch { off, len, .. }, Ok(_)) if b >= off && b < off + len => 0,
        _ => return None,
    };
    Some(Effect {
        value,
        start: r.start,
        end: r.end,
    })
}

/// The effects on `word` of the records of one file, starting with the
/// zeros the file held before setup (at time 0).
fn effects(records: &[&Record], word: u64) -> Vec<Effect> {
    let mut v = vec![Effect {
        value: 0,
        start: 0,
        end: 0,
    }];
    v.extend(records.iter().filter_map(|r| effect(r, word)));
    v
}

fn allowed(effects: &[Effect], v: u64, rs: u64, re: u64) -> bool {
    effects
        .iter()
        .filter(|c| c.value == v && c.start < re)
        .any(|c| !effects.iter().any(|x| x.start > c.end && x.end < rs))
}

/// The size-changing operations of one file and the sizes reachable by
/// running any real-time-respecting prefix of them.
struct Sizes {
    ops: Vec<(u64, u64, SizeChange)>,
    states: HashSet<(u32, u64)>,
}

#[derive(Clone, Copy)]
enum SizeChange {
    Set(u64),
    AtLeast(u64),
}

/// Beyond this many size-changing operations the search is skipped.
const MAX_SIZE_OPS: usize = 16;

impl Sizes {
    fn new(records: &[&Record], initial: u64) -> Option<Sizes> {
        let ops: Vec<_> = records
            .iter()
            .filter_map(|r| match (r.op.plain(), &r.result) {
                (Op::SetLen { size, .. }, Ok(_)) => Some((r.start, r.end, SizeChange::Set(size))),
                (Op::Write { off, .. }, Ok(n)) if *n > 0 => {
                    Some((r.start, r.end, SizeChange::AtLeast(off + *n as u64)))
                }
                _ => None,
            })
            .collect();
        if ops.len() > MAX_SIZE_OPS {
            return None;
        }
        let before: Vec<u32> = ops
            .iter()
            .map(|o| {
                ops.iter()
                    .enumerate()
                    .filter(|(_, p)| p.1 < o.0)
                    .fold(0u32, |m, (i, _)| m | 1 << i)
            })
            .collect();
        let mut states = HashSet::new();
        let mut todo = vec![(0u32, initial)];
        while let Some((mask, size)) = todo.pop() {
            if !states.insert((mask, size)) {
                continue;
            }
            for (i, o) in ops.iter().enumerate() {
                if mask & 1 << i != 0 || before[i] & !mask != 0 {
                    continue;
                }
                let s = match o.2 {
                    SizeChange::Set(s) => s,
                    SizeChange::AtLeast(s) => size.max(s),
                };
                todo.push((mask | 1 << i, s));
            }
        }
        Some(Sizes { ops, states })
    }

    /// Sizes the file can have at some instant of `[rs, re]`.
    fn during(&self, rs: u64, re: u64) -> impl Iterator<Item = u64> + '_ {
        let must = self.mask(|s, e| e < rs && s < rs);
        let cannot = self.mask(|s, _| s > re);
        self.states
            .iter()
            .filter(move |(m, _)| m & must == must && m & cannot == 0)
            .map(|&(_, s)| s)
    }

    fn mask(&self, f: impl Fn(u64, u64) -> bool) -> u32 {
        self.ops
            .iter()
            .enumerate()
            .filter(|(_, o)| f(o.0, o.1))
            .fold(0u32, |m, (i, _)| m | 1 << i)
    }
}

/// Checks the records of file `file`, which had `initial` bytes after
/// setup. Final reads are records with `task == usize::MAX` and an
/// `end` past every other record. Returns the first violation found.
///
/// With `strict_length` off, a read may also return a prefix, ending on a
/// page boundary, of what it would return at a size the file could have
/// had: the engine's read path takes the size once, then stops at the first
/// page a concurrent truncate has removed (a known engine bug).
pub fn check_file(
    records: &[Record],
    file: usize,
    initial: u64,
    strict_length: bool,
) -> Result<(), String> {
    let mine: Vec<&Record> = records.iter().filter(|r| r.op.file() == file).collect();
    let sizes = Sizes::new(&mine, initial);
    let reads: Vec<&Record> = mine
        .iter()
        .copied()
        .filter(|r| matches!(r.op.plain(), Op::Read { .. }))
        .collect();
    for r in &reads {
        let (Op::Read { off, len, .. }, Ok(n)) = (r.op.plain(), &r.result) else {
            continue;
        };
        let n = *n as u64;
        if let Some(sizes) = &sizes {
            let ok = sizes.during(r.start, r.end).any(|s| {
                n == len.min(s.saturating_sub(off))
                    || (!strict_length && n < len && (off + n) % PAGE == 0 && s > off + n)
            });
            if !ok {
                let mut seen: Vec<u64> = sizes.during(r.start, r.end).collect();
                seen.sort_unstable();
                seen.dedup();
                return Err(format!(
                    "{} {} during [{}, {}] returned {n} bytes; sizes possible then: {seen:?}",
                    name(r),
                    r.op,
                    r.start,
                    r.end
                ));
            }
        }
        for (k, chunk) in r.data[..n as usize].chunks_exact(WORD as usize).enumerate() {
            let word = off / WORD + k as u64;
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            let v = u64::from_le_bytes(b);
            if !allowed(&effects(&mine, word), v, r.start, r.end) {
                return Err(format!(
                    "{} {} during [{}, {}]: byte {} holds {} which no order allows",
                    name(r),
                    r.op,
                    r.start,
                    r.end,
                    word * WORD,
                    describe(v)
                ));
            }
        }
    }
    check_read_order(&mine, &reads)
}

/// Names a record: its operation id, or "final read".
fn name(r: &Record) -> String {
    if r.id == usize::MAX {
        "final read".to_string()
    } else {
        format!("op #{}", r.id)
    }
}

/// Names a word's value: zero, or the operation and word that wrote it.
fn describe(v: u64) -> String {
    if v == 0 {
        "zero".to_string()
    } else {
        format!(
            "op #{}'s data for byte {}",
            (v >> 32).wrapping_sub(1),
            ((v & 0xffff_ffff).wrapping_sub(1)) * WORD
        )
    }
}

fn value_at(r: &Record, word: u64) -> Option<u64> {
    let (Op::Read { off, .. }, Ok(n)) = (r.op.plain(), &r.result) else {
        return None;
    };
    let at = (word * WORD).checked_sub(off)? as usize;
    let b = r.data.get(at..at + WORD as usize).filter(|_| at < *n)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    Some(u64::from_le_bytes(w))
}

/// If read `a` ended before read `b` began and they saw different values of
/// a word, `b`'s value must come from an effect that had not ended before
/// `a` began: data does not vanish and come back.
fn check_read_order(mine: &[&Record], reads: &[&Record]) -> Result<(), String> {
    for a in reads {
        for b in reads.iter().filter(|b| a.end < b.start) {
            let (
                Op::Read { off, len, .. },
                Op::Read {
                    off: o2, len: l2, ..
                },
            ) = (a.op.plain(), b.op.plain())
            else {
                continue;
            };
            let lo = off.max(o2) / WORD;
            let hi = (off + len).min(o2 + l2) / WORD;
            for word in lo..hi {
                let (Some(va), Some(vb)) = (value_at(a, word), value_at(b, word)) else {
                    continue;
                };
                if va == vb {
                    continue;
                }
                let latest = effects(mine, word)
                    .iter()
                    .filter(|e| e.value == vb)
                    .map(|e| e.end)
                    .max()
                    .unwrap_or(0);
                if latest < a.start {
                    return Err(format!(
                        "byte {}: {} saw {} during [{}, {}], then {} saw {} during [{}, {}], \
                         but that value was overwritten before the first read began",
                        word * WORD,
                        name(a),
                        describe(va),
                        a.start,
                        a.end,
                        name(b),
                        describe(vb),
                        b.start,
                        b.end
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The namespace operations against a model of the root directory, in the
/// order they ran (each runs whole between two scheduling points, so start
/// times order them): each must succeed or fail as the model says, a
/// lookup must find the inode the model names, and the root must end as
/// the model's, each special file still of its kind with its device
/// number. `files` are the initial files (`f0`, `f1`, ...).
pub fn check_names<D: pollfs_core::dev::BlockDevice>(
    records: &[Record],
    fs: &pollfs_core::Fs<D>,
    files: &[pollfs_core::File<D>],
) -> Result<(), String> {
    use super::scenario::{special_rdev, NAMES, SPECIAL};
    use pollfs_core::InodeId;
    use std::collections::BTreeMap;
    // An op's result is a count, or the inode it made or found.
    let ino_of = |result: usize| InodeId(result as u64);
    let mut names: BTreeMap<&str, InodeId> = BTreeMap::new();
    // Special files made, by inode: their kind and device number.
    let mut special: BTreeMap<InodeId, usize> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        names.insert(NAMES[i], f.ino());
    }
    let mut ns: Vec<&Record> = records.iter().filter(|r| r.op.is_namespace()).collect();
    ns.sort_by_key(|r| r.start);
    for r in ns {
        let ok = r.result.is_ok();
        let want_ok = match r.op {
            Op::Rename { from, to } => {
                let w = names.contains_key(NAMES[from]);
                if w && from != to {
                    let ino = names.remove(NAMES[from]).unwrap_or_default();
                    names.insert(NAMES[to], ino);
                }
                w
            }
            Op::Unlink { name } => names.remove(NAMES[name]).is_some(),
            Op::Create { name } | Op::Mknod { name, .. } => {
                let free = !names.contains_key(NAMES[name]);
                if free {
                    if let Ok(ino) = r.result {
                        names.insert(NAMES[name], ino_of(ino));
                        if let Op::Mknod { kind, .. } = r.op {
                            special.insert(ino_of(ino), kind);
                        }
                    }
                }
                free
            }
            Op::Lookup { name } => {
                let want = names.get(NAMES[name]).copied();
                if let (Some(w), Ok(got)) = (want, &r.result) {
                    if w != ino_of(*got) {
                        return Err(format!(
                            "op #{} {}: found inode {got}, the model says {w}",
                            r.id, r.op
                        ));
                    }
                }
                want.is_some()
            }
            _ => continue,
        };
        if ok != want_ok {
            return Err(format!(
                "op #{} {}: returned {:?}, the model says it should {}",
                r.id,
                r.op,
                r.result,
                if want_ok { "succeed" } else { "fail" }
            ));
        }
    }
    let got: BTreeMap<String, InodeId> = fs.entries().into_iter().collect();
    let want: BTreeMap<String, InodeId> =
        names.into_iter().map(|(n, i)| (n.to_string(), i)).collect();
    if got != want {
        return Err(format!("the root holds {got:?}; the model says {want:?}"));
    }
    for ino in want.values() {
        let Some(&kind) = special.get(ino) else {
            continue;
        };
        let m = fs.attr(*ino).map_err(|e| format!("attr of {ino}: {e:?}"))?;
        if (m.kind, m.rdev, m.len) != (SPECIAL[kind], special_rdev(kind), 0) {
            return Err(format!(
                "special file {ino} is {:?} {} ({} bytes); it was made {:?} {}",
                m.kind,
                m.rdev,
                m.len,
                SPECIAL[kind],
                special_rdev(kind)
            ));
        }
    }
    Ok(())
}
