//! The baselines: the kernel (pread/pwrite/fsync on regular files, tmpfs
//! by default; `O_DIRECT` files for direct jobs) and plain memory copies
//! (the physical limit of a cached read). Both run a whole phase, like the
//! pollfs engines, with the same I/O generator.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::anyhow;

use super::direct::Buf;
use super::engine::Engine;
use super::plan::Phase;
use super::run::{run_threads, Progress};
use super::sample::{Recorder, Sample};
use super::workload::{Picker, Sync};

/// The kernel baseline's files, removed when dropped.
struct KernelFiles {
    paths: Vec<PathBuf>,
    /// Buffered handles, one per file of the phase.
    buffered: Vec<std::fs::File>,
    /// `O_DIRECT` handles, for the files a direct job uses.
    direct: Vec<Option<std::fs::File>>,
}

impl Drop for KernelFiles {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn open_direct(path: &Path, dir: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            anyhow!(
                "{}: O_DIRECT: {e} (the filesystem of {} may not take direct I/O; give \
                 --kernel-dir on one that does, such as ext4 or xfs)",
                path.display(),
                dir.display()
            )
        })
}

impl KernelFiles {
    fn create(phase: &Phase<'_>, dir: &Path) -> anyhow::Result<KernelFiles> {
        let mut files = KernelFiles {
            paths: Vec::new(),
            buffered: Vec::new(),
            direct: Vec::new(),
        };
        for spec in &phase.files {
            let path = dir.join(format!("pollfs-bench-{}-{}", std::process::id(), spec.name));
            files.paths.push(path.clone());
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?;
            spec.fill(|bytes, off| file.write_all_at(bytes, off).map_err(|e| anyhow!("{e}")))?;
            if spec.cold {
                file.sync_all().map_err(|e| anyhow!("{e}"))?;
            }
            files.buffered.push(file);
            files.direct.push(None);
        }
        for (job, mine) in phase.jobs.iter().zip(&phase.job_files) {
            if job.direct {
                for &f in mine {
                    if files.direct[f].is_none() {
                        files.direct[f] = Some(open_direct(&files.paths[f], dir)?);
                    }
                }
            }
        }
        Ok(files)
    }
}

/// The phase with pread/pwrite on files in `dir`, one I/O at a time per
/// thread (fio's psync engine) at `iodepth` 1, and through an io_uring
/// with `iodepth` I/Os in flight per thread (fio's io_uring engine) above.
pub fn kernel(phase: &Phase<'_>, dir: &Path, progress: &Progress) -> anyhow::Result<Vec<Sample>> {
    let files = KernelFiles::create(phase, dir)?;
    let files = &files;
    let name = format!("{} ({})", Engine::Kernel.name(), dir.display());
    let recs = run_threads(phase, &name, progress, |j, thread, window| {
        let job = phase.jobs[j];
        let handles: Vec<&std::fs::File> = phase.job_files[j]
            .iter()
            .map(|&f| match (&files.direct[f], job.direct) {
                (Some(d), true) => d,
                _ => &files.buffered[f],
            })
            .collect();
        let mut rec = Recorder::new(window.measure_from)?;
        let mut pick = Picker::new(job, j, thread);
        #[cfg(target_os = "linux")]
        if job.iodepth > 1 {
            super::uring::run(job, &handles, &mut pick, &mut rec, window)?;
            return Ok(rec);
        }
        let mut buf = Buf::new(job.bs as usize);
        while window.open(&rec, 0) {
            let op = pick.next_op();
            let f = handles[op.file];
            rec.submitted(1);
            let began = Instant::now();
            if op.read {
                // Short reads happen past EOF of a file that starts empty.
                f.read_at(buf.as_mut_slice(), op.offset)
                    .map_err(|e| anyhow!("{e}"))?;
                rec.io(began, true, job.bs);
                continue;
            }
            f.write_all_at(buf.as_slice(), op.offset)
                .map_err(|e| anyhow!("{e}"))?;
            rec.io(began, false, job.bs);
            sync_after_write(f, &mut pick, &mut rec)?;
        }
        Ok(rec)
    })?;
    recs.iter().map(|r| Sample::new(&name, r, None)).collect()
}

/// Runs the sync a completed write makes due (`fsync`/`fdatasync` = N),
/// if any, and records its time.
pub(super) fn sync_after_write(
    f: &std::fs::File,
    pick: &mut Picker,
    rec: &mut Recorder,
) -> anyhow::Result<()> {
    let began = Instant::now();
    match pick.after_write() {
        Sync::None => return Ok(()),
        Sync::Data => f.sync_data(),
        Sync::All => f.sync_all(),
    }
    .map_err(|e| anyhow!("{e}"))?;
    rec.sync(began);
    Ok(())
}

/// Random copies out of buffers the size of the phase's files: what any
/// cached read must at least do.
pub fn memcpy(phase: &Phase<'_>, progress: &Progress) -> anyhow::Result<Vec<Sample>> {
    let sources = phase
        .files
        .iter()
        .map(|f| usize::try_from(f.len).map(|len| vec![0x5au8; len]))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| anyhow!("file too large to copy in memory"))?;
    let sources = &sources;
    let recs = run_threads(
        phase,
        Engine::Memcpy.name(),
        progress,
        |j, thread, window| {
            let job = phase.jobs[j];
            let mut rec = Recorder::new(window.measure_from)?;
            let mut pick = Picker::new(job, j, thread);
            let mut buf = vec![0u8; job.bs as usize];
            while window.open(&rec, 0) {
                let op = pick.next_op();
                let began = Instant::now();
                let at = op.offset as usize;
                let src = &sources[phase.job_files[j][op.file]];
                buf.copy_from_slice(&src[at..at + job.bs as usize]);
                std::hint::black_box(&buf);
                rec.io(began, true, job.bs);
            }
            Ok(rec)
        },
    )?;
    recs.iter()
        .map(|r| Sample::new(Engine::Memcpy.name(), r, None))
        .collect()
}
