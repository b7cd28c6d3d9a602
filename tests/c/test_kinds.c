/* The kind registry (libtgrad/src/kinds.h): every kind of TG_KIND_LIST has its whole row (name as
 * listed, role, route decision, CPU executor, explain name, a fusion answer, a GPU emitter's route),
 * and the C ABI runs each kind end to end (a reduction and a cast through tgrad_reduce and
 * tgrad_cast). A kind added to the list without its parts fails here. Linked from libtgrad's
 * objects (hidden symbols). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kinds.h"

static void every_row_is_whole(void) {
#define ROW_(code, NAME, name_, role_)                                                          \
    do {                                                                                        \
        const tg_kind *k = tg_kind_of(TG_OP_##NAME);                                            \
        CHECK(k->name && strcmp(k->name, #name_) == 0);                                         \
        CHECK(k->role == (role_));                                                              \
        CHECK(k->decide != NULL && k->cpu_execute != NULL && k->base_name != NULL);             \
        /* a GPU emitter comes with its route (an anchor's is decided per step) */              \
        CHECK(!k->gpu_render || k->role == TG_ROLE_ANCHOR || tg_route_find(k->gpu_route) != NULL); \
        /* a kind that takes no epilogue says why (explain prints it); anchors, chains and */    \
        /* reductions take one */                                                               \
        CHECK((k->unfused == NULL) == (k->role == TG_ROLE_ANCHOR || k->role == TG_ROLE_REDUCTION ||   \
                                       TG_OP_##NAME == TG_OP_ELEMENTWISE));                     \
    } while (0);
    TG_KIND_LIST(ROW_)
#undef ROW_
}

