/* The thread pool (core/threadpool.c): every job runs exactly once on every
 * thread index, jobs are strictly sequential (no overlap, all writes of job k
 * visible to job k+1), a pool of 1 runs inline, workers that went to sleep
 * wake up, and create/free cycles leak nothing that hangs. Prints the
 * dispatch latency of an empty job for information. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/threadpool.h"
#include "core/cpu_features.h"
#include "testutil.h"

typedef struct {
    int nth_seen[64];
    atomic_int hits[64];
    atomic_int calls;
    long long *shared;   /* job k reads what job k-1 wrote */
    int bad_order;
} job_t;

static void count_task(void *arg, int ith, int nth) {
    job_t *j = arg;
    if (ith >= 0 && ith < 64) {
        atomic_fetch_add(&j->hits[ith], 1);
        j->nth_seen[ith] = nth;
    }
    atomic_fetch_add(&j->calls, 1);
}

/* Each thread adds 1 to its own slot; the next job checks every slot has the
 * previous value + 1 (a job running early or late would see a stale one). */
static void seq_task(void *arg, int ith, int nth) {
    job_t *j = arg;
    long long expect = j->shared[63];   /* the job number, set by the caller */
    if (j->shared[ith] != expect) j->bad_order = 1;
    j->shared[ith] = expect + 1;
    (void)nth;
}

static void empty_task(void *arg, int ith, int nth) { (void)arg; (void)ith; (void)nth; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_pool(int n) {
    pl_threadpool *p = NULL;
    CHECK(pl_threadpool_create(n, &p) == PL_OK && p, "create(%d)", n);
    if (!p) return;
    CHECK(pl_threadpool_size(p) == n, "size %d != %d", pl_threadpool_size(p), n);

    job_t *j = calloc(1, sizeof *j);
    /* With more threads than cores every job needs context switches (and
     * ctest runs tests in parallel): keep oversubscribed runs short. */
    const int iters = n > pl_cpu_count() ? 200 : 2000;
    for (int it = 0; it < iters; it++) pl_threadpool_run(p, count_task, j);
    int ok = atomic_load(&j->calls) == iters * n;
    for (int i = 0; i < n; i++) ok &= atomic_load(&j->hits[i]) == iters && j->nth_seen[i] == n;
    CHECK(ok, "n=%d: every thread index runs every job once (calls %d)", n, atomic_load(&j->calls));

    long long shared[64] = {0};
    j->shared = shared;
    for (int it = 0; it < iters; it++) {
        shared[63] = it;
        pl_threadpool_run(p, seq_task, j);
    }
    CHECK(!j->bad_order, "n=%d: jobs are sequential and their writes visible", n);

    /* let the workers fall asleep, then make sure they wake up */
    usleep(5000);
    atomic_store(&j->calls, 0);
    for (int it = 0; it < 10; it++) {
        pl_threadpool_run(p, count_task, j);
        usleep(1000);
    }
    CHECK(atomic_load(&j->calls) == 10 * n, "n=%d: sleeping workers wake up (calls %d)", n, atomic_load(&j->calls));

    /* dispatch latency (informational: the machine may be shared, and with
     * more threads than cores every job needs context switches) */
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        int count = 0;
        double t0 = now_s(), t1;
        do {
            for (int k = 0; k < 100; k++) pl_threadpool_run(p, empty_task, NULL);
            count += 100;
            t1 = now_s();
        } while (t1 - t0 < 0.05);
        double dt = (t1 - t0) / count;
        if (dt < best) best = dt;
    }
    printf("threadpool n=%d: %.2f us per empty job\n", n, best * 1e6);
    free(j);
    pl_threadpool_free(p);
}

int main(void) {
    printf("cpu features: %s; %d cores\n", pl_cpu_features_get()->description, pl_cpu_count());
    CHECK(pl_cpu_count() >= 1, "pl_cpu_count");
    pl_threadpool *p = NULL;
    CHECK(pl_threadpool_create(0, &p) == PL_ERR_INVALID_ARG && p == NULL, "create(0) is refused");
    test_pool(1);
    test_pool(2);
    test_pool(3);
    test_pool(8);
    /* create/free churn, including freeing a pool that never ran a job */
    for (int i = 0; i < 50; i++) {
        pl_threadpool *q = NULL;
        if (pl_threadpool_create(1 + i % 4, &q) == PL_OK) {
            if (i % 2) pl_threadpool_run(q, empty_task, NULL);
            pl_threadpool_free(q);
        }
    }
    CHECK(1, "create/free churn");
    pl_threadpool_free(NULL);
    return pl_test_summary("test_threadpool");
}
