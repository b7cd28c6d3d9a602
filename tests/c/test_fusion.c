/* Fusion never changes a byte: every graph of the roster, on every CPU variant this machine runs,
 * every matmul route (rowvec, skinny, gemm per block, gemm in shared chunks, zeros, the [M, 1]
 * swap) and 1 or 3 threads, gives the same bytes with fusion on and off, and those bytes are the
 * ops applied one at a time to the stored matmul result (tgrad_debug_elementwise). With fusion on,
 * explain shows the ops inside the matmul's kernel. Public API only. Prints "N passed, N failed". */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static uint32_t seed = 12345;
static uint16_t random_bf16(void) {
    seed = seed * 1664525u + 1013904223u;
    uint32_t r = seed >> 8;
    if (r % 97 == 0) return (uint16_t[]){ 0x7f80, 0xff80, 0x7fc1, 0x8000, 0x0001 }[r % 5]; /* specials now and then */
    float f = ((float)(r % 2001) - 1000.0f) / 256.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static tgrad_tensor_t random_tensor(int32_t ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    uint16_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = random_bf16();
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_tensor_from_bf16(v, ndim, shape, &t), TGRAD_OK);
    free(v);
    return t;
}

static tgrad_tensor_t un(tgrad_op op, tgrad_tensor_t x) {
    tgrad_tensor_t y = 0;
    EXPECT(tgrad_unary(op, x, &y), TGRAD_OK);
    return y;
}

static tgrad_tensor_t bin(tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t b) {
    tgrad_tensor_t y = 0;
    EXPECT(tgrad_binary(op, a, b, &y), TGRAD_OK);
    return y;
}

static uint16_t *bits_of(tgrad_tensor_t t, int64_t n) {
    uint16_t *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    EXPECT(tgrad_tensor_read_bf16(t, v, (size_t)n), TGRAD_OK);
    return v;
}

/* ---- the roster: graphs over mm = a @ b [M, N] ---------------------------------------------- */
typedef struct {
    tgrad_tensor_t a, b, row, col, full; /* row [N], col [M, 1], full [M, N] */
    int64_t M, N;
} operands;

enum { GRAPHS = 6 };

/* Graph g over a fresh product (so every run builds it anew), and the same ops applied one at a
 * time to the stored product's bits in ref (n = M * N elements). */
static tgrad_tensor_t graph(int g, const operands *o) {
    tgrad_tensor_t mm = 0, t[8] = { 0 }, y = 0;
    EXPECT(tgrad_matmul(o->a, o->b, &mm), TGRAD_OK);
    switch (g) {
    case 0: /* gelu(mm + bias) */
        t[0] = bin(TGRAD_OP_ADD, mm, o->row);
        y = un(TGRAD_OP_GELU, t[0]);
        break;
    case 1: /* bias - mm, times a column */
        t[0] = bin(TGRAD_OP_SUB, o->row, mm);
        y = bin(TGRAD_OP_MUL, o->col, t[0]);
        break;
    case 2: /* a chain longer than one kernel takes */
        t[0] = un(TGRAD_OP_SILU, mm);
        for (int i = 1; i < 8; i++) t[i] = i % 2 ? bin(TGRAD_OP_MAXIMUM, t[i - 1], o->full) : un(TGRAD_OP_TANH, t[i - 1]);
        y = bin(TGRAD_OP_DIV, t[7], o->row);
        break;
    case 3: /* the product read twice: silu(mm) * mm stores mm and fuses silu and mul elsewhere */
        t[0] = un(TGRAD_OP_SILU, mm);
        y = bin(TGRAD_OP_MUL, t[0], mm);
        break;
    case 4: /* a transposed read of the product is not the whole result: not fused */
        EXPECT(tgrad_tensor_transpose(mm, 0, 1, &t[0]), TGRAD_OK);
        y = un(TGRAD_OP_EXP, t[0]);
        break;
    default: /* rsqrt(square(mm) + 1) over a broadcast full operand */
        t[0] = un(TGRAD_OP_SQUARE, mm);
        t[1] = bin(TGRAD_OP_ADD, t[0], o->full);
        y = un(TGRAD_OP_RSQRT, t[1]);
    }
    for (int i = 0; i < 8; i++) tgrad_tensor_release(t[i]);
    tgrad_tensor_release(mm);
    return y;
}

static void ew(tgrad_op op, const uint16_t *a, const uint16_t *b, uint16_t *out, int64_t n) {
    EXPECT(tgrad_debug_elementwise(op, a, b, out, n), TGRAD_OK);
}

/* The reference: the graph's ops one at a time over the stored product p. */
static void reference(int g, const operands *o, const uint16_t *p, uint16_t *out) {
    int64_t M = o->M, N = o->N, n = M * N;
    uint16_t *row = bits_of(o->row, N), *col = bits_of(o->col, M), *full = bits_of(o->full, n);
    uint16_t *R = malloc(sizeof *R * (size_t)n), *C = malloc(sizeof *C * (size_t)n), *T = malloc(sizeof *T * (size_t)n);
    for (int64_t i = 0; i < n; i++) R[i] = row[i % N], C[i] = col[i / N];
    switch (g) {
    case 0: ew(TGRAD_OP_ADD, p, R, T, n), ew(TGRAD_OP_GELU, T, NULL, out, n); break;
    case 1: ew(TGRAD_OP_SUB, R, p, T, n), ew(TGRAD_OP_MUL, C, T, out, n); break;
    case 2:
        ew(TGRAD_OP_SILU, p, NULL, T, n);
        for (int i = 1; i < 8; i++)
            if (i % 2) ew(TGRAD_OP_MAXIMUM, T, full, T, n);
            else ew(TGRAD_OP_TANH, T, NULL, T, n);
        ew(TGRAD_OP_DIV, T, R, out, n);
        break;
    case 3: ew(TGRAD_OP_SILU, p, NULL, T, n), ew(TGRAD_OP_MUL, T, p, out, n); break;
    case 4:
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) T[j * M + i] = p[i * N + j];
        ew(TGRAD_OP_EXP, T, NULL, out, n);
        break;
    default: ew(TGRAD_OP_SQUARE, p, NULL, T, n), ew(TGRAD_OP_ADD, T, full, T, n), ew(TGRAD_OP_RSQRT, T, NULL, out, n);
    }
    free(row), free(col), free(full), free(R), free(C), free(T);
}

