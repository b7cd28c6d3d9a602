/* Extreme integers through the public API: INT64_MAX and INT64_MIN extents, strides and offsets,
 * empty shapes whose other extents are huge. Every call must answer with a typed status, compute
 * nothing undefined (the ASan+UBSan build halts on any overflow) and never reach outside the
 * caller's memory. One function per finding of issue 19; the rule they pin down (docs/views.md):
 * a shape is valid when 2 bytes times the product of its non-zero extents fits in int64, and a view
 * with an element lies inside its buffer. Prints "N passed, N failed". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tgrad.h"

#include "check.h"

#define BIG (INT64_C(1) << 40)
#define HALF_MAX (INT64_MAX / 2) /* the most bf16 elements whose byte count fits in int64 */

static tgrad_tensor_t external_at(int line, const uint16_t *data, int64_t extent, int32_t ndim, const int64_t *shape,
                                  const int64_t *strides, tgrad_status want) {
    tgrad_tensor_t t = 0;
    tgrad_status s = tgrad_tensor_from_external(data, extent, ndim, shape, strides, NULL, NULL, &t);
    CHECK(s == want);
    if (s != want) fprintf(stderr, "  line %d: tensor_from_external gave %s, expected %s\n", line, tgrad_status_name(s),
                           tgrad_status_name(want));
    return t;
}
#define external(...) external_at(__LINE__, __VA_ARGS__)

/* Empty shapes whose other extents are huge: the contiguous strides of [INT64_MAX, 0, INT64_MAX]
 * overflow, so such a shape is refused like numpy refuses it ("array is too big"). */
static void test_huge_empty_shapes_are_refused(void) {
    tgrad_tensor_t t = 0;
    const int64_t shapes[][3] = { { INT64_MAX, 0, INT64_MAX }, { 0, BIG, BIG }, { BIG, BIG, 0 }, { INT64_MAX, 0, 1 },
                                  { HALF_MAX + 1, 0, 1 } };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        EXPECT(tgrad_tensor_from_bf16(NULL, 3, shapes[i], &t), TGRAD_ERR_SIZE_OVERFLOW);
        EXPECT(tgrad_tensor_from_f32(NULL, 3, shapes[i], &t), TGRAD_ERR_SIZE_OVERFLOW);
        external(NULL, 0, 3, shapes[i], NULL, TGRAD_ERR_SIZE_OVERFLOW);
        external(NULL, 0, 3, shapes[i], (int64_t[]){ 1, 1, 1 }, TGRAD_ERR_SIZE_OVERFLOW);
    }
    CHECK(t == 0);
    /* the boundary: 2 * (INT64_MAX / 2) bytes fit */
    EXPECT(tgrad_tensor_from_bf16(NULL, 3, (int64_t[]){ HALF_MAX, 0, 1 }, &t), TGRAD_OK);
    int64_t strides[3] = { 0 }, numel = -1;
    EXPECT(tgrad_tensor_strides(t, strides), TGRAD_OK);
    EXPECT(tgrad_tensor_numel(t, &numel), TGRAD_OK);
    CHECK(strides[0] == 1 && strides[1] == 1 && strides[2] == 1 && numel == 0);
    tgrad_tensor_t c = 0;
    EXPECT(tgrad_tensor_contiguous(t, &c), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(c), TGRAD_OK);
    tgrad_tensor_release(c), tgrad_tensor_release(t);
    EXPECT(tgrad_tensor_from_bf16(NULL, 2, (int64_t[]){ -1, 0 }, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_from_bf16(NULL, 2, (int64_t[]){ INT64_MIN, 0 }, &t), TGRAD_ERR_INVALID_ARGUMENT);
}

/* Expanding an empty tensor to huge extents: the product of the other extents must fit as for a
 * new shape, else its element count depended on the order of the axes (a permute then overflowed). */
static void test_expand_to_huge_extents_is_refused(void) {
    tgrad_tensor_t t = 0, e = 0, one = 0;
    EXPECT(tgrad_tensor_from_bf16(NULL, 3, (int64_t[]){ 0, 1, 1 }, &t), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(t, (int64_t[]){ 0, BIG, BIG }, 3, &e), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_expand(t, (int64_t[]){ INT64_MAX, 0, BIG, 1 }, 4, &e), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_expand(t, (int64_t[]){ 0, 1, INT64_MAX }, 3, &e), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_expand(t, (int64_t[]){ 0, BIG, 1 }, 3, &e), TGRAD_OK);
    tgrad_tensor_t p = 0;
    int64_t numel = -1;
    EXPECT(tgrad_tensor_permute(e, (int32_t[]){ 1, 2, 0 }, 3, &p), TGRAD_OK);
    EXPECT(tgrad_tensor_numel(p, &numel), TGRAD_OK);
    CHECK(numel == 0);
    tgrad_tensor_release(p), tgrad_tensor_release(e);
    uint16_t v = 0x3f80;
    EXPECT(tgrad_tensor_from_bf16(&v, 1, (int64_t[]){ 1 }, &one), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(one, (int64_t[]){ INT64_MAX }, 1, &e), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_expand(one, (int64_t[]){ HALF_MAX }, 1, &e), TGRAD_OK);
    tgrad_tensor_t c = 0;
    EXPECT(tgrad_tensor_contiguous(e, &c), TGRAD_OK); /* lazy: 2^63 - 2 bytes are never allocated */
    tgrad_tensor_release(c), tgrad_tensor_release(e), tgrad_tensor_release(one), tgrad_tensor_release(t);
}

/* Reshaping to a huge empty shape: the same rule as creating it (view() computed its contiguous
 * strides, overflowing). */
static void test_reshape_to_huge_empty_shape_is_refused(void) {
    tgrad_tensor_t t = 0, r = 0;
    EXPECT(tgrad_tensor_from_bf16(NULL, 1, (int64_t[]){ 0 }, &t), TGRAD_OK);
    const int64_t shapes[][3] = { { 0, BIG, BIG }, { INT64_MAX, 0, INT64_MAX }, { HALF_MAX + 1, 0, 1 } };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        EXPECT(tgrad_tensor_view(t, shapes[i], 3, &r), TGRAD_ERR_SIZE_OVERFLOW);
        EXPECT(tgrad_tensor_reshape(t, shapes[i], 3, &r), TGRAD_ERR_SIZE_OVERFLOW);
    }
    EXPECT(tgrad_tensor_view(t, (int64_t[]){ 0, -1 }, 2, &r), TGRAD_ERR_BAD_RESHAPE);
    EXPECT(tgrad_tensor_view(t, (int64_t[]){ HALF_MAX, 0, 1 }, 3, &r), TGRAD_OK);
    tgrad_tensor_release(r), tgrad_tensor_release(t);
}

int main(void) {
    test_huge_empty_shapes_are_refused();
    test_expand_to_huge_extents_is_refused();
    test_reshape_to_huge_empty_shape_is_refused();
    CHECK(tgrad_live_tensors() == 0);
    CHECK(tgrad_live_buffers() == 0);
    CHECK(tgrad_live_bytes() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
