/*
 * fio ioengine for pollfs, loaded with ioengine=external:PATH/libpollfs_fio.so.
 *
 * - One pollfs filesystem per fio process, formatted on the device
 *   `pollfs_dev` names (the workspace's device spec) when the first job
 *   thread starts and unmounted when the last one ends; jobs must run as
 *   threads (thread=1), as they share it. `pollfs_cache_mb` sets its page
 *   cache, `pollfs_size_mb` the size of an in-memory device or of a file
 *   made for it; `pollfs_force=1` formats a device that holds something.
 * - One pollfs queue (an engine session with its own device queue) per job
 *   thread, as deep as the job's iodepth: ->queue collects reads and
 *   writes, ->commit submits them, ->getevents polls for completions (no
 *   wakers, no threads). Syncs and trims run synchronously.
 * - Files are pollfs files named as fio names them, created and written
 *   out to the job's size (size= / nr_files each) when first opened, so
 *   reads find data; their pages are then in the cache.
 *
 * Built against fio's source tree (config-host.h from its ./configure);
 * the fio binary must come from the same tree, as the engine uses fio's
 * structures directly.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/falloc.h>

#include "fio.h"
#include "optgroup.h"

#include "pollfs.h"

struct pollfs_fio_options {
	void *pad; /* fio treats an option at offset 0 as unset */
	char *dev;
	unsigned int cache_mb;
	unsigned int size_mb;
	unsigned int force;
};

static struct fio_option options[] = {
	{
		.name = "pollfs_dev",
		.lname = "pollfs device",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct pollfs_fio_options, dev),
		.def = "emu",
		.help = "Device spec pollfs is formatted on (emu, file:PATH, vfio:ADDR, ...)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "pollfs_cache_mb",
		.lname = "pollfs cache size",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct pollfs_fio_options, cache_mb),
		.def = "1024",
		.help = "Page cache of the pollfs filesystem, in MiB",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "pollfs_size_mb",
		.lname = "pollfs device size",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct pollfs_fio_options, size_mb),
		.def = "2048",
		.help = "Size of an in-memory device (emu, ram) or of a file: device made here, in MiB",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "pollfs_force",
		.lname = "pollfs force format",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct pollfs_fio_options, force),
		.def = "0",
		.help = "Format the device even if it holds something",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = NULL,
	},
};

/* The process's filesystem, shared by the job threads. */
static pthread_mutex_t mount_lock = PTHREAD_MUTEX_INITIALIZER;
static PollfsFs *mounted;
static int users;

/* A job thread's state. */
struct pollfs_job {
	PollfsQueue *queue;
	PollfsIo *pending; /* queued, not yet committed */
	unsigned int npending;
	PollfsCompletion *done;
	struct io_u **events;
	unsigned int depth;
};

static int fail(struct thread_data *td, int err, const char *what)
{
	log_err("pollfs: %s: %s (%s)\n", what, strerror(-err), pollfs_last_error());
	td_verror(td, -err, what);
	return 1;
}

static int pollfs_fio_init(struct thread_data *td)
{
	struct pollfs_fio_options *o = td->eo;
	if (!td->o.use_thread) {
		log_err("pollfs: the job threads share one filesystem: set thread=1\n");
		return 1;
	}
	pthread_mutex_lock(&mount_lock);
	if (!mounted) {
		PollfsOptions opts = {
			.cache_pages = o->cache_mb * 256,
			.force = o->force,
			.size_bytes = (uint64_t)o->size_mb << 20,
		};
		int r = pollfs_format(o->dev, &opts, &mounted);
		if (r < 0) {
			mounted = NULL;
			pthread_mutex_unlock(&mount_lock);
			return fail(td, r, "pollfs_format");
		}
	}
	users++;
	pthread_mutex_unlock(&mount_lock);

	struct pollfs_job *job = calloc(1, sizeof(*job));
	unsigned int depth = td->o.iodepth ? td->o.iodepth : 1;
	if (!job)
		return fail(td, -ENOMEM, "calloc");
	job->depth = depth;
	job->pending = calloc(depth, sizeof(*job->pending));
	job->done = calloc(depth, sizeof(*job->done));
	job->events = calloc(depth, sizeof(*job->events));
	td->io_ops_data = job;
	if (!job->pending || !job->done || !job->events)
		return fail(td, -ENOMEM, "calloc");
	int r = pollfs_queue_new(mounted, depth, &job->queue);
	if (r < 0)
		return fail(td, r, "pollfs_queue_new");
	return 0;
}

static void pollfs_fio_cleanup(struct thread_data *td)
{
	struct pollfs_job *job = td->io_ops_data;
	if (job) {
		/* Reap what is still in flight (an aborted job), then free. */
		while (job->queue && pollfs_queue_in_flight(job->queue) > 0)
			pollfs_complete(job->queue, job->done, job->depth);
		if (job->queue)
			pollfs_queue_free(job->queue);
		free(job->pending);
		free(job->done);
		free(job->events);
		free(job);
		td->io_ops_data = NULL;
	}
	pthread_mutex_lock(&mount_lock);
	if (users > 0 && --users == 0 && mounted) {
		int r = pollfs_unmount(mounted);
		if (r < 0)
			log_err("pollfs: unmount: %s (%s)\n", strerror(-r), pollfs_last_error());
		mounted = NULL;
	}
	pthread_mutex_unlock(&mount_lock);
}

static int pollfs_fio_get_file_size(struct thread_data *td, struct fio_file *f)
{
	if (fio_file_size_known(f))
		return 0;
	if (!td->o.size) {
		log_err("pollfs: give the job a size= (the files are made to it)\n");
		return 1;
	}
	f->real_file_size = td->o.size / (td->o.nr_files ? td->o.nr_files : 1);
	fio_file_set_size_known(f);
	return 0;
}

