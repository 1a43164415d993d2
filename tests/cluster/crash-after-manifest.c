/* SPDX-License-Identifier: MIT */
/*
 * LD_PRELOAD shim for the cluster tests: the process dies (SIGKILL) right
 * after it renames a MANIFEST.json into place and fsyncs its directory:
 * a leader that committed a step and told nobody. Only for the daemon it
 * is preloaded into; the rename itself goes through unchanged.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The build hides symbols by default; these must interpose. */
#define SHIM_EXPORT __attribute__((visibility("default")))

static int is_manifest(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return strcmp(base, "MANIFEST.json") == 0;
}

static void die(int dirfd)
{
	static const char msg[] = "crash-after-manifest: MANIFEST.json in place, SIGKILL\n";

	if (dirfd >= 0)
		fsync(dirfd);
	fputs(msg, stderr); /* unbuffered: out before the kill */
	raise(SIGKILL);
}

SHIM_EXPORT int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
	int (*real)(int, const char *, int, const char *) =
		(int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
	int r = real(olddirfd, oldpath, newdirfd, newpath);

	if (r == 0 && is_manifest(newpath))
		die(newdirfd);
	return r;
}

SHIM_EXPORT int rename(const char *oldpath, const char *newpath)
{
	int (*real)(const char *, const char *) =
		(int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
	int r = real(oldpath, newpath);

	if (r == 0 && is_manifest(newpath))
		die(-1);
	return r;
}
