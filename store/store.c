/* SPDX-License-Identifier: MIT */
/*
 * store: the checkpoint root on a POSIX file system. Every path below the
 * root is opened relative to a directory fd with O_NOFOLLOW, so a symlink
 * planted inside the root never leads out of it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "store.h"

#define STORE_MANIFEST_MAX ((size_t)1 << 30)
/* An index holds the table (at most CKPT_TABLE_MAX_BYTES) and 4 bytes per
 * chunk; 1 GiB leaves room for shards of many TiB at the smallest chunk. */
#define STORE_INDEX_MAX ((size_t)1 << 30)
#define STORE_LATEST_MAX 64
#define STORE_VERIFY_BUF ((size_t)8 << 20)
/* Checkpoint trees are three levels deep; anything far deeper is not ours
 * and would cost one fd per level. */
#define STORE_REMOVE_DEPTH_MAX 64

void store_freep(void *p)
{
	free(*(void **)p);
}

void store_closep(int *fd)
{
	if (fd && *fd >= 0) {
		int saved = errno;

		close(*fd);
		errno = saved;
	}
}

static void closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}
#define _cleanup_closedir_ __attribute__((cleanup(closedirp)))

static void index_freep(struct ckpt_index *idx)
{
	ckpt_index_free(idx);
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static int open_dir_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name,
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int store_fsync_dir(int dirfd)
{
	if (fsync(dirfd) == 0)
		return 0;
	if (errno != EBADF)
		return -errno;
	/* An O_PATH descriptor cannot be fsync'd; a real one for "." can. */
	_cleanup_close_ int fd = openat(dirfd, ".",
					O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return fsync(fd) < 0 ? -errno : 0;
}

int store_write_file_durable(int dirfd, const char *name, const void *buf,
			     size_t len)
{
	char tmp[NAME_MAX + 1];
	int r;

	if (!name || !*name || strchr(name, '/'))
		return -EINVAL;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", name) >= sizeof(tmp))
		return -ENAMETOOLONG;

	int fd = openat(dirfd, tmp,
			O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
			0644);
	if (fd < 0)
		return -errno;
	r = write_all(fd, buf, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	/* close() can report a deferred write error (NFS): it counts. */
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r < 0)
		goto fail;
	if (renameat(dirfd, tmp, dirfd, name) < 0) {
		r = -errno;
		goto fail;
	}
	return store_fsync_dir(dirfd);
fail:
	unlinkat(dirfd, tmp, 0);
	return r;
}

int store_read_file(int dirfd, const char *name, size_t max, void **out,
		    size_t *len)
{
	struct stat st;
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	size_t cap, used = 0;

	/* Room for the NUL and for noticing growth past max. */
	if (max > SIZE_MAX - 2)
		max = SIZE_MAX - 2;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((uint64_t)st.st_size > max)
		return -EFBIG;
	/* One byte more than the size, so that growth is noticed (and for
	 * the NUL). */
	cap = (size_t)st.st_size + 1;
	buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n = read(fd, buf + used, cap - used);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		used += (size_t)n;
		if (used == cap) {
			/* The file grew while we read it. */
			if (cap > max)
				return -EFBIG;
			size_t ncap = cap > (max + 1) / 2 ? max + 1 : cap * 2;
			char *nbuf = realloc(buf, ncap + 1);

			if (!nbuf)
				return -ENOMEM;
			buf = nbuf;
			cap = ncap;
		}
	}
	buf[used] = '\0';
	*out = TAKE_PTR(buf);
	*len = used;
	return 0;
}

static int remove_tree_at(int dirfd, const char *name, unsigned depth)
{
	struct stat st;
	int r = 0;

	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dirfd, name, 0) < 0 ? -errno : 0;
	if (depth >= STORE_REMOVE_DEPTH_MAX)
		return -ELOOP;

	int fd = open_dir_at(dirfd, name);
	if (fd < 0)
		return fd;
	_cleanup_closedir_ DIR *d = fdopendir(fd);
	if (!d) {
		r = -errno;
		close(fd);
		return r;
	}
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);

		if (!de) {
			if (errno)
				r = -errno;
			break;
		}
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		int q;

		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			q = unlinkat(fd, de->d_name, 0) < 0 ? -errno : 0;
		else
			q = remove_tree_at(fd, de->d_name, depth + 1);
		if (q < 0 && q != -ENOENT && r == 0)
			r = q;
	}
	if (r < 0)
		return r;
	return unlinkat(dirfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
}

int store_remove_tree(int dirfd, const char *name)
{
	int r;

	if (!name || !*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return -EINVAL;
	r = remove_tree_at(dirfd, name, 0);
	/* Already gone is what the caller wanted. */
	return r == -ENOENT ? 0 : r;
}

/* readdir over a directory fd without moving the caller's fd offset. */
static int opendir_at(int dirfd, DIR **out)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	*out = fdopendir(fd);
	if (!*out) {
		int r = -errno;

		close(fd);
		return r;
	}
	return 0;
}

