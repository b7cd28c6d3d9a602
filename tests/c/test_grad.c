/* Gradients through the C ABI (docs/autograd.md): tgrad_grad on a small graph (matmul, a
 * broadcast add, relu, a slice, a mean) against a double reference; history kept past
 * realization; no_grad; each refusal before anything is allocated (live counters unchanged, grads
 * unwritten); every allocation failure an OUT_OF_MEMORY that leaks nothing (fault injection). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

enum { M = 3, K = 4, N = 5 };
static float a[M * K], b[K * N], bias[N];

/* loss = mean(relu(a @ b + bias)[1:, :]), the gradients of a, b and bias in float32. */
static tgrad_status scenario(int32_t realize_first, float *ga, float *gb, float *gbias) {
    int64_t sa[2] = { M, K }, sb[2] = { K, N }, sc[1] = { N };
    tgrad_tensor_t A = 0, B = 0, C = 0, P = 0, Q = 0, R = 0, S = 0, L = 0, g[3] = { 0, 0, 0 };
    tgrad_status s = tgrad_tensor_from_f32(a, 2, sa, &A);
    if (!s) s = tgrad_tensor_from_f32(b, 2, sb, &B);
    if (!s) s = tgrad_tensor_from_host(bias, TGRAD_DTYPE_F32, 1, sc, TGRAD_DTYPE_BF16, &C);
    for (int i = 0; i < 3 && !s; i++) s = tgrad_tensor_set_requires_grad(i == 0 ? A : i == 1 ? B : C, 1);
    if (!s) s = tgrad_matmul(A, B, &P);
    if (!s) s = tgrad_binary(TGRAD_OP_ADD, P, C, &Q);
    if (!s) s = tgrad_unary(TGRAD_OP_RELU, Q, &R);
    if (!s) s = tgrad_tensor_slice(R, 0, 1, 0, 1, TGRAD_SLICE_STOP_NONE, &S);
    if (!s) s = tgrad_reduce(TGRAD_REDUCE_MEAN, S, NULL, -1, 0, TGRAD_DTYPE_F32, &L);
    if (!s && realize_first) s = tgrad_tensor_realize(L);
    tgrad_tensor_t ins[3] = { A, B, C };
    if (!s) s = tgrad_grad(1, &L, NULL, 3, ins, TGRAD_DTYPE_F32, g);
    if (!s) s = tgrad_tensor_read(g[0], ga, sizeof(float) * M * K);
    if (!s) s = tgrad_tensor_read(g[1], gb, sizeof(float) * K * N);
    if (!s) s = tgrad_tensor_read(g[2], gbias, sizeof(float) * N);
    tgrad_tensor_t all[] = { A, B, C, P, Q, R, S, L, g[0], g[1], g[2] };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tgrad_tensor_release(all[i]);
    return s;
}

static float bf16(float x) { /* round to bf16 (RNE), as the tensors hold them */
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static void gradients_match_a_double_reference(void) {
    float ga[M * K], gb[K * N], gc[N];
    for (int r = 0; r < 2; r++) {
        EXPECT(scenario(r, ga, gb, gc), TGRAD_OK);
        double q[M][N], w = 1.0 / ((M - 1) * N); /* dL/dq = w where q > 0 in rows 1.. */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float acc = 0; /* the product rounds once to bf16; the reference does too */
                for (int k = 0; k < K; k++) acc += bf16(a[i * K + k]) * bf16(b[k * N + j]);
                q[i][j] = (double)bf16(bf16(acc) + bf16(bias[j]));
            }
        for (int j = 0; j < N; j++) {
            double want = 0;
            for (int i = 1; i < M; i++) want += q[i][j] > 0 ? w : 0;
            CHECK(fabs(gc[j] - want) <= 1e-6);
        }
        for (int i = 0; i < M; i++)
            for (int k = 0; k < K; k++) {
                double want = 0;
                for (int j = 0; j < N; j++) want += (i > 0 && q[i][j] > 0) ? (double)bf16((float)w) * bf16(b[k * N + j]) : 0;
                CHECK(fabs(ga[i * K + k] - want) <= 1e-6);
            }
    }
}

