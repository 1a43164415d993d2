/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"

int64_t test_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int fake_start(struct fake *f, fake_serve_fn serve, void *arg)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	int lfd;

	snprintf(f->dir, sizeof(f->dir), "/tmp/ckpt-fake-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/ckptd.sock", f->dir);
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", f->path);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -1;
	if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 8) < 0) {
		close(lfd);
		return -1;
	}
	fflush(NULL);
	f->pid = fork();
	if (f->pid < 0) {
		close(lfd);
		return -1;
	}
	if (f->pid == 0)
		_exit(serve(lfd, arg));
	close(lfd);
	return 0;
}

int fake_stop(struct fake *f, int timeout_ms)
{
	int64_t deadline = test_now_ms() + timeout_ms;
	int status = 0;
	pid_t r;

	for (;;) {
		r = waitpid(f->pid, &status, WNOHANG);
		if (r == f->pid)
			break;
		if (r < 0)
			return -1;
		if (test_now_ms() > deadline) {
			kill(f->pid, SIGKILL);
			waitpid(f->pid, &status, 0);
			fprintf(stderr, "fake ckptd did not finish; killed\n");
			status = -1;
			break;
		}
		usleep(10000);
	}
	unlink(f->path);
	rmdir(f->dir);
	if (status == -1 || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

int fake_accept(int lfd, int timeout_ms)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };

	if (poll(&p, 1, timeout_ms) != 1)
		return -1;
	return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

int fake_recv(int cfd, struct ckpt_msg *m, int timeout_ms)
{
	uint8_t buf[CKPT_MSG_MAX_BYTES];
	struct pollfd p = { .fd = cfd, .events = POLLIN };
	ssize_t n;

	if (poll(&p, 1, timeout_ms) != 1)
		return -1;
	n = recv(cfd, buf, sizeof(buf), 0);
	if (n <= 0)
		return -1;
	return ckpt_msg_decode(buf, (size_t)n, m) < 0 ? -1 : 0;
}

int fake_send_raw(int cfd, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 4)];
	} cbuf;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds > 0) {
		struct cmsghdr *c;

		memset(&cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	return sendmsg(cfd, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

int fake_send(int cfd, const struct ckpt_msg *m, const int *fds, int nfds)
{
	uint8_t buf[CKPT_MSG_MAX_BYTES];
	ssize_t n = ckpt_msg_encode(m, buf, sizeof(buf));

	if (n < 0)
		return -1;
	return fake_send_raw(cfd, buf, (size_t)n, fds, nfds);
}

int fake_memfd(uint64_t bytes, uint64_t file_bytes, bool seal, void **base)
{
	int fd = memfd_create("fake-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)(file_bytes ? file_bytes : bytes)) < 0)
		goto fail;
	if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto fail;
	if (base) {
		*base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (*base == MAP_FAILED)
			goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

void fake_hello_ok(struct ckpt_msg *m, uint32_t slots, uint64_t slot_bytes, uint32_t flags)
{
	memset(m, 0, sizeof(*m));
	m->type = CKPT_MSG_HELLO_OK;
	m->seq = 1;
	m->u.hello_ok.slots = slots;
	m->u.hello_ok.flags = flags;
	m->u.hello_ok.slot_bytes = slot_bytes;
	m->u.hello_ok.arena_bytes = slots * slot_bytes;
	m->u.hello_ok.chunk_bytes = CKPT_CHUNK_MIN;
	m->u.hello_ok.latest_step = CKPT_NO_STEP;
}

int fake_hello(int cfd, uint32_t slots, uint64_t slot_bytes, uint32_t flags, void **base)
{
	struct ckpt_msg m;
	int fd, r;

	if (fake_recv(cfd, &m, 5000) < 0 || m.type != CKPT_MSG_HELLO)
		return -1;
	fd = fake_memfd(slots * slot_bytes, 0, true, base);
	if (fd < 0)
		return -1;
	fake_hello_ok(&m, slots, slot_bytes, flags);
	r = fake_send(cfd, &m, &fd, 1);
	close(fd);
	return r;
}

int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own fd */
}

int count_memfd_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "memfd:fake-arena"))
			n++;
	fclose(f);
	return n;
}