static bool is_real_dir(int dirfd, const struct dirent *de)
{
	struct stat st;

	if (de->d_type == DT_DIR)
		return true;
	if (de->d_type != DT_UNKNOWN)
		return false;
	return fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISDIR(st.st_mode);
}

void store_strv_free(char **v, size_t count)
{
	if (!v)
		return;
	for (size_t i = 0; i < count; i++)
		free(v[i]);
	free(v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int store_list_jobs(int rootfd, char ***jobs, size_t *count)
{
	_cleanup_closedir_ DIR *d = NULL;
	char **v = NULL;
	size_t n = 0, cap = 0;
	int r;

	r = opendir_at(rootfd, &d);
	if (r < 0)
		return r;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);

		if (!de) {
			if (errno) {
				r = -errno;
				goto fail;
			}
			break;
		}
		if (ckpt_job_name_check(de->d_name, strlen(de->d_name)) != 0 ||
		    !is_real_dir(dirfd(d), de))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			char **nv = realloc(v, ncap * sizeof(*v));

			if (!nv) {
				r = -ENOMEM;
				goto fail;
			}
			v = nv;
			cap = ncap;
		}
		v[n] = strdup(de->d_name);
		if (!v[n]) {
			r = -ENOMEM;
			goto fail;
		}
		n++;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_str);
	*jobs = v;
	*count = n;
	return 0;
fail:
	store_strv_free(v, n);
	return r;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static bool step_committed(int jobfd, const char *dirname)
{
	struct stat st;
	_cleanup_close_ int fd = open_dir_at(jobfd, dirname);

	if (fd < 0)
		return false;
	return fstatat(fd, CKPT_MANIFEST_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISREG(st.st_mode);
}

int store_list_steps(int jobfd, bool committed_only, uint64_t **steps,
		     size_t *count)
{
	_cleanup_closedir_ DIR *d = NULL;
	_cleanup_free_ uint64_t *v = NULL;
	size_t n = 0, cap = 0;
	int r;

	r = opendir_at(jobfd, &d);
	if (r < 0)
		return r;
	for (;;) {
		uint64_t step;

		errno = 0;
		struct dirent *de = readdir(d);

		if (!de) {
			if (errno)
				return -errno;
			break;
		}
		if (ckpt_step_dirname_parse(de->d_name, &step) != 0 ||
		    !is_real_dir(dirfd(d), de))
			continue;
		if (committed_only && !step_committed(dirfd(d), de->d_name))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			uint64_t *nv = realloc(v, ncap * sizeof(*v));

			if (!nv)
				return -ENOMEM;
			v = nv;
			cap = ncap;
		}
		v[n++] = step;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_u64);
	*steps = TAKE_PTR(v);
	*count = n;
	return 0;
}

int store_read_manifest(int jobfd, uint64_t step, struct ckpt_manifest *m,
			char *err, size_t errlen)
{
	char dname[32];
	_cleanup_close_ int stepfd = -1;
	_cleanup_free_ char *buf = NULL;
	char why[256] = "";
	size_t len;
	int r;

	r = ckpt_step_dirname(dname, sizeof(dname), step);
	if (r < 0)
		return r;
	stepfd = open_dir_at(jobfd, dname);
	if (stepfd < 0) {
		set_err(err, errlen, "%s: %s", dname, strerror(-stepfd));
		return stepfd;
	}
	r = store_read_file(stepfd, CKPT_MANIFEST_NAME, STORE_MANIFEST_MAX,
			    (void **)&buf, &len);
	if (r < 0) {
		set_err(err, errlen, "%s/%s: %s", dname, CKPT_MANIFEST_NAME,
			strerror(-r));
		return r;
	}
	r = ckpt_manifest_decode(buf, len, m, why, sizeof(why));
	if (r < 0) {
		set_err(err, errlen, "%s/%s: %s", dname, CKPT_MANIFEST_NAME,
			why[0] ? why : strerror(-r));
		return r;
	}
	if (m->step != step) {
		set_err(err, errlen, "%s/%s: manifest is for step %" PRIu64,
			dname, CKPT_MANIFEST_NAME, m->step);
		ckpt_manifest_free(m);
		return -EBADMSG;
	}
	return 0;
}

void store_sha256(const void *buf, size_t len, uint8_t out[32])
{
	unsigned int n = 32;

	if (EVP_Digest(buf, len, out, &n, EVP_sha256(), NULL) != 1)
		memset(out, 0, 32);
}

/* Check an index file's bytes against the manifest's digest (if given),
 * decode them and check they are rank's. `name` labels messages. */
