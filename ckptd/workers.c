/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "workers.h"

struct task {
	struct task *next;
	work_fn run, done;
	void *arg;
};

struct workers {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct task *todo_head, *todo_tail;
	struct task *done_head, *done_tail;
	bool stop;
	int efd;
	unsigned n;
	pthread_t *threads;
};

static void push(struct task **head, struct task **tail, struct task *t)
{
	t->next = NULL;
	if (*tail)
		(*tail)->next = t;
	else
		*head = t;
	*tail = t;
}

static struct task *pop(struct task **head, struct task **tail)
{
	struct task *t = *head;

	if (t) {
		*head = t->next;
		if (!*head)
			*tail = NULL;
	}
	return t;
}

static void *worker_main(void *arg)
{
	struct workers *w = arg;

	/* Checksums of one rank's save must not slow down the copy another
	 * rank of the node is still making into its slot: that copy is the
	 * trainer's stall. On an idle CPU niceness costs nothing. */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct task *t = pop(&w->todo_head, &w->todo_tail);

		if (!t) {
			if (w->stop)
				break;
			pthread_cond_wait(&w->cond, &w->lock);
			continue;
		}
		pthread_mutex_unlock(&w->lock);
		if (t->run)
			t->run(t->arg);
		pthread_mutex_lock(&w->lock);
		push(&w->done_head, &w->done_tail, t);
		/* The counter only wakes the loop; a failed write means it is
		 * already non-zero. */
		(void)eventfd_write(w->efd, 1);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int workers_create(unsigned threads, struct workers **out)
{
	struct workers *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return -ENOMEM;
	if (threads == 0)
		threads = 1;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0) {
		r = -errno;
		goto fail;
	}
	w->threads = calloc(threads, sizeof(*w->threads));
	if (!w->threads) {
		r = -ENOMEM;
		goto fail;
	}
	for (; w->n < threads; w->n++) {
		r = -pthread_create(&w->threads[w->n], NULL, worker_main, w);
		if (r < 0)
			goto fail;
	}
	*out = w;
	return 0;
fail:
	workers_destroy(w);
	return r;
}

void workers_destroy(struct workers *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->n; i++)
		pthread_join(w->threads[i], NULL);
	while (workers_dispatch(w) > 0)
		;
	free(w->threads);
	if (w->efd >= 0)
		close(w->efd);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	free(w);
}

int workers_submit(struct workers *w, work_fn run, work_fn done, void *arg)
{
	struct task *t = malloc(sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->run = run;
	t->done = done;
	t->arg = arg;
	pthread_mutex_lock(&w->lock);
	push(&w->todo_head, &w->todo_tail, t);
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

int workers_fd(const struct workers *w)
{
	return w->efd;
}

int workers_dispatch(struct workers *w)
{
	eventfd_t v;
	int n = 0;

	/* EAGAIN: nothing signalled; finished tasks are still checked. */
	(void)eventfd_read(w->efd, &v);
	for (;;) {
		pthread_mutex_lock(&w->lock);
		struct task *t = pop(&w->done_head, &w->done_tail);
		pthread_mutex_unlock(&w->lock);
		if (!t)
			break;
		if (t->done)
			t->done(t->arg);
		free(t);
		n++;
	}
	return n;
}
