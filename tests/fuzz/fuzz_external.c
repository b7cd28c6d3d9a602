/* libFuzzer target: tgrad_tensor_from_external (caller memory, caller strides) against a model of
 * the reachable range, computed in 128-bit arithmetic.
 *
 * The input decodes to an extent, a rank, a shape and strides (or none), small or extreme (INT64_MAX,
 * INT64_MIN, 2^62, raw 64-bit values, the buffer's own boundaries). The model predicts the status
 * from first principles, in the library's documented order: arguments, the extent's byte count,
 * the shape's size rule (2 bytes times the product of the non-zero extents fits in int64), then
 * for a view with elements the span: a stride times an extent, the sums of the negative and of the
 * positive spans and their distance must fit in int64 (size_overflow), and the view must lie inside
 * [0, extent) (view_not_expressible); without strides, the row-major elements must fit
 * (buffer_too_small). The call gets a heap buffer of exactly `extent` elements, so AddressSanitizer
 * sees any read past it. When the call succeeds, the tensor's properties, its data pointer and
 * every element it reads (read_bf16, contiguous(), and for 2-D both sides of a product with an
 * identity, which is exact for the small integers the buffer holds) must match the model's gather,
 * and the deleter runs exactly once, at the release. Any disagreement, crash or leak aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad.h"

typedef __int128 i128;

#define HALF_MAX (INT64_MAX / 2)
enum { MAX_REAL = 4096, MAX_READ = 4096, MAX_SIDE = 64 };

#define REQUIRE(cond)                                                                                      \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "model disagrees: %s (line %d): %s\n", #cond, __LINE__, tgrad_last_error());    \
            abort();                                                                                       \
        }                                                                                                  \
    } while (0)

typedef struct { const uint8_t *p; size_t n; } input;
static int take(input *in) { return in->n ? (in->n--, *in->p++) : 0; }
static int64_t take64(input *in) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | (uint64_t)take(in);
    return (int64_t)v;
}

static const int64_t extreme[] = {
    0, 1, -1, 2, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, HALF_MAX, HALF_MAX + 1, -HALF_MAX,
    INT64_C(1) << 31, INT64_C(1) << 32, INT64_C(1) << 40, (INT64_C(1) << 61) - 1, INT64_C(1) << 61,
    INT64_C(1) << 62, -(INT64_C(1) << 62), 3037000500, -3037000500, /* ~sqrt(2^63) */
};
static int64_t pick_extreme(input *in) { return extreme[take(in) % (int)(sizeof extreme / sizeof *extreme)]; }

static int64_t pick_extent(input *in) {
    switch (take(in) % 8) {
    case 0: case 1: case 2: case 3: return take(in) % 65;
    case 4: return take(in) * 16 + take(in) % 16; /* up to 4095 */
    case 5: return pick_extreme(in);
    case 6: return take64(in);
    default: return 16;
    }
}

static int64_t pick_extent_of_axis(input *in) {
    switch (take(in) % 8) {
    case 6: return pick_extreme(in);
    case 7: return take64(in);
    default: return take(in) % 6;
    }
}

static int64_t pick_stride(input *in, int64_t extent) {
    int64_t e = extent > 0 ? extent : 1;
    switch (take(in) % 10) {
    case 5: return pick_extreme(in);
    case 6: return take64(in);
    case 7: return take(in) % 2 ? e : -e;         /* one past the buffer for an extent-1 axis */
    case 8: return take(in) % 2 ? e - 1 : 1 - e;  /* the buffer's last element */
    default: return (int64_t)(take(in) % 17) - 8;
    }
}

/* ---- the model ---- */
typedef struct {
    tgrad_status status;
    int64_t numel, offset, strides[TGRAD_MAX_DIMS];
} prediction;

