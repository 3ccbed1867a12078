/* A persistent thread pool. pl_threadpool_run() runs fn(arg, ith, nth) on all
 * nth threads (the caller is thread 0) and returns when every thread is done.
 * Workers spin briefly between jobs, then sleep, so back-to-back ops cost no
 * syscalls. One job at a time; not re-entrant. */
#ifndef PL_CORE_THREADPOOL_H
#define PL_CORE_THREADPOOL_H
#include "pocketllm.h"

typedef struct pl_threadpool pl_threadpool;
typedef void (*pl_task_fn)(void *arg, int ith, int nth);

pl_status pl_threadpool_create(int n_threads, pl_threadpool **out);
void pl_threadpool_free(pl_threadpool *pool);
int pl_threadpool_size(const pl_threadpool *pool);
void pl_threadpool_run(pl_threadpool *pool, pl_task_fn fn, void *arg);
/* Like pl_threadpool_run, for jobs whose fn takes its work from a shared
 * counter until none is left (so any one thread can do all of it): fn runs on
 * the caller and on the workers that pick the job up before the caller's fn
 * returns; a worker that is late (descheduled, asleep) skips it. Returns when
 * every thread that ran fn is done. A thread's ith tells it nothing about
 * which part of the work is its own; nth is the pool size. */
void pl_threadpool_run_elastic(pl_threadpool *pool, pl_task_fn fn, void *arg);
/* Number of online CPU cores (>= 1). */
int pl_cpu_count(void);

#endif
