/* C tests of the ABI contract: statuses, handles, views, matmul across CPU variants and thread
 * counts, and the live-object counters. Prints "N passed, N failed". */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tgrad.h"

#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static tgrad_tensor_t make_f32(int64_t rows, int64_t cols, const float *data) {
    tgrad_tensor_t t = 0;
    int64_t shape[2] = { rows, cols };
    EXPECT(tgrad_tensor_from_f32(data, 2, shape, &t), TGRAD_OK);
    return t;
}

static void test_version_and_registry(void) {
    CHECK(tgrad_version() == TGRAD_VERSION_NUMBER);
    CHECK(strcmp(tgrad_version_string(), TGRAD_VERSION_STRING) == 0);
    EXPECT(tgrad_check_version(TGRAD_VERSION_NUMBER), TGRAD_OK);
    EXPECT(tgrad_check_version(TGRAD_VERSION_NUMBER + 10000), TGRAD_ERR_VERSION_MISMATCH);
    CHECK(tgrad_status_count() == TGRAD_STATUS_COUNT_);
    CHECK(strcmp(tgrad_status_name(TGRAD_ERR_SHAPE_MISMATCH), "shape_mismatch") == 0);
    CHECK(strcmp(tgrad_status_name(TGRAD_ERR_VIEW_NOT_EXPRESSIBLE), "view_not_expressible") == 0);
    CHECK(strcmp(tgrad_status_name(-1), "unknown_status") == 0);
    CHECK(strcmp(tgrad_status_name(9999), "unknown_status") == 0);
    CHECK(tgrad_status_message(9999) != NULL);
    for (int32_t i = 0; i < tgrad_status_count(); i++) {
        CHECK(strlen(tgrad_status_name(i)) > 0);
        CHECK(strlen(tgrad_status_category(i)) > 0);
    }
}

