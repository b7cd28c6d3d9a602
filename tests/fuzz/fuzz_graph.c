/* libFuzzer target: random graphs (issue 33). The input is decoded into base tensors (from bf16
 * bits, float32 or float64, with special values) and a sequence of ops over a pool of handles:
 * every elementwise op of the registry (broadcasting), matmul, and the views (transpose, permute,
 * expand, slice, select, view, reshape, contiguous), on operands that may not fit. The same input
 * is built twice: once with fusion on and nothing realized until the end (the scheduler fuses
 * what it can), once with fusion off and every new tensor realized at once (each op its own
 * kernel). Both runs must refuse exactly the same ops, each with a registry status and the output
 * handle untouched, and every tensor of the pool must read back as the same bytes. Then every
 * handle is released and nothing may be left alive. Any disagreement, crash or leak aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad.h"

#define POOL 8
#define STEPS 24

typedef struct { const uint8_t *p; size_t n; } input;
static int take(input *in) { return in->n ? (in->n--, *in->p++) : 0; }

#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "graph fuzz: %s (line %d): %s\n", #cond, __LINE__, tgrad_last_error()); \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* What one run left: each pool slot's status history and, at the end, its bytes. */
typedef struct {
    int32_t statuses[STEPS];
    int32_t count;
    int32_t ndim[POOL];
    int64_t shape[POOL][TGRAD_MAX_DIMS];
    int64_t numel[POOL];
    uint16_t *bits[POOL]; /* malloc'd: extents stay <= 4 on at most 8 axes, so <= 65536 elements */
} outcome;

static const uint16_t SPECIAL[] = { 0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x807F, 0x3F80,
                                    0xBF80, 0x7F7F, 0x4000, 0xC2F7, 0x3C00, 0x0080, 0x8001, 0x7FA5 };

static uint16_t value(input *in) {
    int b = take(in);
    if (b < 64) return SPECIAL[b % 16];
    return (uint16_t)(0x3C00 + (b << 2) + (take(in) & 3)); /* moderate magnitudes, both signs */
}

/* A base tensor: up to 3 axes of extent 0..4, from bf16 bits, float32 or float64. */
static tgrad_tensor_t base(input *in) {
    int32_t nd = take(in) % 4;
    int64_t shape[3], n = 1;
    for (int32_t i = 0; i < nd; i++) shape[i] = take(in) % 5, n *= shape[i];
    uint16_t bits[64];
    float f32[64];
    double f64[64];
    for (int64_t i = 0; i < n; i++) {
        bits[i] = value(in);
        uint32_t w = (uint32_t)bits[i] << 16 | (uint32_t)take(in) << 8; /* below bf16's precision too */
        memcpy(&f32[i], &w, 4);
        f64[i] = (double)f32[i] * (1.0 + (take(in) & 7) * 0x1p-30);
    }
    tgrad_tensor_t t = 0;
    switch (take(in) % 3) {
    case 0: REQUIRE(tgrad_tensor_from_bf16(bits, nd, shape, &t) == TGRAD_OK); break;
    case 1: REQUIRE(tgrad_tensor_from_f32(f32, nd, shape, &t) == TGRAD_OK); break;
    default: REQUIRE(tgrad_tensor_from_f64(f64, nd, shape, &t) == TGRAD_OK); break;
    }
    return t;
}

static int32_t ndim_of(tgrad_tensor_t t) {
    int32_t nd = 0;
    REQUIRE(tgrad_tensor_ndim(t, &nd) == TGRAD_OK);
    return nd;
}

