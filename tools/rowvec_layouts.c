/* A decode step's one-row products from DRAM, the block32 order on AVX2, with W in four layouts
 * (docs/performance.md, "Session 29" and "Session 31"): the library's (W [N, K] row-major read as
 * x @ W.T, AVX2 kernel stream_block32_avx2.c, 2 column strips a thread), W.T stored row-major
 * [K, N] in column strips (the kernel's few_rows loop, accumulators in L1), W.T row-major split
 * along K (each thread a contiguous range of 32-row blocks, chains in registers, the per-block
 * sums then added in block order: the same bytes), and W packed in 32-column panels (each strip
 * of 32 columns its K / 2 pair words a row of 32, one contiguous run: no transpose, one stream a
 * thread). 8 layers of the ~100 M Llama's products and its 8192-row head, each product's two
 * halves on 2 threads behind a spin barrier; prints the best token's time and each product's mean.
 *
 *     cc -O3 -ffp-contract=off -fno-fast-math -mavx2 -mfma -Ikernels/cpu tools/rowvec_layouts.c \
 *        -lpthread -o rowvec_layouts
 *     ./rowvec_layouts cols 30      (or rows, ksplit, panels; rounds)
 *     ./rowvec_layouts check        (the four give the same bytes: one W, its transpose, its panels)
 */
#include "stream_block32_avx2.c"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- W.T row-major, split along K: per-block sums S[blk][n] (lanes 0-3, 8-11 | 4-7, 12-15 of
 * each 16 columns, as unpacklo/unpackhi widen them), then summed in block order ---- */
static inline __m256 lo16(__m256i x) { return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), x)); }
static inline __m256 hi16(__m256i x) { return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), x)); }

static void block_sums(const uint32_t *a, const uint16_t *b, int64_t K, int64_t N, int64_t b0, int64_t b1, float *S) {
    __attribute__((aligned(32))) float af[32];
    int64_t kp = (K + 1) / 2, groups = N / 32; /* N and K multiples of 32 here */
    for (int64_t blk = b0; blk < b1; blk++) {
        widen_a(a, 16 * blk, 16, kp, af);
        const char *next = (const char *)(b + (32 * blk + 32) * N);
        int64_t ahead = blk + 1 < b1 ? 32 * N * 2 : 0, per = (ahead / groups + 63) / 64 * 64;
        for (int64_t g = 0; g < groups; g++) {
            for (int64_t o = g * per; o < (g + 1) * per && o < ahead; o += 64) _mm_prefetch(next + o, _MM_HINT_T1);
            const uint16_t *col = b + 32 * blk * N + 32 * g;
            __m256 e[4], od[4];
            for (int i = 0; i < 4; i++) e[i] = od[i] = _mm256_setzero_ps();
            for (int p = 0; p < 16; p++) {
                const uint16_t *re = col + 2 * p * N, *ro = re + N;
                __m256 ae = _mm256_broadcast_ss(af + 2 * p), ao = _mm256_broadcast_ss(af + 2 * p + 1);
                __m256i x0 = _mm256_loadu_si256((const __m256i *)re), x1 = _mm256_loadu_si256((const __m256i *)(re + 16));
                __m256i y0 = _mm256_loadu_si256((const __m256i *)ro), y1 = _mm256_loadu_si256((const __m256i *)(ro + 16));
                e[0] = _mm256_fmadd_ps(ae, lo16(x0), e[0]), e[1] = _mm256_fmadd_ps(ae, hi16(x0), e[1]);
                e[2] = _mm256_fmadd_ps(ae, lo16(x1), e[2]), e[3] = _mm256_fmadd_ps(ae, hi16(x1), e[3]);
                od[0] = _mm256_fmadd_ps(ao, lo16(y0), od[0]), od[1] = _mm256_fmadd_ps(ao, hi16(y0), od[1]);
                od[2] = _mm256_fmadd_ps(ao, lo16(y1), od[2]), od[3] = _mm256_fmadd_ps(ao, hi16(y1), od[3]);
            }
            for (int i = 0; i < 4; i++) _mm256_store_ps(S + blk * N + 32 * g + 8 * i, _mm256_add_ps(e[i], od[i]));
        }
    }
}

