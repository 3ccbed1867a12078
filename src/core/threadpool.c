/* A persistent fork-join thread pool (see threadpool.h).
 *
 * Dispatch protocol. The caller publishes (fn, arg), resets n_done and bumps
 * the job generation `gen`; each worker waits for gen to change, runs
 * fn(arg, ith, nth) and increments n_done; the caller runs ith = 0 itself and
 * then waits for n_done == nth - 1. After its last job a worker spins on gen
 * (see the waiting phases below), so the back-to-back ops of a forward pass
 * are dispatched in about a microsecond without syscalls; after a while it
 * sleeps on a condition variable so an idle model costs no CPU.
 *
 * Lost wake-ups are excluded Dekker-style: a worker increments n_sleeping
 * (seq_cst) under the mutex and then re-reads gen before waiting, while the
 * caller bumps gen (seq_cst) before reading n_sleeping and, if anyone may be
 * asleep, broadcasts under the same mutex. Either the worker sees the new
 * generation or the caller sees the sleeper.
 */
#include "core/threadpool.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/status.h"

#if defined(__x86_64__) || defined(__i386__)
#define PL_CPU_RELAX() __builtin_ia32_pause()
#else
#define PL_CPU_RELAX() ((void)0)
#endif

/* Waiting, in three phases (both for a worker waiting for the next job and
 * for the caller waiting for the workers to finish):
 *   - up to PL_SPIN_PURE_NS: spin with PAUSE only: the common case of
 *     back-to-back ops on dedicated cores, sub-microsecond hand-off;
 *   - then spin with sched_yield(): on an oversubscribed machine (more
 *     runnable threads than cores, e.g. a shared box or n_threads > cores)
 *     this hands the core to the thread we are waiting for instead of
 *     burning a whole scheduler slice; on an idle core it returns at once;
 *   - a worker that has waited PL_SPIN_NS in total sleeps on the condvar, so
 *     an idle model costs no CPU. */
#define PL_SPIN_PURE_NS 20000LL
#define PL_SPIN_NS 2000000LL
#define PL_MAX_THREADS 1024

typedef struct pl_worker {
    struct pl_threadpool *pool;
    int ith;
} pl_worker;

/* A job description. Two slots, used by generation parity, so a worker that
 * lags behind (possible only after an elastic job it did not join) never
 * reads a slot while the caller rewrites it for the very next job. */
typedef struct pl_job_slot {
    _Atomic(pl_task_fn) fn;
    _Atomic(void *) arg;
    atomic_bool elastic;
} pl_job_slot;

/* Elastic jobs (pl_threadpool_run_elastic): entry = (gen & 0xffff) << 16 |
 * PL_ENTRY_CLOSED | number of workers that joined. */
#define PL_ENTRY_CLOSED 0x8000u
#define PL_ENTRY_COUNT 0x7fffu

struct pl_threadpool {
    int n_threads;
    pthread_t *threads;
    pl_worker *workers;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* The current job: slot[gen & 1], written by the caller before gen is
     * bumped. */
    pl_job_slot slot[2];
    /* Each hot counter on its own cache line: workers poll gen while they
     * write n_done. */
    _Alignas(64) atomic_uint gen;
    _Alignas(64) atomic_int n_done;
    _Alignas(64) atomic_int n_sleeping;
    _Alignas(64) atomic_uint entry;
    atomic_bool stop;
};

static long long pl_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Waits until gen differs from `seen`; returns the new generation. */
static unsigned pl_worker_wait(struct pl_threadpool *p, unsigned seen) {
    long long t0 = 0, now = 0;
    for (unsigned it = 0;; it++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) return g;
        if (!t0 || now - t0 < PL_SPIN_PURE_NS) {
            PL_CPU_RELAX();
            if ((it & 63) != 63) continue;
        } else {
            sched_yield();
        }
        now = pl_now_ns();
        if (!t0) t0 = now;
        else if (now - t0 >= PL_SPIN_NS) break;
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleeping, 1);
    unsigned g;
    while ((g = atomic_load(&p->gen)) == seen) pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *pl_worker_main(void *vw) {
    pl_worker *w = vw;
    struct pl_threadpool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        const unsigned g = pl_worker_wait(p, seen);
        seen = g;
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
        const pl_job_slot *js = &p->slot[g & 1];
        const pl_task_fn fn = atomic_load_explicit(&js->fn, memory_order_relaxed);
        void *const arg = atomic_load_explicit(&js->arg, memory_order_relaxed);
        const bool elastic = atomic_load_explicit(&js->elastic, memory_order_relaxed);
        /* A newer job already? (We lagged behind an elastic job we did not
         * join.) Then the slot may be mid-rewrite: go and take the new one. */
        if (atomic_load_explicit(&p->gen, memory_order_acquire) != g) continue;
        if (elastic) {
            /* join only while the job is open: a closed job (or a newer one)
             * is none of our business, and its caller is not waiting for us */
            unsigned e = atomic_load_explicit(&p->entry, memory_order_acquire);
            bool joined = false;
            while ((e >> 16) == (g & 0xffffu) && !(e & PL_ENTRY_CLOSED)) {
                if (atomic_compare_exchange_weak_explicit(&p->entry, &e, e + 1, memory_order_acq_rel,
                                                          memory_order_acquire)) {
                    joined = true;
                    break;
                }
            }
            if (!joined) continue;
        }
        fn(arg, w->ith, p->n_threads);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
    return NULL;
}

