/* qk_pool.c: a small persistent thread pool and the per-thread scratch buffers.
 *
 * One job at a time: the caller publishes (task, ctx, nchunks) under a new generation, wakes the
 * workers, and claims chunks itself. Chunks are claimed in runs of consecutive ones (see
 * run_chunks) from a counter tagged with the generation, so a worker that wakes late (descheduled
 * on a loaded machine) finds nothing of a finished job to claim and never touches its context; the
 * caller only waits for chunks that were claimed. A caller that finds the pool busy (another
 * thread's product in flight) runs its chunks alone instead of waiting. A thread out of work (an
 * idle worker, a caller whose chunks are all claimed) first lingers, yielding its CPU between
 * looks, for QK_TUNE_SPIN_NS, then blocks on a condition variable. The workers run a job's chunks
 * in its caller's floating-point environment (XLA's CPU client runs with denormals flushed to
 * zero, a Go program without), so that a chunk gives the same bits whichever thread claims it. */
#define _GNU_SOURCE
#include <fenv.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "qk_internal.h"

/* A job's floating-point mode: on x86-64 the MXCSR, which holds what the kernels' vector code
 * depends on (denormal flushing, rounding) and costs a few nanoseconds to read and set, where the
 * whole environment (fegetenv/fesetenv, x87 state included) costs about 250; elsewhere the whole
 * environment. The MXCSR is read and set by instruction: SIMDe's emulated _mm_getcsr (the qk_simde
 * build) keeps the rounding mode only. */
#if QK_X86
typedef unsigned fp_mode;
static fp_mode fp_mode_get(void) {
  fp_mode m;
  __asm__ volatile("stmxcsr %0" : "=m"(m));
  return m;
}
static void fp_mode_set(const fp_mode *m) { __asm__ volatile("ldmxcsr %0" : : "m"(*m)); }
#else
typedef fenv_t fp_mode;
static fp_mode fp_mode_get(void) {
  fenv_t e;
  fegetenv(&e);
  return e;
}
static void fp_mode_set(const fp_mode *m) { fesetenv(m); }
#endif

/* ---- per-thread buffers ---- */

typedef struct {
  void *p;
  size_t n;
} qk_buf;

static __thread qk_buf tl_scratch, tl_call;
static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;

static void buf_free(void *unused) {
  (void)unused;
  free(tl_scratch.p);
  free(tl_call.p);
  tl_scratch.p = tl_call.p = NULL;
  tl_scratch.n = tl_call.n = 0;
}

static void buf_key_init(void) { (void)pthread_key_create(&buf_key, buf_free); }

static void *buf_get(qk_buf *b, size_t n) {
  if (b->n >= n) {
    return b->p;
  }
  pthread_once(&buf_once, buf_key_init);
  (void)pthread_setspecific(buf_key, (void *)1); /* so buf_free runs at thread exit */
  free(b->p);
  b->p = NULL;
  b->n = 0;
  size_t size = (n + 63) & ~(size_t)63;
  void *p = aligned_alloc(64, size);
  if (p == NULL) {
    return NULL;
  }
  b->p = p;
  b->n = size;
  return p;
}

void *qk_call_buffer(size_t bytes) { return buf_get(&tl_call, bytes); }

static void *chunk_scratch(void) { return buf_get(&tl_scratch, QK_CHUNK_SCRATCH); }

void *qk_thread_scratch(void) { return chunk_scratch(); }

static __thread struct {
  qk_scheduler fn;
  void *arg;
} tl_sched;

void qk_set_scheduler(qk_scheduler fn, void *arg) {
  tl_sched.fn = fn;
  tl_sched.arg = fn != NULL ? arg : NULL;
}

/* ---- pool ---- */

static struct {
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  int nworkers;
  _Atomic uint32_t gen;
  qk_task task;
  void *ctx;
  int64_t nchunks;
  int nslots;
  fp_mode env; /* the caller's floating-point mode (denormal flushing, rounding) */
  _Atomic uint64_t claim; /* gen << 32 | next chunk */
  _Atomic int64_t finished;
  atomic_flag busy;
} pool = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .busy = ATOMIC_FLAG_INIT,
};

/* How long a thread out of work lingers before it blocks, in nanoseconds (qk_tune). A blocked
 * thread takes tens of microseconds to wake on a virtual machine, as long as a product of a small
 * model's layer takes: lingering lets a decoding step's products, which come every few tens of
 * microseconds, find both threads awake (docs/performance.md). Lingering yields the CPU between
 * looks, so a thread with work on the same CPU runs meanwhile. */
static _Atomic int64_t spin_ns = 200000;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* linger returns whether ready(arg) came true within spin_ns, the CPU yielded between looks. */
static int linger(int (*ready)(int64_t), int64_t arg) {
  if (ready(arg)) {
    return 1;
  }
  const int64_t limit = atomic_load_explicit(&spin_ns, memory_order_relaxed), start = now_ns();
  while (now_ns() - start < limit) {
    sched_yield();
    if (ready(arg)) {
      return 1;
    }
  }
  return 0;
}

/* posted_after: a job newer than generation seen was published. */
static int posted_after(int64_t seen) { return atomic_load_explicit(&pool.gen, memory_order_acquire) != (uint32_t)seen; }

/* finished_all: n chunks of the current job have finished. */
static int finished_all(int64_t n) { return atomic_load_explicit(&pool.finished, memory_order_acquire) >= n; }