static void no_grad_and_refusals(void) {
    int64_t shape[1] = { 3 };
    float v[3] = { 1, 2, 3 };
    tgrad_tensor_t x = 0, y = 0, z = 0, sd = 0, out[2] = { 77, 77 };
    int32_t on = -1;
    EXPECT(tgrad_tensor_from_f32(v, 1, shape, &x), TGRAD_OK);
    EXPECT(tgrad_tensor_requires_grad(x, &on), TGRAD_OK);
    CHECK(on == 0);
    EXPECT(tgrad_tensor_set_requires_grad(x, 1), TGRAD_OK);
    CHECK(tgrad_grad_enabled() == 1);
    EXPECT(tgrad_set_grad_enabled(0), TGRAD_OK);
    EXPECT(tgrad_unary(TGRAD_OP_EXP, x, &y), TGRAD_OK);
    EXPECT(tgrad_tensor_requires_grad(y, &on), TGRAD_OK);
    CHECK(on == 0);
    EXPECT(tgrad_set_grad_enabled(1), TGRAD_OK);
    EXPECT(tgrad_unary(TGRAD_OP_EXP, x, &z), TGRAD_OK);
    EXPECT(tgrad_tensor_requires_grad(z, &on), TGRAD_OK);
    CHECK(on == 1);
    EXPECT(tgrad_tensor_from_f32(v, 1, shape, &sd), TGRAD_OK);
    int64_t tensors = tgrad_live_tensors(), buffers = tgrad_live_buffers();
    EXPECT(tgrad_set_grad_enabled(2), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_set_requires_grad(x, 2), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_tensor_requires_grad(x, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_grad(1, &z, NULL, 1, &x, 0, out), TGRAD_ERR_INVALID_ARGUMENT); /* 3 elements, no seed */
    EXPECT(tgrad_grad(0, &z, &sd, 1, &x, 0, out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_grad(1, &z, &sd, 1, &x, TGRAD_DTYPE_I32, out), TGRAD_ERR_DTYPE_UNSUPPORTED);
    EXPECT(tgrad_grad(1, &z, &sd, 1, &x, 0, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_grad(1, &z, &x, 1, &out[0], 0, out), TGRAD_ERR_INVALID_HANDLE);
    int32_t ax = 0;
    tgrad_tensor_t sm = 0;
    /* hwire: softmax's rule is softmax_backward (its bytes); the backward node has no rule */
    tgrad_tensor_t fw = 0, want = 0;
    float a3[3], b3[3];
    EXPECT(tgrad_softmax(TGRAD_SOFTMAX_SOFTMAX, x, ax, 0, 0, &fw), TGRAD_OK);
    EXPECT(tgrad_grad(1, &fw, &sd, 1, &x, 0, out), TGRAD_OK);
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_SOFTMAX, fw, sd, ax, 0, &want), TGRAD_OK);
    EXPECT(tgrad_tensor_read_f32(out[0], a3, 3), TGRAD_OK);
    EXPECT(tgrad_tensor_read_f32(want, b3, 3), TGRAD_OK);
    CHECK(memcmp(a3, b3, sizeof a3) == 0);
    tgrad_tensor_release(out[0]), tgrad_tensor_release(want), tgrad_tensor_release(fw);
    out[0] = 77;
    EXPECT(tgrad_softmax_backward(TGRAD_SOFTMAX_SOFTMAX, z, z, ax, 0, &sm), TGRAD_OK);
    int64_t tensors2 = tgrad_live_tensors(), buffers2 = tgrad_live_buffers();
    EXPECT(tgrad_grad(1, &sm, &sd, 1, &x, 0, out), TGRAD_ERR_NO_GRADIENT_RULE);
    CHECK(strstr(tgrad_last_error(), "softmax_backward") != NULL);
    CHECK(out[0] == 77 && out[1] == 77);
    CHECK(tgrad_live_tensors() == tensors2 && tgrad_live_buffers() == buffers2);
    tgrad_tensor_release(sm);
    CHECK(tgrad_live_tensors() == tensors && tgrad_live_buffers() == buffers);
    /* a path-less input gets 0; a gradient through y (made under no_grad) does not exist */
    EXPECT(tgrad_grad(1, &y, &sd, 1, &x, 0, out), TGRAD_OK);
    CHECK(out[0] == 0);
    EXPECT(tgrad_grad(1, &z, &sd, 1, &x, 0, out), TGRAD_OK);
    float gx[3];
    EXPECT(tgrad_tensor_read_f32(out[0], gx, 3), TGRAD_OK);
    for (int k = 0; k < 3; k++) /* seed * exp(x), exp's bf16 result times the seed, rounded once */
        CHECK(gx[k] == bf16(v[k] * bf16((float)exp(v[k]))));
    tgrad_tensor_release(out[0]);
    tgrad_tensor_t all[] = { x, y, z, sd };
    for (size_t i = 0; i < 4; i++) tgrad_tensor_release(all[i]);
}

static void allocation_failures_leak_nothing(void) {
    int64_t fired = 0;
    if (tgrad_debug_fail_allocation(0, &fired) == TGRAD_ERR_BACKEND_UNAVAILABLE) return;
    float ga[M * K], gb[K * N], gc[N], ra[M * K];
    EXPECT(scenario(1, ra, gb, gc), TGRAD_OK);
    int64_t tensors = tgrad_live_tensors(), buffers = tgrad_live_buffers(), bytes = tgrad_live_bytes();
    for (int64_t n = 1; n < 100000; n++) {
        int64_t before = 0, after = 0;
        tgrad_debug_fail_allocation(n, &before);
        tgrad_status s = scenario(1, ga, gb, gc);
        tgrad_debug_fail_allocation(0, &after);
        CHECK(tgrad_live_tensors() == tensors && tgrad_live_buffers() == buffers && tgrad_live_bytes() == bytes);
        if (after == before) {
            CHECK(s == TGRAD_OK && memcmp(ga, ra, sizeof ga) == 0);
            break;
        }
        CHECK(s == TGRAD_ERR_OUT_OF_MEMORY);
    }
}

int main(void) {
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 11) / 4 - 1.25f;
    for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 9) / 3 - 1.5f;
    for (int i = 0; i < N; i++) bias[i] = (float)i / 2 - 1;
    gradients_match_a_double_reference();
    no_grad_and_refusals();
    allocation_failures_leak_nothing();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