/* Bumps the generation and wakes sleepers (see the protocol above). */
static void pl_pool_signal(struct pl_threadpool *p) {
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static void pl_pool_stop(struct pl_threadpool *p) {
    atomic_store(&p->stop, true);
    /* Taking the mutex around the bump makes sure no worker is between its
     * check of gen and cond_wait when we broadcast. */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    p->n_started = 0;
}

pl_status pl_threadpool_create(int n_threads, pl_threadpool **out) {
    if (!out) return pl_errorf(PL_ERR_INVALID_ARG, "threadpool: out is NULL");
    *out = NULL;
    if (n_threads < 1 || n_threads > PL_MAX_THREADS)
        return pl_errorf(PL_ERR_INVALID_ARG, "threadpool: n_threads = %d (must be 1..%d)",
                         n_threads, PL_MAX_THREADS);
    /* over-aligned struct (cache-line counters): calloc does not promise 64 */
    const size_t size = (sizeof(struct pl_threadpool) + 63) & ~(size_t)63;
    struct pl_threadpool *p = aligned_alloc(64, size);
    if (!p) return pl_errorf(PL_ERR_NO_MEMORY, "threadpool: out of memory");
    memset(p, 0, size);
    p->n_threads = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->entry, 0);
    atomic_init(&p->stop, false);
    for (int i = 0; i < 2; i++) {
        atomic_init(&p->slot[i].fn, NULL);
        atomic_init(&p->slot[i].arg, NULL);
        atomic_init(&p->slot[i].elastic, false);
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) { free(p); return pl_errorf(PL_ERR_INTERNAL, "threadpool: mutex init failed"); }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return pl_errorf(PL_ERR_INTERNAL, "threadpool: condvar init failed");
    }
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            pl_threadpool_free(p);
            return pl_errorf(PL_ERR_NO_MEMORY, "threadpool: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].ith = i + 1;
            int rc = pthread_create(&p->threads[i], NULL, pl_worker_main, &p->workers[i]);
            if (rc != 0) {
                pl_threadpool_free(p);
                return pl_errorf(PL_ERR_NO_MEMORY, "threadpool: cannot start thread %d of %d: %s",
                                 i + 1, n_threads, strerror(rc));
            }
            p->n_started++;
        }
    }
    *out = p;
    return PL_OK;
}

void pl_threadpool_free(pl_threadpool *p) {
    if (!p) return;
    pl_pool_stop(p);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
}

int pl_threadpool_size(const pl_threadpool *p) { return p ? p->n_threads : 1; }

/* Waits (spin, then yield) until n_done reaches want. */
static void pl_pool_join(struct pl_threadpool *p, int want) {
    long long t0 = 0;
    bool yielding = false;
    for (unsigned it = 0; atomic_load_explicit(&p->n_done, memory_order_acquire) != want; it++) {
        if (yielding) { sched_yield(); continue; }
        PL_CPU_RELAX();
        if ((it & 63) == 63) {
            long long now = pl_now_ns();
            if (!t0) t0 = now;
            else if (now - t0 >= PL_SPIN_PURE_NS) yielding = true;
        }
    }
}

static void pl_pool_publish(struct pl_threadpool *p, pl_task_fn fn, void *arg, bool elastic) {
    const unsigned next = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    pl_job_slot *js = &p->slot[next & 1];
    atomic_store_explicit(&js->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&js->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&js->elastic, elastic, memory_order_relaxed);
    atomic_store_explicit(&p->entry, (next & 0xffffu) << 16, memory_order_relaxed);
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    pl_pool_signal(p);   /* seq_cst bump to `next`: also publishes the slot, entry, n_done */
}

void pl_threadpool_run(pl_threadpool *p, pl_task_fn fn, void *arg) {
    if (!p || p->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pl_pool_publish(p, fn, arg, false);
    fn(arg, 0, p->n_threads);
    pl_pool_join(p, p->n_threads - 1);
}

void pl_threadpool_run_elastic(pl_threadpool *p, pl_task_fn fn, void *arg) {
    if (!p || p->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pl_pool_publish(p, fn, arg, true);
    fn(arg, 0, p->n_threads);
    /* All work is claimed: close the job and wait only for those who joined. */
    const unsigned joined = atomic_fetch_or_explicit(&p->entry, PL_ENTRY_CLOSED, memory_order_acq_rel) & PL_ENTRY_COUNT;
    pl_pool_join(p, (int)joined);
}

int pl_cpu_count(void) {
#ifdef CPU_COUNT
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n >= 1) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
}
