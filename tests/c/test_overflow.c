/* Extreme integers through the public API: INT64_MAX and INT64_MIN extents, strides and offsets,
 * empty shapes whose other extents are huge. Every call must answer with a typed status, compute
 * nothing undefined (the ASan+UBSan build halts on any overflow) and never reach outside the
 * caller's memory. One function per finding of issue 19; the rule they pin down (docs/views.md):
 * a shape is valid when 2 bytes times the product of its non-zero extents fits in int64, and a view
 * with an element lies inside its buffer. Prints "N passed, N failed". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/* [2, 2] with strides [INT64_MAX, INT64_MAX] over 16 elements: the per-axis spans fit, their sum
 * does not. And the neighbours: a span that fits but reaches past the buffer, spans whose
 * difference overflows, a buffer whose byte count overflows. */
static void test_external_views_reaching_outside_are_refused(void) {
    static uint16_t mem[16];
    const int64_t sq[2] = { 2, 2 }, one[1] = { 2 }, three[1] = { 3 };
    external(mem, 16, 2, sq, (int64_t[]){ INT64_MAX, INT64_MAX }, TGRAD_ERR_SIZE_OVERFLOW);
    external(mem, 16, 2, sq, (int64_t[]){ INT64_MIN, 1 }, TGRAD_ERR_SIZE_OVERFLOW);
    external(mem, 16, 2, sq, (int64_t[]){ -INT64_MAX, INT64_MAX }, TGRAD_ERR_SIZE_OVERFLOW);
    external(mem, 16, 2, sq, (int64_t[]){ INT64_MIN, INT64_MIN }, TGRAD_ERR_SIZE_OVERFLOW);
    external(mem, 16, 1, three, (int64_t[]){ INT64_MAX }, TGRAD_ERR_SIZE_OVERFLOW);
    external(mem, 16, 1, one, (int64_t[]){ INT64_MAX }, TGRAD_ERR_VIEW_NOT_EXPRESSIBLE);
    external(mem, 16, 1, one, (int64_t[]){ -INT64_MAX }, TGRAD_ERR_VIEW_NOT_EXPRESSIBLE);
    external(mem, 16, 1, one, (int64_t[]){ INT64_MIN }, TGRAD_ERR_SIZE_OVERFLOW); /* 0 - INT64_MIN */
    external(mem, 16, 2, sq, (int64_t[]){ 8, 8 }, TGRAD_ERR_VIEW_NOT_EXPRESSIBLE); /* reaches element 16 */
    CHECK(strstr(tgrad_last_error(), "16-element buffer") != NULL);
    external(mem, INT64_MAX, 1, one, NULL, TGRAD_ERR_SIZE_OVERFLOW);
    external(mem, HALF_MAX + 1, 1, one, NULL, TGRAD_ERR_SIZE_OVERFLOW);
    external(mem, INT64_MIN, 1, one, NULL, TGRAD_ERR_INVALID_ARGUMENT);
    external(mem, 16, 2, (int64_t[]){ 1 << 30, 1 << 30 }, NULL, TGRAD_ERR_BUFFER_TOO_SMALL);
    external(mem, 16, 2, (int64_t[]){ BIG, BIG }, NULL, TGRAD_ERR_SIZE_OVERFLOW);
    /* a view that fits, with a negative stride: element [0, 0] is data[8] */
    for (int i = 0; i < 16; i++) mem[i] = (uint16_t)i;
    tgrad_tensor_t t = external(mem, 16, 2, (int64_t[]){ 2, 3 }, (int64_t[]){ -8, 1 }, TGRAD_OK);
    uint16_t out[6] = { 0 };
    EXPECT(tgrad_tensor_read_bf16(t, out, 6), TGRAD_OK);
    CHECK(out[0] == 8 && out[2] == 10 && out[3] == 0 && out[5] == 2);
    tgrad_tensor_release(t);
    /* the last element of the buffer, reached exactly */
    t = external(mem, 16, 2, sq, (int64_t[]){ -15, 0 }, TGRAD_OK);
    EXPECT(tgrad_tensor_read_bf16(t, out, 4), TGRAD_OK);
    CHECK(out[0] == 15 && out[1] == 15 && out[2] == 0);
    tgrad_tensor_release(t);
    /* a view with no element reaches nothing, whatever its strides */
    t = external(mem, 16, 3, (int64_t[]){ 2, 0, 2 }, (int64_t[]){ INT64_MAX, INT64_MIN, INT64_MAX }, TGRAD_OK);
    int64_t numel = -1;
    EXPECT(tgrad_tensor_numel(t, &numel), TGRAD_OK);
    CHECK(numel == 0);
    tgrad_tensor_release(t);
    /* the largest buffer whose byte count fits (never read here) */
    t = external(mem, HALF_MAX, 1, one, (int64_t[]){ HALF_MAX - 1 }, TGRAD_OK);
    tgrad_tensor_release(t);
}

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