static void sum_blocks(const float *S, int64_t N, int64_t blocks, int64_t n0, int64_t n1, uint16_t *out,
                       float *out32) {
    for (int64_t n = n0; n < n1; n += 16) {
        __m256 A = _mm256_setzero_ps(), B = A;
        for (int64_t b = 0; b < blocks; b++)
            A = _mm256_add_ps(A, _mm256_load_ps(S + b * N + n)), B = _mm256_add_ps(B, _mm256_load_ps(S + b * N + n + 8));
        store_sums(out, out32, n, _mm256_permute2f128_ps(A, B, 0x20), 8);
        store_sums(out, out32, n + 8, _mm256_permute2f128_ps(A, B, 0x31), 8);
    }
}

/* ---- W [N, K] packed in 32-column panels: strip s's pair p of column c at word
 * (s * K / 2 + p) * 32 + c (even k low, odd k high), N a multiple of 32, K of 32 ---- */
enum { PANEL_AHEAD = 1536 }; /* words: 6 KB ahead in the strip's run (1024-4096 alike, 256 slower) */

static void pack_panels(const uint16_t *w, int64_t N, int64_t K, uint32_t *P) {
    int64_t kp = K / 2;
    for (int64_t s = 0; s < N / 32; s++)
        for (int64_t p = 0; p < kp; p++)
            for (int c = 0; c < 32; c++) {
                const uint16_t *row = w + (32 * s + c) * K;
                P[(s * kp + p) * 32 + c] = (uint32_t)row[2 * p] | (uint32_t)row[2 * p + 1] << 16;
            }
}

/* One strip's 32 sums: per block the 4 groups' even and odd chains over its 16 pairs, then
 * acc + (even + odd), cols_block4's order without its transposes. af: A widened (even, odd). */
static void panels_strip(const float *af, const uint32_t *P, int64_t kp, uint16_t *out, float *out32, int64_t n0) {
    const __m256i odd_mask = _mm256_set1_epi32((int)0xffff0000u);
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t blk = 0; blk < kp / 16; blk++) {
        __m256 ev[4], od[4];
        for (int g = 0; g < 4; g++) ev[g] = _mm256_setzero_ps(), od[g] = _mm256_setzero_ps();
        const uint32_t *q = P + blk * 16 * 32;
#pragma GCC unroll 16
        for (int p = 0; p < 16; p++) {
            if (!(p & 1)) /* the 4 lines two pairs take, PANEL_AHEAD words on */
                for (int l = 0; l < 4; l++) _mm_prefetch((const char *)(q + 32 * p + PANEL_AHEAD + 16 * l), _MM_HINT_T0);
            __m256 e = _mm256_broadcast_ss(af + 32 * blk + 2 * p), o = _mm256_broadcast_ss(af + 32 * blk + 2 * p + 1);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                __m256i r = _mm256_load_si256((const __m256i *)(q + 32 * p + 8 * g));
                ev[g] = _mm256_fmadd_ps(e, _mm256_castsi256_ps(_mm256_slli_epi32(r, 16)), ev[g]);
                od[g] = _mm256_fmadd_ps(o, _mm256_castsi256_ps(_mm256_and_si256(r, odd_mask)), od[g]);
            }
        }
        for (int g = 0; g < 4; g++) acc[g] = _mm256_add_ps(acc[g], _mm256_add_ps(ev[g], od[g]));
    }
    for (int g = 0; g < 4; g++) store_sums(out, out32, n0 + 8 * g, acc[g], 8);
}