static int decode_index(const char *name, const void *buf, size_t len,
			uint32_t rank, const uint8_t *sha256,
			struct ckpt_index *idx, char *err, size_t errlen)
{
	int r;

	if (sha256) {
		uint8_t got[32];

		store_sha256(buf, len, got);
		if (memcmp(got, sha256, 32) != 0) {
			char hex[65];

			ckpt_hex(hex, got, 32);
			set_err(err, errlen,
				"%s: index digest mismatch (sha256 %s)", name,
				hex);
			return -EBADMSG;
		}
	}
	r = ckpt_index_decode(buf, len, idx);
	if (r < 0) {
		set_err(err, errlen, "%s: %s", name,
			r == -EBADMSG ? "malformed index" : strerror(-r));
		return r;
	}
	if (idx->rank != rank) {
		set_err(err, errlen, "%s: index is for rank %" PRIu32, name,
			idx->rank);
		ckpt_index_free(idx);
		return -EBADMSG;
	}
	return 0;
}

/* Read and decode an index; *file_len gets the file's size. */
static int read_index(int stepfd, uint32_t rank, const uint8_t *sha256,
		      struct ckpt_index *idx, size_t *file_len, char *err,
		      size_t errlen)
{
	char name[32];
	_cleanup_free_ void *buf = NULL;
	size_t len;
	int r;

	r = ckpt_index_filename(name, sizeof(name), rank);
	if (r < 0)
		return r;
	r = store_read_file(stepfd, name, STORE_INDEX_MAX, &buf, &len);
	if (r < 0) {
		set_err(err, errlen, "%s: %s", name, strerror(-r));
		return r;
	}
	r = decode_index(name, buf, len, rank, sha256, idx, err, errlen);
	if (r < 0)
		return r;
	if (file_len)
		*file_len = len;
	return 0;
}

int store_read_index(int stepfd, uint32_t rank, const uint8_t *sha256,
		     struct ckpt_index *idx, char *err, size_t errlen)
{
	return read_index(stepfd, rank, sha256, idx, NULL, err, errlen);
}

int store_read_latest(int jobfd, uint64_t *step)
{
	_cleanup_free_ char *buf = NULL;
	size_t len, i;
	uint64_t v = 0;
	int r;

	r = store_read_file(jobfd, CKPT_LATEST_NAME, STORE_LATEST_MAX,
			    (void **)&buf, &len);
	if (r < 0)
		return r == -EFBIG ? -EBADMSG : r;
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	if (len == 0 || len > 20)
		return -EBADMSG;
	for (i = 0; i < len; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return -EBADMSG;
		unsigned d = (unsigned)(buf[i] - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -EBADMSG;
		v = v * 10 + d;
	}
	*step = v;
	return 0;
}

int store_write_latest(int jobfd, uint64_t step)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", step);

	return store_write_file_durable(jobfd, CKPT_LATEST_NAME, buf, (size_t)n);
}

uint64_t store_manifest_bytes(const struct ckpt_manifest *m)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < m->world_size; i++)
		sum += m->ranks[i].shard_bytes + m->ranks[i].index_bytes;
	return sum;
}

/* ---- Verification ------------------------------------------------------ */

/* One extent of a shard: a tensor (index < count) or the blob. */
struct extent {
	uint64_t offset, bytes;
	uint64_t first_chunk;
	uint32_t tensor; /* UINT32_MAX: the blob */
};