/* Integer index and slice of an empty view with extreme strides: the offset arithmetic overflows
 * (nothing is read, but the computation itself was undefined). */
static void test_select_and_slice_of_empty_views_with_extreme_strides(void) {
    tgrad_tensor_t t = external(NULL, 0, 2, (int64_t[]){ 3, 0 }, (int64_t[]){ INT64_MAX, 1 }, TGRAD_OK), s = 0, u = 0;
    EXPECT(tgrad_tensor_select(t, 0, 2, &s), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_select(t, 0, -1, &s), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_slice(t, 0, 2, 3, 1, 0, &s), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_slice(t, 0, 1, 3, 1, 0, &s), TGRAD_OK); /* offset INT64_MAX */
    int64_t off = 0;
    EXPECT(tgrad_tensor_offset(s, &off), TGRAD_OK);
    CHECK(off == INT64_MAX);
    EXPECT(tgrad_tensor_select(s, 0, 1, &u), TGRAD_ERR_SIZE_OVERFLOW); /* INT64_MAX + INT64_MAX */
    EXPECT(tgrad_tensor_select(s, 0, 0, &u), TGRAD_OK);
    EXPECT(tgrad_tensor_offset(u, &off), TGRAD_OK);
    CHECK(off == INT64_MAX);
    tgrad_tensor_release(u), tgrad_tensor_release(s), tgrad_tensor_release(t);
    t = external(NULL, 0, 2, (int64_t[]){ 3, 0 }, (int64_t[]){ INT64_MIN, 1 }, TGRAD_OK);
    EXPECT(tgrad_tensor_select(t, 0, 1, &s), TGRAD_OK);
    EXPECT(tgrad_tensor_select(t, 0, 2, &s), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_slice(t, 0, 2, 0, -1, 0, &u), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_slice(t, 0, 0, 3, INT64_MAX, 0, &u), TGRAD_OK); /* one element: no stride product */
    tgrad_tensor_release(u), tgrad_tensor_release(s), tgrad_tensor_release(t);
}

/* A matmul and a data pointer of empty views whose offset points far outside the buffer: the
 * operand's address was formed before the emptiness was seen (pointer overflow). */
static void test_empty_views_with_far_offsets_are_not_addressed(void) {
    static uint16_t mem[1] = { 0x3f80 };
    tgrad_tensor_t t = external(mem, 1, 2, (int64_t[]){ 3, 0 }, (int64_t[]){ -(INT64_C(1) << 61), 1 }, TGRAD_OK);
    tgrad_tensor_t a = 0, at = 0, b = 0, c = 0, d = 0;
    EXPECT(tgrad_tensor_slice(t, 0, 2, 3, 1, 0, &a), TGRAD_OK); /* [1, 0], offset -2^62 */
    int64_t off = 0;
    EXPECT(tgrad_tensor_offset(a, &off), TGRAD_OK);
    CHECK(off == -(INT64_C(1) << 62));
    const uint16_t *p = NULL;
    EXPECT(tgrad_tensor_data(a, &p), TGRAD_OK);
    CHECK(p == mem); /* an empty view's data pointer is its buffer's */
    EXPECT(tgrad_tensor_from_bf16(NULL, 2, (int64_t[]){ 0, 2 }, &b), TGRAD_OK);
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK); /* [1, 0] @ [0, 2]: zeros */
    uint16_t out[2] = { 1, 1 };
    EXPECT(tgrad_tensor_read_bf16(c, out, 2), TGRAD_OK);
    CHECK(out[0] == 0 && out[1] == 0);
    EXPECT(tgrad_tensor_transpose(a, 0, 1, &at), TGRAD_OK); /* [0, 1] @ [1, 0]... */
    EXPECT(tgrad_matmul(at, a, &d), TGRAD_OK);            /* [0, 1] @ [1, 0]: empty */
    EXPECT(tgrad_tensor_realize(d), TGRAD_OK);
    tgrad_tensor_release(d), tgrad_tensor_release(c), tgrad_tensor_release(b);
    tgrad_tensor_release(at), tgrad_tensor_release(a), tgrad_tensor_release(t);
}