/* One op on the pool; returns its status (the new tensor, if any, is placed in a slot). */
static tgrad_status step(input *in, tgrad_tensor_t *pool, int eager) {
    tgrad_tensor_t a = pool[take(in) % POOL], out = 0;
    tgrad_tensor_t b = pool[take(in) % POOL];
    int32_t nd = ndim_of(a);
    int64_t ext[TGRAD_MAX_DIMS];
    REQUIRE(tgrad_tensor_shape(a, ext) == TGRAD_OK);
    tgrad_status s;
    int kind = take(in) % 12;
    switch (kind) {
    case 0: s = tgrad_unary((tgrad_op)(1 + take(in) % 11), a, &out); break;
    case 1: case 2: s = tgrad_binary((tgrad_op)(12 + take(in) % 6), a, b, &out); break;
    case 3: s = tgrad_matmul(a, b, &out); break;
    case 4: { /* arguments taken one statement each: C leaves the order within a call open */
        int32_t a0 = take(in) % 4 - 1, a1 = take(in) % 4 - 1;
        s = tgrad_tensor_transpose(a, a0, a1, &out);
        break;
    }
    case 5: {
        int32_t axes[TGRAD_MAX_DIMS];
        for (int32_t i = 0; i < nd; i++) axes[i] = (i + take(in) % 2) % (nd ? nd : 1);
        s = tgrad_tensor_permute(a, axes, nd, &out);
        break;
    }
    case 6: { /* expand to a new leading axis and/or size-1 axes grown */
        int64_t shape[TGRAD_MAX_DIMS + 1]; /* one axis past the limit: refused, typed */
        int32_t lead = take(in) % 2;
        shape[0] = take(in) % 4;
        for (int32_t i = 0; i < nd; i++) {
            int b = take(in);
            shape[lead + i] = ext[i] == 1 ? b % 5 : (b % 3 ? ext[i] : -1);
        }
        s = tgrad_tensor_expand(a, shape, nd + lead, &out);
        break;
    }
    case 7: {
        uint32_t flags = (uint32_t)take(in) % 4; /* TGRAD_SLICE_START_NONE / STOP_NONE bits */
        int32_t axis = take(in) % 4;
        int64_t start = take(in) % 7 - 3, stop = take(in) % 7 - 3, by = take(in) % 5 - 2;
        s = tgrad_tensor_slice(a, axis, start, stop, by, flags, &out);
        break;
    }
    case 8: {
        int32_t axis = take(in) % 4;
        int64_t index = take(in) % 7 - 3;
        s = tgrad_tensor_select(a, axis, index, &out);
        break;
    }
    case 9: case 10: { /* view (refused when strides cannot say it) or reshape (copies then) */
        int64_t shape[3], n = 1;
        for (int32_t i = 0; i < nd; i++) n *= ext[i];
        int32_t k = 1 + take(in) % 3;
        for (int32_t i = 0; i < k; i++) shape[i] = take(in) % 5 == 0 ? -1 : (i == 0 ? n : 1);
        if (k == 2 && n % 2 == 0 && take(in) % 2) shape[0] = 2, shape[1] = -1;
        s = kind == 9 ? tgrad_tensor_view(a, shape, k, &out) : tgrad_tensor_reshape(a, shape, k, &out);
        break;
    }
    default: s = tgrad_tensor_contiguous(a, &out); break;
    }
    if (s != TGRAD_OK) {
        REQUIRE(s > 0 && s < tgrad_status_count() && out == 0); /* typed, and nothing made */
        return s;
    }
    REQUIRE(out != 0);
    if (eager) REQUIRE(tgrad_tensor_realize(out) == TGRAD_OK);
    int slot = take(in) % POOL;
    tgrad_tensor_release(pool[slot]);
    pool[slot] = out;
    return s;
}

static void run(const uint8_t *data, size_t size, int fused, outcome *o) {
    input in = { data, size };
    REQUIRE(tgrad_set_fusion(fused) == TGRAD_OK);
    tgrad_tensor_t pool[POOL];
    int32_t bases = 1 + take(&in) % 3;
    for (int32_t i = 0; i < bases; i++) pool[i] = base(&in);
    for (int32_t i = bases; i < POOL; i++) REQUIRE(tgrad_tensor_contiguous(pool[i % bases], &pool[i]) == TGRAD_OK);
    o->count = 0;
    for (int32_t k = 0; k < STEPS && in.n; k++) o->statuses[o->count++] = step(&in, pool, !fused);
    for (int32_t i = 0; i < POOL; i++) { /* read every slot: the fused run realizes here */
        o->ndim[i] = ndim_of(pool[i]);
        REQUIRE(tgrad_tensor_shape(pool[i], o->shape[i]) == TGRAD_OK);
        REQUIRE(tgrad_tensor_numel(pool[i], &o->numel[i]) == TGRAD_OK);
        REQUIRE((o->bits[i] = malloc(2 * (size_t)o->numel[i] + 2)) != NULL);
        REQUIRE(tgrad_tensor_read_bf16(pool[i], o->bits[i], (size_t)o->numel[i]) == TGRAD_OK);
        tgrad_tensor_release(pool[i]);
    }
    REQUIRE(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static outcome fused, unfused;
    int32_t was = tgrad_fusion_enabled();
    run(data, size, 1, &fused);
    run(data, size, 0, &unfused);
    REQUIRE(tgrad_set_fusion(was) == TGRAD_OK);
    REQUIRE(fused.count == unfused.count);
    for (int32_t k = 0; k < fused.count; k++) REQUIRE(fused.statuses[k] == unfused.statuses[k]);
    for (int32_t i = 0; i < POOL; i++) {
        REQUIRE(fused.ndim[i] == unfused.ndim[i] && fused.numel[i] == unfused.numel[i]);
        REQUIRE(memcmp(fused.shape[i], unfused.shape[i], sizeof(int64_t) * (size_t)fused.ndim[i]) == 0);
        REQUIRE(memcmp(fused.bits[i], unfused.bits[i], 2 * (size_t)fused.numel[i]) == 0);
        free(fused.bits[i]), free(unfused.bits[i]);
    }
    return 0;
}
