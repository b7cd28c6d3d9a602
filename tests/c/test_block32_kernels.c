/* The block32 order's vdpbf16ps kernel (kernels/cpu/ukernel_avx512bf16_block32.c) against the
 * portable reference (ukernel_portable_block32.c), bit for bit: each variant's own packing and
 * micro-kernels driven over whole problems by a small frame here (row panels of each tile height
 * the variant has, column panels, K panels of 32 to 512 elements carried in fp32), for row-major,
 * column-major and strided operands, fills with NaN, infinities, subnormals and signed zeros, fills
 * whose partial sums cross fp32's flush threshold, and a caller whose MXCSR rounds toward zero
 * with flush modes off (restored after); and its few-row hook (skinny) and one-row hook (rowvec,
 * row- and column-major B read in place), and the AVX2 stream kernel's two hooks
 * (stream_block32_avx2.c), against the same reference. Linked from libtgrad's objects (the kernels are hidden in
 * the shared library). Exit 77 (skipped) where the CPU has no AVX512-BF16. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cpu/ukernel.h"
#include "check.h"

#if defined(TGRAD_HAVE_X86_VARIANTS)
#include <xmmintrin.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint32_t next_u32(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

enum fill { NORMAL, SPECIAL, NEAR_FLUSH, CANCEL, NFILLS };
static const char *const fill_names[] = { "normal", "special", "near_flush", "cancel" };

static uint16_t random_bf16(enum fill f) {
    uint32_t r = next_u32();
    uint16_t sign = (uint16_t)((r & 1u) << 15), mant = (uint16_t)((r >> 1) & 127u);
    switch (f) {
    case NORMAL: return sign | (uint16_t)((120u + (r >> 8) % 14u) << 7) | mant;
    case SPECIAL: {
        static const uint16_t picks[] = { 0x7fc0, 0x7f80, 0xff80, 0x0001, 0x807f, 0x8000, 0x0000 };
        if ((r >> 8) % 16u == 0) return picks[(r >> 12) % 7u];
        return sign | (uint16_t)((120u + (r >> 8) % 14u) << 7) | mant;
    }
    case NEAR_FLUSH: return sign | (uint16_t)((61u + (r >> 8) % 8u) << 7) | mant; /* products near 2^-126 */
    case CANCEL: { /* +-1, +-2, +-0: partial sums cancel to signed zeros */
        static const uint16_t picks[] = { 0x3f80, 0xbf80, 0x4000, 0xc000, 0x0000, 0x8000 };
        return picks[(r >> 8) % 6u];
    }
    default: return 0;
    }
}

/* A [M, K] and B [K, N] in one of three layouts: row-major, column-major, or strided (every other
 * element of a row-major buffer twice as wide). */
enum layout { ROWS, COLS, STRIDED, NLAYOUTS };
static const char *const layout_names[] = { "rows", "cols", "strided" };

static tg_operand make(uint16_t *buf, int64_t d0, int64_t d1, enum layout l) {
    if (l == ROWS) return (tg_operand){ buf, d1, 1 };
    if (l == COLS) return (tg_operand){ buf, 1, d0 };
    return (tg_operand){ buf, 2 * d1, 2 };
}

/* The product by one variant's kernel fn of height mr: fp32 accumulators to acc32 (M x N) and bf16
 * to out (M x N), K panels of kcp elements (a multiple of 32). */
static void run(const tg_ukernel *uk, int32_t mr, tg_ukernel_fn fn, const tg_operand *A, const tg_operand *B,
                int64_t M, int64_t N, int64_t K, int64_t kcp, float *acc32, uint16_t *out) {
    int64_t nr = uk->nr, kpmax = (kcp + 31) / 32 * 16;
    uint32_t *ap = aligned_alloc(64, (size_t)(kpmax * mr) * 4u), *bp = aligned_alloc(64, (size_t)(kpmax * nr) * 4u);
    float *tacc = aligned_alloc(64, (size_t)(mr * nr) * 4u);
    for (int64_t i0 = 0; i0 < M; i0 += mr)
        for (int64_t j0 = 0; j0 < N; j0 += nr) {
            int32_t rows = (int32_t)(M - i0 < mr ? M - i0 : mr), cols = (int32_t)(N - j0 < nr ? N - j0 : nr);
            for (int pass = 0; pass < 2; pass++) /* pass 0: fp32 accumulators out; 1: bf16 */
                for (int64_t k0 = 0; k0 < K; k0 += kcp) {
                    int64_t kc = K - k0 < kcp ? K - k0 : kcp, kp = (kc + 31) / 32 * 16;
                    bool last = k0 + kcp >= K;
                    uk->pack_a(A, i0, rows, k0, kc, mr, ap);
                    uk->pack_b(B, k0, kc, j0, cols, bp);
                    tg_tile t = { .acc = tacc, .ldacc = nr, .load = k0 > 0, .rows = rows, .cols = cols,
                                  .out = pass && last ? out + i0 * N + j0 : NULL, .ldout = N };
                    fn(kp, ap, bp, &t);
                    if (!pass && last)
                        for (int32_t r = 0; r < rows; r++)
                            memcpy(acc32 + (i0 + r) * N + j0, tacc + r * nr, (size_t)cols * 4u);
                }
        }
    free(ap), free(bp), free(tacc);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : u; /* any NaN as the canonical one */
}

