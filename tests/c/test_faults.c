/* Fault injection (a library built with -Dfault_injection=true): fail the n-th allocation of each
 * scenario, for every n until a run completes without reaching it. Each failed run must report
 * out_of_memory, leave its outputs untouched, and leak nothing (live counters back to zero; ASan's
 * leak checker watches the rest in `nox -s sanitize`). */
#include <stdio.h>
#include <string.h>

#include "tgrad.h"

static int passed, failed;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) passed++;                                                                        \
        else { failed++; fprintf(stderr, "%s:%d: CHECK(%s) failed (n=%lld) [%s]\n", __FILE__, __LINE__, #cond, (long long)n, tgrad_last_error()); } \
    } while (0)

enum { M = 37, K = 301, N = 530, PANELS = 10 };
static float a[M * K], b[K * N];
static int32_t reversed[M * K];

/* The scenario: creation, views, a chain of two matmuls with elementwise ops fused into the
 * second and a broadcast elementwise pass, a materializing reshape, a gather (reversed) and a
 * concat of its result with itself, a batched product whose A every batch shares, explain, read.
 * Returns the
 * first failing status (the rest is skipped, as a careful caller would). */
static tgrad_status scenario(uint16_t *out, size_t cap, tgrad_tensor_t *result) {
    tgrad_tensor_t ta = 0, tb = 0, bt = 0, ab = 0, r = 0, v = 0, c = 0, bias = 0, d = 0, g = 0, e = 0;
    tgrad_tensor_t ix = 0, tk = 0, half = 0, cc = 0;
    tgrad_status s = tgrad_tensor_from_f32(a, 2, (int64_t[]){ M, K }, &ta);
    if (!s) s = tgrad_tensor_from_f32(b, 2, (int64_t[]){ K, N }, &tb);
    if (!s) s = tgrad_tensor_from_f32(a, 1, (int64_t[]){ K }, &bias);
    if (!s) s = tgrad_matmul(ta, tb, &ab);                               /* [M, N] */
    if (!s) s = tgrad_tensor_transpose(tb, 0, 1, &bt);                   /* [N, K] */
    if (!s) s = tgrad_matmul(ab, bt, &c);                                /* [M, K] */
    if (!s) s = tgrad_binary(TGRAD_OP_ADD, c, bias, &d);                 /* fused into the matmul: */
    if (!s) s = tgrad_unary(TGRAD_OP_GELU, d, &g);
    tgrad_tensor_release(c), tgrad_tensor_release(d), c = d = 0;         /* no handle holds them */
    if (!s) s = tgrad_binary(TGRAD_OP_MUL, g, ta, &e);                   /* g is held: a pass */
    if (!s) s = tgrad_tensor_transpose(e, 0, 1, &v);
    if (!s) s = tgrad_tensor_reshape(v, (int64_t[]){ -1 }, 1, &tk);     /* materializes */
    if (!s) s = tgrad_tensor_from_host(reversed, TGRAD_DTYPE_I32, 1, (int64_t[]){ M * K }, TGRAD_DTYPE_I32, &ix);
    if (!s) s = tgrad_take(tk, ix, 0, &half);                            /* reversed */
    if (!s) s = tgrad_tensor_slice(half, 0, 0, M * K / 2, 1, 0, &cc);
    tgrad_tensor_t two[2] = { cc, 0 };
    if (!s) s = tgrad_tensor_slice(half, 0, M * K / 2, M * K, 1, 0, &two[1]);
    if (!s) s = tgrad_concat(2, two, 0, &r);                             /* back together */
    tgrad_tensor_release(two[1]), tgrad_tensor_release(ix), tgrad_tensor_release(tk);
    tgrad_tensor_release(half), tgrad_tensor_release(cc);
    /* x @ panels with x shared by every batch (cpu/shared_a.c): M rows (the packed kernels) and
     * one row (rowvec), A packed once for the ten 32-column panels */
    tgrad_tensor_t tp = 0, row = 0, sh = 0, sh1 = 0;
    static uint16_t scratch[PANELS * M * 32];
    if (!s) s = tgrad_tensor_from_f32(b, 3, (int64_t[]){ PANELS, K, 32 }, &tp);
    if (!s) s = tgrad_matmul(ta, tp, &sh);                                /* [PANELS, M, 32] */
    if (!s) s = tgrad_tensor_slice(ta, 0, 0, 1, 1, 0, &row);
    if (!s) s = tgrad_matmul(row, tp, &sh1);                              /* [PANELS, 1, 32] */
    if (!s) s = tgrad_tensor_read_bf16(sh, scratch, PANELS * M * 32);
    if (!s) s = tgrad_tensor_read_bf16(sh1, scratch, PANELS * 32);
    tgrad_tensor_release(tp), tgrad_tensor_release(row), tgrad_tensor_release(sh), tgrad_tensor_release(sh1);
    size_t len = 0;
    if (!s) {
        s = tgrad_tensor_explain(r, TGRAD_FORMAT_TEXT, NULL, 0, &len);
        if (s == TGRAD_ERR_BUFFER_TOO_SMALL) s = TGRAD_OK;
    }
    if (!s) s = tgrad_tensor_read_bf16(r, out, cap);
    if (!s) *result = r, r = 0;
    tgrad_tensor_release(ta), tgrad_tensor_release(tb), tgrad_tensor_release(bt), tgrad_tensor_release(ab);
    tgrad_tensor_release(v), tgrad_tensor_release(c), tgrad_tensor_release(r), tgrad_tensor_release(bias);
    tgrad_tensor_release(d), tgrad_tensor_release(g), tgrad_tensor_release(e);
    return s;
}

int main(void) {
    long long n = 0;
    int64_t fired = 0;
    if (tgrad_debug_fail_allocation(0, &fired) == TGRAD_ERR_BACKEND_UNAVAILABLE) {
        printf("fault injection not built (-Dfault_injection=true)\n");
        return 77; /* meson's "skipped" */
    }
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 11) - 5;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 9) - 4;
    for (int i = 0; i < M * K; i++) reversed[i] = M * K - 1 - i;
    static uint16_t ref[M * K], out[M * K];
    tgrad_tensor_t result = 0;
    tgrad_set_num_threads(2);
    /* Walk first, in a fresh process: the one-time allocations (handle table, per-thread packing
     * workspaces) are reached too. The run that completes is compared with a second one. */
    int walked = 0;
    for (n = 1; n < 10000; n++) {
        int64_t before = 0, after = 0;
        tgrad_debug_fail_allocation(n, &before);
        memset(out, 0xAB, sizeof out);
        result = 0;
        tgrad_status s = scenario(out, M * K, &result);
        tgrad_debug_fail_allocation(0, &after);
        if (after == before) { /* the n-th allocation was never reached: every one was tried */
            CHECK(s == TGRAD_OK);
            tgrad_tensor_release(result);
            result = 0;
            CHECK(scenario(ref, M * K, &result) == TGRAD_OK && memcmp(out, ref, sizeof out) == 0);
            tgrad_tensor_release(result);
            break;
        }
        walked++;
        CHECK(s == TGRAD_ERR_OUT_OF_MEMORY);
        CHECK(result == 0);
        if (s != TGRAD_OK) { /* the destination is untouched unless the read itself succeeded */
            uint16_t pattern[M * K];
            memset(pattern, 0xAB, sizeof pattern);
            CHECK(memcmp(out, pattern, sizeof out) == 0);
        }
        tgrad_tensor_release(result);
        tgrad_release_cached();
        CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0 && tgrad_live_bytes() == 0);
    }
    CHECK(walked > 5);
    printf("walked %d allocation sites\n", walked);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