/* ---- the harness ---- */
enum { LAYERS = 8, SHAPES = 7, MATS = LAYERS * SHAPES + 1 };
static const int64_t shape[SHAPES + 1][2] = { { 1024, 1024 }, { 256, 1024 }, { 256, 1024 }, { 1024, 1024 },
                                              { 2816, 1024 }, { 2816, 1024 }, { 1024, 2816 }, { 8192, 1024 } };
static const char *const names[SHAPES + 1] = { "q", "k", "v", "o", "gate", "up", "down", "head" };
static struct { uint16_t *w; int64_t N, K; int kind; } mats[MATS];
static uint32_t *apairs;
static uint16_t *out;
static float *S;
static int mode; /* 0 cols, 1 rows, 2 ksplit, 3 panels */
static float *awide; /* A widened (even, odd) for the panels */
static atomic_int arrived, phase;
static double spent[SHAPES + 1];
static int counted[SHAPES + 1], rounds;

static void barrier(void) {
    int p = atomic_load(&phase);
    if (atomic_fetch_add(&arrived, 1) == 1) atomic_store(&arrived, 0), atomic_fetch_add(&phase, 1);
    else
        while (atomic_load(&phase) == p) _mm_pause();
}

static void product(int m, int t) {
    int64_t N = mats[m].N, K = mats[m].K;
    if (mode == 2) {
        int64_t blocks = K / 32, half = (N / 2 + 15) / 16 * 16;
        block_sums(apairs, mats[m].w, K, N, blocks * t / 2, blocks * (t + 1) / 2, S);
        barrier();
        sum_blocks(S, N, blocks, t * half, t ? N : half, out, NULL);
        return;
    }
    if (mode == 3) { /* each thread a contiguous half of the strips: one run */
        int64_t strips = N / 32, kp = K / 2;
        for (int64_t s = strips * t / 2; s < strips * (t + 1) / 2; s++)
            panels_strip(awide, (const uint32_t *)mats[m].w + s * kp * 32, kp, out, NULL, 32 * s);
        return;
    }
    int64_t strip = ((N + 3) / 4 + 31) / 32 * 32;
    if (strip < 128) strip = 128;
    tg_operand B = mode == 0 ? (tg_operand){ mats[m].w, 1, K } : (tg_operand){ mats[m].w, N, 1 };
    for (int64_t s = t; s * strip < N; s += 2) {
        int64_t n0 = s * strip;
        rowvec(apairs, &B, K, n0, N - n0 < strip ? N - n0 : strip, out + n0);
    }
}

static void token(int t) {
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    for (int m = 0; m < MATS; m++) {
        double t0 = now();
        product(m, t);
        barrier();
        if (!t) spent[mats[m].kind] += now() - t0, counted[mats[m].kind]++;
    }
    _mm_setcsr(csr);
}

static void *worker(void *arg) {
    (void)arg;
    for (int r = 0; r < rounds; r++) barrier(), token(1);
    return NULL;
}

/* W [N, K], its transpose and its panels through each layout's code: the same fp32 sums, bit for bit (before
 * the rounding to bf16, which would hide a changed order). */
