/* qk_avx512.c: AVX-512 kernels (temporary stub). */
#include "qk_internal.h"
#if QK_X86
const qk_ops qk_ops_avx512 = {.isa = QK_ISA_AVX512};
#endif
