/* AMX variant of the block32 order (docs/numerics.md, "The block32 order"): Intel AMX's
 * TDPBF16PS computes, for a 16 x 16 fp32 tile C over one block of 32 K elements (A: 16 rows of
 * 16 pair words, B: 16 pair rows of 16 columns), per output: two fp32 temporaries from +0, the
 * even-k products into one and the odd-k products into the other in ascending k, each step one
 * fused rounding (RNE, subnormal inputs as zero, tiny results flushed), then C + (even + odd).
 * That is the block32 order itself, so this kernel is the order in hardware, as the AVX512-BF16
 * kernel is the pairwise one; ukernel_portable_block32.c is its reference.
 *
 * Tile: 32 rows x 32 columns, four C tiles (2 x 2), two A tiles and two B tiles: all eight of
 * the palette. A is packed per block as 32 rows of 64 bytes (two A tiles), B per pair as 32
 * columns (pack_avx512.h's layout: the two B tiles are its halves, 128 bytes per pair row).
 * Every tile is 16 rows x 64 bytes, one configuration (loaded per frame task: `begin`). Compiled
 * alone with -mamx-tile -mamx-bf16 (meson); the OS grants the tile state per process
 * (arch_prctl ARCH_REQ_XCOMP_PERM, asked once in `available`). */
#include <immintrin.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MR 32
#define NR 32
#include "pack_avx512.h"
#include "pack_block32.h"
#include "store_bf16_avx512.h"
#include "pack_block32_avx512.h"

enum { KC = 256 }; /* a B micro-panel of KC/2 pairs x 32 columns and an A panel of 32 rows x KC are 16 KiB each: both
                    * stay in L1 (the kernel alone, 192 rows x 32 columns: 2175 GFLOP/s per core at 256, 1932 at 512) */
_Static_assert(KC % (2 * B32_PAIRS) == 0, "K panels start at block boundaries");

/* ---- packing ---- */

/* Row-major A (s1 == 1): each row's block is 64 contiguous bytes, loaded under a mask at K's end
 * (the rest +0) and DAZ'd (TDPBF16PS ignores subnormal inputs itself; packing them as zeros keeps
 * every variant's panels alike). */
static void pack_a_amx(const tg_operand *A, int64_t m0, int64_t mb, int64_t k0, int64_t kc, int32_t mr, void *dst_) {
    if (A->s1 != 1) {
        pack_a_block32(A, m0, mb, k0, kc, mr, dst_);
        return;
    }
    uint32_t *dst = dst_;
    int64_t kp = b32_pairs(kc), blocks = kp / B32_PAIRS;
    for (int64_t i0 = 0; i0 < mb; i0 += mr, dst += kp * mr) {
        int64_t rows = mb - i0 < mr ? mb - i0 : mr;
        for (int64_t r = 0; r < mr; r++) {
            const uint16_t *row = A->base + (m0 + i0 + r) * A->s0 + k0;
            for (int64_t blk = 0; blk < blocks; blk++) {
                int64_t left = kc - 32 * blk;
                __mmask32 m = r >= rows ? 0 : left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1u);
                __m512i v = daz16(_mm512_maskz_loadu_epi16(m, row + 32 * blk));
                _mm512_storeu_si512(dst + (blk * mr + r) * B32_PAIRS, v);
            }
        }
    }
}


/* ---- tiles ---- */
typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Static data, not a stack struct filled in place: gcc 12 drops stores that only ldtilecfg reads. */
static const tile_config config = { .palette = 1, .colsb = { 64, 64, 64, 64, 64, 64, 64, 64 },
                                    .rows = { 16, 16, 16, 16, 16, 16, 16, 16 } };

static void begin(void) { _tile_loadconfig(&config); }
static void end(void) { _tile_release(); }