static prediction predict(const uint16_t *data, int64_t extent, int32_t nd, const int64_t *shape,
                          const int64_t *strides) {
    prediction p = { .status = TGRAD_OK };
    if (extent < 0 || (extent > 0 && !data)) return (prediction){ .status = TGRAD_ERR_INVALID_ARGUMENT };
    if (extent > INT64_MAX / 2) return (prediction){ .status = TGRAD_ERR_SIZE_OVERFLOW };
    for (int32_t d = 0; d < nd; d++)
        if (shape[d] < 0) return (prediction){ .status = TGRAD_ERR_INVALID_ARGUMENT };
    i128 product = 1; /* of the non-zero extents, stopped once past any int64 */
    int empty = 0;
    for (int32_t d = 0; d < nd; d++) {
        if (shape[d] == 0) empty = 1;
        else if (product <= INT64_MAX) product *= shape[d];
    }
    if (2 * product > INT64_MAX) return (prediction){ .status = TGRAD_ERR_SIZE_OVERFLOW };
    p.numel = empty ? 0 : (int64_t)product;
    i128 step = 1; /* row-major strides */
    for (int32_t d = nd - 1; d >= 0; d--) p.strides[d] = (int64_t)step, step *= shape[d] ? shape[d] : 1;
    if (!strides) {
        if (p.numel > extent) return (prediction){ .status = TGRAD_ERR_BUFFER_TOO_SMALL };
        return p;
    }
    for (int32_t d = 0; d < nd; d++) p.strides[d] = strides[d];
    if (p.numel == 0) return p; /* reaches nothing */
    i128 lo = 0, hi = 0;
    int overflow = 0;
    for (int32_t d = 0; d < nd; d++) {
        i128 span = (i128)strides[d] * (shape[d] - 1);
        if (span < INT64_MIN || span > INT64_MAX) overflow = 1;
        if (span < 0) lo += span;
        else hi += span;
    }
    if (overflow || lo < INT64_MIN || hi > INT64_MAX || hi - lo > INT64_MAX)
        return (prediction){ .status = TGRAD_ERR_SIZE_OVERFLOW };
    if (hi - lo >= extent) return (prediction){ .status = TGRAD_ERR_VIEW_NOT_EXPRESSIBLE };
    p.offset = (int64_t)-lo;
    for (int32_t d = 0; d < nd; d++) /* an extent-1 axis's stride outside the buffer is recorded as 0 */
        if (shape[d] == 1 && (strides[d] >= extent || strides[d] <= -extent)) p.strides[d] = 0;
    return p;
}

