/* qk_cpu.c: the ISA dispatch, the thread-count setting, statuses and the NF4 codebook. */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "qk_internal.h"

/* The 16 NF4 values of QLoRA, indexed by code (the same float32 values as package nf4). */
const float qk_nf4_codebook[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

const char *qk_status_string(int status) {
  switch (status) {
  case QK_OK:
    return "ok";
  case QK_ERR_NULL:
    return "null pointer for a non-empty buffer";
  case QK_ERR_SIZE:
    return "invalid size";
  case QK_ERR_DTYPE:
    return "unsupported element type";
  case QK_ERR_BLOCK:
    return "block size not even and positive";
  case QK_ERR_SCALE:
    return "unsupported scale kind";
  case QK_ERR_ISA:
    return "instruction set not supported here";
  case QK_ERR_NOMEM:
    return "out of memory";
  case QK_ERR_TYPE:
    return "unknown weight type";
  }
  return "unknown status";
}

const char *qk_isa_name(int isa) {
  switch (isa) {
  case QK_ISA_AUTO:
    return "auto";
  case QK_ISA_PORTABLE:
    return "portable";
  case QK_ISA_AVX2:
    return "avx2";
  case QK_ISA_AVX512:
    return "avx512";
  }
  return "unknown";
}

int qk_isa_supported(int isa) {
  switch (isa) {
  case QK_ISA_PORTABLE:
    return 1;
#if QK_X86
  case QK_ISA_AVX2:
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  case QK_ISA_AVX512:
#ifdef QK_SIMDE
    return 1; /* emulated (qk_avx512.c) */
#endif
    __builtin_cpu_init();
    /* libgcc's check includes the OS's XSAVE support of the AVX-512 state. */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#endif
  }
  return 0;
}

int qk_isa_best(void) {
  if (qk_isa_supported(QK_ISA_AVX512)) {
    return QK_ISA_AVX512;
  }
  if (qk_isa_supported(QK_ISA_AVX2)) {
    return QK_ISA_AVX2;
  }
  return QK_ISA_PORTABLE;
}

static _Atomic int active_isa; /* 0 until first use */

int qk_isa_active(void) {
  int isa = atomic_load_explicit(&active_isa, memory_order_relaxed);
  if (isa == 0) {
    isa = qk_isa_best();
    atomic_store_explicit(&active_isa, isa, memory_order_relaxed);
  }
  return isa;
}

int qk_isa_force(int isa) {
  if (isa == QK_ISA_AUTO) {
    isa = qk_isa_best();
  }
  if (!qk_isa_supported(isa)) {
    return QK_ERR_ISA;
  }
  atomic_store_explicit(&active_isa, isa, memory_order_relaxed);
  return QK_OK;
}

const qk_ops *qk_active_ops(void) {
  switch (qk_isa_active()) {
#if QK_X86
  case QK_ISA_AVX512:
    return &qk_ops_avx512;
  case QK_ISA_AVX2:
    return &qk_ops_avx2;
#endif
  default:
    return &qk_ops_portable;
  }
}

/* ---- thread count ---- */

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int default_threads;
static _Atomic int cur_threads;
static char config_note[160];

static void threads_init(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int def = cpus < 1 ? 1 : (cpus > QK_MAX_THREADS ? QK_MAX_THREADS : (int)cpus);
  const char *env = getenv("QUANTA_KERNEL_THREADS");
  if (env != NULL && *env != '\0') {
    char *end = NULL;
    errno = 0;
    long v = strtol(env, &end, 10); /* skips leading white space; a value beyond long is ERANGE */
    const int range = errno == ERANGE;
    while (end != env && isspace((unsigned char)*end)) {
      end++; /* trailing white space too */
    }
    if (end == env || *end != '\0') {
      snprintf(config_note, sizeof config_note,
               "QUANTA_KERNEL_THREADS=%.40s is not a decimal integer: ignored, using %d threads", env, def);
    } else if (range || v < 1 || v > QK_MAX_THREADS) {
      int c = v < 1 ? 1 : QK_MAX_THREADS;
      snprintf(config_note, sizeof config_note, "QUANTA_KERNEL_THREADS=%.40s is outside [1, %d]: using %d", env,
               QK_MAX_THREADS, c);
      def = c;
    } else {
      def = (int)v;
    }
  }
  default_threads = def;
  atomic_store(&cur_threads, def);
}

int qk_threads(void) {
  pthread_once(&threads_once, threads_init);
  return atomic_load_explicit(&cur_threads, memory_order_relaxed);
}

int qk_set_threads(int n) {
  pthread_once(&threads_once, threads_init);
  if (n <= 0) {
    n = default_threads;
  } else if (n > QK_MAX_THREADS) {
    n = QK_MAX_THREADS;
  }
  atomic_store(&cur_threads, n);
  return n;
}

const char *qk_config_note(void) {
  pthread_once(&threads_once, threads_init);
  return config_note[0] != '\0' ? config_note : NULL;
}