/* A stride on an axis of extent 1 addresses nothing, so the caller may pass anything; one outside
 * the buffer is recorded as 0, and kernels never form an address with it. */
static void unit_axis_strides_on_the_current_variant(void) {
    static uint16_t mem[40], ones[3] = { 0x3f80, 0x3f80, 0x3f80 };
    for (int i = 0; i < 40; i++) mem[i] = (uint16_t)(0x3f80 + (i << 7)); /* 1, 2, 4, ... (powers of two) */
    mem[39] = 0;
    const int64_t wild[] = { INT64_MAX, INT64_MIN, 40, -40, 39 };
    for (size_t w = 0; w < sizeof wild / sizeof *wild; w++) {
        tgrad_tensor_t b = external(mem, 40, 2, (int64_t[]){ 1, 40 }, (int64_t[]){ wild[w], 1 }, TGRAD_OK), a = 0, c = 0;
        int64_t strides[2];
        EXPECT(tgrad_tensor_strides(b, strides), TGRAD_OK);
        CHECK(strides[0] == (w == 4 ? 39 : 0) && strides[1] == 1);
        EXPECT(tgrad_tensor_from_bf16(ones, 2, (int64_t[]){ 3, 1 }, &a), TGRAD_OK);
        EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK); /* [3, 1] @ [1, 40]: every row is b */
        uint16_t out[120];
        EXPECT(tgrad_tensor_read_bf16(c, out, 120), TGRAD_OK);
        CHECK(memcmp(out, mem, 80) == 0 && memcmp(out + 80, mem, 80) == 0);
        tgrad_tensor_release(c), tgrad_tensor_release(a);
        tgrad_tensor_t bt = 0;
        EXPECT(tgrad_tensor_transpose(b, 0, 1, &bt), TGRAD_OK);
        EXPECT(tgrad_tensor_from_bf16(ones, 2, (int64_t[]){ 1, 3 }, &a), TGRAD_OK);
        EXPECT(tgrad_matmul(bt, a, &c), TGRAD_OK); /* [40, 1] @ [1, 3] */
        EXPECT(tgrad_tensor_read_bf16(c, out, 120), TGRAD_OK);
        CHECK(out[0] == mem[0] && out[3] == mem[1] && out[119] == mem[39]);
        size_t len = 0;
        struct tgrad_launch launch = { .size = sizeof launch };
        EXPECT(tgrad_render_matmul(TGRAD_ROUTE_TILED, TGRAD_LANG_OPENCL, bt, a, NULL, 0, &len, &launch), TGRAD_OK);
        tgrad_tensor_release(c), tgrad_tensor_release(a), tgrad_tensor_release(bt), tgrad_tensor_release(b);
    }
}

static void test_unit_axis_strides_outside_the_buffer(void) {
    for (int32_t i = 0;; i++) {
        int32_t available = 0;
        const char *name = tgrad_cpu_isa_name(i, &available);
        if (!name) break;
        if (!available) continue;
        EXPECT(tgrad_set_cpu_isa(name), TGRAD_OK);
        unit_axis_strides_on_the_current_variant();
    }
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
}

/* Rendering a kernel for an operand with no element and extreme strides: the naive route folds
 * (K - 1) * stride into the offset for an odd K. */
