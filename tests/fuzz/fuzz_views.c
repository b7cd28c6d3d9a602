/* libFuzzer target: random chains of view operations, checked against an independent model.
 *
 * The model keeps (values, shape, strides, offset) and derives every answer from first
 * principles: slicing by walking indices, view() by brute force (a new shape is expressible iff
 * the elements' buffer offsets, listed in row-major order, are produced by some strides), reshape
 * by listing elements. The base tensor's bits are its element indices, so a read-back names the
 * exact element each position holds. Any disagreement, crash or leak aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad.h"

#define MAXN 4096

typedef struct {
    uint16_t values[MAXN]; /* the buffer's contents */
    int32_t nd;
    int64_t shape[TGRAD_MAX_DIMS], strides[TGRAD_MAX_DIMS], offset;
} model;

typedef struct { const uint8_t *p; size_t n; } input;
static int take(input *in) { return in->n ? (in->n--, *in->p++) : 0; }
static int64_t small(input *in) { return (int64_t)(take(in) % 11) - 5; } /* -5 .. 5 */

#define REQUIRE(cond)                                                                    \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "model disagrees: %s (line %d): %s\n", #cond, __LINE__, tgrad_last_error()); \
            abort();                                                                     \
        }                                                                                \
    } while (0)

static int64_t numel(const model *m) {
    int64_t n = 1;
    for (int32_t i = 0; i < m->nd; i++) n *= m->shape[i];
    return n;
}

/* Buffer offsets of every element, row-major. */
static int64_t offsets(const model *m, int64_t *out) {
    int64_t n = numel(m), idx[TGRAD_MAX_DIMS] = { 0 };
    for (int64_t e = 0; e < n; e++) {
        int64_t off = m->offset;
        for (int32_t d = 0; d < m->nd; d++) off += idx[d] * m->strides[d];
        out[e] = off;
        for (int32_t d = m->nd - 1; d >= 0 && ++idx[d] == m->shape[d]; d--) idx[d] = 0;
    }
    return n;
}

static void check(tgrad_tensor_t t, const model *m) {
    int32_t nd = -1;
    int64_t shape[8], strides[8], off;
    REQUIRE(tgrad_tensor_ndim(t, &nd) == TGRAD_OK && nd == m->nd);
    REQUIRE(tgrad_tensor_shape(t, shape) == TGRAD_OK && tgrad_tensor_strides(t, strides) == TGRAD_OK);
    for (int32_t i = 0; i < nd; i++) REQUIRE(shape[i] == m->shape[i]);
    static int64_t offs[MAXN * 8];
    int64_t n = offsets(m, offs);
    static uint16_t got[MAXN * 8];
    REQUIRE((size_t)n <= sizeof got / 2);
    REQUIRE(tgrad_tensor_read_bf16(t, got, (size_t)n) == TGRAD_OK);
    for (int64_t e = 0; e < n; e++) REQUIRE(got[e] == m->values[offs[e]]);
    (void)off;
}

/* Materialize: the model's elements become a compact buffer. */
static void compact(model *m) {
    static int64_t offs[MAXN * 8];
    static uint16_t vals[MAXN];
    int64_t n = offsets(m, offs);
    for (int64_t e = 0; e < n; e++) vals[e] = m->values[offs[e]];
    memcpy(m->values, vals, (size_t)n * 2);
    int64_t s = 1;
    for (int32_t d = m->nd - 1; d >= 0; d--) m->strides[d] = s, s *= m->shape[d] ? m->shape[d] : 1;
    m->offset = 0;
}

/* Is `shape` expressible with strides over the same element order? Brute force: take each axis's
 * stride from the offsets of its first step, then check every element. On success *v is the view. */
