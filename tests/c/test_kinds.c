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

int main(void) {
    every_row_is_whole();
    reduce_and_cast_through_the_abi();
    norm_and_rope_through_the_abi();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
