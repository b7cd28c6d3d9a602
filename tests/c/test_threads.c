/* Concurrency, as the header promises: many threads creating, viewing, multiplying, realizing,
 * reading and releasing their own tensors while sharing read-only inputs and one lazy result
 * (realized once, read by all). Run under ThreadSanitizer by `nox -s sanitize`. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tgrad.h"

enum { THREADS = 6, ROUNDS = 20, M = 33, K = 700, N = 145 }; /* M*K*N above the pool threshold */
static tgrad_tensor_t shared_a, shared_b, shared_c; /* read-only inputs and a shared lazy result */
static uint16_t expected[M * N];
static int errors[THREADS];

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    for (int round = 0; round < ROUNDS; round++) {
        uint16_t got[M * N];
        if (tgrad_tensor_read_bf16(shared_c, got, M * N) || memcmp(got, expected, sizeof got)) errors[id]++;
        tgrad_tensor_t bt = 0, b = 0, c = 0, row = 0;
        /* a private chain over the shared inputs: b = (b^T)^T, c = a @ b, one row of it */
        if (tgrad_tensor_transpose(shared_b, 0, 1, &bt) || tgrad_tensor_transpose(bt, 0, 1, &b) ||
            tgrad_matmul(shared_a, b, &c) || tgrad_tensor_select(c, 0, round % M, &row))
            errors[id]++;
        uint16_t r[N];
        if (tgrad_tensor_read_bf16(row, r, N) || memcmp(r, expected + (round % M) * N, sizeof r)) errors[id]++;
        if (id % 2 == 0 && round % 5 == 0) tgrad_set_num_threads(1 + round % 3); /* resize the pool meanwhile */
        tgrad_tensor_release(row), tgrad_tensor_release(c), tgrad_tensor_release(b), tgrad_tensor_release(bt);
        /* a handle released by this thread is invalid, never a crash */
        int32_t nd;
        if (tgrad_tensor_ndim(c, &nd) != TGRAD_ERR_INVALID_HANDLE) errors[id]++;
    }
    return NULL;
}

int main(void) {
    static float a[M * K], b[K * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)(i % 13) * 0.25f - 1.5f;
    for (int i = 0; i < K * N; i++) b[i] = (float)(i % 7) * 0.5f - 1.0f;
    int failed = 0, passed = 0;
    failed += tgrad_tensor_from_f32(a, 2, (int64_t[]){ M, K }, &shared_a) != TGRAD_OK;
    failed += tgrad_tensor_from_f32(b, 2, (int64_t[]){ K, N }, &shared_b) != TGRAD_OK;
    tgrad_tensor_t ref = 0;
    failed += tgrad_matmul(shared_a, shared_b, &ref) != TGRAD_OK;
    failed += tgrad_tensor_read_bf16(ref, expected, M * N) != TGRAD_OK;
    failed += tgrad_matmul(shared_a, shared_b, &shared_c) != TGRAD_OK; /* lazy: the threads race to realize it */
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++) {
        if (errors[i]) fprintf(stderr, "thread %d: %d errors\n", i, errors[i]);
        failed += errors[i] != 0, passed += errors[i] == 0;
    }
    tgrad_tensor_release(ref), tgrad_tensor_release(shared_a), tgrad_tensor_release(shared_b);
    tgrad_tensor_release(shared_c);
    int leaks = tgrad_live_tensors() != 0 || tgrad_live_buffers() != 0 || tgrad_live_bytes() != 0;
    failed += leaks, passed += !leaks;
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