static int expressible(const model *m, const int64_t *shape, int32_t nd, model *v) {
    static int64_t offs[MAXN * 8], mine[MAXN * 8];
    int64_t n = offsets(m, offs);
    *v = *m;
    v->nd = nd;
    memcpy(v->shape, shape, sizeof(int64_t) * (size_t)nd);
    v->offset = n ? offs[0] : m->offset;
    int64_t step = 1; /* row-major index distance of one step along axis d */
    for (int32_t d = nd - 1; d >= 0; d--) {
        v->strides[d] = shape[d] > 1 ? offs[step] - offs[0] : 0;
        step *= shape[d] ? shape[d] : 1;
    }
    if (n <= 1) return 1;
    offsets(v, mine);
    for (int64_t e = 0; e < n; e++)
        if (mine[e] != offs[e]) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input in = { data, size };
    static model m;
    m.nd = 1 + take(&in) % 4;
    int64_t total = 1;
    for (int32_t i = 0; i < m.nd; i++) m.shape[i] = take(&in) % 6, total *= m.shape[i];
    for (int64_t i = 0; i < total; i++) m.values[i] = (uint16_t)i;
    m.offset = 0;
    for (int64_t d = m.nd - 1, st = 1; d >= 0; d--) m.strides[d] = st, st *= m.shape[d] ? m.shape[d] : 1;
    tgrad_tensor_t t = 0;
    REQUIRE(tgrad_tensor_from_bf16(m.values, m.nd, m.shape, &t) == TGRAD_OK);
    for (int op = 0; op < 12 && in.n; op++) {
        tgrad_tensor_t next = 0;
        tgrad_status s;
        model nm = m;
        int choice = take(&in) % 8;
        if (m.nd == 0 && (choice == 3 || choice == 4)) continue; /* no axis to slice or index */
        switch (choice) {
        case 0: { /* transpose */
            int32_t a0 = (int32_t)small(&in), a1 = (int32_t)small(&in);
            int ok = a0 >= -m.nd && a0 < m.nd && a1 >= -m.nd && a1 < m.nd;
            s = tgrad_tensor_transpose(t, a0, a1, &next);
            REQUIRE(ok ? s == TGRAD_OK : s == TGRAD_ERR_INDEX_OUT_OF_RANGE);
            if (ok) {
                a0 = a0 < 0 ? a0 + m.nd : a0, a1 = a1 < 0 ? a1 + m.nd : a1;
                nm.shape[a0] = m.shape[a1], nm.strides[a0] = m.strides[a1];
                nm.shape[a1] = m.shape[a0], nm.strides[a1] = m.strides[a0];
            }
            break;
        }
        case 1: { /* permute (sometimes not a permutation) */
            int32_t axes[8], n = m.nd + (take(&in) % 5 == 0 ? 1 : 0), seen = 0, ok = n == m.nd;
            for (int32_t i = 0; i < n; i++) {
                axes[i] = (int32_t)(take(&in) % (m.nd + 1)) - (take(&in) % 2 ? m.nd : 0);
                int32_t a = axes[i] < 0 ? axes[i] + m.nd : axes[i];
                if (a < 0 || a >= m.nd || (seen >> a & 1)) ok = 0;
                else seen |= 1 << a, nm.shape[i] = m.shape[a], nm.strides[i] = m.strides[a];
            }
            s = tgrad_tensor_permute(t, axes, n, &next);
            REQUIRE(ok ? s == TGRAD_OK : s == TGRAD_ERR_BAD_PERMUTATION);
            break;
        }
        case 2: { /* expand, maybe with a new leading axis */
            int32_t lead = take(&in) % 3 == 0 && m.nd < 4, n = m.nd + lead, ok = 1;
            int64_t shape[8];
            for (int32_t i = 0; i < n; i++) {
                int64_t want = take(&in) % 4 == 0 ? -1 : take(&in) % 4;
                shape[i] = want;
                if (i < lead) {
                    if (want < 0) ok = 0;
                    nm.shape[i] = want, nm.strides[i] = 0;
                    continue;
                }
                int64_t have = m.shape[i - lead];
                nm.shape[i] = have, nm.strides[i] = m.strides[i - lead];
                if (want == -1 || want == have) continue;
                if (have == 1) nm.shape[i] = want, nm.strides[i] = 0;
                else ok = 0;
            }
            nm.nd = n;
            s = tgrad_tensor_expand(t, shape, n, &next);
            REQUIRE(ok ? s == TGRAD_OK : s == TGRAD_ERR_BAD_EXPAND);
            break;
        }
        case 3: { /* slice: CPython's slice.indices(), then walk the indices */
            int32_t axis = (int32_t)(take(&in) % m.nd);
            int64_t start = small(&in), stop = small(&in), step = small(&in);
            uint32_t flags = (uint32_t)take(&in) % 4;
            s = tgrad_tensor_slice(t, axis, start, stop, step, flags, &next);
            if (step == 0) {
                REQUIRE(s == TGRAD_ERR_INVALID_ARGUMENT);
                break;
            }
            REQUIRE(s == TGRAD_OK);
            int64_t len = m.shape[axis], lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
            int64_t lo, hi;
            if (flags & TGRAD_SLICE_START_NONE) lo = step < 0 ? upper : lower;
            else {
                lo = start < 0 ? start + len : start;
                lo = lo < lower ? lower : lo > upper ? upper : lo;
            }
            if (flags & TGRAD_SLICE_STOP_NONE) hi = step < 0 ? lower : upper;
            else {
                hi = stop < 0 ? stop + len : stop;
                hi = hi < lower ? lower : hi > upper ? upper : hi;
            }
            int64_t first = -1, count = 0;
            for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
                if (first < 0) first = i;
                count++;
            }
            nm.shape[axis] = count;
            if (count > 0) nm.offset = m.offset + first * m.strides[axis];
            if (count > 1) nm.strides[axis] = m.strides[axis] * step; /* one element: its stride never matters */
            break;
        }
        case 4: { /* integer index */
            int32_t axis = (int32_t)(take(&in) % m.nd);
            int64_t index = small(&in), len = m.shape[axis], i = index < 0 ? index + len : index;
            s = tgrad_tensor_select(t, axis, index, &next);
            REQUIRE((i >= 0 && i < len) ? s == TGRAD_OK : s == TGRAD_ERR_INDEX_OUT_OF_RANGE);
            if (s) break;
            nm.nd = m.nd - 1, nm.offset = m.offset + i * m.strides[axis];
            for (int32_t d = 0, o = 0; d < m.nd; d++)
                if (d != axis) nm.shape[o] = m.shape[d], nm.strides[o] = m.strides[d], o++;
            break;
        }
        case 5:   /* view: expressible or refused */
        case 6: { /* reshape: a view when expressible, else a copy */
            int is_view = choice == 5;
            int32_t n = 1 + take(&in) % 4;
            int64_t shape[8], prod = 1;
            for (int32_t i = 0; i < n; i++) shape[i] = take(&in) % 5, prod *= shape[i];
            s = is_view ? tgrad_tensor_view(t, shape, n, &next) : tgrad_tensor_reshape(t, shape, n, &next);
            if (prod != numel(&m)) {
                REQUIRE(s == TGRAD_ERR_BAD_RESHAPE);
                break;
            }
            model v;
            int expr = expressible(&m, shape, n, &v);
            if (is_view && !expr) {
                REQUIRE(s == TGRAD_ERR_VIEW_NOT_EXPRESSIBLE);
                break;
            }
            REQUIRE(s == TGRAD_OK);
            if (expr) {
                nm = v;
            } else { /* materialized: a compact copy */
                compact(&nm);
                nm.nd = n;
                memcpy(nm.shape, shape, sizeof(int64_t) * (size_t)n);
                int64_t st = 1;
                for (int32_t d = n - 1; d >= 0; d--) nm.strides[d] = st, st *= shape[d] ? shape[d] : 1;
            }
            break;
        }
        default: { /* matmul argument validation against a second operand */
            int64_t bs[2] = { take(&in) % 5, take(&in) % 5 };
            static uint16_t zeros[32];
            tgrad_tensor_t b = 0, c = 0;
            REQUIRE(tgrad_tensor_from_bf16(zeros, 2, bs, &b) == TGRAD_OK);
            s = tgrad_matmul(t, b, &c);
            /* torch.matmul's rule: t's last axis contracts with b's first; t's other axes lead */
            if (m.nd == 0) REQUIRE(s == TGRAD_ERR_RANK_MISMATCH);
            else if (m.shape[m.nd - 1] != bs[0]) REQUIRE(s == TGRAD_ERR_SHAPE_MISMATCH);
            else {
                REQUIRE(s == TGRAD_OK);
                int64_t rows = 1;
                for (int32_t d = 0; d + 1 < m.nd; d++) rows *= m.shape[d];
                uint16_t out[64];
                REQUIRE(tgrad_tensor_read_bf16(c, out, 64) == TGRAD_OK || rows * bs[1] > 64);
            }
            tgrad_tensor_release(b), tgrad_tensor_release(c);
            s = TGRAD_ERR_INVALID_ARGUMENT; /* the chain goes on from t */
            break;
        }
        }
        if (s == TGRAD_OK) {
            check(next, &nm);
            tgrad_tensor_release(t);
            t = next, m = nm;
        }
    }
    tgrad_tensor_release(t);
    REQUIRE(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0);
    return 0;
}
