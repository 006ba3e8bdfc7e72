//! The baselines: the kernel's page cache (pread/pwrite/fsync on a regular
//! file, tmpfs by default) and plain memory copies (the physical limit).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use super::job::Job;
use super::sample::{Recorder, Sample};
use super::workload::{Picker, Sync};
use super::{run_threads, Progress};

/// The job with pread/pwrite on files in `dir`.
pub fn kernel(job: &Job, dir: &Path, progress: &Progress) -> Result<Sample, String> {
    let size = job.file_size();
    let mut paths = Vec::new();
    let mut files = Vec::new();
    for k in 0..job.nrfiles {
        let path = dir.join(format!(
            "pollfs-bench-{}-{}.{k}",
            std::process::id(),
            job.filename
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let chunk = vec![0x5au8; 1 << 20];
        let mut off = 0;
        while off < size && !job.append {
            let n = chunk.len().min((size - off) as usize);
            file.write_all_at(&chunk[..n], off)
                .map_err(|e| e.to_string())?;
            off += n as u64;
        }
        paths.push(path);
        files.push(file);
    }
    if job.cold {
        for f in &files {
            f.sync_all().map_err(|e| e.to_string())?;
        }
    }
    let files = &files;
    let result = run_threads(job, progress, |thread, deadline, start| {
        let mut rec = Recorder::new(start)?;
        let mut pick = Picker::new(job, thread);
        let mut buf = vec![0u8; job.bs as usize];
        while Instant::now() < deadline {
            let op = pick.next_op();
            let f = &files[op.file];
            let began = Instant::now();
            if op.read {
                f.read_exact_at(&mut buf, op.offset)
                    .map_err(|e| e.to_string())?;
            } else {
                f.write_all_at(&buf, op.offset).map_err(|e| e.to_string())?;
                match pick.after_write() {
                    Sync::None => {}
                    Sync::Data => {
                        f.sync_data().map_err(|e| e.to_string())?;
                        rec.syncs += 1;
                    }
                    Sync::All => {
                        f.sync_all().map_err(|e| e.to_string())?;
                        rec.syncs += 1;
                    }
                }
            }
            rec.io(began, job.bs);
        }
        Ok(rec)
    });
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    let (rec, secs) = result?;
    Ok(Sample::new(
        &format!("kernel ({})", dir.display()),
        rec,
        secs,
        None,
    ))
}

/// Random copies out of one buffer the size of the job's files: what any
/// cached read must at least do.
pub fn memcpy(job: &Job, progress: &Progress) -> Result<Sample, String> {
    let size = usize::try_from(job.file_size()).map_err(|_| "file too large")?;
    let sources: Vec<Vec<u8>> = (0..job.nrfiles).map(|_| vec![0x5au8; size]).collect();
    let sources = &sources;
    let (rec, secs) = run_threads(job, progress, |thread, deadline, start| {
        let mut rec = Recorder::new(start)?;
        let mut pick = Picker::new(job, thread);
        let mut buf = vec![0u8; job.bs as usize];
        while Instant::now() < deadline {
            let op = pick.next_op();
            let began = Instant::now();
            let at = op.offset as usize;
            buf.copy_from_slice(&sources[op.file][at..at + job.bs as usize]);
            std::hint::black_box(&buf);
            rec.io(began, job.bs);
        }
        Ok(rec)
    })?;
    Ok(Sample::new("memcpy", rec, secs, None))
}