static int cases, mismatches;

typedef struct {
    const tg_operand *A, *B;
    const uint16_t *b; /* B's buffer (row-major B: the skinny hook reads it with B->s0) */
    int64_t M, N, K;
    enum fill f;
    enum layout la, lb;
    unsigned caller_csr;
    uint32_t *ap; /* room for a 16-row A panel */
    const uint16_t *want16;
    uint16_t *got16;
} hook_case;

/* A streaming hook of k against the reference's bf16 outputs: rowvec (one row) or skinny (a
 * 16-row A panel), A packed by k's pack_a, over two column strips as the frame's tasks split them,
 * under the caller's MXCSR (which is back afterwards). */
static void check_hook(const char *what, const tg_ukernel *k, bool one, const hook_case *c) {
    int64_t M = c->M, N = c->N, K = c->K, half = N / 2;
    memset(c->got16, 0, (size_t)(M * N) * 2u);
    k->pack_a(c->A, 0, M, 0, K, one ? 1 : 16, c->ap);
    unsigned csr = _mm_getcsr();
    if (c->caller_csr) _mm_setcsr(c->caller_csr);
    if (one) {
        CHECK(k->rowvec(c->ap, c->B, K, 0, half, c->got16) && k->rowvec(c->ap, c->B, K, half, N - half, c->got16 + half));
    } else {
        k->skinny(K, c->ap, (int32_t)M, c->b, c->B->s0, (int32_t)half, c->got16, N);
        k->skinny(K, c->ap, (int32_t)M, c->b + half, c->B->s0, (int32_t)(N - half), c->got16 + half, N);
    }
    if (c->caller_csr) CHECK(_mm_getcsr() == c->caller_csr);
    _mm_setcsr(csr);
    int64_t bad = 0;
    for (int64_t i = 0; i < M * N; i++) bad += c->got16[i] != c->want16[i];
    cases++;
    CHECK(bad == 0);
    if (bad) {
        mismatches++;
        fprintf(stderr, "  %lldx%lldx%lld %s A %s B %s, %s: %lld of %lld differ\n", (long long)M, (long long)K,
                (long long)N, fill_names[c->f], layout_names[c->la], layout_names[c->lb], what, (long long)bad,
                (long long)(M * N));
    }
}

/* One problem: the reference (portable_block32's main kernel) against every kernel height of the
 * vdpbf16ps variant. */
static void compare(int64_t M, int64_t N, int64_t K, int64_t kcp, enum fill f, enum layout la, enum layout lb,
                    unsigned caller_csr) {
    const tg_ukernel *ref = &tg_ukernel_portable_block32, *uk = &tg_ukernel_avx512bf16_block32;
    uint16_t *a = calloc((size_t)(2 * M * K), 2u), *b = calloc((size_t)(2 * K * N), 2u);
    for (int64_t i = 0; i < 2 * M * K; i++) a[i] = random_bf16(f);
    for (int64_t i = 0; i < 2 * K * N; i++) b[i] = random_bf16(f);
    tg_operand A = make(a, M, K, la), B = make(b, K, N, lb);
    float *want32 = calloc((size_t)(M * N), 4u), *got32 = calloc((size_t)(M * N), 4u);
    uint16_t *want16 = calloc((size_t)(M * N), 2u), *got16 = calloc((size_t)(M * N), 2u);
    run(ref, ref->mr, ref->kernel, &A, &B, M, N, K, kcp, want32, want16);
    struct { int32_t rows; tg_ukernel_fn fn; } heights[4] = { { uk->mr, uk->kernel } };
    for (int i = 0; i < 3; i++)
        heights[i + 1].rows = uk->short_kernels[i].rows, heights[i + 1].fn = uk->short_kernels[i].fn;
    for (int h = 0; h < 4 && heights[h].fn; h++) {
        unsigned csr = _mm_getcsr();
        if (caller_csr) _mm_setcsr(caller_csr);
        run(uk, heights[h].rows, heights[h].fn, &A, &B, M, N, K, kcp, got32, got16);
        if (caller_csr) CHECK(_mm_getcsr() == caller_csr);
        _mm_setcsr(csr);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < M * N; i++)
            if (bits(got32[i]) != bits(want32[i]) || got16[i] != want16[i]) bad++, first = first < 0 ? i : first;
        cases++;
        CHECK(bad == 0);
        if (bad) {
            mismatches++;
            fprintf(stderr, "  %lldx%lldx%lld panel %lld %s A %s B %s, %d-row kernel: %lld of %lld differ; "
                    "C[%lld,%lld]: got %08x/%04x want %08x/%04x\n", (long long)M, (long long)K, (long long)N,
                    (long long)kcp, fill_names[f], layout_names[la], layout_names[lb], heights[h].rows, (long long)bad,
                    (long long)(M * N), (long long)(first / N), (long long)(first % N), bits(got32[first]),
                    got16[first], bits(want32[first]), want16[first]);
        }
    }
    /* the streaming hooks (bf16 out): the vdpbf16ps kernel's skinny (M <= 16, row-major B) and
     * rowvec (one row, either layout); the AVX2 stream kernel's rowvec and skinny (up to 4 rows) */
    uint32_t *ap = aligned_alloc(64, (size_t)(16 * ((K + 31) / 32 * 16)) * 4u);
    const tg_ukernel *s2 = &tg_ukernel_avx2_block32_stream;
    bool one = M == 1 && (lb == ROWS || lb == COLS);
    hook_case c = { &A, &B, b, M, N, K, f, la, lb, caller_csr, ap, want16, got16 };
    if (M <= 16 && lb == ROWS) check_hook("skinny", uk, false, &c);
    if (one) check_hook("rowvec", uk, true, &c);
    if (s2->available() && (one || (M <= 4 && lb == ROWS))) check_hook(one ? "avx2 rowvec" : "avx2 skinny", s2, one, &c);
    free(ap), free(a), free(b), free(want32), free(got32), free(want16), free(got16);
}

