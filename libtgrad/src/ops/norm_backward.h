/* The norms' input gradient (private): one row of rms_norm_backward or layer_norm_backward, the
 * row's values read as doubles (each exactly a bf16 or float32 value), and the exact decision of
 * the elements the double bound leaves open (norm_backward_exact.c). docs/numerics.md,
 * "rms_norm_backward, layer_norm_backward". */
#ifndef TGRAD_OPS_NORM_BACKWARD_H
#define TGRAD_OPS_NORM_BACKWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "norm_exact.h"

/* One row: x, g and w (ones when absent) as exact doubles, gw[j] = g[j] w[j] (exact: two 24-bit
 * significands), n elements; layer: the layer_norm formula, else rms_norm's; eps as given. */
typedef struct tg_nb_row {
    const double *x, *g, *w, *gw;
    double *v, *e; /* n each: the row's double values and their bounds (workspace) */
    int64_t n;
    bool layer;
    double eps;
    int32_t dt; /* the result's dtype: TGRAD_DTYPE_BF16 or TGRAD_DTYPE_F32 */
} tg_nb_row;

/* The row's exact statistics, made on the first element that needs them (docs/numerics.md):
 * every value v is the integer V = v 2^149, and
 *   R  = SXX 2^102 + N E (rms) or (N SXX - SX^2) 2^102 + N^2 E (layer), E = eps 2^400,
 *   K  = SG (rms: sum GW_j X_j) or N SG - SX SGW (layer),
 * so that dx_i = T_i c / (2^98 R^(3/2)) with T_i = GW_i R - X_i K 2^102 (rms, c = sqrt(N)) or
 * (N GW_i - SGW) R - (N X_i - SX) K 2^102 (layer, c = 1). */
typedef struct tg_nb_exact {
    const tg_nb_row *row;
    bool ready;
    tg_big sx, sgw, r, r3, k;
} tg_nb_exact;

/* Element i's bits in the row's dtype, decided exactly: its key among [round(lo), round(hi)] by
 * bisection over the midpoints (lo = -inf, hi = inf: all of them); an exact zero is +0, a value
 * that rounds to zero takes its sign; R = 0 (eps = 0 and a constant row) gives NaN. */
TG_HIDDEN uint32_t tg_nb_exact_element(tg_nb_exact *E, int64_t i, double lo, double hi);

/* The double's rounding to dt's bits (RNE, gradual underflow, overflow to inf, NaN canonical). */
TG_HIDDEN uint32_t tg_nb_round(double v, int32_t dt);

/* The row's constants of the double evaluation (docs/numerics.md): dx_i ~ rinv ((gw_i - a) - (x_i
 * - mu) c), with a within ea, mu within delta, c within ec, rinv within rho (relative); rms_norm:
 * mu = a = ea = delta = 0. */
typedef struct tg_nb_consts {
    double mu, a, c, rinv, rho, ea, delta, ec;
} tg_nb_consts;

/* An element the double bound left open (never a result: the bound's values are finite). */
#define TG_NB_UNDECIDED 0xFFFFFFFFu

/* The hot loops (kernels/cpu/norm_backward_loops.h), portable and AVX-512 builds of one source:
 * loads into doubles, g w, the rows' sums (rms: x^2, gw x, |gw x|; layer: x, |x|, gw, |gw|, then
 * (x - mu)^2, gw (x - mu), |gw (x - mu)|), and each element's value, bound and decided bits. */
#define TG_NB_DECLARE_(sfx)                                                                                     \
    TG_HIDDEN void tg_nb_load_bf16_##sfx(const uint16_t *src, int64_t n, double *to);                           \
    TG_HIDDEN void tg_nb_load_f32_##sfx(const float *src, int64_t n, double *to);                               \
    TG_HIDDEN void tg_nb_mul_##sfx(const double *a, const double *b, int64_t n, double *to);                    \
    TG_HIDDEN void tg_nb_rms_sums_##sfx(const double *x, const double *gw, int64_t n, double s[3]);             \
    TG_HIDDEN void tg_nb_layer_sums_##sfx(const double *x, const double *gw, int64_t n, double s[4]);           \
    TG_HIDDEN void tg_nb_layer_devs_##sfx(const double *x, const double *gw, int64_t n, double mu, double s[3]); \
    TG_HIDDEN void tg_nb_values_##sfx(const tg_nb_consts *K, const double *x, const double *gw, int64_t n,      \
                                      int32_t bf16, double *v, double *e, uint32_t *bits);
TG_NB_DECLARE_(portable)
#if defined(TGRAD_HAVE_X86_VARIANTS)
TG_NB_DECLARE_(avx512f)
#endif

/* Counts into the norm kind's debug counters (tgrad_debug_norm_slow_path): elements evaluated
 * (what 0) and decided exactly (what 1). */
TG_HIDDEN void tg_norm_count(int what, int64_t n);
/* ... and into TGRAD_DEBUG_NORM_DEVICE_ROWS: rows a GPU kernel flagged and the host reran. */
TG_HIDDEN void tg_norm_count_device_rows(int64_t n);

/* The GPU route's slow path of the backward ops (ops/norm_backward.c; tg_norm_rows_on_host hands
 * them over). */
struct tg_step;
TG_HIDDEN tgrad_status tg_norm_backward_rows_on_host(const struct tg_step *st, const uint32_t *flags, int64_t nflags,
                                                 int64_t flagged);

#endif
