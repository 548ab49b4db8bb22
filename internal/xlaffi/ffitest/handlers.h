/* handlers.h: the test handlers of package ffitest. */
#ifndef QUANTA_FFITEST_HANDLERS_H_
#define QUANTA_FFITEST_HANDLERS_H_

#include <stdint.h>

#include "qffi.h"

qffi_error* quanta_test_axpby(qffi_frame* frame);
qffi_error* quanta_test_u8dot(qffi_frame* frame);
qffi_error* quanta_test_attrs(qffi_frame* frame);
qffi_error* quanta_test_unanswering(qffi_frame* frame);
qffi_error* quanta_test_old_abi(qffi_frame* frame);

/* ffitest_calls returns the number of executions of handler i (0 axpby, 1 u8dot, 2 attrs). */
int64_t ffitest_calls(int i);

/* ffitest_threads returns the intra-op pool size u8dot saw last, and the number of distinct
 * chunks it ran off the calling thread. */
int64_t ffitest_threads(void);
int64_t ffitest_pool_chunks(void);

#endif /* QUANTA_FFITEST_HANDLERS_H_ */