int main(void) {
    if (!tg_ukernel_avx512bf16_block32.available()) {
        printf("skipped: this CPU has no AVX512-BF16\n");
        return 77;
    }
    const tg_ukernel *uk = &tg_ukernel_avx512bf16_block32;
    CHECK(uk->order == TG_UK_ORDER_BLOCK32 && uk->kpair_align == 16);
    /* K across blocks (32) and panels; M across every tile height; N across the 32-column panel */
    static const int64_t Ks[] = { 1, 2, 3, 5, 31, 32, 33, 64, 95, 200, 513, 1100 };
    static const int64_t MNs[][2] = { { 1, 1 }, { 3, 33 }, { 7, 17 }, { 13, 70 }, { 1, 100 }, { 16, 65 } };
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t s = 0; s < sizeof MNs / sizeof MNs[0]; s++)
            for (int f = 0; f < NFILLS; f++) {
                int64_t K = Ks[ki], kcp = (ki + s + (size_t)f) % 3 == 0 ? 32 : (ki + s) % 3 == 1 ? 96 : 512;
                enum layout la = (enum layout)((ki + (size_t)f) % NLAYOUTS);
                enum layout lb = (enum layout)((s + ki / 3) % NLAYOUTS);
                compare(MNs[s][0], MNs[s][1], K, kcp, (enum fill)f, la, lb, 0);
            }
    /* every layout pair once with specials over several K panels */
    for (int la = 0; la < NLAYOUTS; la++)
        for (int lb = 0; lb < NLAYOUTS; lb++) compare(9, 40, 300, 64, SPECIAL, (enum layout)la, (enum layout)lb, 0);
    /* a caller's hostile MXCSR (round toward zero or -inf, no FTZ/DAZ) around the kernel: its
     * results do not change and the caller's MXCSR is back afterwards */
    compare(13, 70, 300, 96, NEAR_FLUSH, ROWS, ROWS, 0x1f80u | 0x6000u);
    compare(13, 70, 300, 96, CANCEL, ROWS, COLS, 0x1f80u | 0x2000u); /* toward -inf: -0 sums */
    /* the one-row hook over wider B (several 64- and 32-column groups, edges) in both layouts, and
     * the AVX2 hooks' few rows */
    for (int lb = ROWS; lb <= COLS; lb++)
        for (int f = 0; f < NFILLS; f++) {
            compare(1, 200, 333, 512, (enum fill)f, ROWS, (enum layout)lb, 0);
            compare(1, 95, 1100, 512, (enum fill)f, COLS, (enum layout)lb, 0x1f80u | 0x6000u);
            compare(4, 66, 1100, 512, (enum fill)f, (enum layout)lb, ROWS, 0x1f80u | 0x2000u);
            compare(3, 1100, 70, 512, (enum fill)f, ROWS, ROWS, 0);
        }
    printf("%d kernel runs compared, %d differ\n", cases, mismatches);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
#else
int main(void) {
    printf("skipped: no x86 variants in this build\n");
    return 77;
}
#endif