static void test_render_of_empty_operands_with_extreme_strides(void) {
    uint16_t ones[6] = { 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80, 0x3f80 };
    tgrad_tensor_t a = external(NULL, 0, 2, (int64_t[]){ 0, 3 }, (int64_t[]){ 1, INT64_MAX }, TGRAD_OK), b = 0, bt = 0;
    EXPECT(tgrad_tensor_from_bf16(ones, 2, (int64_t[]){ 3, 2 }, &b), TGRAD_OK);
    tgrad_tensor_t e = external(NULL, 0, 2, (int64_t[]){ 3, 0 }, (int64_t[]){ INT64_MIN, INT64_MAX }, TGRAD_OK);
    size_t len = 0;
    struct tgrad_launch launch = { .size = sizeof launch };
    for (int32_t route = TGRAD_ROUTE_NAIVE; route <= TGRAD_ROUTE_TILED; route++) {
        EXPECT(tgrad_render_matmul(route, TGRAD_LANG_OPENCL, a, b, NULL, 0, &len, &launch), TGRAD_OK);
        CHECK(launch.grid[1] == 0);
        EXPECT(tgrad_tensor_transpose(b, 0, 1, &bt), TGRAD_OK); /* [2, 3] @ [3, 0] */
        EXPECT(tgrad_render_matmul(route, TGRAD_LANG_MSL, bt, e, NULL, 0, &len, &launch), TGRAD_OK);
        CHECK(launch.grid[0] == 0);
        tgrad_tensor_release(bt);
    }
    EXPECT(tgrad_render_copy(TGRAD_LANG_OPENCL, e, NULL, 0, &len, &launch), TGRAD_OK);
    tgrad_tensor_release(e), tgrad_tensor_release(b), tgrad_tensor_release(a);
}

/* explain of a lazy matmul whose operands are huge expanded views: the bytes it reads pass 2^63
 * (the sum overflowed). Nothing is allocated or run. */
static void test_explain_counts_bytes_of_huge_operands(void) {
    uint16_t v = 0x3f80;
    tgrad_tensor_t one = 0, a = 0, b = 0, c = 0;
    const int64_t m = INT64_C(1) << 30, k = (INT64_C(1) << 32) - 1;
    EXPECT(tgrad_tensor_from_bf16(&v, 2, (int64_t[]){ 1, 1 }, &one), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(one, (int64_t[]){ m, k }, 2, &a), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(one, (int64_t[]){ k, m }, 2, &b), TGRAD_OK);
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
    static char text[8192];
    size_t len = 0;
    EXPECT(tgrad_tensor_explain(c, TGRAD_FORMAT_JSON, text, sizeof text, &len), TGRAD_OK);
    CHECK(strstr(text, "\"bytes_read\": 18446744069414584320") != NULL); /* 2 operands * 2 bytes * 2^30 * (2^32 - 1) */
    EXPECT(tgrad_tensor_explain(c, TGRAD_FORMAT_TEXT, text, sizeof text, &len), TGRAD_OK);
    CHECK(strstr(text, "reads 18446744069414584320 B") != NULL);
    tgrad_tensor_release(c), tgrad_tensor_release(b), tgrad_tensor_release(a), tgrad_tensor_release(one);
}

/* Views of a buffer as large as the byte count allows (never read): strides near 2^61 chain in
 * view() without overflow, and slices at the far end address it exactly. */
static void test_views_near_the_largest_buffer(void) {
    static uint16_t mem[1];
    const int64_t s = (INT64_C(1) << 61) - 1;
    tgrad_tensor_t t = external(mem, HALF_MAX, 1, (int64_t[]){ 3 }, (int64_t[]){ s }, TGRAD_OK), v = 0, w = 0;
    EXPECT(tgrad_tensor_view(t, (int64_t[]){ 1, 3, 1 }, 3, &v), TGRAD_OK);
    EXPECT(tgrad_tensor_slice(t, 0, 2, 3, 1, 0, &w), TGRAD_OK);
    int64_t off = 0;
    EXPECT(tgrad_tensor_offset(w, &off), TGRAD_OK);
    CHECK(off == 2 * s);
    tgrad_tensor_release(w), tgrad_tensor_release(v), tgrad_tensor_release(t);
    t = external(mem, HALF_MAX, 2, (int64_t[]){ 2, 2 }, (int64_t[]){ -s, s }, TGRAD_OK);
    EXPECT(tgrad_tensor_view(t, (int64_t[]){ 4 }, 1, &v), TGRAD_ERR_VIEW_NOT_EXPRESSIBLE);
    EXPECT(tgrad_tensor_select(t, 0, 1, &v), TGRAD_OK);
    EXPECT(tgrad_tensor_offset(v, &off), TGRAD_OK);
    CHECK(off == 0);
    tgrad_tensor_release(v), tgrad_tensor_release(t);
}

