/* qk_avx2.c: AVX2 + FMA kernels (temporary stub). */
#include "qk_internal.h"
#if QK_X86
const qk_ops qk_ops_avx2 = {.isa = QK_ISA_AVX2};
#endif