/* run_chunks claims and runs chunks of job gen until none is left. A claim takes a run of
 * consecutive chunks, the unclaimed ones shared among the job's nslots threads (at least one):
 * a thread streams neighbouring chunks in one go, and a product of a small layer makes a few
 * claims on the shared counter rather than one a chunk (each a cache line passed between cores;
 * docs/performance.md), while the last claims, a chunk each, still even out a late thread. */
static void run_chunks(uint32_t gen, qk_task task, void *ctx, int64_t nchunks, int nslots, int slot, void *scratch) {
  for (;;) {
    uint64_t s = atomic_load_explicit(&pool.claim, memory_order_acquire);
    int64_t first, take;
    for (;;) {
      first = (int64_t)(s & 0xffffffffu);
      if ((uint32_t)(s >> 32) != gen || first >= nchunks) {
        return;
      }
      take = QK_MAX(1, (nchunks - first) / nslots);
      if (atomic_compare_exchange_weak_explicit(&pool.claim, &s, s + (uint64_t)take, memory_order_acq_rel,
                                                memory_order_acquire)) {
        break;
      }
    }
    for (int64_t c = first; c < first + take; c++) {
      task(ctx, c, slot, scratch);
    }
    if (atomic_fetch_add_explicit(&pool.finished, take, memory_order_acq_rel) + take == nchunks) {
      pthread_mutex_lock(&pool.mu);
      pthread_cond_broadcast(&pool.done);
      pthread_mutex_unlock(&pool.mu);
    }
  }
}

static void *worker(void *arg) {
  uintptr_t a = (uintptr_t)arg;
  int slot = (int)(a & 0xffff);
  uint32_t seen = (uint32_t)(a >> 16);
  void *scratch = chunk_scratch();
  if (scratch == NULL) {
    return NULL; /* the others claim everything */
  }
  for (;;) {
    (void)linger(posted_after, seen);
    pthread_mutex_lock(&pool.mu);
    while (atomic_load_explicit(&pool.gen, memory_order_relaxed) == seen) {
      pthread_cond_wait(&pool.wake, &pool.mu);
    }
    seen = atomic_load_explicit(&pool.gen, memory_order_relaxed);
    qk_task task = pool.task;
    void *ctx = pool.ctx;
    int64_t nchunks = pool.nchunks;
    int nslots = pool.nslots;
    fp_mode env = pool.env;
    pthread_mutex_unlock(&pool.mu);
    if (slot < nslots) {
      fp_mode_set(&env);
      run_chunks(seen, task, ctx, nchunks, nslots, slot, scratch);
    }
  }
  return NULL;
}

/* ensure_workers starts workers up to n (slots 1..n); called with pool.mu held. Signals are
 * blocked in them: they run only kernel code and must not take the host's (e.g. Go's) signals. */
static void ensure_workers(int n) {
  if (pool.nworkers >= n) {
    return;
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  uint32_t gen = atomic_load_explicit(&pool.gen, memory_order_relaxed);
  while (pool.nworkers < n) {
    pthread_t t;
    uintptr_t arg = ((uintptr_t)gen << 16) | (uintptr_t)(pool.nworkers + 1);
    if (pthread_create(&t, &attr, worker, (void *)arg) != 0) {
      break;
    }
    pool.nworkers++;
  }
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int qk_parallel(int64_t nchunks, int nthreads, qk_task task, void *ctx) {
  if (tl_sched.fn != NULL && nthreads > 1 && nchunks > 1) {
    return tl_sched.fn(tl_sched.arg, nchunks, nthreads, task, ctx);
  }
  void *scratch = chunk_scratch();
  if (scratch == NULL) {
    return QK_ERR_NOMEM;
  }
  if (nchunks <= 0) {
    return QK_OK;
  }
  if (nchunks > 0xffffffffLL) {
    nthreads = 1; /* the claim counter holds 32 bits; the drivers never get near */
  }
  if (nthreads > nchunks) {
    nthreads = (int)nchunks;
  }
  if (nthreads <= 1 || atomic_flag_test_and_set_explicit(&pool.busy, memory_order_acquire)) {
    for (int64_t c = 0; c < nchunks; c++) {
      task(ctx, c, 0, scratch);
    }
    return QK_OK;
  }
  pthread_mutex_lock(&pool.mu);
  ensure_workers(nthreads - 1);
  uint32_t gen = atomic_load_explicit(&pool.gen, memory_order_relaxed) + 1;
  pool.task = task;
  pool.ctx = ctx;
  pool.nchunks = nchunks;
  pool.nslots = nthreads;
  pool.env = fp_mode_get();
  atomic_store_explicit(&pool.finished, 0, memory_order_relaxed);
  atomic_store_explicit(&pool.claim, (uint64_t)gen << 32, memory_order_release);
  atomic_store_explicit(&pool.gen, gen, memory_order_release);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.mu);

  run_chunks(gen, task, ctx, nchunks, nthreads, 0, scratch);

  if (!linger(finished_all, nchunks)) {
    pthread_mutex_lock(&pool.mu);
    while (!finished_all(nchunks)) {
      pthread_cond_wait(&pool.done, &pool.mu);
    }
    pthread_mutex_unlock(&pool.mu);
  }
  atomic_flag_clear_explicit(&pool.busy, memory_order_release);
  return QK_OK;
}

void qk_set_spin_ns(int64_t ns) { atomic_store(&spin_ns, ns < 0 ? 0 : ns); }

int64_t qk_get_spin_ns(void) { return atomic_load(&spin_ns); }