static int check(void) {
    enum { N = 256, K = 1024 };
    uint16_t *w = aligned_alloc(64, N * K * 2), *wt = aligned_alloc(64, N * K * 2), *x = aligned_alloc(64, K * 2);
    float res[4][N];
    uint32_t *ap = aligned_alloc(64, (K + 64) * 4), *panels = aligned_alloc(64, N * K * 2);
    float *af = aligned_alloc(64, K * 4);
    float *s = aligned_alloc(64, (size_t)(K / 32) * N * 4);
    for (int i = 0; i < N * K; i++) w[i] = (uint16_t)(0x3800 + (((unsigned)i * 2654435761u) >> 20) % 0x1000);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) wt[k * N + n] = (w[n * K + k] & 0x7f80) == 0x7f80 ? 0x3f80 : w[n * K + k];
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) w[n * K + k] = wt[k * N + n]; /* no NaN or infinity: comparable */
    for (int k = 0; k < K; k++) x[k] = (uint16_t)(0x3c00 + k * 37 % 0x900);
    tg_operand A = { x, K, 1 }, Bc = { w, 1, K }, Br = { wt, N, 1 };
    pack_a_bf16(&A, 0, 1, 0, K, 1, ap);
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    rowvec_to(ap, &Bc, K, 0, N, NULL, res[0]);
    rowvec_to(ap, &Br, K, 0, N, NULL, res[1]);
    block_sums(ap, wt, K, N, 0, K / 32, s);
    sum_blocks(s, N, K / 32, 0, N, NULL, res[2]);
    pack_panels(w, N, K, panels);
    widen_a(ap, 0, K / 2, K / 2, af);
    for (int64_t st = 0; st < N / 32; st++) panels_strip(af, panels + st * (K / 2) * 32, K / 2, NULL, res[3], 32 * st);
    _mm_setcsr(csr);
    int diff = memcmp(res[0], res[1], sizeof res[0]) != 0 || memcmp(res[0], res[2], sizeof res[0]) != 0 ||
               memcmp(res[0], res[3], sizeof res[0]) != 0;
    printf("%s\n", diff ? "the layouts differ" : "the same bytes");
    return diff;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "check")) return check();
    static const char *const modes[] = { "cols", "rows", "ksplit", "panels" };
    for (int i = 1; i < 4; i++)
        if (argc > 1 && !strcmp(argv[1], modes[i])) mode = i;
    rounds = argc > 2 ? atoi(argv[2]) : 30;
    double bytes = 0;
    for (int m = 0; m < MATS; m++) {
        int kind = m == MATS - 1 ? SHAPES : m % SHAPES;
        size_t n = (size_t)(shape[kind][0] * shape[kind][1]), cap = (n * 2 + (2u << 20) - 1) / (2u << 20) * (2u << 20);
        mats[m].w = aligned_alloc(2u << 20, cap);
        madvise(mats[m].w, cap, MADV_HUGEPAGE);
        for (size_t i = 0; i < n; i++) mats[m].w[i] = (uint16_t)(0x3c00 + ((i * 2654435761u) >> 20) % 0x800);
        mats[m].N = shape[kind][0], mats[m].K = shape[kind][1], mats[m].kind = kind;
        bytes += (double)n * 2;
    }
    uint16_t *x = aligned_alloc(64, 4096 * 2);
    for (int i = 0; i < 4096; i++) x[i] = (uint16_t)(0x3f00 + i % 128);
    apairs = aligned_alloc(64, 4096 * 4);
    tg_operand A = { x, 2816, 1 };
    pack_a_bf16(&A, 0, 1, 0, 2816, 1, apairs);
    awide = aligned_alloc(64, 2816 * 4);
    widen_a(apairs, 0, 2816 / 2, 2816 / 2, awide); /* the panels' timing reads W's bytes as panels */
    out = aligned_alloc(64, 8192 * 2 + 64);
    S = aligned_alloc(64, (size_t)8192 * 4 * 96);
    pthread_t th;
    pthread_create(&th, NULL, worker, NULL);
    double best = 1e9;
    for (int r = 0; r < rounds; r++) {
        barrier();
        double t0 = now();
        token(0);
        if (now() - t0 < best) best = now() - t0;
    }
    pthread_join(th, NULL);
    printf("%s: best %.2f ms a token, %.2f GB/s\n", modes[mode], best * 1e3,
           bytes / best / 1e9);
    for (int k = 0; k <= SHAPES; k++)
        printf("  %-4s %7.1f us, %5.1f GB/s\n", names[k], spent[k] / counted[k] * 1e6,
               (double)(shape[k][0] * shape[k][1] * 2) / (spent[k] / counted[k]) / 1e9);
    return 0;
}