static bool fused_in_plan(tgrad_tensor_t y) {
    char text[8192];
    size_t len;
    if (tgrad_tensor_explain(y, TGRAD_FORMAT_TEXT, text, sizeof text, &len)) return false;
    return strchr(text, '+') != NULL; /* a kernel named "matmul+add+gelu", "silu+mul", ... */
}

static int mismatches;

static void run_case(const char *variant, int64_t M, int64_t K, int64_t N) {
    operands o = { .M = M, .N = N };
    o.a = random_tensor(2, (int64_t[]){ M, K });
    o.b = random_tensor(2, (int64_t[]){ K, N });
    o.row = random_tensor(1, (int64_t[]){ N });
    o.col = random_tensor(2, (int64_t[]){ M, 1 });
    o.full = random_tensor(2, (int64_t[]){ M, N });
    int64_t n = M * N;
    tgrad_tensor_t mm = 0;
    EXPECT(tgrad_matmul(o.a, o.b, &mm), TGRAD_OK);
    uint16_t *p = bits_of(mm, n), *want = malloc(sizeof *want * (size_t)(n ? n : 1));
    for (int g = 0; g < GRAPHS; g++) {
        reference(g, &o, p, want);
        uint16_t *got[2];
        for (int fusion = 0; fusion < 2; fusion++) {
            EXPECT(tgrad_set_fusion(fusion), TGRAD_OK);
            tgrad_tensor_t y = graph(g, &o);
            bool fused = fused_in_plan(y);
            /* every graph but 4 has ops that fuse; 4 reads the product transposed, which is the
             * whole result as it is only for a 1 x 1 product */
            CHECK(fused == (fusion && (g != 4 || (M == 1 && N == 1))));
            got[fusion] = bits_of(y, n);
            tgrad_tensor_release(y);
        }
        bool same = memcmp(got[0], got[1], sizeof *got[0] * (size_t)n) == 0;
        bool right = memcmp(got[1], want, sizeof *want * (size_t)n) == 0;
        CHECK(same && right);
        if ((!same || !right) && mismatches++ < 10)
            fprintf(stderr, "%s %lldx%lldx%lld graph %d: fused %s unfused, %s the ops one at a time\n", variant,
                    (long long)M, (long long)K, (long long)N, g, same ? "==" : "!=", right ? "==" : "!=");
        free(got[0]), free(got[1]);
    }
    free(p), free(want);
    tgrad_tensor_release(mm);
    tgrad_tensor_release(o.a), tgrad_tensor_release(o.b), tgrad_tensor_release(o.row);
    tgrad_tensor_release(o.col), tgrad_tensor_release(o.full);
}

/* Shapes that reach every route: one row (rowvec), few rows (skinny), per-block and chunked
 * gemm, K = 0 (zeros), N = 1 (computed as its transpose), odd sizes and tails. */
static const int64_t SHAPES[][3] = {
    { 1, 64, 300 }, { 1, 33, 7 }, { 5, 64, 300 }, { 16, 96, 130 }, { 40, 70, 33 }, { 100, 130, 260 },
    { 3, 0, 5 }, { 37, 50, 1 }, { 1, 1, 1 }, { 200, 300, 520 }, { 0, 4, 6 },
    { 400, 200, 1100 }, /* shared chunks (M > 384) with many column tiles */
    { 40, 1024, 1024 }, /* skinny in passes of 12 rows where a variant takes 40 rows that way (avx512) */
};

/* `test_fusion quick` (the fusion-quick test, run under qemu by nox -s cross) leaves out the
 * shapes past this many multiply-adds: every route but the big ones' (shared chunks with many
 * column tiles, skinny in passes) is still reached, in seconds rather than minutes emulated. */
#define QUICK_MNK 4000000.0

int main(int argc, char **argv) {
    bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    int32_t available;
    const char *name;
    for (int32_t v = 0; (name = tgrad_cpu_isa_name(v, &available)); v++) {
        if (!available) continue;
        EXPECT(tgrad_set_cpu_isa(name), TGRAD_OK);
        for (int32_t threads = 1; threads <= 3; threads += 2) {
            EXPECT(tgrad_set_num_threads(threads), TGRAD_OK);
            for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
                if (!quick || (double)SHAPES[s][0] * (double)SHAPES[s][1] * (double)SHAPES[s][2] <= QUICK_MNK)
                    run_case(name, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2]);
            /* the shared-chunk path, with small chunks and K panels so that many are crossed */
            EXPECT(tgrad_debug_cpu_blocking(4096, 32, 0), TGRAD_OK);
            run_case(name, 70, 90, 150);
            EXPECT(tgrad_debug_cpu_blocking(4096, 32, TGRAD_DEBUG_CPU_NO_DIRECT_A), TGRAD_OK);
            run_case(name, 70, 90, 150);
            EXPECT(tgrad_debug_cpu_blocking(0, 0, 0), TGRAD_OK);
        }
    }
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
    EXPECT(tgrad_set_fusion(1), TGRAD_OK);
    EXPECT(tgrad_set_fusion(2), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(tgrad_fusion_enabled() == 1);
    CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