/* C tiles 0-3 (rows 0-15 | 16-31 x columns 0-15 | 16-31), A tiles 4-5, B tiles 6-7. */
static inline void load_c(const tg_tile *t, float *buf, bool two_rows) {
    if (!t->load) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        return;
    }
    const float *acc = t->acc;
    long ld = (long)t->ldacc * 4;
    (void)buf;
    _tile_loadd(0, acc, ld);
    _tile_loadd(1, acc + 16, ld);
    if (two_rows) {
        _tile_loadd(2, acc + 16 * t->ldacc, ld);
        _tile_loadd(3, acc + 16 * t->ldacc + 16, ld);
    }
}

/* The finished tile: fp32 accumulators to acc, or bf16 (RNE, NaN 0x7FC0) to out's valid part. */
static inline void store_c(const tg_tile *t, bool two_rows) {
    if (!t->out) {
        long ld = (long)t->ldacc * 4;
        _tile_stored(0, t->acc, ld);
        _tile_stored(1, t->acc + 16, ld);
        if (two_rows) {
            _tile_stored(2, t->acc + 16 * t->ldacc, ld);
            _tile_stored(3, t->acc + 16 * t->ldacc + 16, ld);
        }
        return;
    }
    float buf[32 * 32] __attribute__((aligned(64)));
    _tile_stored(0, buf, 128);
    _tile_stored(1, buf + 16, 128);
    if (two_rows) {
        _tile_stored(2, buf + 16 * 32, 128);
        _tile_stored(3, buf + 16 * 32 + 16, 128);
    }
    __mmask32 cols = col_mask32(t->cols);
    for (int32_t r = 0; r < t->rows; r++)
        store_bf16x32(t->out + r * t->ldout, _mm512_load_ps(buf + 32 * r), _mm512_load_ps(buf + 32 * r + 16), cols,
                      t->stream);
}

/* The 32-row tile over `blocks` blocks: per block, A's two tiles (rows 0-15 at a, 16-31 at
 * a + a_half, rows `stride` bytes apart, the next block a_step bytes on) and B's two (the
 * micro-panel's pair rows at bp, B32_PAIRS * NR * 4 bytes a block), four products. Software
 * pipelined: each tile register is loaded with the next block's data right after the last
 * product that reads it was issued, so the loads overlap the products (the kernel alone over
 * cached panels: +3-7%, tools/amx_kernel_bench.c). The products and their order per C tile are
 * the unpipelined loop's: the same bytes. */
static inline __attribute__((always_inline)) void blocks_32(int64_t blocks, const char *a, long a_half, long a_step,
                                                            long stride, const char *bp) {
    if (blocks <= 0) return;
    _tile_loadd(4, a, stride);
    _tile_loadd(6, bp, NR * 4);
    _tile_loadd(5, a + a_half, stride);
    _tile_loadd(7, bp + 64, NR * 4);
    for (int64_t i = 1; i < blocks; i++) {
        a += a_step, bp += B32_PAIRS * NR * 4;
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(4, a, stride);
        _tile_dpbf16ps(2, 5, 6);
        _tile_loadd(6, bp, NR * 4);
        _tile_dpbf16ps(3, 5, 7);
        _tile_loadd(5, a + a_half, stride);
        _tile_loadd(7, bp + 64, NR * 4);
    }
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
}

/* 32 rows: per block, two A tiles (2 KiB of the panel) and two B tiles, four products. */
static void kernel(int64_t kpairs, const void *a, const void *b, const tg_tile *t) {
    load_c(t, NULL, true);
    blocks_32(kpairs / B32_PAIRS, a, 16 * 64, 32 * 64, 64, b);
    store_c(t, true);
}

/* 16 rows (a panel of 16: M's tail, or M <= 16): one A tile, two C tiles. */
static void kernel_16(int64_t kpairs, const void *a, const void *b, const tg_tile *t) {
    const char *ap = a, *bp = b;
    load_c(t, NULL, false);
    for (int64_t p0 = 0; p0 < kpairs; p0 += B32_PAIRS, ap += 16 * 64, bp += B32_PAIRS * NR * 4) {
        _tile_loadd(4, ap, 64);
        _tile_loadd(6, bp, NR * 4);
        _tile_loadd(7, bp + 64, NR * 4);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
    }
    store_c(t, false);
}