static void reduce_and_cast_through_the_abi(void) {
    float v[6] = { 1e30f, 1.0f, -1e30f, 2.0f, -0.0f, 3.0f };
    int64_t shape[2] = { 2, 3 };
    tgrad_tensor_t x = 0, s = 0, am = 0, c = 0;
    EXPECT(tgrad_tensor_from_host(v, TGRAD_DTYPE_F32, 2, shape, TGRAD_DTYPE_F32, &x), TGRAD_OK);
    int32_t axis = 1, dtype = 0;
    EXPECT(tgrad_reduce(TGRAD_REDUCE_SUM, x, &axis, 1, 0, 0, &s), TGRAD_OK);
    float sums[2] = { 0 };
    EXPECT(tgrad_tensor_read(s, sums, sizeof sums), TGRAD_OK);
    CHECK(sums[0] == 1.0f && sums[1] == 5.0f); /* 1e30 + 1 - 1e30: the exact 1 */
    EXPECT(tgrad_reduce(TGRAD_REDUCE_ARGMAX, x, NULL, -1, 0, 0, &am), TGRAD_OK);
    int32_t index = -1;
    EXPECT(tgrad_tensor_dtype(am, &dtype), TGRAD_OK);
    CHECK(dtype == TGRAD_DTYPE_I32);
    EXPECT(tgrad_tensor_read(am, &index, sizeof index), TGRAD_OK);
    CHECK(index == 0);
    EXPECT(tgrad_cast(x, TGRAD_DTYPE_BF16, &c), TGRAD_OK);
    uint16_t bits[6];
    EXPECT(tgrad_tensor_read_bf16(c, bits, 6), TGRAD_OK);
    CHECK(bits[1] == 0x3f80 && bits[4] == 0x8000);
    /* refusals: before anything is allocated */
    int64_t live = tgrad_live_tensors();
    tgrad_tensor_t bad = 0;
    int32_t axes2[2] = { 1, -1 };
    EXPECT(tgrad_reduce(TGRAD_REDUCE_SUM, x, axes2, 2, 0, 0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    axis = 2;
    EXPECT(tgrad_reduce(TGRAD_REDUCE_MAX, x, &axis, 1, 0, 0, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_reduce(99, x, NULL, -1, 0, 0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_reduce(TGRAD_REDUCE_SUM, x, NULL, -1, 0, TGRAD_DTYPE_I32, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_cast(x, TGRAD_DTYPE_F64, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_matmul(x, x, &bad), TGRAD_ERR_SHAPE_MISMATCH);
    EXPECT(tgrad_unary(TGRAD_OP_RELU, am, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED); /* int32: no elementwise op */
    CHECK(bad == 0 && tgrad_live_tensors() == live);
    tgrad_tensor_release(x), tgrad_tensor_release(s), tgrad_tensor_release(am), tgrad_tensor_release(c);
}

/* concat and gather (take) through the ABI: any element size, operands through their views, a
 * concat of more operands than a step's inline reads, and every refusal before allocation. */
static void concat_and_take_through_the_abi(void) {
    int32_t iv[6] = { 1, 2, 3, 4, 5, 6 }; /* [2, 3] int32 */
    int64_t shape[2] = { 2, 3 };
    tgrad_tensor_t x = 0, xt = 0, c = 0, ids = 0, g = 0, bad = 0;
    EXPECT(tgrad_tensor_from_host(iv, TGRAD_DTYPE_I32, 2, shape, TGRAD_DTYPE_I32, &x), TGRAD_OK);
    EXPECT(tgrad_tensor_transpose(x, 0, 1, &xt), TGRAD_OK); /* [3, 2] */
    tgrad_tensor_t parts[2] = { x, x };
    EXPECT(tgrad_concat(2, parts, -1, &c), TGRAD_OK); /* [2, 6] */
    int32_t got[12];
    EXPECT(tgrad_tensor_read(c, got, sizeof got), TGRAD_OK);
    const int32_t want[12] = { 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6 };
    CHECK(memcmp(got, want, sizeof want) == 0);
    tgrad_tensor_release(c), c = 0;
    /* 40 operands, more than a step reads inline (TG_MAX_READS) */
    tgrad_tensor_t many[40];
    for (int i = 0; i < 40; i++) many[i] = i % 2 ? xt : x;
    EXPECT(tgrad_concat(40, many, 0, &bad), TGRAD_ERR_SHAPE_MISMATCH);
    for (int i = 0; i < 40; i++) many[i] = xt;
    EXPECT(tgrad_concat(40, many, 0, &c), TGRAD_OK); /* [120, 2] */
    int32_t big[240];
    EXPECT(tgrad_tensor_read(c, big, sizeof big), TGRAD_OK);
    CHECK(big[0] == 1 && big[1] == 4 && big[2] == 2 && big[238] == 3 && big[239] == 6);
    int32_t k[3] = { 2, -3, 0 };
    int64_t kshape[1] = { 3 };
    EXPECT(tgrad_tensor_from_host(k, TGRAD_DTYPE_I32, 1, kshape, TGRAD_DTYPE_I32, &ids), TGRAD_OK);
    EXPECT(tgrad_take(xt, ids, 0, &g), TGRAD_OK); /* rows 2, 0, 0 of x^T */
    int32_t rows[6];
    EXPECT(tgrad_tensor_read(g, rows, sizeof rows), TGRAD_OK);
    CHECK(rows[0] == 3 && rows[1] == 6 && rows[2] == 1 && rows[3] == 4 && rows[4] == 1 && rows[5] == 4);
    /* refusals: nothing made */
    int64_t live = tgrad_live_tensors(), buffers = tgrad_live_buffers();
    EXPECT(tgrad_take(x, ids, 1, &bad), TGRAD_OK); /* -3 .. 2 fit an extent of 3 */
    tgrad_tensor_release(bad), bad = 0;
    EXPECT(tgrad_take(x, ids, 0, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE); /* extent 2: index 2 is out */
    EXPECT(tgrad_take(x, ids, 2, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_take(ids, x, 0, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE); /* x holds 1 .. 6 */
    EXPECT(tgrad_take(x, c, 0, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_concat(0, parts, 0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_concat(1, NULL, 0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_concat(2, parts, 2, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    tgrad_tensor_t mixed[2] = { x, ids };
    EXPECT(tgrad_concat(2, mixed, 0, &bad), TGRAD_ERR_RANK_MISMATCH);
    tgrad_tensor_t stale[2] = { x, 0 };
    EXPECT(tgrad_concat(2, stale, 0, &bad), TGRAD_ERR_INVALID_HANDLE);
    CHECK(bad == 0 && tgrad_live_tensors() == live && tgrad_live_buffers() == buffers);
    tgrad_tensor_release(x), tgrad_tensor_release(xt), tgrad_tensor_release(c), tgrad_tensor_release(ids);
    tgrad_tensor_release(g);
}

/* norm and rope through the ABI: an exact midpoint decided exactly (rms_norm of [3, 1, 1, 5],
 * weight 255/128, eps 0: y_3 = 425/128 ties to 3.3125), a refusal before allocating, and rope at
 * position 0 keeping the bits. */
static void norm_and_rope_through_the_abi(void) {
    float xv[4] = { 3.0f, 1.0f, 1.0f, 5.0f }, wv[4] = { 255 / 128.0f, 255 / 128.0f, 255 / 128.0f, 255 / 128.0f };
    int64_t shape[2] = { 1, 4 }, wshape[1] = { 4 }, pshape[1] = { 1 };
    tgrad_tensor_t x = 0, w = 0, y = 0, p = 0, r = 0, bad = 0;
    EXPECT(tgrad_tensor_from_host(xv, TGRAD_DTYPE_F32, 2, shape, TGRAD_DTYPE_BF16, &x), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(wv, TGRAD_DTYPE_F32, 1, wshape, TGRAD_DTYPE_BF16, &w), TGRAD_OK);
    EXPECT(tgrad_rms_norm(x, w, 1, 0.0, &y), TGRAD_OK);
    uint16_t bits[4];
    EXPECT(tgrad_tensor_read_bf16(y, bits, 4), TGRAD_OK);
    CHECK(bits[3] == 0x4054); /* 3.3125 */
    int64_t live = tgrad_live_tensors();
    EXPECT(tgrad_layer_norm(x, w, 0, 2, 1e-5, &bad), TGRAD_ERR_SHAPE_MISMATCH); /* weight [4] vs axes [1, 4] */
    EXPECT(tgrad_rms_norm(x, 0, 1, -1.0, &bad), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(tgrad_live_tensors() == live && bad == 0);
    int32_t pos = 0;
    EXPECT(tgrad_tensor_from_host(&pos, TGRAD_DTYPE_I32, 1, pshape, TGRAD_DTYPE_I32, &p), TGRAD_OK);
    EXPECT(tgrad_rope(x, p, 0, 10000.0, 0, 0, &r), TGRAD_OK);
    uint16_t in[4], rot[4];
    EXPECT(tgrad_tensor_read_bf16(x, in, 4), TGRAD_OK);
    EXPECT(tgrad_tensor_read_bf16(r, rot, 4), TGRAD_OK);
    CHECK(memcmp(in, rot, sizeof in) == 0);
    tgrad_tensor_release(x), tgrad_tensor_release(w), tgrad_tensor_release(y), tgrad_tensor_release(p);
    tgrad_tensor_release(r);
}

/* slice_scatter (hmodel): the values, the write in place when dst has no other holder (the result's
 * storage is dst's), a copy when a handle still holds dst (which keeps its values), refusals. */
static void slice_scatter_through_the_abi(void) {
    float dv[6] = { 1, 2, 3, 4, 5, 6 }, sv[2] = { -1, -2 }; /* dst [2, 3], src [2, 1], as bfloat16 */
    int64_t dshape[2] = { 2, 3 }, sshape[2] = { 2, 1 };
    tgrad_tensor_t d = 0, s = 0, o = 0, o2 = 0, f = 0, bad = 0;
    EXPECT(tgrad_tensor_from_host(dv, TGRAD_DTYPE_F32, 2, dshape, TGRAD_DTYPE_BF16, &d), TGRAD_OK);
    EXPECT(tgrad_tensor_from_host(sv, TGRAD_DTYPE_F32, 2, sshape, TGRAD_DTYPE_BF16, &s), TGRAD_OK);
    const uint16_t *dptr = NULL, *optr = NULL, *o2ptr = NULL;
    EXPECT(tgrad_tensor_data(d, &dptr), TGRAD_OK);
    EXPECT(tgrad_slice_scatter(d, s, 1, 2, &o), TGRAD_OK); /* d still held: a copy */
    uint16_t got[6]; /* bfloat16 bits: 1 2 3 4 5 6 are 3f80 4000 4040 4080 40a0 40c0; -1 -2 bf80 c000 */
    const uint16_t orig[6] = { 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0 };
    EXPECT(tgrad_tensor_read_bf16(o, got, 6), TGRAD_OK);
    const uint16_t want[6] = { 0x3f80, 0x4000, 0xbf80, 0x4080, 0x40a0, 0xc000 };
    CHECK(memcmp(got, want, sizeof want) == 0);
    EXPECT(tgrad_tensor_data(o, &optr), TGRAD_OK);
    CHECK(optr != dptr);
    EXPECT(tgrad_tensor_read_bf16(d, got, 6), TGRAD_OK);
    CHECK(memcmp(got, orig, sizeof orig) == 0); /* dst keeps its values */
    tgrad_tensor_release(d);
    /* o held by the new node only: its storage becomes o2's */
    EXPECT(tgrad_slice_scatter(o, s, -1, 0, &o2), TGRAD_OK);
    tgrad_tensor_release(o);
    EXPECT(tgrad_tensor_read_bf16(o2, got, 6), TGRAD_OK);
    const uint16_t want2[6] = { 0xbf80, 0x4000, 0xbf80, 0xc000, 0x40a0, 0xc000 };
    CHECK(memcmp(got, want2, sizeof want2) == 0);
    EXPECT(tgrad_tensor_data(o2, &o2ptr), TGRAD_OK);
    CHECK(o2ptr == optr);
    /* refusals, before anything is allocated */
    EXPECT(tgrad_cast(s, TGRAD_DTYPE_F32, &f), TGRAD_OK);
    int64_t live = tgrad_live_tensors();
    EXPECT(tgrad_slice_scatter(o2, s, 1, 3, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE); /* past the end */
    EXPECT(tgrad_slice_scatter(o2, s, 1, -1, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_slice_scatter(o2, s, 2, 0, &bad), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_slice_scatter(o2, s, 0, 0, &bad), TGRAD_ERR_SHAPE_MISMATCH); /* extents off the axis */
    EXPECT(tgrad_slice_scatter(o2, f, 1, 0, &bad), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_slice_scatter(o2, s, 1, 0, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(bad == 0 && tgrad_live_tensors() == live);
    tgrad_tensor_release(f), tgrad_tensor_release(s), tgrad_tensor_release(o2);
}

int main(void) {
    every_row_is_whole();
    reduce_and_cast_through_the_abi();
    concat_and_take_through_the_abi();
    norm_and_rope_through_the_abi();
    slice_scatter_through_the_abi();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