static int cmp_extent(const void *a, const void *b)
{
	const struct extent *x = a, *y = b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Reads a shard window by window: from a file (O_DIRECT where the file
 * system takes it), or through the caller's read function. */
struct shard_reader {
	int fd;
	bool direct;
	int stepfd;
	const char *name;
	store_read_fn read;     /* NULL: the file */
	void *read_opaque;
	uint8_t *buf;
	size_t cap;
	uint64_t win_start, win_end; /* bytes of the file in buf */
	uint64_t file_bytes;
};

static int reader_open(struct shard_reader *rd)
{
	rd->fd = openat(rd->stepfd, rd->name,
			O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECT);
	rd->direct = rd->fd >= 0;
	if (rd->fd < 0 && errno == EINVAL)
		rd->fd = openat(rd->stepfd, rd->name,
				O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	return rd->fd < 0 ? -errno : 0;
}

static int file_read(struct shard_reader *rd, uint64_t start, size_t want)
{
	size_t got = 0;

	while (got < want) {
		ssize_t n = pread(rd->fd, rd->buf + got, want - got,
				  (off_t)(start + got));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* Some file systems take O_DIRECT at open and refuse
			 * it at read: fall back to the page cache. */
			if (errno == EINVAL && rd->direct) {
				int fd = openat(rd->stepfd, rd->name,
						O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

				if (fd < 0)
					return -errno;
				close(rd->fd);
				rd->fd = fd;
				rd->direct = false;
				continue;
			}
			return -errno;
		}
		if (n == 0)
			return -ENODATA; /* shorter than it said at fstat */
		got += (size_t)n;
	}
	return 0;
}

/* Load the window that holds file offset pos. */
static int reader_fill(struct shard_reader *rd, uint64_t pos)
{
	uint64_t start = pos & ~(uint64_t)(CKPT_ALIGN - 1);
	uint64_t want = rd->file_bytes - start;
	int r;

	if (want > rd->cap)
		want = rd->cap;
	r = rd->read ? rd->read(rd->read_opaque, start, rd->buf, (size_t)want)
		     : file_read(rd, start, (size_t)want);
	if (r < 0)
		return r;
	rd->win_start = start;
	rd->win_end = start + want;
	return 0;
}

static const char *extent_name(const struct ckpt_index *idx,
			       const struct extent *e)
{
	return e->tensor == UINT32_MAX ? "(blob)" : idx->table.tensors[e->tensor].name;
}

static bool tensors_equal(const struct ckpt_tensor *a, const struct ckpt_tensor *b)
{
	if (strcmp(a->name, b->name) || a->dtype != b->dtype ||
	    a->ndim != b->ndim || a->data_offset != b->data_offset ||
	    a->nbytes != b->nbytes || a->crc32c != b->crc32c)
		return false;
	for (uint32_t d = 0; d < a->ndim && d < CKPT_MAX_DIMS; d++)
		if (a->global_shape[d] != b->global_shape[d] ||
		    a->offset[d] != b->offset[d] || a->shape[d] != b->shape[d])
			return false;
	return true;
}

/* Index against manifest: everything the manifest says of this rank. */
static int check_index_matches(const struct ckpt_manifest *m,
			       const struct ckpt_manifest_rank *mr,
			       const struct ckpt_index *idx, char *why,
			       size_t whylen)
{
	if (strcmp(idx->job, m->job) || idx->step != m->step ||
	    idx->world_size != m->world_size) {
		snprintf(why, whylen,
			 "index is for job %s step %" PRIu64 " world size %" PRIu32,
			 idx->job, idx->step, idx->world_size);
		return -EBADMSG;
	}
	if (idx->chunk_bytes != m->chunk_bytes) {
		snprintf(why, whylen, "index chunk_bytes %" PRIu32
			 " differs from the manifest's %" PRIu32,
			 idx->chunk_bytes, m->chunk_bytes);
		return -EBADMSG;
	}
	if (idx->shard_bytes != mr->shard_bytes ||
	    idx->blob_bytes != mr->blob_bytes ||
	    idx->blob_crc32c != mr->blob_crc32c) {
		snprintf(why, whylen,
			 "index shard_bytes/blob_bytes/blob_crc32c differ from the manifest");
		return -EBADMSG;
	}
	if (idx->table.count != mr->table.count) {
		snprintf(why, whylen, "index has %" PRIu32
			 " tensors, the manifest %" PRIu32,
			 idx->table.count, mr->table.count);
		return -EBADMSG;
	}
	for (uint32_t i = 0; i < idx->table.count; i++) {
		if (!tensors_equal(&idx->table.tensors[i], &mr->table.tensors[i])) {
			snprintf(why, whylen,
				 "tensor %" PRIu32 " ('%s') differs between index and manifest",
				 i, idx->table.tensors[i].name);
			return -EBADMSG;
		}
	}
	return 0;
}

static void reader_closep(struct shard_reader *rd)
{
	store_closep(&rd->fd);
}

/*
 * Build the extents (tensors in table order, then the blob) with the number
 * of their first chunk, check they lie inside the file, and sort them by
 * file offset so that the shard is read front to back.
 */
static int build_extents(const struct ckpt_index *idx, uint64_t file_bytes,
			 struct extent **out, uint32_t *count, uint64_t *total,
			 char *why, size_t whylen)
{
	uint32_t n = idx->table.count + (idx->blob_bytes ? 1 : 0);
	struct extent *ext = calloc(n ? n : 1, sizeof(*ext));
	uint64_t first = 0, sum = 0;

	if (!ext)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct extent *e = &ext[i];

		if (i < idx->table.count) {
			e->offset = idx->table.tensors[i].data_offset;
			e->bytes = idx->table.tensors[i].nbytes;
			e->tensor = i;
		} else {
			e->offset = idx->blob_offset;
			e->bytes = idx->blob_bytes;
			e->tensor = UINT32_MAX;
		}
		if (e->offset > file_bytes || e->bytes > file_bytes - e->offset) {
			snprintf(why, whylen,
				 "tensor '%s' extent at byte offset %" PRIu64
				 " (%" PRIu64 " bytes) lies outside the shard",
				 extent_name(idx, e), e->offset, e->bytes);
			free(ext);
			return -EBADMSG;
		}
		e->first_chunk = first;
		first += (e->bytes + idx->chunk_bytes - 1) / idx->chunk_bytes;
		sum += e->bytes;
	}
	qsort(ext, n, sizeof(*ext), cmp_extent);
	*out = ext;
	*count = n;
	*total = sum;
	return 0;
}

/* CRC-32C of file bytes [pos, end), through the reader's window. */
static int reader_crc(struct shard_reader *rd, uint64_t pos, uint64_t end,
		      uint32_t *crc)
{
	uint32_t c = 0;
	int r;

	while (pos < end) {
		if (pos < rd->win_start || pos >= rd->win_end) {
			r = reader_fill(rd, pos);
			if (r < 0)
				return r;
		}
		uint64_t n = (end < rd->win_end ? end : rd->win_end) - pos;

		c = ckpt_crc32c(c, rd->buf + (pos - rd->win_start), (size_t)n);
		pos += n;
	}
	*crc = c;
	return 0;
}

/*
 * Index against manifest, once the index decoded: its size, what it says of
 * the rank, its chunk count. why gets "INDEXNAME: reason".
 */
static int check_index(const struct ckpt_manifest *m, uint32_t rank,
		       const struct ckpt_index *idx, size_t index_len,
		       const char *iname, char *why, size_t whylen)
{
	const struct ckpt_manifest_rank *mr = &m->ranks[rank];
	char w[256];
	uint64_t need;
	int r;

	if (index_len != mr->index_bytes) {
		snprintf(why, whylen, "%s: %zu bytes, the manifest says %" PRIu64,
			 iname, index_len, mr->index_bytes);
		return -EBADMSG;
	}
	r = check_index_matches(m, mr, idx, w, sizeof(w));
	if (r < 0) {
		snprintf(why, whylen, "%s: %s", iname, w);
		return r;
	}
	need = ckpt_chunk_count(&idx->table, idx->blob_bytes, idx->chunk_bytes);
	if (idx->chunk_bytes == 0 || need != idx->chunk_count) {
		snprintf(why, whylen, "%s: %" PRIu32 " chunk checksums, the layout needs %" PRIu64,
			 iname, idx->chunk_count, need);
		return -EBADMSG;
	}
	return 0;
}

/*
 * Check every chunk of the shard rd reads (rd->file_bytes long) against
 * idx, front to back through a window of at most `window` bytes. A
 * mismatch is counted in *res and named in res->first_error (-EBADMSG); a
 * shard of the wrong size or one that cannot be read leaves its reason in
 * why ("SHARDNAME: reason") instead.
 */
static int check_chunks(const struct ckpt_manifest *m, uint32_t rank,
			const struct ckpt_index *idx, struct shard_reader *rd,
			size_t window, const char *dname, const char *sname,
			const char *iname, store_progress_fn progress, void *opaque,
			struct store_verify_result *res, char *why, size_t whylen)
{
	_cleanup_free_ struct extent *ext = NULL;
	_cleanup_free_ uint8_t *buf = NULL;
	uint64_t total = 0, done = 0;
	uint32_t next = 0;
	int r;

	if (rd->file_bytes != idx->shard_bytes) {
		snprintf(why, whylen, "%s: %" PRIu64 " bytes, the index says %" PRIu64
			 " (truncated or extended)", sname, rd->file_bytes,
			 idx->shard_bytes);
		return -EBADMSG;
	}
	{
		char w[256];

		r = build_extents(idx, rd->file_bytes, &ext, &next, &total, w,
				  sizeof(w));
		if (r < 0) {
			snprintf(why, whylen, "%s: %s", iname,
				 r == -ENOMEM ? strerror(ENOMEM) : w);
			return r;
		}
	}

	window = (window + CKPT_ALIGN - 1) & ~(size_t)(CKPT_ALIGN - 1);
	rd->cap = rd->file_bytes < window
			  ? (size_t)((rd->file_bytes + CKPT_ALIGN - 1) &
				     ~(uint64_t)(CKPT_ALIGN - 1))
			  : window;
	if (rd->cap == 0)
		rd->cap = CKPT_ALIGN;
	if (posix_memalign((void **)&buf, CKPT_ALIGN, rd->cap) != 0) {
		snprintf(why, whylen, "%s: %s", sname, strerror(ENOMEM));
		return -ENOMEM;
	}
	rd->buf = buf;

	for (uint32_t i = 0; i < next; i++) {
		const struct extent *e = &ext[i];
		uint32_t acc = 0; /* CRC of the extent so far */
		uint64_t k = e->first_chunk;

		for (uint64_t coff = 0; coff < e->bytes; coff += idx->chunk_bytes, k++) {
			uint64_t clen = e->bytes - coff < idx->chunk_bytes
						? e->bytes - coff
						: idx->chunk_bytes;
			uint32_t crc;

			r = reader_crc(rd, e->offset + coff, e->offset + coff + clen,
				       &crc);
			if (r < 0) {
				snprintf(why, whylen, "%s: read at byte offset %" PRIu64 ": %s",
					 sname, e->offset + coff, strerror(-r));
				rd->buf = NULL;
				return r;
			}
			res->chunks++;
			res->bytes += clen;
			done += clen;
			if (crc != idx->chunk_crc[k]) {
				res->bad_chunks++;
				if (!res->first_error[0])
					snprintf(res->first_error, sizeof(res->first_error),
						 "%s/%s: rank %" PRIu32 " step %" PRIu64
						 ": tensor '%s' chunk %" PRIu64
						 " at byte offset %" PRIu64 " (%" PRIu64
						 " bytes into the tensor): crc32c %08" PRIx32
						 ", index says %08" PRIx32,
						 dname, sname, rank, m->step,
						 extent_name(idx, e), k, e->offset + coff,
						 coff, crc, idx->chunk_crc[k]);
			}
			acc = coff == 0 ? crc : ckpt_crc32c_combine(acc, crc, clen);
			if (progress)
				progress(opaque, done, total);
		}
		uint32_t want = e->tensor == UINT32_MAX
					? idx->blob_crc32c
					: idx->table.tensors[e->tensor].crc32c;

		/* Chunks that all match but add up to another tensor CRC mean
		 * the index disagrees with itself. */
		if (acc != want && !res->first_error[0]) {
			res->bad_chunks++;
			snprintf(res->first_error, sizeof(res->first_error),
				 "%s/%s: rank %" PRIu32 " step %" PRIu64
				 ": tensor '%s' at byte offset %" PRIu64 " (%" PRIu64
				 " bytes): crc32c %08" PRIx32 ", expected %08" PRIx32,
				 dname, sname, rank, m->step, extent_name(idx, e),
				 e->offset, e->bytes, acc, want);
		}
	}
	rd->buf = NULL;
	return res->first_error[0] ? -EBADMSG : 0;
}

/* The names a rank's verification speaks of; res cleared. */
static int verify_begin(const struct ckpt_manifest *m, uint32_t rank,
			struct store_verify_result *res, char *dname,
			char *iname, char *sname)
{
	if (!res)
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	if (!m || !m->ranks || rank >= m->world_size)
		return -EINVAL;
	if (ckpt_step_dirname(dname, 32, m->step) < 0 ||
	    ckpt_index_filename(iname, 32, rank) < 0 ||
	    ckpt_shard_filename(sname, 32, rank) < 0)
		return -EINVAL;
	return 0;
}

/* why names a file inside the step directory; the label adds the
 * directory, rank and step. */
static int verify_failed(const struct ckpt_manifest *m, uint32_t rank,
			 const char *dname, const char *why,
			 struct store_verify_result *res, int r)
{
	snprintf(res->first_error, sizeof(res->first_error),
		 "%s%s%s (rank %" PRIu32 " step %" PRIu64 ")", dname,
		 why[0] == ':' ? "" : "/", why, rank, m->step);
	return r;
}

int store_verify_rank(int jobfd, const struct ckpt_manifest *m, uint32_t rank,
		      store_progress_fn progress, void *opaque,
		      struct store_verify_result *res)
{
	char dname[32], iname[32], sname[32], why[384] = "";
	_cleanup_close_ int stepfd = -1;
	__attribute__((cleanup(index_freep))) struct ckpt_index idx = { 0 };
	__attribute__((cleanup(reader_closep))) struct shard_reader rd = { .fd = -1 };
	struct stat st;
	size_t index_len = 0;
	int r;

	r = verify_begin(m, rank, res, dname, iname, sname);
	if (r < 0)
		return r;
	stepfd = open_dir_at(jobfd, dname);
	if (stepfd < 0) {
		snprintf(why, sizeof(why), ": %s", strerror(-stepfd));
		return verify_failed(m, rank, dname, why, res, stepfd);
	}
	r = read_index(stepfd, rank, m->ranks[rank].index_sha256, &idx, &index_len,
		       why, sizeof(why));
	if (r == 0)
		r = check_index(m, rank, &idx, index_len, iname, why, sizeof(why));
	if (r < 0)
		return verify_failed(m, rank, dname, why, res, r);

	rd.stepfd = stepfd;
	rd.name = sname;
	r = reader_open(&rd);
	if (r == 0 && fstat(rd.fd, &st) < 0)
		r = -errno;
	if (r < 0) {
		snprintf(why, sizeof(why), "%s: %s", sname, strerror(-r));
		return verify_failed(m, rank, dname, why, res, r);
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, sizeof(why), "%s: not a regular file", sname);
		return verify_failed(m, rank, dname, why, res, -EBADMSG);
	}
	rd.file_bytes = (uint64_t)st.st_size;
	r = check_chunks(m, rank, &idx, &rd, STORE_VERIFY_BUF, dname, sname, iname,
			 progress, opaque, res, why, sizeof(why));
	if (r < 0 && why[0])
		return verify_failed(m, rank, dname, why, res, r);
	return r;
}

