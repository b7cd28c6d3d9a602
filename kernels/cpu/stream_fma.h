/* The one-row (rowvec) and few-rows (skinny) paths of the FMA variants (AVX512F, AVX2), the parts
 * that do not depend on the vector width. B is read in place and widened in registers; MXCSR's
 * FTZ and DAZ are set for the call (DAZ treats a subnormal element as the signed zero packing
 * makes of it, so every sum is the packed kernels'). A arrives packed as fp32 (odd, even) entries:
 * one row (rowvec: pair p at a[2p], a[2p + 1]), or one 16-row panel, zero-padded (skinny: row r's
 * pair p at a[(16p + r) * 2]). An odd K's last pair is (+0, element) with +0 for B's missing row,
 * as packing makes them.
 *
 * skinny: a strip of up to SK_STRIP columns is walked in K chunks of SK_CHUNK pairs, tile by tile
 * (SK_TILE columns), each tile's rows in groups held in registers within a chunk and in an L1
 * strip buffer between chunks; while a chunk computes, the next one is prefetched line by line in
 * row order (each tile's first group issues two prefetches per pair).
 *
 * The including variant defines SK_TILE before including, and then the functions declared below:
 *   rowvec_rows, rowvec_cols: out[0, nb) of a one-row product, over row-major B at b (row stride
 *     ldb) or column-major B (columns n0 .. n0 + nb);
 *   sk_group: rows [r0, r0 + n) of the tile at S->j over S's K chunk, for an n of its choice;
 *     returns n (rows past S->rows compute on the panel's zero rows and are not written; r0 + n
 *     stays within the 16 rows of the panel and the strip buffer). */
#ifndef TGRAD_CPU_STREAM_FMA_H
#define TGRAD_CPU_STREAM_FMA_H
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "fp_env.h"
#include "ukernel.h"

enum { SK_STRIP = 512, SK_CHUNK = 64 };

typedef struct {
    int64_t q0, q1;     /* the K chunk: pairs [q0, q1) */
    bool first, last;   /* the first chunk (accumulators start at +0), the last (outputs written) */
    const float *a;     /* the 16-row A panel */
    int32_t rows;       /* the problem's rows */
    const uint16_t *b;  /* the strip's B */
    int64_t ldb, full;  /* B's row stride; K's whole pairs (an odd K's last pair has no odd row) */
    int32_t j, w;       /* the tile's first column, the strip's width */
    float *acc;         /* the strip's accumulators, SK_STRIP floats per row */
    uint16_t *out;      /* the strip's outputs */
    int64_t ldout;
    tg_line_walk *next; /* the next chunk's prefetch, or NULL */
} sk_args;

/* A group body's locals, from its sk_args */
#define SK_UNPACK(S)                                                                                \
    const int64_t q0 = (S)->q0, q1 = (S)->q1, ldb = (S)->ldb, full = (S)->full, ldout = (S)->ldout; \
    const bool first = (S)->first, last = (S)->last;                                                \
    const int32_t rows = (S)->rows, j = (S)->j, w = (S)->w;                                         \
    const float *a = (S)->a;                                                                        \
    const uint16_t *b = (S)->b;                                                                     \
    float *acc = (S)->acc;                                                                          \
    uint16_t *out = (S)->out;                                                                       \
    tg_line_walk *next = (S)->next;

static void rowvec_rows(const float *a, const uint16_t *b, int64_t ldb, int64_t K, int64_t nb, uint16_t *out);
static void rowvec_cols(const float *a, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out);
static int32_t sk_group(int32_t r0, const sk_args *S);

static bool rowvec(const uint32_t *apairs, const tg_operand *B, int64_t K, int64_t n0, int64_t nb, uint16_t *out) {
    const float *a = (const float *)apairs; /* these variants pack A as fp32 (odd, even) entries */
    if (B->s1 != 1 && B->s0 != 1) return false;
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    if (B->s1 == 1) rowvec_rows(a, B->base + n0, B->s0, K, nb, out);
    else rowvec_cols(a, B, K, n0, nb, out);
    _mm_setcsr(csr);
    return true;
}

static void skinny_strip(int64_t K, const float *a, int32_t rows, const uint16_t *b, int64_t ldb, int32_t w,
                         uint16_t *out, int64_t ldout) {
    __attribute__((aligned(64))) float acc[16 * SK_STRIP];
    int64_t kp = (K + 1) / 2;
    sk_args S = { .a = a, .rows = rows, .b = b, .ldb = ldb, .full = K / 2, .w = w, .acc = acc, .out = out,
                  .ldout = ldout };
    for (S.q0 = 0; S.q0 < kp; S.q0 += SK_CHUNK) {
        S.q1 = S.q0 + SK_CHUNK < kp ? S.q0 + SK_CHUNK : kp;
        S.first = S.q0 == 0, S.last = S.q1 == kp;
        /* the next chunk's rows in whole lines: two per pair of each tile's first group cover them */
        tg_line_walk next = { .base = (const char *)(b + 2 * S.q1 * ldb), .run_stride = ldb * 2, .lines = (w + 31) / 32,
                              .runs = 2 * (kp - S.q1 < SK_CHUNK ? kp - S.q1 : SK_CHUNK) };
        for (S.j = 0; S.j < w; S.j += SK_TILE)
            for (int32_t r0 = 0; r0 < rows;) {
                S.next = r0 ? NULL : &next;
                r0 += sk_group(r0, &S);
            }
    }
}

static void skinny(int64_t K, const uint32_t *a, int32_t rows, const uint16_t *b, int64_t ldb, int32_t cols,
                   uint16_t *out, int64_t ldout) {
    unsigned csr = _mm_getcsr();
    _mm_setcsr(tg_mxcsr_fma(csr));
    for (int32_t j = 0; j < cols; j += SK_STRIP)
        skinny_strip(K, (const float *)a, rows, b + j, ldb, cols - j < SK_STRIP ? cols - j : SK_STRIP, out + j, ldout);
    _mm_setcsr(csr);
}

#endif
