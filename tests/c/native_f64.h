/* The double kinds' function-call API on the host's doubles: libtgrad/src/gen/lang.c's
 * TG_NATIVE_F64_API (the mapping OpenCL C and CUDA use), for the tests that compile a device
 * prelude as C. tg_dk, tg_d_of, tg_d_bits (and tg_d_f32, tg_f32_d where needed) are each test's
 * own, with its checked helpers. Include after typedefs of tg_i64; -ffp-contract=off. */
#ifndef TGRAD_TESTS_NATIVE_F64_H
#define TGRAD_TESTS_NATIVE_F64_H

#include <math.h>

#define tg_f64 double
#define tg_dadd(a, b) ((a) + (b))
#define tg_dsub(a, b) ((a) - (b))
#define tg_dmul(a, b) ((a) * (b))
#define tg_ddiv(a, b) ((a) / (b))
#define tg_dfma(a, b, c) fma(a, b, c)
#define tg_dsqrt(a) sqrt(a)
#define tg_dneg(a) (-(a))
#define tg_dabs(a) fabs(a)
#define tg_dmin(a, b) fmin(a, b)
#define tg_dlt(a, b) ((a) < (b))
#define tg_dle(a, b) ((a) <= (b))
#define tg_dgt(a, b) ((a) > (b))
#define tg_dge(a, b) ((a) >= (b))
#define tg_deq(a, b) ((a) == (b))
#define tg_dne(a, b) ((a) != (b))
#define tg_d_i64(v) ((double)(v))
#define tg_i64_d(d) ((tg_i64)(d))

#endif