int store_verify_rank_bytes(const struct ckpt_manifest *m, uint32_t rank,
			    const void *index_buf, size_t index_len,
			    uint64_t shard_bytes, store_read_fn read,
			    void *read_opaque, size_t window,
			    store_progress_fn progress, void *opaque,
			    struct store_verify_result *res)
{
	char dname[32], iname[32], sname[32], why[384] = "";
	__attribute__((cleanup(index_freep))) struct ckpt_index idx = { 0 };
	struct shard_reader rd = { .fd = -1 };
	int r;

	r = verify_begin(m, rank, res, dname, iname, sname);
	if (r < 0)
		return r;
	if (!index_buf || !read)
		return -EINVAL;
	r = decode_index(iname, index_buf, index_len, rank,
			 m->ranks[rank].index_sha256, &idx, why, sizeof(why));
	if (r == 0)
		r = check_index(m, rank, &idx, index_len, iname, why, sizeof(why));
	if (r < 0)
		return verify_failed(m, rank, dname, why, res, r);

	rd.read = read;
	rd.read_opaque = read_opaque;
	rd.file_bytes = shard_bytes;
	r = check_chunks(m, rank, &idx, &rd, window ? window : STORE_VERIFY_BUF,
			 dname, sname, iname, progress, opaque, res, why, sizeof(why));
	if (r < 0 && why[0])
		return verify_failed(m, rank, dname, why, res, r);
	return r;
}