/* Writes the file out to its size, so that reads find data. */
static int lay_out(struct thread_data *td, PollfsFile *file, uint64_t size)
{
	PollfsStat st;
	int r = pollfs_fstat(file, &st);
	if (r < 0)
		return fail(td, r, "pollfs_fstat");
	enum { CHUNK = 1 << 20 };
	char *buf = malloc(CHUNK);
	if (!buf)
		return fail(td, -ENOMEM, "malloc");
	for (size_t i = 0; i < CHUNK; i++)
		buf[i] = (char)(i * 31 + 7);
	for (uint64_t off = st.size; off < size; off += CHUNK) {
		size_t n = size - off < CHUNK ? size - off : CHUNK;
		ssize_t w = pollfs_pwrite(file, buf, n, off);
		if (w < 0) {
			free(buf);
			return fail(td, (int)w, "laying out the file");
		}
	}
	free(buf);
	return 0;
}

static int pollfs_fio_open_file(struct thread_data *td, struct fio_file *f)
{
	pthread_mutex_lock(&mount_lock);
	PollfsFile *file = NULL;
	int flags = O_CREAT | O_RDWR | (td->o.odirect ? O_DIRECT : 0);
	int r = pollfs_open(mounted, f->file_name, flags, 0644, &file);
	if (r == 0)
		r = lay_out(td, file, f->real_file_size) ? -EIO : 0;
	pthread_mutex_unlock(&mount_lock);
	if (r < 0)
		return fail(td, r, f->file_name);
	FILE_SET_ENG_DATA(f, file);
	return 0;
}

static int pollfs_fio_close_file(struct thread_data *td, struct fio_file *f)
{
	PollfsFile *file = FILE_ENG_DATA(f);
	FILE_SET_ENG_DATA(f, NULL);
	if (file) {
		int r = pollfs_close(file);
		if (r < 0)
			return fail(td, r, "pollfs_close");
	}
	return 0;
}

static enum fio_q_status pollfs_fio_queue(struct thread_data *td, struct io_u *io_u)
{
	struct pollfs_job *job = td->io_ops_data;
	PollfsFile *file = FILE_ENG_DATA(io_u->file);
	fio_ro_check(td, io_u);

	int r = 0;
	switch (io_u->ddir) {
	case DDIR_READ:
	case DDIR_WRITE:
		if (job->npending == job->depth)
			return FIO_Q_BUSY;
		job->pending[job->npending++] = (PollfsIo){
			.opcode = io_u->ddir == DDIR_READ ? POLLFS_OP_READ : POLLFS_OP_WRITE,
			.file = file,
			.buf = io_u->xfer_buf,
			.len = io_u->xfer_buflen,
			.offset = io_u->offset,
			.user_data = (uint64_t)(uintptr_t)io_u,
		};
		return FIO_Q_QUEUED;
	case DDIR_SYNC:
		r = pollfs_fsync(file);
		break;
	case DDIR_DATASYNC:
		r = pollfs_fdatasync(file);
		break;
	case DDIR_TRIM:
		r = pollfs_fallocate(file, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				     io_u->offset, io_u->xfer_buflen);
		break;
	default:
		r = -EINVAL;
		break;
	}
	io_u->error = r < 0 ? -r : 0;
	return FIO_Q_COMPLETED;
}

static int pollfs_fio_commit(struct thread_data *td)
{
	struct pollfs_job *job = td->io_ops_data;
	unsigned int sent = 0;
	while (sent < job->npending) {
		int r = pollfs_submit(job->queue, job->pending + sent, job->npending - sent);
		if (r < 0)
			return fail(td, r, "pollfs_submit");
		sent += (unsigned int)r;
		if (sent < job->npending) {
			/* Full: fio keeps at most iodepth in flight, so this
			 * only waits for completions it has not reaped. */
			return 0;
		}
	}
	job->npending = 0;
	return 0;
}

static int pollfs_fio_getevents(struct thread_data *td, unsigned int min, unsigned int max,
				const struct timespec *t)
{
	struct pollfs_job *job = td->io_ops_data;
	unsigned int got = 0;
	(void)t;
	if (max > job->depth)
		max = job->depth;
	do {
		int n = pollfs_complete(job->queue, job->done, max - got);
		if (n < 0)
			return -fail(td, n, "pollfs_complete");
		for (int i = 0; i < n; i++) {
			struct io_u *io_u = (struct io_u *)(uintptr_t)job->done[i].user_data;
			int64_t res = job->done[i].result;
			if (res < 0) {
				io_u->error = (int)-res;
			} else {
				io_u->error = 0;
				io_u->resid = io_u->xfer_buflen - (unsigned long long)res;
			}
			job->events[got++] = io_u;
		}
	} while (got < min);
	return (int)got;
}

static struct io_u *pollfs_fio_event(struct thread_data *td, int event)
{
	struct pollfs_job *job = td->io_ops_data;
	return job->events[event];
}

struct ioengine_ops ioengine = {
	.name = "pollfs",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_DISKLESSIO | FIO_NODISKUTIL | FIO_NOEXTEND,
	.init = pollfs_fio_init,
	.cleanup = pollfs_fio_cleanup,
	.queue = pollfs_fio_queue,
	.commit = pollfs_fio_commit,
	.getevents = pollfs_fio_getevents,
	.event = pollfs_fio_event,
	.open_file = pollfs_fio_open_file,
	.close_file = pollfs_fio_close_file,
	.get_file_size = pollfs_fio_get_file_size,
	.options = options,
	.option_struct_size = sizeof(struct pollfs_fio_options),
};
