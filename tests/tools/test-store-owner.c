/* SPDX-License-Identifier: MIT */
/*
 * store: the job ownership lock (OWNER, FORMAT.md "Job ownership"). Two
 * open file descriptions conflict even within one process (OFD locks), so
 * one test process plays both daemons: the second is refused and told who
 * holds the job, a probe sees the lock, closing the holder's fd frees it,
 * a file replaced under a waiting locker is noticed, and OWNER's text
 * round-trips and is parsed defensively.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.h"
#include "store.h"
#include "test-common.h"

static void owner(struct store_owner *o, const char *host, long pid, const char *daemon,
		  const char *cluster, uint32_t node, uint32_t nodes)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->host, sizeof(o->host), "%s", host);
	o->pid = pid;
	snprintf(o->daemon, sizeof(o->daemon), "%s", daemon);
	snprintf(o->cluster, sizeof(o->cluster), "%s", cluster);
	o->node = node;
	o->nodes = nodes;
	snprintf(o->since, sizeof(o->since), "2026-01-02T03:04:05Z");
}

static int test_text(void)
{
	struct store_owner a, b;
	char buf[1024], desc[512];
	int n;

	owner(&a, "node7", 4242, "00112233aabbccdd", "grp", 0, 4);
	n = store_owner_format(&a, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK_EQ(strncmp(buf, "ckpt-owner 1\n", 13), 0);
	CHECK_EQ(store_owner_parse(buf, (size_t)n, &b), 0);
	CHECK(strcmp(b.host, "node7") == 0 && b.pid == 4242 && b.node == 0 && b.nodes == 4);
	CHECK(strcmp(b.daemon, a.daemon) == 0 && strcmp(b.cluster, "grp") == 0);
	CHECK(strcmp(b.since, a.since) == 0);
	CHECK_EQ(b.holder[0], 0);
	store_owner_describe(&b, desc, sizeof(desc));
	CHECK_CONTAINS(desc, "host node7 pid 4242");
	CHECK_CONTAINS(desc, "cluster grp, node 0 of 4");
	CHECK_EQ(store_owner_format(&a, buf, 20), -ENOSPC);
	/* The identity across restarts round-trips; a file without it (an
	 * older ckptd's) parses with an empty one, which matches no daemon. */
	snprintf(a.holder, sizeof(a.holder), "single:node7:/run/ckptd/ckptd.sock");
	n = store_owner_format(&a, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK_EQ(store_owner_parse(buf, (size_t)n, &b), 0);
	CHECK(strcmp(b.holder, "single:node7:/run/ckptd/ckptd.sock") == 0);
	static const char old[] = "ckpt-owner 1\nhost=h\npid=7\ndaemon=d\nnodes=1\n";
	CHECK_EQ(store_owner_parse(old, sizeof(old) - 1, &b), 0);
	CHECK(b.pid == 7 && b.holder[0] == 0);
	/* Not ours, or hostile: refused or cleaned, never trusted blindly. */
	CHECK_EQ(store_owner_parse("ckpt-owner 2\npid=1\n", 19, &b), -EBADMSG);
	CHECK_EQ(store_owner_parse("", 0, &b), -EBADMSG);
	static const char odd[] = "ckpt-owner 1\nhost=a\x1b[2Jb\npid=99999999999\nnew=1\nnodes=x\n";
	CHECK_EQ(store_owner_parse(odd, sizeof(odd) - 1, &b), 0);
	CHECK(strcmp(b.host, "a?[2Jb") == 0);
	CHECK_EQ(b.pid, 0);
	CHECK_EQ(b.nodes, 0);
	store_owner_describe(&b, desc, sizeof(desc));
	CHECK_CONTAINS(desc, "cannot be read");
	return 0;
fail:
	return 1;
}

static int test_lock(int jobfd)
{
	struct store_owner a, b, h;
	int fa = -1, fb = -1;
	struct stat st;

	owner(&a, "host-a", 100, "aaaaaaaaaaaaaaaa", "default", 0, 1);
	owner(&b, "host-b", 200, "bbbbbbbbbbbbbbbb", "grp", 0, 2);
	CHECK_EQ(store_owner_probe(jobfd, &h), 0); /* no OWNER yet */
	CHECK_EQ(store_owner_read(jobfd, &h), -ENOENT);
	snprintf(a.holder, sizeof(a.holder), "single:host-a:/tmp/a.sock");
	CHECK_EQ(store_owner_lock(jobfd, &a, &fa, &h), 0);
	/* Read without locking, while held and after: the last holder. */
	CHECK_EQ(store_owner_read(jobfd, &h), 0);
	CHECK(h.pid == 100 && strcmp(h.holder, "single:host-a:/tmp/a.sock") == 0);
	CHECK(fa >= 0);
	CHECK_EQ(fstatat(jobfd, CKPT_OWNER_NAME, &st, 0), 0);
	CHECK_EQ(store_owner_lock(jobfd, &b, &fb, &h), -EAGAIN);
	CHECK_EQ(fb, -1);
	CHECK(strcmp(h.host, "host-a") == 0 && h.pid == 100 && h.nodes == 1);
	CHECK(strcmp(h.daemon, "aaaaaaaaaaaaaaaa") == 0);
	CHECK_EQ(store_owner_probe(jobfd, &h), 1);
	CHECK_EQ(h.pid, 100);
	/* The holder goes (its process dies, or it releases): free again. */
	close(fa);
	fa = -1;
	CHECK_EQ(store_owner_probe(jobfd, &h), 0);
	CHECK_EQ(store_owner_read(jobfd, &h), 0);
	CHECK(strcmp(h.holder, "single:host-a:/tmp/a.sock") == 0);
	CHECK_EQ(store_owner_lock(jobfd, &b, &fb, &h), 0);
	CHECK_EQ(store_owner_probe(jobfd, &h), 1);
	CHECK(strcmp(h.cluster, "grp") == 0 && h.nodes == 2 && h.pid == 200);
	/* A releasing owner unlinks OWNER: a new one is created and locked. */
	CHECK_EQ(unlinkat(jobfd, CKPT_OWNER_NAME, 0), 0);
	close(fb);
	fb = -1;
	CHECK_EQ(store_owner_lock(jobfd, &a, &fa, &h), 0);
	CHECK_EQ(store_owner_probe(jobfd, &h), 1);
	CHECK_EQ(h.pid, 100);
	close(fa);
	return 0;
fail:
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return 1;
}

int main(void)
{
	char tmp[4096];
	int dirfd, failed = 0;

	if (fixture_tmpdir(tmp, sizeof(tmp)) < 0) {
		perror("mkdtemp");
		return 1;
	}
	dirfd = open(tmp, O_RDONLY | O_DIRECTORY);
	if (dirfd < 0)
		return 1;
	failed |= test_text();
	failed |= test_lock(dirfd);
	close(dirfd);
	fixture_rmtree(tmp);
	return failed ? 1 : 0;
}
