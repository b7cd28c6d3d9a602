/* A standalone elementwise op against a plain copy of the same bytes, and two builds of libtgrad
 * side by side, in one process on one thread: each repetition times, in alternating order, a
 * memcpy of 64 MiB into a resident array and `a + b` and `relu(a)` over 32 Mi bf16 elements
 * through each library (node, realize, release: the output block is reused from tgrad's cache).
 * Prints the median times, GB/s (bytes read + written) and, per repetition paired, each op's
 * bandwidth as a share of the copy's (median and quartiles), and NEW/OLD; where the CPU has
 * AVX-512, also a copy with non-temporal stores (timed beside the others, not a share). Issue 20's target is
 * 80% of the copy's bandwidth (docs/performance.md, "Layers").
 *
 *   cc -O2 tools/ab_elementwise.c -o ab_elementwise -ldl
 *   ./ab_elementwise build-old/libtgrad/libtgrad.so build-new/libtgrad/libtgrad.so 41
 *
 * The two files must be different paths (copies if need be): dlopen loads each once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef uint64_t handle;
typedef struct {
    int (*unary)(int32_t, handle, handle *);
    int (*binary)(int32_t, handle, handle, handle *);
    int (*realize)(handle);
    int (*release)(handle);
    handle a, b;
    int32_t add, relu;
} lib;

enum { N = 32 << 20, OPS = 2, LIBS = 2 };

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double quantile(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[(int)(q * (n - 1) + 0.5)];
}

/* The same copy with non-temporal stores (no read of the destination's lines first), AVX-512
 * where the CPU has it: the other roof an elementwise pass can be held to. */
__attribute__((target("avx512f"))) static void copy_nt_avx512(uint16_t *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i + 32 <= n; i += 32) _mm512_stream_si512((void *)(dst + i), _mm512_loadu_si512(src + i));
    _mm_sfence();
}

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) fprintf(stderr, "missing %s\n", name), exit(2);
    return p;
}

static int32_t op_code(void *h, const char *name) {
    int32_t (*count)(void) = (int32_t (*)(void))sym(h, "tgrad_op_count");
    const char *(*op_name)(int32_t) = (const char *(*)(int32_t))sym(h, "tgrad_op_name");
    for (int32_t c = 1; c <= count(); c++)
        if (strcmp(op_name(c), name) == 0) return c;
    fprintf(stderr, "no op %s\n", name), exit(2);
}

static void load(lib *l, const char *path, const uint16_t *a, const uint16_t *b) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) fprintf(stderr, "%s\n", dlerror()), exit(2);
    int (*from_bf16)(const uint16_t *, int32_t, const int64_t *, handle *) =
        (int (*)(const uint16_t *, int32_t, const int64_t *, handle *))sym(h, "tgrad_tensor_from_bf16");
    int (*threads)(int32_t) = (int (*)(int32_t))sym(h, "tgrad_set_num_threads");
    l->unary = (int (*)(int32_t, handle, handle *))sym(h, "tgrad_unary");
    l->binary = (int (*)(int32_t, handle, handle, handle *))sym(h, "tgrad_binary");
    l->realize = (int (*)(handle))sym(h, "tgrad_tensor_realize");
    l->release = (int (*)(handle))sym(h, "tgrad_tensor_release");
    l->add = op_code(h, "add"), l->relu = op_code(h, "relu");
    int64_t shape[1] = { N };
    if (from_bf16(a, 1, shape, &l->a) || from_bf16(b, 1, shape, &l->b) || threads(1))
        fprintf(stderr, "%s: setup failed\n", path), exit(2);
}

static double run_op(const lib *l, int op) {
    handle y = 0;
    double t0 = now_s();
    int s = op == 0 ? l->binary(l->add, l->a, l->b, &y) : l->unary(l->relu, l->a, &y);
    if (s || l->realize(y)) fprintf(stderr, "op failed\n"), exit(2);
    double dt = now_s() - t0;
    l->release(y);
    return dt;
}

