/* Two builds of libtgrad timed side by side in one process: a paired A/B for changes that the
 * machine's drift from minute to minute would hide (docs/performance.md, "The quiet, warm
 * table"). Each repetition times OLD and NEW once each, in alternating order, each call after
 * 1 ms idle and one untimed call (the bench's hot region), at 2 threads (TGRAD_AB_THREADS); prints the median
 * times and the median and quartiles of NEW/OLD.
 *
 *   cc -O2 tools/ab_libs.c -o ab_libs -ldl
 *   ./ab_libs build-old/libtgrad/libtgrad.so build-new/libtgrad/libtgrad.so 1024 1024 1024 61
 *
 * The two files must be different paths (copies if need be): dlopen loads each once. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* clock_gettime, usleep under -std=c11 */
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef uint64_t handle;
typedef struct {
    int (*from_bf16)(const uint16_t *, int32_t, const int64_t *, handle *);
    int (*matmul)(handle, handle, handle *);
    int (*realize)(handle);
    int (*release)(handle);
    handle a, b;
} lib;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static void load(lib *l, const char *path, const uint16_t *a, const uint16_t *b, const int64_t *sa, const int64_t *sb) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        exit(2);
    }
    l->from_bf16 = (int (*)(const uint16_t *, int32_t, const int64_t *, handle *))dlsym(h, "tgrad_tensor_from_bf16");
    l->matmul = (int (*)(handle, handle, handle *))dlsym(h, "tgrad_matmul");
    l->realize = (int (*)(handle))dlsym(h, "tgrad_tensor_realize");
    l->release = (int (*)(handle))dlsym(h, "tgrad_tensor_release");
    int (*threads)(int32_t) = (int (*)(int32_t))dlsym(h, "tgrad_set_num_threads");
    if (!l->from_bf16 || !l->matmul || !l->realize || !l->release || !threads) {
        fprintf(stderr, "%s: not a libtgrad\n", path);
        exit(2);
    }
    /* TGRAD_AB_ORDER=0|1: both libraries' products in that matmul order (tgrad_set_matmul_order,
     * 0.2; calls run on this thread) */
    int (*set_order)(int32_t) = (int (*)(int32_t))dlsym(h, "tgrad_set_matmul_order");
    if (getenv("TGRAD_AB_ORDER") && (!set_order || set_order(atoi(getenv("TGRAD_AB_ORDER"))))) {
        fprintf(stderr, "%s: cannot set the matmul order\n", path);
        exit(2);
    }
    /* TGRAD_AB_THREADS: the pool's threads (default 2) */
    int32_t nthreads = getenv("TGRAD_AB_THREADS") ? atoi(getenv("TGRAD_AB_THREADS")) : 2;
    if (l->from_bf16(a, 2, sa, &l->a) || l->from_bf16(b, 2, sb, &l->b) || threads(nthreads)) {
        fprintf(stderr, "%s: setup failed\n", path);
        exit(2);
    }
}

static double timed_call(lib *l) {
    handle c;
    double t0 = now_us();
    if (l->matmul(l->a, l->b, &c) || l->realize(c)) exit(3);
    double t = now_us() - t0;
    l->release(c);
    return t;
}

/* The bench's hot region: an untimed call, then the timed one. */
static double hot_call(lib *l) {
    timed_call(l);
    return timed_call(l);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s OLD.so NEW.so M K N REPETITIONS\n", argv[0]);
        return 2;
    }
    int64_t m = atoll(argv[3]), k = atoll(argv[4]), n = atoll(argv[5]);
    int reps = atoi(argv[6]);
    if (m < 1 || k < 1 || n < 1 || reps < 1) return 2;
    uint16_t *a = malloc((size_t)(m * k) * 2), *b = malloc((size_t)(k * n) * 2);
    double *t_old = malloc(sizeof(double) * (size_t)reps), *t_new = malloc(sizeof(double) * (size_t)reps),
           *ratio = malloc(sizeof(double) * (size_t)reps);
    if (!a || !b || !t_old || !t_new || !ratio) return 2;
    srand(1);
    for (int64_t i = 0; i < m * k; i++) a[i] = (uint16_t)(0x3f80 + (rand() & 0x3f)); /* 1.0 .. 1.5 */
    for (int64_t i = 0; i < k * n; i++) b[i] = (uint16_t)(0x3f80 + (rand() & 0x3f));
    int64_t sa[2] = { m, k }, sb[2] = { k, n };
    lib old, new;
    load(&old, argv[1], a, b, sa, sb);
    load(&new, argv[2], a, b, sa, sb);
    for (int i = 0; i < reps; i++) {
        lib *first = i % 2 ? &new : &old, *second = i % 2 ? &old : &new;
        usleep(1000);
        double t1 = hot_call(first);
        usleep(1000);
        double t2 = hot_call(second);
        t_old[i] = i % 2 ? t2 : t1;
        t_new[i] = i % 2 ? t1 : t2;
        ratio[i] = t_new[i] / t_old[i];
    }
    qsort(t_old, (size_t)reps, sizeof(double), by_value);
    qsort(t_new, (size_t)reps, sizeof(double), by_value);
    qsort(ratio, (size_t)reps, sizeof(double), by_value);
    printf("%lldx%lldx%lld: old %.1f us, new %.1f us; new/old median %.3f, quartiles %.3f %.3f\n", (long long)m,
           (long long)k, (long long)n, t_old[reps / 2], t_new[reps / 2], ratio[reps / 2], ratio[reps / 4], ratio[3 * reps / 4]);
    old.release(old.a), old.release(old.b), new.release(new.a), new.release(new.b);
    free(a), free(b), free(t_old), free(t_new), free(ratio);
    return 0;
}