static void test_handles(void) {
    int64_t live0 = tgrad_live_tensors();
    float v[4] = { 1, 2, 3, 4 };
    tgrad_tensor_t t = make_f32(2, 2, v);
    CHECK(tgrad_live_tensors() == live0 + 1);
    EXPECT(tgrad_tensor_release(0), TGRAD_OK);
    EXPECT(tgrad_tensor_release(t), TGRAD_OK);
    EXPECT(tgrad_tensor_release(t), TGRAD_ERR_INVALID_HANDLE); /* double release */
    int32_t nd;
    EXPECT(tgrad_tensor_ndim(t, &nd), TGRAD_ERR_INVALID_HANDLE); /* use after release */
    tgrad_tensor_t u = make_f32(2, 2, v);                       /* reuses the slot */
    CHECK((uint32_t)u == (uint32_t)t && u != t);
    EXPECT(tgrad_tensor_ndim(t, &nd), TGRAD_ERR_INVALID_HANDLE); /* stale generation */
    EXPECT(tgrad_tensor_ndim(u, &nd), TGRAD_OK);
    tgrad_tensor_t foreign = (u & 0x00ffffffffffffffull) | (2ull << 56);
    EXPECT(tgrad_tensor_ndim(foreign, &nd), TGRAD_ERR_WRONG_HANDLE_KIND);
    EXPECT(tgrad_tensor_ndim(0x1234, &nd), TGRAD_ERR_INVALID_HANDLE);
    EXPECT(tgrad_tensor_ndim(u, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(strlen(tgrad_last_error()) > 0);
    CHECK(tgrad_last_status() == TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_from_f32(NULL, 2, (int64_t[]){ 2, 2 }, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_from_f32(v, 2, NULL, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_from_f32(v, 9, (int64_t[9]){ 0 }, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_from_f32(v, 2, (int64_t[]){ -1, 2 }, &t), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_from_f32(v, 3, (int64_t[]){ 1ll << 40, 1ll << 40, 1 }, &t), TGRAD_ERR_SIZE_OVERFLOW);
    EXPECT(tgrad_tensor_from_f32(v, 2, (int64_t[]){ 2, 2 }, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_release(u), TGRAD_OK);
    CHECK(tgrad_live_tensors() == live0);
}

static void test_views(void) {
    float v[6] = { 0, 1, 2, 3, 4, 5 };
    tgrad_tensor_t t = make_f32(2, 3, v), tt = 0, s = 0, e = 0, r = 0, w = 0;
    EXPECT(tgrad_tensor_transpose(t, 0, 1, &tt), TGRAD_OK);
    int64_t shape[8], strides[8];
    EXPECT(tgrad_tensor_shape(tt, shape), TGRAD_OK);
    EXPECT(tgrad_tensor_strides(tt, strides), TGRAD_OK);
    CHECK(shape[0] == 3 && shape[1] == 2 && strides[0] == 1 && strides[1] == 3);
    float out[6];
    EXPECT(tgrad_tensor_read_f32(tt, out, 6), TGRAD_OK);
    CHECK(out[0] == 0 && out[1] == 3 && out[2] == 1 && out[5] == 5);
    EXPECT(tgrad_tensor_read_f32(tt, out, 5), TGRAD_ERR_BUFFER_TOO_SMALL);
    EXPECT(tgrad_tensor_slice(t, 1, 0, 0, -1, TGRAD_SLICE_START_NONE | TGRAD_SLICE_STOP_NONE, &s), TGRAD_OK);
    EXPECT(tgrad_tensor_read_f32(s, out, 6), TGRAD_OK);
    CHECK(out[0] == 2 && out[1] == 1 && out[2] == 0 && out[3] == 5);
    int32_t same = 0;
    EXPECT(tgrad_tensor_same_buffer(t, s, &same), TGRAD_OK);
    CHECK(same == 1);
    EXPECT(tgrad_tensor_slice(t, 1, 0, 3, 0, 0, &w), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_slice(t, 2, 0, 3, 1, 0, &w), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_tensor_select(t, 0, 2, &w), TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_tensor_permute(t, (int32_t[]){ 0, 0 }, 2, &w), TGRAD_ERR_BAD_PERMUTATION);
    EXPECT(tgrad_tensor_expand(t, (int64_t[]){ 4, 3 }, 2, &w), TGRAD_ERR_BAD_EXPAND);
    EXPECT(tgrad_tensor_view(tt, (int64_t[]){ 6 }, 1, &w), TGRAD_ERR_VIEW_NOT_EXPRESSIBLE);
    EXPECT(tgrad_tensor_reshape(tt, (int64_t[]){ 7 }, 1, &w), TGRAD_ERR_BAD_RESHAPE);
    EXPECT(tgrad_tensor_reshape(tt, (int64_t[]){ -1 }, 1, &r), TGRAD_OK); /* materializes */
    EXPECT(tgrad_tensor_same_buffer(tt, r, &same), TGRAD_OK);
    CHECK(same == 0);
    EXPECT(tgrad_tensor_read_f32(r, out, 6), TGRAD_OK);
    CHECK(out[0] == 0 && out[1] == 3 && out[2] == 1 && out[3] == 4);
    tgrad_tensor_t row = 0;
    EXPECT(tgrad_tensor_slice(t, 0, 0, 1, 1, 0, &row), TGRAD_OK);
    EXPECT(tgrad_tensor_expand(row, (int64_t[]){ 4, -1 }, 2, &e), TGRAD_OK);
    EXPECT(tgrad_tensor_strides(e, strides), TGRAD_OK);
    CHECK(strides[0] == 0 && strides[1] == 1);
    tgrad_tensor_release(t), tgrad_tensor_release(tt), tgrad_tensor_release(s);
    tgrad_tensor_release(e), tgrad_tensor_release(r), tgrad_tensor_release(row);
}

/* Small integers: every partial sum is exact, so any order gives the same bytes. */
static void test_matmul_exact(const char *isa) {
    enum { M = 37, K = 53, N = 41 };
    static float a[M * K], b[K * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)((int)(next_u32() % 7) - 3);
    for (int i = 0; i < K * N; i++) b[i] = (float)((int)(next_u32() % 7) - 3);
    EXPECT(tgrad_set_cpu_isa(isa), TGRAD_OK);
    tgrad_tensor_t ta = make_f32(M, K, a), tb = make_f32(K, N, b), tc = 0;
    EXPECT(tgrad_matmul(ta, tb, &tc), TGRAD_OK);
    int32_t realized = 1;
    EXPECT(tgrad_tensor_is_realized(tc, &realized), TGRAD_OK);
    CHECK(realized == 0); /* lazy until read */
    static float c[M * N];
    EXPECT(tgrad_tensor_read_f32(tc, c, M * N), TGRAD_OK);
    int bad = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float ref = 0;
            for (int k = 0; k < K; k++) ref += a[i * K + k] * b[k * N + j];
            bad += c[i * N + j] != ref;
        }
    CHECK(bad == 0);
    tgrad_tensor_release(ta), tgrad_tensor_release(tb), tgrad_tensor_release(tc);
}

/* a @ b computed by the portable variant on one thread, into ref (M x N). */
static void portable_reference(tgrad_tensor_t a, tgrad_tensor_t b, uint16_t *ref, int64_t count) {
    EXPECT(tgrad_set_cpu_isa("portable"), TGRAD_OK);
    EXPECT(tgrad_set_num_threads(1), TGRAD_OK);
    tgrad_tensor_t c = 0;
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
    EXPECT(tgrad_tensor_read_bf16(c, ref, (size_t)count), TGRAD_OK);
    tgrad_tensor_release(c);
}

/* TGRAD_TEST_EMULATED=1 (`nox -s cross`: the aarch64 build under qemu-user, where these sweeps took
 * 5 of the session's 6 minutes): the sweeps below check the other variants against the portable
 * reference and leave out the portable variant's own reruns at other thread counts and blockings.
 * Those run the same portable C source that the native runs of this test check at every thread
 * count and blocking; the reference itself is still computed by the portable variant built for
 * aarch64, and test_matmul_exact holds it to dot(). */
static bool emulated_skips(const char *variant) {
    const char *env = getenv("TGRAD_TEST_EMULATED");
    return env && !strcmp(env, "1") && !strcmp(variant, "portable");
}

/* a @ b on every CPU variant this machine runs, at 1..max_threads threads: each result must be
 * ref's bytes. `what` names the case when one differs. Leaves the automatic variant and 2 threads. */
static void expect_every_variant(tgrad_tensor_t a, tgrad_tensor_t b, const uint16_t *ref, int64_t count,
                                 int32_t max_threads, const char *what) {
    uint16_t *got = malloc(2 * (size_t)count);
    for (int32_t vi = 0;; vi++) {
        int32_t avail = 0;
        const char *name = tgrad_cpu_isa_name(vi, &avail);
        if (!name) break;
        if (!avail || emulated_skips(name)) continue;
        EXPECT(tgrad_set_cpu_isa(name), TGRAD_OK);
        for (int32_t threads = 1; threads <= max_threads; threads++) {
            EXPECT(tgrad_set_num_threads(threads), TGRAD_OK);
            tgrad_tensor_t c = 0;
            EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
            EXPECT(tgrad_tensor_read_bf16(c, got, (size_t)count), TGRAD_OK);
            tgrad_tensor_release(c);
            bool same = memcmp(ref, got, 2 * (size_t)count) == 0;
            CHECK(same);
            if (!same) fprintf(stderr, "  %s: variant %s, %d threads differs from portable\n", what, name, threads);
        }
    }
    free(got);
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
    EXPECT(tgrad_set_num_threads(2), TGRAD_OK);
}

/* Random normal-ish data through views: every variant and thread count gives the same bytes. */
static void test_variants_agree(void) {
    enum { M = 131, K = 517, N = 97 };
    float *a = malloc(sizeof(float) * 2 * M * K), *b = malloc(sizeof(float) * K * N);
    for (int i = 0; i < 2 * M * K; i++) a[i] = ((float)(next_u32() % 20001) - 10000.0f) / 777.0f;
    for (int i = 0; i < K * N; i++) b[i] = ((float)(next_u32() % 20001) - 10000.0f) / 333.0f;
    uint16_t *ref = malloc(2 * M * N);
    tgrad_tensor_t ta = make_f32(K, 2 * M, a), tb = make_f32(N, K, b), av = 0, bv = 0, tmp = 0;
    /* A = (base [K, 2M]).T[::2] -> [M, K] with strides (2, 2M); B = (base [N, K]).T */
    EXPECT(tgrad_tensor_transpose(ta, 0, 1, &tmp), TGRAD_OK);
    EXPECT(tgrad_tensor_slice(tmp, 0, 0, 0, 2, TGRAD_SLICE_START_NONE | TGRAD_SLICE_STOP_NONE, &av), TGRAD_OK);
    EXPECT(tgrad_tensor_transpose(tb, 0, 1, &bv), TGRAD_OK);
    portable_reference(av, bv, ref, M * N);
    expect_every_variant(av, bv, ref, M * N, 3, "strided A, column-major B");
    EXPECT(tgrad_set_cpu_isa("no-such-isa"), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_set_num_threads(0), TGRAD_ERR_INVALID_ARGUMENT);
    tgrad_tensor_release(ta), tgrad_tensor_release(tb), tgrad_tensor_release(av);
    tgrad_tensor_release(bv), tgrad_tensor_release(tmp);
    free(a), free(b), free(ref);
}

/* Random bf16 bits from a mix that stresses the contract: normals of wide exponent range,
 * subnormals, signed zeros, infinities and NaNs. */
/* K: the reduction length the value will be summed over. A NaN or infinity spreads to every sum
 * it enters, so they come at a rate that leaves most outputs finite (else a large K makes every
 * output NaN and a wrong kernel could pass). */
static uint16_t special_bits(int64_t K) {
    uint32_t r = next_u32();
    if (r % (1024u * (uint32_t)(K / 64 + 1)) == 0) return (r & 0x400) ? 0x7fc1 : 0xff80;  /* rare NaN / -Inf */
    switch (r % 16) {
    case 0: return (uint16_t)(r >> 8) & 0x807f;              /* subnormal or zero */
    case 1: return (r & 0x100) ? 0x8000 : 0x0000;            /* signed zero */
    case 2: return (uint16_t)(((r >> 9) & 0x8000) | (((r >> 4) % 8 + 1) << 7)); /* tiny: products flush */
    default: return (uint16_t)(((r >> 9) & 0x8000) | (((r >> 4) % 40 + 107) << 7) | ((r >> 12) & 0x7f));
    }
}

/* Every shape class the frame treats specially (one row, one column, short M on the skinny path,
 * M's tail panel on a shorter kernel, odd K, block edges, odd K with A read in place, row blocks
 * taller than MC_MAX, the chunked path chosen for a small K with A in place, outputs over
 * 16 MiB that are streamed past the caches: N = 2080 has 64-byte aligned rows, 2050 mostly not),
 * with row- and column-major B and special values: every variant gives the portable variant's
 * bytes. */
static void test_variants_agree_on_shape_classes(void) {
    static const int64_t shapes[][3] = { { 1, 4097, 1000 }, { 1, 33, 3 }, { 777, 1025, 1 }, { 5, 1, 7 },
                                         { 16, 515, 300 }, { 9, 64, 1025 }, { 200, 1030, 70 }, { 1, 2, 1 },
                                         { 13, 7, 33 }, { 3, 1031, 520 }, { 1, 5, 64 }, { 77, 9, 1 }, { 1, 3, 50 },
                                         { 127, 255, 511 }, { 24, 255, 300 }, { 4100, 6, 2080 }, { 4100, 3, 2050 },
                                         { 49, 70, 90 }, { 63, 33, 65 }, /* tail panels of 1 and 3 rows */
                                         { 7, 8200, 1100 }, /* short M streaming B row by row */
                                         { 4, 1001, 1060 }, { 6, 130, 545 }, /* 4- and 8-row skinny tiles */
                                         { 30, 1100, 1000 }, /* short M in passes of 12 rows */
                                         { 5, 300, 73 }, { 14, 77, 25 }, /* skinny tiles with 9 columns left */
                                         { 250, 1100, 300 }, /* one 250-row block over three K panels */
                                         { 100, 1000, 1100 } }; /* A in place, B over 2 MiB: chunked */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
        uint16_t *a = malloc(2 * (size_t)(M * K)), *b = malloc(2 * (size_t)(K * N));
        uint16_t *ref = malloc(2 * (size_t)(M * N));
        for (int64_t i = 0; i < M * K; i++) a[i] = special_bits(K);
        for (int64_t i = 0; i < K * N; i++) b[i] = special_bits(K);
        for (int layout = 0; layout < 2; layout++) {
            tgrad_tensor_t ta = 0, tb = 0, bt = 0, bv = 0;
            EXPECT(tgrad_tensor_from_bf16(a, 2, (int64_t[]){ M, K }, &ta), TGRAD_OK);
            if (layout == 0) {
                EXPECT(tgrad_tensor_from_bf16(b, 2, (int64_t[]){ K, N }, &tb), TGRAD_OK);
                EXPECT(tgrad_tensor_slice(tb, 0, 0, 0, 1, TGRAD_SLICE_START_NONE | TGRAD_SLICE_STOP_NONE, &bv), TGRAD_OK);
            } else { /* the same values stored column-major: b^T is [N, K] */
                EXPECT(tgrad_tensor_from_bf16(b, 2, (int64_t[]){ N, K }, &bt), TGRAD_OK);
                EXPECT(tgrad_tensor_transpose(bt, 0, 1, &bv), TGRAD_OK);
            }
            char what[96];
            snprintf(what, sizeof what, "%lldx%lldx%lld, %s B", (long long)M, (long long)K, (long long)N,
                     layout ? "column-major" : "row-major");
            portable_reference(ta, bv, ref, M * N);
            expect_every_variant(ta, bv, ref, M * N, 2, what);
            tgrad_tensor_release(ta), tgrad_tensor_release(tb), tgrad_tensor_release(bt), tgrad_tensor_release(bv);
        }
        free(a), free(b), free(ref);
    }
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
}

/* The shared-chunk path under small caps (many row/column chunks, many K panels, A read in place
 * or packed), every variant and 1-3 threads, A row-major, column-major and strided: the bytes of
 * the portable variant on the per-block path (automatic choice at these sizes). */
static void test_chunked_blocking_agrees(void) {
    static const int64_t shapes[][3] = { { 200, 1030, 70 }, { 131, 517, 97 }, { 37, 64, 300 }, { 300, 2, 33 }, { 25, 9, 1 },
                                         { 61, 41, 65 }, { 51, 40, 40 }, { 200, 64, 600 } };
    static const int64_t blockings[][3] = { { 64 << 10, 256, 0 }, { 64 << 10, 256, TGRAD_DEBUG_CPU_NO_DIRECT_A },
                                            { 16 << 10, 64, 0 }, { 8 << 10, 30, 0 }, { 1 << 20, 0, 0 } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
        uint16_t *a = malloc(2 * (size_t)(2 * M * K)), *b = malloc(2 * (size_t)(K * N));
        uint16_t *ref = malloc(2 * (size_t)(M * N));
        for (int64_t i = 0; i < 2 * M * K; i++) a[i] = special_bits(K);
        for (int64_t i = 0; i < K * N; i++) b[i] = special_bits(K);
        tgrad_tensor_t tb = 0, base = 0;
        EXPECT(tgrad_tensor_from_bf16(b, 2, (int64_t[]){ K, N }, &tb), TGRAD_OK);
        EXPECT(tgrad_tensor_from_bf16(a, 2, (int64_t[]){ 2 * M, K }, &base), TGRAD_OK);
        for (int layout = 0; layout < 3; layout++) {
            tgrad_tensor_t ta = 0, at = 0;
            if (layout == 0) { /* row-major: the first M rows */
                EXPECT(tgrad_tensor_slice(base, 0, 0, M, 1, 0, &ta), TGRAD_OK);
            } else if (layout == 1) { /* column-major: the transpose of a [K, M] tensor */
                EXPECT(tgrad_tensor_from_bf16(a, 2, (int64_t[]){ K, M }, &at), TGRAD_OK);
                EXPECT(tgrad_tensor_transpose(at, 0, 1, &ta), TGRAD_OK);
            } else { /* every other row */
                EXPECT(tgrad_tensor_slice(base, 0, 0, 0, 2, TGRAD_SLICE_START_NONE | TGRAD_SLICE_STOP_NONE, &ta), TGRAD_OK);
            }
            EXPECT(tgrad_debug_cpu_blocking(0, 0, 0), TGRAD_OK);
            portable_reference(ta, tb, ref, M * N);
            for (size_t bi = 0; bi < sizeof blockings / sizeof blockings[0]; bi++) {
                EXPECT(tgrad_debug_cpu_blocking(blockings[bi][0], blockings[bi][1], (int32_t)blockings[bi][2]), TGRAD_OK);
                char what[96];
                snprintf(what, sizeof what, "%lldx%lldx%lld, blocking %zu, A layout %d", (long long)M, (long long)K,
                         (long long)N, bi, layout);
                expect_every_variant(ta, tb, ref, M * N, 3, what);
            }
            tgrad_tensor_release(ta), tgrad_tensor_release(at);
        }
        tgrad_tensor_release(tb), tgrad_tensor_release(base);
        free(a), free(b), free(ref);
    }
    EXPECT(tgrad_debug_cpu_blocking(-1, 0, 0), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_cpu_blocking(0, 3, 0), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_cpu_blocking(0, 0, 4), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_cpu_blocking(0, 0, 0), TGRAD_OK);
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
    EXPECT(tgrad_set_num_threads(2), TGRAD_OK);
}

static void test_matmul_refusals(void) {
    static float z[32 * 768], big[512 * 768];
    tgrad_tensor_t a = make_f32(32, 768, z), b = make_f32(512, 768, big), c = 123;
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_ERR_SHAPE_MISMATCH);
    CHECK(c == 123); /* output untouched */
    CHECK(strstr(tgrad_last_error(), "matmul: [32, 768] @ [512, 768]: inner dimensions 768 and 512 differ") != NULL);
    tgrad_tensor_t row = 0;
    EXPECT(tgrad_tensor_select(a, 0, 0, &row), TGRAD_OK);
    EXPECT(tgrad_matmul(row, b, &c), TGRAD_ERR_SHAPE_MISMATCH); /* [768] @ [512, 768]: 768 vs 512 */
    tgrad_tensor_t scalar = 0;
    EXPECT(tgrad_tensor_select(row, 0, 0, &scalar), TGRAD_OK);
    EXPECT(tgrad_matmul(scalar, b, &c), TGRAD_ERR_RANK_MISMATCH); /* a 0-d operand */
    CHECK(c == 123);
    tgrad_tensor_release(scalar);
    EXPECT(tgrad_matmul(a, 0, &c), TGRAD_ERR_INVALID_HANDLE);
    EXPECT(tgrad_matmul(a, b, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    /* empty dimensions: K = 0 gives zeros, M = 0 an empty result */
    tgrad_tensor_t k0a = make_f32(3, 0, NULL), k0b = make_f32(0, 2, NULL), k0c = 0;
    EXPECT(tgrad_matmul(k0a, k0b, &k0c), TGRAD_OK);
    uint16_t bits[6] = { 1, 1, 1, 1, 1, 1 };
    EXPECT(tgrad_tensor_read_bf16(k0c, bits, 6), TGRAD_OK);
    CHECK(bits[0] == 0 && bits[5] == 0);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(row);
    tgrad_tensor_release(k0a), tgrad_tensor_release(k0b), tgrad_tensor_release(k0c);
}

static void test_chain_frees_intermediates(void) {
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = (float)(i % 5);
    tgrad_tensor_t a = make_f32(4, 4, v), ab = 0, abc = 0;
    EXPECT(tgrad_matmul(a, a, &ab), TGRAD_OK);
    EXPECT(tgrad_matmul(ab, a, &abc), TGRAD_OK);
    EXPECT(tgrad_tensor_release(ab), TGRAD_OK); /* the pending graph keeps what it needs */
    int64_t bytes_before = tgrad_live_bytes();
    EXPECT(tgrad_tensor_realize(abc), TGRAD_OK);
    /* a (32 B) and abc (32 B) remain; ab's storage was freed once abc ran */
    CHECK(tgrad_live_bytes() == bytes_before + 32);
    tgrad_tensor_release(a), tgrad_tensor_release(abc);
}

/* One output, K = 2 or 4, on one variant: the bf16 bits of row a . column b. */
static uint16_t dot(const float *a, const float *b, int64_t K) {
    tgrad_tensor_t ta = 0, tb = 0, tc = 0;
    int64_t sa[2] = { 1, K }, sb[2] = { K, 1 };
    EXPECT(tgrad_tensor_from_f32(a, 2, sa, &ta), TGRAD_OK);
    EXPECT(tgrad_tensor_from_f32(b, 2, sb, &tb), TGRAD_OK);
    EXPECT(tgrad_matmul(ta, tb, &tc), TGRAD_OK);
    uint16_t r = 0xdead;
    EXPECT(tgrad_tensor_read_bf16(tc, &r, 1), TGRAD_OK);
    tgrad_tensor_release(ta), tgrad_tensor_release(tb), tgrad_tensor_release(tc);
    return r;
}

/* The contract's order and flush rule, on every variant (docs/numerics.md). */
static void test_contract_probes(const char *isa) {
    EXPECT(tgrad_set_cpu_isa(isa), TGRAD_OK);
    /* odd element of each pair first: p1, p0, p3, p2 = -2^25, 0, 2^25, 1 gives 1; even-first gives 0 */
    CHECK(dot((float[]){ 0, -0x1p25f, 1, 0x1p25f }, (float[]){ 0, 1, 1, 1 }, 4) == 0x3f80);
    /* tininess after rounding: 2^-126 + (-2^-152) stays 2^-126 ... */
    CHECK(dot((float[]){ -0x1p-76f, 0x1p-63f }, (float[]){ 0x1p-76f, 0x1p-63f }, 2) == 0x0080);
    /* ... 2^-126 + (-3 * 2^-152) rounds below 2^-126 and flushes to +0 */
    CHECK(dot((float[]){ -0x3p-76f, 0x1p-63f }, (float[]){ 0x1p-76f, 0x1p-63f }, 2) == 0x0000);
    /* a subnormal input counts as zero (DAZ): 2^-130 * 2^100 would be 2^-30 */
    CHECK(dot((float[]){ 0, 0x1p-130f }, (float[]){ 0, 0x1p100f }, 2) == 0x0000);
    /* odd K: the padded +0 product turns a flushed -0 into +0 */
    CHECK(dot((float[]){ -0x1p-70f, 0, -0.0f }, (float[]){ 0x1p-70f, 0, 0 }, 3) == 0x0000);
    /* NaN results are canonical */
    CHECK(dot((float[]){ INFINITY, 0 }, (float[]){ 0, 0 }, 2) == 0x7fc0);
}

static char *explain(tgrad_tensor_t t, int32_t format) {
    size_t len = 0;
    CHECK(tgrad_tensor_explain(t, format, NULL, 0, &len) == TGRAD_ERR_BUFFER_TOO_SMALL);
    char *text = malloc(len + 1);
    EXPECT(tgrad_tensor_explain(t, format, text, len + 1, &len), TGRAD_OK);
    return text;
}

/* explain reads the plan without running it; the chain (a @ b) @ c frees a @ b after its reader. */
static void test_explain_and_routes(void) {
    float v[64];
    for (int i = 0; i < 64; i++) v[i] = (float)(i % 7);
    tgrad_tensor_t a = make_f32(8, 8, v), b = make_f32(8, 8, v), ab = 0, abT = 0, abc = 0;
    EXPECT(tgrad_matmul(a, b, &ab), TGRAD_OK);
    EXPECT(tgrad_tensor_transpose(ab, 0, 1, &abT), TGRAD_OK);
    EXPECT(tgrad_matmul(abT, a, &abc), TGRAD_OK);
    uint64_t id_ab = 0, id_abT = 0;
    EXPECT(tgrad_tensor_buffer_id(ab, &id_ab), TGRAD_OK);
    EXPECT(tgrad_tensor_buffer_id(abT, &id_abT), TGRAD_OK);
    CHECK(id_ab == id_abT && id_ab != 0); /* a view shares its base's buffer */
    EXPECT(tgrad_tensor_release(ab), TGRAD_OK);
    EXPECT(tgrad_tensor_release(abT), TGRAD_OK); /* now only the pending graph holds a @ b */
    char *text = explain(abc, TGRAD_FORMAT_TEXT);
    CHECK(strstr(text, "plan for buf#") != NULL && strstr(text, "2 steps") != NULL);
    CHECK(strstr(text, "step 0: matmul cpu.") != NULL && strstr(text, "step 1: matmul cpu.") != NULL);
    CHECK(strstr(text, "strides (1, 8)") != NULL && strstr(text, "composed") != NULL); /* the transpose, read in place */
    char frees[32];
    snprintf(frees, sizeof frees, "frees buf#%llu", (unsigned long long)id_ab);
    CHECK(strstr(text, frees) != NULL);
    free(text);
    text = explain(abc, TGRAD_FORMAT_JSON);
    CHECK(text[0] == '{' && strstr(text, "\"steps\": [{\"step\": 0") != NULL && strstr(text, "\"load\": \"composed\"") != NULL);
    free(text);
    int32_t realized = 1;
    EXPECT(tgrad_tensor_is_realized(abc, &realized), TGRAD_OK);
    CHECK(realized == 0); /* explaining ran nothing */
    char route[64];
    size_t len = 0;
    EXPECT(tgrad_tensor_route(a, route, sizeof route, &len), TGRAD_OK);
    CHECK(strcmp(route, "host") == 0 && len == 4);
    EXPECT(tgrad_tensor_route(a, route, 4, &len), TGRAD_ERR_BUFFER_TOO_SMALL);
    EXPECT(tgrad_tensor_realize(abc), TGRAD_OK);
    EXPECT(tgrad_tensor_route(abc, route, sizeof route, &len), TGRAD_OK);
    /* "cpu.<variant>.<path>": the packed products' variant, or the streaming one for rowvec/skinny */
    CHECK(strncmp(route, "cpu.", 4) == 0 &&
          (strstr(route, tgrad_cpu_isa()) != NULL || strstr(route, tgrad_cpu_stream_isa()) != NULL));
    text = explain(abc, TGRAD_FORMAT_TEXT);
    CHECK(strstr(text, "realized: buf#") != NULL && strstr(text, "nothing to run") != NULL);
    free(text);
    /* a materializing reshape is a copy step */
    tgrad_tensor_t t = 0, r = 0;
    EXPECT(tgrad_tensor_transpose(a, 0, 1, &t), TGRAD_OK);
    EXPECT(tgrad_tensor_reshape(t, (int64_t[]){ 64 }, 1, &r), TGRAD_OK);
    text = explain(r, TGRAD_FORMAT_TEXT);
    CHECK(strstr(text, "step 0: copy cpu.copy") != NULL && strstr(text, "materialized") != NULL);
    free(text);
    EXPECT(tgrad_tensor_explain(r, 7, NULL, 0, &len), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_explain(r, TGRAD_FORMAT_TEXT, NULL, 0, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(abc);
    tgrad_tensor_release(t), tgrad_tensor_release(r);
}

static void test_capabilities_and_backends(void) {
    const char *backend, *cap, *value, *note;
    int32_t rows = 0;
    while (tgrad_capability(rows, &backend, &cap, &value, &note) == TGRAD_OK) rows++;
    CHECK(rows > 5);
    CHECK(tgrad_last_status() == TGRAD_ERR_INDEX_OUT_OF_RANGE);
    EXPECT(tgrad_capability(0, NULL, &cap, &value, &note), TGRAD_ERR_INVALID_ARGUMENT);
    const char *name, *device;
    int32_t built, available;
    EXPECT(tgrad_backend(0, &name, &built, &available, &device), TGRAD_OK);
    CHECK(strcmp(name, "cpu") == 0 && built && available);
    EXPECT(tgrad_backend(1, &name, &built, &available, &device), TGRAD_OK);
    CHECK(strcmp(name, "metal") == 0 && !available);
    EXPECT(tgrad_backend(99, &name, &built, &available, &device), TGRAD_ERR_INDEX_OUT_OF_RANGE);
}

static int deleted;
static void count_delete(void *ctx) { deleted += *(int *)ctx; }

/* Memory the caller owns, viewed without a copy; freed through the deleter with the last view. */
static void test_external_memory(void) {
    static uint16_t mem[12];
    for (int i = 0; i < 12; i++) mem[i] = (uint16_t)(0x3f80 + i); /* 1.0, 1.0078, ... */
    int one = 1;
    deleted = 0;
    tgrad_tensor_t t = 0, tt = 0, bad = 0;
    EXPECT(tgrad_tensor_from_external(mem, 12, 2, (int64_t[]){ 3, 4 }, NULL, count_delete, &one, &t), TGRAD_OK);
    EXPECT(tgrad_tensor_transpose(t, 0, 1, &tt), TGRAD_OK);
    const uint16_t *p = NULL;
    EXPECT(tgrad_tensor_data(tt, &p), TGRAD_OK);
    CHECK(p == mem); /* zero-copy both ways */
    uint16_t out[12];
    EXPECT(tgrad_tensor_read_bf16(tt, out, 12), TGRAD_OK);
    CHECK(out[1] == mem[4] && out[3] == mem[1]);
    EXPECT(tgrad_tensor_release(t), TGRAD_OK);
    CHECK(deleted == 0); /* the transposed view still uses it */
    EXPECT(tgrad_tensor_release(tt), TGRAD_OK);
    CHECK(deleted == 1);
    /* a view reaching past the buffer is refused, and the deleter is not called */
    EXPECT(tgrad_tensor_from_external(mem, 12, 2, (int64_t[]){ 3, 4 }, (int64_t[]){ 5, 1 }, count_delete, &one, &bad),
           TGRAD_ERR_VIEW_NOT_EXPRESSIBLE);
    EXPECT(tgrad_tensor_from_external(mem, 11, 2, (int64_t[]){ 3, 4 }, NULL, count_delete, &one, &bad),
           TGRAD_ERR_BUFFER_TOO_SMALL);
    EXPECT(tgrad_tensor_from_external(mem, 12, 2, (int64_t[]){ 3, 4 }, (int64_t[]){ -4, 1 }, NULL, NULL, &t), TGRAD_OK);
    EXPECT(tgrad_tensor_read_bf16(t, out, 12), TGRAD_OK);
    CHECK(out[0] == mem[8] && out[11] == mem[3]); /* rows reversed: data[0] is the lowest address */
    tgrad_tensor_release(t);
    CHECK(deleted == 1 && bad == 0);
}

/* The bench's paired limits: refusals change nothing; reads of every size and split stay inside
 * the buffer (the sanitizer build catches a byte past it: each buffer is allocated to size). */
static void test_limit_runs(void) {
    EXPECT(tgrad_cpu_peak_run(-1, 1e6), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_cpu_peak_run(257, 1e6), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_cpu_peak_run(1, -1.0), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_cpu_peak_run(1, NAN), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_cpu_peak_run(1, 1e16), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(strstr(tgrad_last_error(), "cpu_peak_run: flops") != NULL);
    EXPECT(tgrad_cpu_peak_run(1, 0), TGRAD_OK);
    EXPECT(tgrad_cpu_peak_run(0, 1e5), TGRAD_OK);
    EXPECT(tgrad_cpu_peak_run(3, 1e6), TGRAD_OK);
    char one = 7;
    EXPECT(tgrad_cpu_read_run(NULL, 10, 1), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_cpu_read_run(&one, -1, 1), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_cpu_read_run(&one, 1, -1), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_cpu_read_run(&one, 1, 257), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(strstr(tgrad_last_error(), "cpu_read_run: threads 257") != NULL);
    EXPECT(tgrad_cpu_read_run(NULL, 0, 1), TGRAD_OK);
    static const int64_t sizes[] = { 1, 63, 64, 127, 129, 4097, 100003 };
    static const int32_t splits[] = { 0, 1, 2, 3, 5 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        unsigned char *buf = malloc((size_t)sizes[i]);
        CHECK(buf != NULL);
        if (!buf) continue;
        memset(buf, 0x5a, (size_t)sizes[i]);
        for (size_t j = 0; j < sizeof splits / sizeof *splits; j++)
            EXPECT(tgrad_cpu_read_run(buf, sizes[i], splits[j]), TGRAD_OK);
        free(buf);
    }
}

int main(void) {
    test_version_and_registry();
    /* the products below are checked against the pairwise order's reference (dot(), contract_ref.h);
     * test_block32.c checks block32, the default */
    EXPECT(tgrad_set_matmul_order(TGRAD_MATMUL_ORDER_PAIRWISE), TGRAD_OK);
    test_handles();
    test_views();
    for (int32_t vi = 0;; vi++) {
        int32_t avail = 0;
        const char *name = tgrad_cpu_isa_name(vi, &avail);
        if (!name) break;
        if (avail) test_matmul_exact(name), test_contract_probes(name);
    }
    tgrad_set_cpu_isa("auto");
    test_variants_agree();
    tgrad_set_num_threads(2);
    test_variants_agree_on_shape_classes();
    test_chunked_blocking_agrees();
    test_matmul_refusals();
    test_chain_frees_intermediates();
    test_explain_and_routes();
    test_capabilities_and_backends();
    test_external_memory();
    test_limit_runs();
    CHECK(tgrad_live_tensors() == 0);
    CHECK(tgrad_live_buffers() == 0);
    CHECK(tgrad_live_bytes() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