/* The memory limit (issue 33): a node whose buffer passes it is refused when it is made, with
 * out_of_memory, before anything is allocated; views are not buffers and stay free. Default: the
 * machine's physical memory; 0 restores it; a negative limit is invalid and changes nothing. */
static void test_memory_limit_refuses_at_the_node(void) {
    int64_t physical = (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGE_SIZE);
    CHECK(tgrad_memory_limit() == physical);
    uint16_t v = 0x3f80;
    tgrad_tensor_t one = 0, col = 0, row = 0, c = 0;
    EXPECT(tgrad_tensor_from_bf16(&v, 2, (int64_t[]){ 1, 1 }, &one), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(one, (int64_t[]){ 100000, 1 }, 2, &col), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(one, (int64_t[]){ 1, INT64_C(10000000000) }, 2, &row), TGRAD_OK);
    int64_t buffers = tgrad_live_buffers();
    EXPECT(tgrad_binary(TGRAD_OP_ADD, col, row, &c), TGRAD_ERR_OUT_OF_MEMORY); /* 10^15 elements */
    CHECK(c == 0);
    EXPECT(tgrad_matmul(col, row, &c), TGRAD_ERR_OUT_OF_MEMORY);
    CHECK(tgrad_live_buffers() == buffers);
    EXPECT(tgrad_set_memory_limit(-1), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(tgrad_memory_limit() == physical);
    EXPECT(tgrad_set_memory_limit(6), TGRAD_OK); /* 3 elements */
    EXPECT(tgrad_tensor_from_bf16((uint16_t[]){ 1, 2, 3, 4 }, 1, (int64_t[]){ 4 }, &c), TGRAD_ERR_OUT_OF_MEMORY);
    EXPECT(tgrad_tensor_from_bf16((uint16_t[]){ 1, 2, 3 }, 1, (int64_t[]){ 3 }, &c), TGRAD_OK);
    tgrad_tensor_release(c);
    EXPECT(tgrad_unary(TGRAD_OP_NEG, row, &c), TGRAD_ERR_OUT_OF_MEMORY);
    EXPECT(tgrad_tensor_contiguous(col, &c), TGRAD_ERR_OUT_OF_MEMORY);
    EXPECT(tgrad_set_memory_limit(0), TGRAD_OK);
    CHECK(tgrad_memory_limit() == physical);
    tgrad_tensor_release(row), tgrad_tensor_release(col), tgrad_tensor_release(one);
}

int main(void) {
    test_memory_limit_refuses_at_the_node();
    /* The probes below make huge lazy tensors that are never realized: the memory limit is lifted,
     * so that what they reach is the int64 arithmetic. */
    EXPECT(tgrad_set_memory_limit(INT64_MAX), TGRAD_OK);
    test_external_views_reaching_outside_are_refused();
    test_huge_empty_shapes_are_refused();
    test_expand_to_huge_extents_is_refused();
    test_reshape_to_huge_empty_shape_is_refused();
    test_select_and_slice_of_empty_views_with_extreme_strides();
    test_empty_views_with_far_offsets_are_not_addressed();
    test_unit_axis_strides_outside_the_buffer();
    test_render_of_empty_operands_with_extreme_strides();
    test_explain_counts_bytes_of_huge_operands();
    test_views_near_the_largest_buffer();
    CHECK(tgrad_live_tensors() == 0);
    CHECK(tgrad_live_buffers() == 0);
    CHECK(tgrad_live_bytes() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