/* The view's elements, row-major, gathered from data. */
static void gather(const uint16_t *data, int32_t nd, const int64_t *shape, const int64_t *strides, int64_t offset,
                   int64_t numel, uint16_t *out) {
    int64_t idx[TGRAD_MAX_DIMS] = { 0 };
    for (int64_t e = 0; e < numel; e++) {
        int64_t at = offset;
        for (int32_t d = 0; d < nd; d++) at += idx[d] * strides[d];
        out[e] = data[at];
        for (int32_t d = nd - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
    }
}

static void read_and_compare(tgrad_tensor_t t, const uint16_t *want, int64_t numel) {
    static uint16_t got[MAX_READ];
    REQUIRE(tgrad_tensor_read_bf16(t, got, MAX_READ) == TGRAD_OK);
    REQUIRE(memcmp(got, want, (size_t)numel * 2) == 0);
}

static tgrad_tensor_t identity(int64_t n) {
    static float eye[MAX_SIDE * MAX_SIDE];
    for (int64_t i = 0; i < n * n; i++) eye[i] = i % (n + 1) == 0 ? 1.0f : 0.0f;
    tgrad_tensor_t t = 0;
    REQUIRE(tgrad_tensor_from_f32(eye, 2, (int64_t[]){ n, n }, &t) == TGRAD_OK);
    return t;
}

/* t @ I and I @ t equal t: every value is a small integer, so each sum is exact. */
static void products(tgrad_tensor_t t, const int64_t *shape, const uint16_t *want, int64_t numel) {
    for (int side = 0; side < 2; side++) {
        tgrad_tensor_t eye = identity(shape[side ? 0 : 1]), c = 0;
        REQUIRE((side ? tgrad_matmul(eye, t, &c) : tgrad_matmul(t, eye, &c)) == TGRAD_OK);
        read_and_compare(c, want, numel);
        tgrad_tensor_release(c), tgrad_tensor_release(eye);
    }
}

/* 1 .. 200 as bf16 bits (exact: at most 8 significant bits), so a product with an identity is too. */
static uint16_t small_integer(int64_t i) {
    float f = (float)(i % 200 + 1);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static int deleted;
static void count_delete(void *context) { deleted += context == (void *)&deleted; }

int LLVMFuzzerTestOneInput(const uint8_t *bytes, size_t size) {
    input in = { bytes, size };
    int64_t extent = pick_extent(&in);
    int32_t nd = take(&in) % 6;
    int64_t shape[TGRAD_MAX_DIMS], strides_given[TGRAD_MAX_DIMS];
    for (int32_t d = 0; d < nd; d++) shape[d] = pick_extent_of_axis(&in);
    const int64_t *strides = NULL;
    if (take(&in) % 5) {
        for (int32_t d = 0; d < nd; d++) strides_given[d] = pick_stride(&in, extent);
        strides = strides_given;
    }
    /* memory: exactly `extent` elements when that is small; a stand-in never read when it is not */
    static uint16_t stand_in[1];
    int real = extent > 0 && extent <= MAX_REAL;
    uint16_t *data = real ? malloc((size_t)extent * 2) : extent != 0 || take(&in) % 2 ? stand_in : NULL;
    if (real)
        for (int64_t i = 0; i < extent; i++) data[i] = small_integer(i);
    prediction want = predict(data, extent, nd, shape, strides);
    deleted = 0;
    tgrad_tensor_t t = 0;
    tgrad_status s = tgrad_tensor_from_external(data, extent, nd, shape, strides, count_delete, &deleted, &t);
    if (s != want.status)
        fprintf(stderr, "tensor_from_external gave %s, the model %s\n", tgrad_status_name(s),
                tgrad_status_name(want.status));
    REQUIRE(s == want.status);
    if (s != TGRAD_OK) {
        REQUIRE(t == 0 && deleted == 0); /* refused: the caller keeps the memory */
    } else {
        int64_t numel = -1, offset = -1, got_strides[TGRAD_MAX_DIMS];
        const uint16_t *p = NULL;
        REQUIRE(tgrad_tensor_numel(t, &numel) == TGRAD_OK && numel == want.numel);
        REQUIRE(tgrad_tensor_strides(t, got_strides) == TGRAD_OK);
        REQUIRE(memcmp(got_strides, want.strides, sizeof(int64_t) * (size_t)nd) == 0);
        REQUIRE(tgrad_tensor_offset(t, &offset) == TGRAD_OK && offset == want.offset);
        if (real) { /* (a stand-in's address plus a huge offset would not point anywhere) */
            REQUIRE(tgrad_tensor_data(t, &p) == TGRAD_OK);
            REQUIRE(p == (numel > 0 ? data + want.offset : data));
        }
        if (real && numel > 0 && numel <= MAX_READ) {
            static uint16_t elements[MAX_READ];
            gather(data, nd, shape, want.strides, want.offset, numel, elements);
            read_and_compare(t, elements, numel);
            tgrad_tensor_t c = 0;
            REQUIRE(tgrad_tensor_contiguous(t, &c) == TGRAD_OK);
            read_and_compare(c, elements, numel);
            tgrad_tensor_release(c);
            if (nd == 2 && shape[0] <= MAX_SIDE && shape[1] <= MAX_SIDE) products(t, shape, elements, numel);
        }
        REQUIRE(deleted == 0);
        tgrad_tensor_release(t);
        REQUIRE(deleted == 1);
    }
    if (real) free(data);
    REQUIRE(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0 && tgrad_live_bytes() == 0);
    return 0;
}