int main(int argc, char **argv) {
    if (argc < 3) fprintf(stderr, "usage: %s OLD.so NEW.so [reps]\n", argv[0]), exit(2);
    int reps = argc > 3 ? atoi(argv[3]) : 41;
    uint16_t *a = aligned_alloc(64, 2 * (size_t)N), *b = aligned_alloc(64, 2 * (size_t)N), *dst = aligned_alloc(64, 2 * (size_t)N);
    for (int64_t i = 0; i < N; i++) a[i] = (uint16_t)(0x3c00 + (i * 37) % 1500), b[i] = (uint16_t)(0xbc00 + (i * 11) % 900);
    memset(dst, 1, 2 * (size_t)N);
    lib libs[LIBS];
    for (int k = 0; k < LIBS; k++) load(&libs[k], argv[1 + k], a, b);
    const double bytes[OPS] = { 3.0 * 2 * N, 2.0 * 2 * N }; /* read + written */
    int nt = __builtin_cpu_supports("avx512f");
    double *copy_nt = malloc(sizeof(double) * reps);
    double *copy = malloc(sizeof(double) * reps), *t[LIBS][OPS], *share[LIBS][OPS], *ratio[OPS];
    for (int o = 0; o < OPS; o++) {
        ratio[o] = malloc(sizeof(double) * reps);
        for (int k = 0; k < LIBS; k++) t[k][o] = malloc(sizeof(double) * reps), share[k][o] = malloc(sizeof(double) * reps);
    }
    for (int k = 0; k < LIBS; k++)
        for (int o = 0; o < OPS; o++) run_op(&libs[k], o); /* warm: blocks cached, tables built */
    for (int r = 0; r < reps; r++) {
        int first = r & 1;
        double t0 = now_s();
        memcpy(dst, r & 2 ? a : b, 2 * (size_t)N);
        copy[r] = now_s() - t0;
        if (nt) {
            t0 = now_s();
            copy_nt_avx512(dst, r & 2 ? b : a, (size_t)N);
            copy_nt[r] = now_s() - t0;
        }
        for (int o = 0; o < OPS; o++)
            for (int j = 0; j < LIBS; j++) {
                int k = j ^ first;
                t[k][o][r] = run_op(&libs[k], o);
            }
        for (int o = 0; o < OPS; o++) {
            ratio[o][r] = t[1][o][r] / t[0][o][r];
            for (int k = 0; k < LIBS; k++) share[k][o][r] = (bytes[o] / t[k][o][r]) / (2.0 * 2 * N / copy[r]);
        }
    }
    double c = quantile(copy, reps, 0.5);
    printf("copy 64 MiB: %.2f ms, %.1f GB/s (read + written), 1 thread, %d repetitions\n", 1e3 * c, 4.0 * N / c / 1e9, reps);
    if (nt) {
        double cn = quantile(copy_nt, reps, 0.5);
        printf("copy 64 MiB with non-temporal AVX-512 stores: %.2f ms, %.1f GB/s\n", 1e3 * cn, 4.0 * N / cn / 1e9);
    }
    const char *names[OPS] = { "a + b", "relu(a)" }, *which[LIBS] = { "OLD", "NEW" };
    for (int o = 0; o < OPS; o++) {
        for (int k = 0; k < LIBS; k++) {
            double m = quantile(t[k][o], reps, 0.5);
            double s50 = quantile(share[k][o], reps, 0.5), s25 = quantile(share[k][o], reps, 0.25),
                   s75 = quantile(share[k][o], reps, 0.75);
            printf("%-8s %s: %.2f ms, %.1f GB/s; of the paired copy's GB/s: %.0f%% [%.0f%%, %.0f%%]\n", names[o],
                   which[k], 1e3 * m, bytes[o] / m / 1e9, 100 * s50, 100 * s25, 100 * s75);
        }
        printf("%-8s NEW/OLD time: %.3f [%.3f, %.3f]\n", names[o], quantile(ratio[o], reps, 0.5),
               quantile(ratio[o], reps, 0.25), quantile(ratio[o], reps, 0.75));
    }
    return 0;
}