/* The 32-row kernel reading row-major A in place (ukernel.h, kernel_direct): an A tile is 16
 * rows of 32 consecutive k elements, so a block's A tiles load straight from the rows (stride
 * lda); AMX treats subnormal inputs as zero itself, as packing would have made them. K's last,
 * partial block is copied to a zero-padded buffer first (nothing past a row is read). */
static void kernel_direct(int64_t kc, const uint16_t *a, int64_t lda, const void *b, const tg_tile *t) {
    const char *bp = b;
    long stride = (long)lda * 2;
    int64_t full = kc / 32, left = kc % 32;
    load_c(t, NULL, true);
    blocks_32(full, (const char *)a, 16 * stride, 64, stride, bp);
    if (left) {
        uint16_t tail[32 * 32] __attribute__((aligned(64)));
        __mmask32 m = (__mmask32)((1u << left) - 1u);
        for (int r = 0; r < 32; r++)
            _mm512_store_si512(tail + 32 * r, _mm512_maskz_loadu_epi16(m, a + r * lda + 32 * full));
        blocks_32(1, (const char *)tail, 16 * 64, 0, 64, bp + full * B32_PAIRS * NR * 4);
    }
    store_c(t, true);
}

/* ---- availability: the CPU has AMX-TILE and AMX-BF16 (CPUID 7.0 EDX bits 24 and 22), the OS
 * saves tile state (XCR0 bits 17-18) and grants it to this process ---- */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
static int amx_ok;
static const char *amx_why = "not probed";
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void probe(void) {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0), "c"(0));
    unsigned max_leaf = a;
    if (max_leaf < 7) { amx_why = "the CPU has no AMX (no CPUID leaf 7)"; return; }
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!((d >> 24) & 1) || !((d >> 22) & 1)) { amx_why = "the CPU has no AMX-TILE and AMX-BF16 (CPUID 7.0 EDX)"; return; }
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
    if (!((c >> 27) & 1)) { amx_why = "the OS does not use XSAVE (CPUID 1 ECX.OSXSAVE)"; return; }
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) { amx_why = "the OS does not enable the tile state (XCR0 bits 17-18)"; return; }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512bf16")) {
        amx_why = "the CPU lacks AVX512-BW or AVX512-BF16, which the AMX kernel's packing and stores use";
        return;
    }
    amx_ok = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    amx_why = amx_ok ? NULL : "the kernel refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM; Linux 5.16+)";
}

const char *tg_amx_unavailable(void) {
    pthread_once(&amx_once, probe);
    return amx_why;
}

static int available(void) {
    pthread_once(&amx_once, probe);
    return amx_ok;
}

/* Four independent accumulator tiles over L1-resident operands: TDPBF16PS's throughput, 16 x 16
 * x 32 x 2 flops each. */
static double peak(int64_t iters) {
    static uint32_t a[2 * 16 * 16] __attribute__((aligned(64))), b[16 * 32] __attribute__((aligned(64)));
    for (int i = 0; i < 2 * 16 * 16; i++) a[i] = 0x3f803f80u;
    for (int i = 0; i < 16 * 32; i++) b[i] = 0x00010001u;
    begin();
    _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    for (int64_t i = 0; i < iters; i++) {
        _tile_loadd(4, a, 64);
        _tile_loadd(5, a + 256, 64);
        _tile_loadd(6, b, 128);
        _tile_loadd(7, b + 16, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float out[256] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    end();
    volatile float sink = out[0];
    (void)sink;
    return (double)iters * 4 * 16 * 16 * 32 * 2;
}

const tg_ukernel tg_ukernel_amx = {
    .name = "amx", .mr = MR, .nr = NR, .a_entry_bytes = 4, .b_entry_bytes = 4, .kc = KC, .pack_a = pack_a_amx,
    .pack_b = pack_b_block32_avx512, .kernel = kernel, .short_kernels = { { 16, kernel_16 } }, .available = available,
    .peak = peak, .order = TG_UK_ORDER_BLOCK32, .kpair_align = B32_PAIRS, .begin = begin, .end = end, .ksub = KC,
    .kernel_direct = kernel_direct, .direct_any_stride = true };