/* ---- Job ownership (OWNER) ------------------------------------------ */

#define STORE_OWNER_MAX 4096

int store_owner_format(const struct store_owner *o, char *buf, size_t len)
{
	int n = snprintf(buf, len,
			 STORE_OWNER_FORMAT "\nhost=%s\npid=%ld\ndaemon=%s\ncluster=%s\n"
			 "node=%" PRIu32 "\nnodes=%" PRIu32 "\nsince=%s\nholder=%s\n",
			 o->host, o->pid, o->daemon, o->cluster, o->node, o->nodes, o->since,
			 o->holder);

	return n < 0 || (size_t)n >= len ? -ENOSPC : n;
}

static void owner_field(char *dst, size_t cap, const char *v, size_t vlen)
{
	size_t n = vlen < cap - 1 ? vlen : cap - 1;

	/* Only printable ASCII goes into messages and logs. */
	for (size_t i = 0; i < n; i++)
		dst[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
	dst[n] = 0;
}

static bool owner_number(const char *v, size_t vlen, uint64_t max, uint64_t *out)
{
	uint64_t x = 0;

	if (vlen == 0 || vlen > 20)
		return false;
	for (size_t i = 0; i < vlen; i++) {
		if (v[i] < '0' || v[i] > '9')
			return false;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	if (x > max)
		return false;
	*out = x;
	return true;
}

int store_owner_parse(const char *buf, size_t len, struct store_owner *o)
{
	size_t hl = strlen(STORE_OWNER_FORMAT);

	memset(o, 0, sizeof(*o));
	if (len < hl + 1 || memcmp(buf, STORE_OWNER_FORMAT, hl) != 0 || buf[hl] != '\n')
		return -EBADMSG;
	for (size_t i = hl + 1; i < len;) {
		const char *line = buf + i;
		const char *nl = memchr(line, '\n', len - i);
		size_t ll = nl ? (size_t)(nl - line) : len - i;
		const char *eq = memchr(line, '=', ll);
		uint64_t x;

		i += ll + 1;
		if (!eq)
			continue;
		size_t kl = (size_t)(eq - line), vl = ll - kl - 1;
		const char *v = eq + 1;
#define KEY(k) (kl == strlen(k) && memcmp(line, k, kl) == 0)
		if (KEY("host"))
			owner_field(o->host, sizeof(o->host), v, vl);
		else if (KEY("daemon"))
			owner_field(o->daemon, sizeof(o->daemon), v, vl);
		else if (KEY("cluster"))
			owner_field(o->cluster, sizeof(o->cluster), v, vl);
		else if (KEY("since"))
			owner_field(o->since, sizeof(o->since), v, vl);
		else if (KEY("holder"))
			owner_field(o->holder, sizeof(o->holder), v, vl);
		else if (KEY("pid") && owner_number(v, vl, INT32_MAX, &x))
			o->pid = (long)x;
		else if (KEY("node") && owner_number(v, vl, UINT32_MAX, &x))
			o->node = (uint32_t)x;
		else if (KEY("nodes") && owner_number(v, vl, UINT32_MAX, &x))
			o->nodes = (uint32_t)x;
#undef KEY
	}
	return 0;
}

void store_owner_describe(const struct store_owner *o, char *buf, size_t len)
{
	if (o->pid <= 0) {
		snprintf(buf, len, "a holder whose %s file cannot be read", CKPT_OWNER_NAME);
		return;
	}
	if (o->nodes > 1)
		snprintf(buf, len, "host %s pid %ld (cluster %s, node %" PRIu32 " of %" PRIu32
			 ") since %s", o->host, o->pid, o->cluster, o->node, o->nodes, o->since);
	else
		snprintf(buf, len, "host %s pid %ld (a single-node ckptd) since %s", o->host,
			 o->pid, o->since);
}

static void owner_read(int fd, struct store_owner *holder)
{
	char buf[STORE_OWNER_MAX];

	memset(holder, 0, sizeof(*holder));
	/* The holder rewrites the file only while it takes the lock: a short
	 * read of a half-written file is possible, a retry fixes it. */
	for (int attempt = 0; attempt < 3; attempt++) {
		ssize_t n = pread(fd, buf, sizeof(buf), 0);

		if (n > 0 && store_owner_parse(buf, (size_t)n, holder) == 0 && holder->pid > 0)
			return;
		usleep(20000);
	}
}

/* A write lock on the whole file; OFD where the kernel has it. */
static int owner_setlk(int fd, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };

	if (fcntl(fd, F_OFD_SETLK, &fl) == 0)
		return 0;
	if (errno == EINVAL) {
		/* No OFD locks here: classic POSIX locks, held by the process
		 * (ckptd opens each OWNER file once, so none is lost by a
		 * close of another descriptor). */
		fl.l_pid = 0;
		if (fcntl(fd, F_SETLK, &fl) == 0)
			return 0;
	}
	return errno == EACCES || errno == EAGAIN ? -EAGAIN : -errno;
}

int store_owner_lock(int jobfd, const struct store_owner *me, int *lockfd,
		     struct store_owner *holder)
{
	char buf[STORE_OWNER_MAX];
	struct stat a, b;
	bool created = false;
	int r, n;

	*lockfd = -1;
	memset(holder, 0, sizeof(*holder));
	n = store_owner_format(me, buf, sizeof(buf));
	if (n < 0)
		return n;
	_cleanup_close_ int fd = openat(jobfd, CKPT_OWNER_NAME,
					O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		fd = openat(jobfd, CKPT_OWNER_NAME,
			    O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		created = fd >= 0;
		if (fd < 0 && errno == EEXIST)
			return -ESTALE; /* created by another meanwhile: again */
	}
	if (fd < 0)
		return -errno;
	r = owner_setlk(fd, F_WRLCK);
	if (r == -EAGAIN) {
		owner_read(fd, holder);
		return r;
	}
	if (r < 0)
		return r;
	if (fstat(fd, &a) < 0)
		return -errno;
	if (fstatat(jobfd, CKPT_OWNER_NAME, &b, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? -ESTALE : -errno;
	if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return -ESTALE;
	if (!S_ISREG(a.st_mode))
		return -EBADF;
	errno = 0;
	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n)
		return errno ? -errno : -EIO;
	if (fsync(fd) < 0)
		return -errno;
	if (created && (r = store_fsync_dir(jobfd)) < 0)
		return r;
	*lockfd = TAKE_FD(fd);
	return 0;
}

int store_owner_probe(int jobfd, struct store_owner *holder)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };

	memset(holder, 0, sizeof(*holder));
	_cleanup_close_ int fd = openat(jobfd, CKPT_OWNER_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fcntl(fd, F_OFD_GETLK, &fl) < 0) {
		if (errno != EINVAL)
			return -errno;
		fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET };
		if (fcntl(fd, F_GETLK, &fl) < 0)
			return -errno;
	}
	if (fl.l_type == F_UNLCK)
		return 0;
	owner_read(fd, holder);
	return 1;
}

int store_owner_read(int jobfd, struct store_owner *o)
{
	char buf[STORE_OWNER_MAX];
	ssize_t n;

	memset(o, 0, sizeof(*o));
	_cleanup_close_ int fd = openat(jobfd, CKPT_OWNER_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = pread(fd, buf, sizeof(buf), 0);
	if (n < 0)
		return -errno;
	return store_owner_parse(buf, (size_t)n, o) == 0 && o->pid > 0 ? 0 : -EBADMSG;
}
