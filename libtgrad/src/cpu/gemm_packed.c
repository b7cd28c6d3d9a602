/* The packed path (route gemm): blocks or shared chunks of packed A and B, the variant's
 * micro-kernel over them, L1-aware reading of A in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "frame.h"

/* ---- the frame ---- */
enum { MC_MAX = 192, NC_MAX = 512 }; /* K panels: the variant's kc (even: only the last panel has an odd tail) */
/* The shared-chunk path's row block may hold all of a chunk's rows, up to this many, where they fit
 * in half of L2 (below). */
enum { MC_WHOLE = 512 };

/* Rows [r0, r0 + rows) of A packed into panels of mr rows, a tail panel of tail_mr rows. */
void tg_cpu_pack_rows(const tg_ukernel *uk, const tg_kernels *k, const tg_operand *A, int64_t r0, int64_t rows,
                      int64_t k0, int64_t kc, char *dst) {
    int64_t full = rows / k->mr * k->mr;
    if (full) uk->pack_a(A, r0, full, k0, kc, k->mr, dst);
    if (rows > full)
        uk->pack_a(A, r0 + full, rows - full, k0, kc, k->tail_mr,
                   dst + (size_t)(full * tg_panel_pairs(uk, kc)) * (size_t)uk->a_entry_bytes);
}

/* Tile height: the main one, or for M below it the shortest kernel that holds all of M; then the
 * tail panel's. (Choosing the kernel with the fewest padded rows for every M < 48 ran 17 rows on
 * the one-row kernel: 17x4096x4096 took 4.3 ms.) */
tg_kernels tg_cpu_kernels_for(const tg_ukernel *uk, int64_t M) {
    tg_kernels k = { .fn = uk->kernel, .mr = uk->mr };
    for (int i = 0; i < 3 && uk->short_kernels[i].fn && M < uk->mr; i++) {
        int32_t h = uk->short_kernels[i].rows;
        if (h < k.mr && h >= M) k.mr = h, k.fn = uk->short_kernels[i].fn;
    }
    k.tail = k.fn, k.tail_mr = k.mr;
    for (int i = 0; i < 3 && uk->short_kernels[i].fn && M % k.mr; i++) {
        int32_t h = uk->short_kernels[i].rows;
        if (h < k.tail_mr && h >= M % k.mr) k.tail_mr = h, k.tail = uk->short_kernels[i].fn;
    }
    return k;
}

typedef struct {
    const tg_ukernel *uk;
    tg_kernels k;
    bool direct; /* full row panels read A in place (kernel_direct) */
    tg_operand A, B;
    int64_t M, N, K, mc, nc, tiles_n;
    uint16_t *out;
    float *out32; /* instead of out: the fp32 accumulators (frame.h) */
    const tg_chain *ep;
    atomic_int failed;
} job;

/* Block sizes (at most mc_max x nc_max) for the tasks of one parallel loop: the slowest thread's
 * share of multiply-adds plus `pack_weight` multiply-adds' worth per element a task packs itself
 * (~8 measured on the AVX512-BF16 variant for the per-block path; the shared-chunk path packs
 * outside its tasks and only breaks ties toward bigger blocks). Results do not depend on it. */
static void choose_blocks(int64_t M, int64_t N, int64_t K, int64_t mr, int64_t nr, int32_t threads, int64_t mc_max,
                          int64_t nc_max, double pack_weight, int64_t *mc_out, int64_t *nc_out) {
    int64_t tm0 = (M + mc_max - 1) / mc_max, tn0 = (N + nc_max - 1) / nc_max;
    int64_t tm_max = (M + mr - 1) / mr, tn_max = (N + nr - 1) / nr;
    double best = -1;
    *mc_out = round_up((M + tm0 - 1) / tm0, mr), *nc_out = round_up((N + tn0 - 1) / tn0, nr);
    if (threads == 1) return;
    /* the column splits once (this runs on every call: divisions add up) */
    int64_t nbs[16], ncounts[16], tns = 0;
    for (int64_t tn = tn0; tn <= tn_max && tn < tn0 + 16; tn++, tns++) {
        nbs[tns] = round_up((N + tn - 1) / tn, nr);
        ncounts[tns] = (N + nbs[tns] - 1) / nbs[tns];
    }
    for (int64_t tm = tm0; tm <= tm_max && tm < tm0 + 16; tm++) {
        int64_t mb = round_up((M + tm - 1) / tm, mr), mcount = (M + mb - 1) / mb;
        for (int64_t i = 0; i < tns; i++) {
            int64_t nb = nbs[i], waves = (mcount * ncounts[i] + threads - 1) / threads;
            double cost = (double)waves * ((double)mb * (double)nb * (double)K + pack_weight * (double)K * (double)(mb + nb));
            if (best < 0 || cost < best) best = cost, *mc_out = mb, *nc_out = nb;
        }
    }
}


/* One full-height tile whose A rows are read in place (kernel_direct) over the K panel of kc
 * elements starting at k0. */
static void direct_tile(const tg_ukernel *uk, const tg_operand *A, int64_t row0, int64_t k0, int64_t kc,
                        const char *bp, const tg_tile *t) {
    uk->kernel_direct(kc, A->base + row0 * A->s0 + k0, A->s0, bp, t);
}

static void run_block(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    job *J = arg;
    const tg_ukernel *uk = J->uk;
    int64_t m0 = (task / J->tiles_n) * J->mc, n0 = (task % J->tiles_n) * J->nc;
    int64_t mb = J->M - m0 < J->mc ? J->M - m0 : J->mc;
    int64_t nb = J->N - n0 < J->nc ? J->N - n0 : J->nc;
    int64_t ldacc = round_up(nb, uk->nr), mr = J->k.mr;
    int64_t KC = uk->kc;
    int64_t kc_max = J->K < KC ? round_up(J->K, 2) : KC;
    bool multi_panel = J->K > KC;
    float scratch[TILE_MAX]; /* one tile's accumulators of a float32 result over one K panel */
    workspace *w = tg_cpu_workspace(multi_panel ? sizeof(float) * (size_t)(round_up(mb, mr) * ldacc) : 64,
                          (size_t)uk->a_entry_bytes * (size_t)(round_up(mb, mr) * tg_panel_pairs(uk, kc_max)),
                          (size_t)uk->b_entry_bytes * (size_t)(ldacc * tg_panel_pairs(uk, kc_max)));
    if (!w) {
        atomic_store(&J->failed, 1);
        return;
    }
    if (uk->begin) uk->begin();
    char *ap = w->apack, *bp = w->bpack;
    float *acc = w->acc;
    int64_t a_lo = J->direct ? mb / mr * mr : 0; /* rows below a_lo are read in place */
    for (int64_t k0 = 0; k0 < J->K; k0 += KC) {
        int64_t kc = J->K - k0 < KC ? J->K - k0 : KC, kp = tg_panel_pairs(uk, kc);
        bool last = k0 + KC >= J->K;
        uk->pack_b(&J->B, k0, kc, n0, nb, bp);
        if (a_lo < mb) tg_cpu_pack_rows(uk, &J->k, &J->A, m0 + a_lo, mb - a_lo, k0, kc, ap);
        tg_b_prefetch next;
        tg_b_prefetch_init(&next, &J->B, k0 + KC, last ? 0 : (J->K - k0 - KC < KC ? J->K - k0 - KC : KC), n0, nb,
                           ((mb + mr - 1) / mr) * ((nb + uk->nr - 1) / uk->nr));
        for (int64_t j0 = 0; j0 < nb; j0 += uk->nr) {
            const char *bj = bp + (size_t)(j0 * kp) * (size_t)uk->b_entry_bytes;
            for (int64_t i0 = 0; i0 < mb; i0 += mr) {
                tg_tile t = { .acc = acc + i0 * ldacc + j0, .ldacc = ldacc, .load = k0 > 0,
                              .out = last && J->out ? J->out + (m0 + i0) * J->N + n0 + j0 : NULL, .ldout = J->N,
                              .rows = (int32_t)(mb - i0 < mr ? mb - i0 : mr),
                              .cols = (int32_t)(nb - j0 < uk->nr ? nb - j0 : uk->nr) };
                if (J->out32 && !multi_panel) t.acc = scratch, t.ldacc = uk->nr;
                tg_prefetch_lines(&next.walk, next.per_call);
                if (i0 < a_lo) direct_tile(uk, &J->A, m0 + i0, k0, kc, bj, &t);
                else tg_kernel_pick(&J->k, t.rows)(kp, ap + (size_t)((i0 - a_lo) * kp) * (size_t)uk->a_entry_bytes, bj, &t);
                if (last && J->out32)
                    store_f32_tile(t.acc, t.ldacc, J->out32 + (m0 + i0) * J->N + n0 + j0, J->N, t.rows, t.cols);
            }
        }
    }
    if (uk->end) uk->end();
    tg_chain_apply_block(J->ep, J->out, J->N, m0, n0, mb, nb); /* the block is finished and in L2 */
}

/* ---- big problems: packed chunks shared by all threads ----
 * When many row blocks would each pack the same B panels again, the frame packs a chunk of B
 * (K panel x columns) and of A (rows x K panel) once, all threads together, then all threads
 * compute the chunk's tiles from the shared panels (two pool jobs per chunk and panel). A K panel
 * is up to KCB_MAX deep (a B micro-panel streams from L2 well on the machines measured), so
 * K <= KCB_MAX carries no fp32 accumulators through memory; deeper K keeps the chunk's
 * accumulators between panels, in order, as the per-block path does. Where the variant reads
 * row-major A in place (kernel_direct, odd K included), only a short last row panel is packed
 * and the row chunk is all of M, so B is packed exactly once, by the tasks that use it (own_cols).
 * Chunks are capped at CHUNK_BYTES each. */
enum { KCB_MAX = 4096 };
#define CHUNKED_B_BYTES ((double)(2 << 20)) /* see tg_cpu_gemm_packed */
#define STREAMED_B_BYTES ((double)(8 << 20))
#define PACKED_B_BLOCK_BYTES ((int64_t)256 << 10)
#define CHUNK_BYTES ((int64_t)8 << 20)
/* An output bigger than this will not be in cache when it is read: whole lines bypass the caches
 * (no read-for-ownership traffic; 4096x64x4096 went from ~700 to ~840 GFLOP/s). */
#define STREAM_BYTES (16.0 * 1024 * 1024)
/* Rows a multiple of 4 KiB apart put a tile's output lines (12 rows) in one L1 set, where they
 * evict the B micro-panel's lines of that set at every tile; bypassing the caches avoids that from
 * this size on (1024x512x8192: 780-850 -> 870-910 GFLOP/s; N = 8160: ~930 either way). */
#define STREAM_ALIASED_BYTES (1.0 * 1024 * 1024)

static bool stream_output(int64_t M, int64_t N) {
    double bytes = (double)M * (double)N * 2.0;
    return bytes > STREAM_BYTES || ((N * 2) % 4096 == 0 && bytes >= STREAM_ALIASED_BYTES);
}

/* testing aid (tgrad_debug_cpu_blocking): force this path with smaller caps */
static _Atomic int64_t dbg_chunk_bytes, dbg_panel_k;
static atomic_int dbg_flags;

bool tg_cpu_debug_no_gemm_t(void) { return atomic_load(&dbg_flags) & TGRAD_DEBUG_CPU_NO_GEMM_T; }
bool tg_cpu_debug_no_direct_a(void) { return atomic_load(&dbg_flags) & TGRAD_DEBUG_CPU_NO_DIRECT_A; }

TGRAD_API tgrad_status tgrad_debug_cpu_blocking(int64_t chunk_bytes, int64_t panel_k, int32_t flags) {
    if (chunk_bytes < 0 || panel_k < 0 || panel_k % 2 || (flags & ~(TGRAD_DEBUG_CPU_NO_DIRECT_A | TGRAD_DEBUG_CPU_NO_GEMM_T)))
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT,
                       "debug_cpu_blocking: chunk_bytes and panel_k must be >= 0, panel_k even, flags known");
    atomic_store(&dbg_chunk_bytes, chunk_bytes);
    atomic_store(&dbg_panel_k, panel_k);
    atomic_store(&dbg_flags, flags);
    return TGRAD_OK;
}

/* The caches from cpuid (x86: leaf 4 on Intel, 0x8000001D on AMD; each level's size is ways x
 * partitions x line x sets), else, for L2, Linux's sysfs (other architectures); zeros where
 * unknown. Read once. */
static tg_cpu_caches caches;
static pthread_once_t caches_once = PTHREAD_ONCE_INIT;

static int64_t sysfs_l2_bytes(void) {
    for (int i = 0; i < 8; i++) {
        char path[96], text[32] = { 0 };
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        int level = fscanf(f, "%d", &level) == 1 ? level : 0;
        fclose(f);
        if (level != 2) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r"))) return 0;
        bool ok = fgets(text, sizeof text, f) != NULL;
        fclose(f);
        char *end = text;
        long long n = ok ? strtoll(text, &end, 10) : 0;
        return n <= 0 ? 0 : *end == 'K' ? n << 10 : *end == 'M' ? n << 20 : n;
    }
    return 0;
}

static void read_caches(void) {
#if defined(__x86_64__) || defined(__i386__)
    static const unsigned leaves[2] = { 4, 0x8000001Du };
    for (int l = 0; l < 2 && !caches.l1d.ways; l++) {
        unsigned a, b, c, d;
        for (unsigned sub = 0; sub < 8; sub++) {
            if (!__get_cpuid_count(leaves[l], sub, &a, &b, &c, &d)) break; /* leaf past the CPU's last */
            unsigned type = a & 31, level = (a >> 5) & 7;
            if (type == 0) break; /* no more caches (or a leaf this vendor leaves empty) */
            tg_l1d_geometry g = { .ways = (int32_t)(b >> 22) + 1, .line = (int32_t)(b & 0xfff) + 1,
                                  .sets = (int32_t)c + 1 };
            if (type == 1 && level == 1) caches.l1d = g;
            if ((type == 1 || type == 3) && level == 2)
                caches.l2_bytes = (int64_t)g.ways * (((b >> 12) & 0x3ff) + 1) * g.line * g.sets;
        }
    }
#endif
    if (!caches.l2_bytes) caches.l2_bytes = sysfs_l2_bytes();
}

const tg_cpu_caches *tg_cpu_cache_sizes(void) {
    pthread_once(&caches_once, read_caches);
    return &caches;
}

int64_t tg_cpu_l2_block_rows(int64_t l2_bytes, int64_t row_bytes, int32_t mr, int64_t most) {
    if (l2_bytes <= 0 || row_bytes <= 0 || mr <= 0) return most;
    int64_t rows = l2_bytes / 2 / row_bytes / mr * mr;
    return rows < mr ? mr : rows > most ? most : rows;
}

int32_t tg_cpu_rows_per_l1_set(int32_t rows, int64_t stride_bytes, const tg_l1d_geometry *g) {
    if (g->ways <= 0 || g->sets <= 0 || g->line <= 0 || rows <= 0) return 0;
    enum { MAX_ROWS = 64 }; /* a tile's rows; more are counted as the first 64 */
    if (rows > MAX_ROWS) rows = MAX_ROWS;
    /* (r * |stride|) mod span, computed as (r * (|stride| mod span)) mod span: no product overflows,
     * whatever the stride (the rows a tile would read need not exist in a short view). */
    uint64_t span = (uint64_t)g->sets * (uint64_t)g->line;
    uint64_t s = (stride_bytes < 0 ? (uint64_t)0 - (uint64_t)stride_bytes : (uint64_t)stride_bytes) % span;
    int64_t set[MAX_ROWS], most = 0; /* each row's set, computed once: this runs on every plan */
    for (int32_t r = 0; r < rows; r++) set[r] = (int64_t)((uint64_t)r * s % span / (uint64_t)g->line);
    for (int32_t r = 0; r < rows; r++) {
        int64_t same = 0;
        for (int32_t q = 0; q < rows; q++) same += set[q] == set[r];
        if (same > most) most = same;
    }
    return (int32_t)most;
}

bool tg_cpu_direct_a_fits_l1(int32_t mr, int64_t stride_bytes, const tg_l1d_geometry *g) {
    return g->ways <= 0 || tg_cpu_rows_per_l1_set(mr, stride_bytes, g) <= g->ways;
}

/* tg_cpu_direct_a_fits_l1 for this machine's L1, remembered for the last (mr, stride) asked: its
 * modulo arithmetic was ~3% of a 64^3 product, and a program multiplies by the same operand
 * shapes again and again. One atomic word holds the key and the answer (stride < 2^40 bytes, mr <
 * 2^8; others are computed every time). */
static _Atomic uint64_t l1_memo; /* stride << 24 | mr << 16 | 1 << 8 (valid) | fits */

static bool direct_a_fits_l1(int32_t mr, int64_t stride_bytes) {
    uint64_t s = stride_bytes < 0 ? (uint64_t)0 - (uint64_t)stride_bytes : (uint64_t)stride_bytes;
    bool memo = s < ((uint64_t)1 << 40) && mr > 0 && mr < 256;
    uint64_t key = s << 24 | (uint64_t)mr << 16 | 1u << 8, m = atomic_load_explicit(&l1_memo, memory_order_relaxed);
    if (memo && (m & ~(uint64_t)0xff) == key) return m & 1;
    bool fits = tg_cpu_direct_a_fits_l1(mr, stride_bytes, &tg_cpu_cache_sizes()->l1d);
    if (memo) atomic_store_explicit(&l1_memo, key | fits, memory_order_relaxed);
    return fits;
}

/* Full-height row panels read row-major A in place where the variant can (kernel_direct), unless
 * the panel's rows would share an L1 set beyond its ways: then every line of A is evicted before
 * its next use. Rows 4 KiB apart (K = 2048, 4096, ...) put all 12 in one set: on AMD Zen 4 (8
 * ways) 2048^3 ran at 297 GFLOP/s read in place and 412 packed, 4096^3 297 vs 405 (C loop, 2
 * threads, alternating runs); on Zen 5 (12 ways) reading in place stays ahead (packing was 4-5%
 * slower there). Rows 2 KiB apart (6 per set) measured the same either way on Zen 4. */
static bool can_read_a_in_place(const tg_ukernel *uk, int32_t mr, const tg_operand *A) {
    return uk->kernel_direct && mr == uk->mr && A->s1 == 1 && !(atomic_load(&dbg_flags) & TGRAD_DEBUG_CPU_NO_DIRECT_A) &&
           (uk->direct_any_stride || direct_a_fits_l1(mr, A->s0 * 2)); /* |s0| < INT64_MAX / 2: inside A's buffer */
}

typedef struct {
    const tg_ukernel *uk;
    tg_kernels k;
    tg_operand A, B;
    int64_t N;           /* output row stride */
    int64_t m0, mb, n0, nb, k0, kc; /* this chunk pair and K panel */
    bool load, last, stream;
    char *apack, *bpack; /* direct: apack holds only the short last row panel */
    float *acc;          /* chunk accumulators (multi-panel K only), row stride ldacc */
    int64_t ldacc;
    int64_t a_lo;        /* rows below it are read in place (direct), the rest packed from apack */
    int64_t a_tasks, a_group, b_group; /* packing split, in micro-panels per task */
    int64_t mc, nc, tiles_n;           /* compute split */
    bool own_cols; /* a task owns nc columns over all rows and packs their B itself (see below) */
    uint16_t *out;
    float *out32; /* instead of out: the fp32 accumulators (frame.h) */
    const tg_chain *ep;
} chunk_job;

static void chunk_pack(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    chunk_job *J = arg;
    const tg_ukernel *uk = J->uk;
    int64_t kp = tg_panel_pairs(uk, J->kc);
    if (task < J->a_tasks) {
        int64_t r0 = J->a_lo + task * J->a_group * J->k.mr, rows = J->a_group * J->k.mr;
        if (rows > J->mb - r0) rows = J->mb - r0;
        tg_cpu_pack_rows(uk, &J->k, &J->A, J->m0 + r0, rows, J->k0, J->kc,
                         J->apack + (size_t)((r0 - J->a_lo) * kp) * (size_t)uk->a_entry_bytes);
    } else {
        int64_t c0 = (task - J->a_tasks) * J->b_group * uk->nr, cols = J->b_group * uk->nr;
        if (cols > J->nb - c0) cols = J->nb - c0;
        uk->pack_b(&J->B, J->k0, J->kc, J->n0 + c0, cols, J->bpack + (size_t)(c0 * kp) * (size_t)uk->b_entry_bytes);
    }
}

/* chunk_tiles for a variant with K sub-panels (ukernel.h, ksub): per row block of at most MC_MAX
 * rows, a column micro-panel at a time (packed here first when the task owns its columns): for
 * each sub-panel of ksub elements, every row tile of the block against that micro-panel's
 * sub-panel (in L1), A read in place below a_lo or from its packed panel; the accumulators in the
 * chunk's (K past one panel) or here (a micro-panel's column of the block: 24 KiB). The kernels
 * see the same blocks in the same order: the bytes are the whole panel's. */
static void chunk_tiles_ksub(const chunk_job *J, int64_t i_lo, int64_t i_hi, int64_t j_lo, int64_t j_hi) {
    const tg_ukernel *uk = J->uk;
    int64_t kp = tg_panel_pairs(uk, J->kc), sp = uk->ksub / 2, mr = J->k.mr, nr = uk->nr;
    int64_t aeb = uk->a_entry_bytes, beb = uk->b_entry_bytes;
    float local[MC_WHOLE * 32] __attribute__((aligned(64)));
    for (int64_t ib = i_lo; ib < i_hi; ib += J->mc) {
        int64_t ie = ib + J->mc < i_hi ? ib + J->mc : i_hi;
        for (int64_t j0 = j_lo; j0 < j_hi; j0 += nr) {
            char *bp = J->bpack + (size_t)(j0 * kp * beb);
            int32_t cols = (int32_t)(J->nb - j0 < nr ? J->nb - j0 : nr);
            if (J->own_cols && ib == i_lo) uk->pack_b(&J->B, J->k0, J->kc, J->n0 + j0, cols, bp);
            for (int64_t p0 = 0; p0 < kp; p0 += sp) {
                int64_t pairs = kp - p0 < sp ? kp - p0 : sp;
                bool last = J->last && p0 + pairs == kp;
                for (int64_t i0 = ib; i0 < ie; i0 += mr) {
                    int32_t rows = (int32_t)(J->mb - i0 < mr ? J->mb - i0 : mr);
                    tg_tile t = { .acc = J->acc ? J->acc + i0 * J->ldacc + j0 : local + (i0 - ib) * nr,
                                  .ldacc = J->acc ? J->ldacc : nr, .load = J->load || p0 > 0,
                                  .out = last && J->out ? J->out + (J->m0 + i0) * J->N + J->n0 + j0 : NULL,
                                  .ldout = J->N, .rows = rows, .cols = cols, .stream = J->stream };
                    if (i0 < J->a_lo) {
                        int64_t k_in = J->kc - 2 * p0 < 2 * sp ? J->kc - 2 * p0 : 2 * sp; /* elements */
                        direct_tile(uk, &J->A, J->m0 + i0, J->k0 + 2 * p0, k_in, bp + (size_t)(p0 * nr * beb), &t);
                    } else {
                        int64_t h = rows < mr ? J->k.tail_mr : mr; /* the panel's packed height */
                        tg_kernel_pick(&J->k, rows)(pairs, J->apack + (size_t)(((i0 - J->a_lo) * kp + p0 * h) * aeb),
                                                    bp + (size_t)(p0 * nr * beb), &t);
                    }
                    if (last && J->out32)
                        store_f32_tile(t.acc, t.ldacc, J->out32 + (J->m0 + i0) * J->N + J->n0 + j0, J->N, rows,
                                       cols);
                }
            }
        }
        if (J->last) tg_chain_apply_block(J->ep, J->out, J->N, J->m0 + ib, J->n0 + j_lo, ie - ib, j_hi - j_lo);
    }
}

static void chunk_tiles(int64_t task, int32_t worker, void *arg) {
    (void)worker;
    chunk_job *J = arg;
    const tg_ukernel *uk = J->uk;
    int64_t kp = tg_panel_pairs(uk, J->kc), mr = J->k.mr, nr = uk->nr, aeb = uk->a_entry_bytes, beb = uk->b_entry_bytes;
    int64_t i_lo = J->own_cols ? 0 : (task / J->tiles_n) * J->mc, j_lo = (task % J->tiles_n) * J->nc;
    int64_t i_hi = J->own_cols || i_lo + J->mc > J->mb ? J->mb : i_lo + J->mc;
    int64_t j_hi = j_lo + J->nc < J->nb ? j_lo + J->nc : J->nb;
    float scratch[TILE_MAX]; /* one tile's accumulators of a float32 result over one K panel */
    if (uk->begin) uk->begin();
    if (uk->ksub && uk->ksub < J->kc && nr == 32 && J->mc <= MC_WHOLE) {
        chunk_tiles_ksub(J, i_lo, i_hi, j_lo, j_hi);
        i_hi = i_lo; /* done: skip the whole-panel loop */
    }
    for (int64_t ib = i_lo; ib < i_hi; ib += J->mc) { /* row blocks of mc: one, unless own_cols */
        for (int64_t j0 = j_lo; j0 < j_hi; j0 += nr) {
            char *bp = J->bpack + (size_t)(j0 * kp * beb);
            if (J->own_cols && ib == i_lo)
                uk->pack_b(&J->B, J->k0, J->kc, J->n0 + j0, J->nb - j0 < nr ? J->nb - j0 : nr, bp);
            int64_t ie = ib + J->mc < i_hi ? ib + J->mc : i_hi;
            for (int64_t i0 = ib; i0 < ie; i0 += mr) {
                tg_tile t = { .acc = J->acc ? J->acc + i0 * J->ldacc + j0 : NULL, .ldacc = J->ldacc, .load = J->load,
                              .out = J->last && J->out ? J->out + (J->m0 + i0) * J->N + J->n0 + j0 : NULL, .ldout = J->N,
                              .rows = (int32_t)(J->mb - i0 < mr ? J->mb - i0 : mr),
                              .cols = (int32_t)(J->nb - j0 < nr ? J->nb - j0 : nr), .stream = J->stream };
                if (J->out32 && !J->acc) t.acc = scratch, t.ldacc = nr;
                if (i0 < J->a_lo)
                    direct_tile(uk, &J->A, J->m0 + i0, J->k0, J->kc, bp, &t);
                else
                    tg_kernel_pick(&J->k, t.rows)(kp, J->apack + (size_t)((i0 - J->a_lo) * kp * aeb), bp, &t);
                if (J->last && J->out32)
                    store_f32_tile(t.acc, t.ldacc, J->out32 + (J->m0 + i0) * J->N + J->n0 + j0, J->N, t.rows, t.cols);
            }
        }
        /* the row block is finished over the task's columns and still in L2: long runs for the
         * epilogue (per column panel, runs of nr elements cost more in calls than in ops) */
        if (J->last)
            tg_chain_apply_block(J->ep, J->out, J->N, J->m0 + ib, J->n0 + j_lo,
                                 (ib + J->mc < i_hi ? ib + J->mc : i_hi) - ib, j_hi - j_lo);
    }
    if (uk->end) uk->end();
    if (J->stream && J->last) tg_store_fence();
}

static tgrad_status matmul_chunked(const tg_ukernel *uk, const tg_kernels *k, bool direct, const tg_operand *A,
                                   const tg_operand *B, int64_t M, int64_t N, int64_t K, int32_t threads,
                                   uint16_t *out, float *out32, const tg_chain *ep) {
    int32_t mr = k->mr;
    int64_t cap = atomic_load(&dbg_chunk_bytes), kcb_max = atomic_load(&dbg_panel_k);
    if (!cap) cap = CHUNK_BYTES;
    if (!kcb_max) kcb_max = KCB_MAX;
    if (uk->kpair_align > 1) kcb_max = round_up(kcb_max, 2 * (int64_t)uk->kpair_align); /* panels start at blocks */
    int64_t nr = uk->nr, kcb = K <= kcb_max ? round_up(K, 2) : kcb_max;
    bool multi = K > kcb;
    /* one packed row of A, one packed column of B, over a K panel */
    int64_t a_row_bytes = tg_panel_pairs(uk, kcb) * uk->a_entry_bytes, b_col_bytes = tg_panel_pairs(uk, kcb) * uk->b_entry_bytes;
    /* The most rows (columns) the cap allows, then as many chunks as that asks for, of even sizes
     * in whole tiles (so a chunk may pass the cap by less than a tile): 1020 + 1020 + 8 rows would
     * pack all of B a third time for 8 rows. */
    int64_t cols_cap = cap / b_col_bytes > 0 ? cap / b_col_bytes : 1, nchunks = (N + cols_cap - 1) / cols_cap;
    int64_t nch = round_up((N + nchunks - 1) / nchunks, nr);
    int64_t rows_cap = direct && !multi ? M /* nothing to hold: one row chunk, B packed once */
                                        : cap / a_row_bytes;
    if (multi && rows_cap > 2 * cap / (4 * nch)) rows_cap = 2 * cap / (4 * nch); /* fp32 accumulators too */
    if (rows_cap < 1) rows_cap = 1;
    int64_t mchunks = (M + rows_cap - 1) / rows_cap;
    int64_t mch = round_up((M + mchunks - 1) / mchunks, mr);
    int64_t apanel_rows = direct ? mr : mch;
    /* A row block and a B micro-panel at a time: the block's rows (read in place, or packed) over
     * the K panel stay in this core's L2 while the task's micro-panels stream past (AMX, 1 thread,
     * paired: 512x4096x4096 and 512x4096x1024 +10%, 4096^3 +20%, 1024x8192x1024 +10% with 128 rows
     * of 8 KiB in a 2 MiB L2 against 192; 64 rows was 7% slower than 192). */
    int64_t fit = tg_cpu_l2_block_rows(tg_cpu_cache_sizes()->l2_bytes, direct ? 2 * kcb : a_row_bytes, mr, MC_WHOLE);
    /* ... and where all of the chunk's rows fit (up to 512), one block of them all, so that each B
     * micro-panel serves every row while it is hot (AMX, 2 threads, quiet: 512x1024x4096 0.89 of
     * the time; 2048^3's 256 rows against 192 measured 1.5% slower, hence the cap when not all fit) */
    int64_t mc_max = fit >= mch ? fit : fit < MC_MAX ? fit : MC_MAX;
    workspace *w = tg_cpu_workspace(multi ? sizeof(float) * (size_t)(mch * nch) : 64,
                          (size_t)(apanel_rows * a_row_bytes), (size_t)(nch * b_col_bytes));
    if (!w) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate packing buffers");
    chunk_job J = { .uk = uk, .k = *k, .A = *A, .B = *B, .N = N,
                    .apack = w->apack, .bpack = w->bpack, .acc = multi ? w->acc : NULL, .out = out, .out32 = out32, .ep = ep,
                    /* an epilogue reads the block back at once: keep it in cache */
                    .stream = stream_output(M, N) && !(ep && ep->n) };
    /* With one K panel, the outer loop's chunk is packed once and serves every chunk of the inner
     * loop, which is packed again each time: rows outer (B packed per row chunk) unless packing A
     * per column chunk moves fewer bytes (FMA variants at 2048^3: B twice vs A once). */
    int64_t mcount = (M + mch - 1) / mch, ncount = (N + nch - 1) / nch;
    bool n_outer = !multi && !direct && (double)(ncount - 1) * (double)M * (double)a_row_bytes <
                                            (double)(mcount - 1) * (double)N * (double)b_col_bytes;
    int64_t outer = n_outer ? ncount : mcount, inner = n_outer ? mcount : ncount;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            int64_t mi = n_outer ? in : o, ni = n_outer ? o : in;
            J.m0 = mi * mch, J.mb = M - J.m0 < mch ? M - J.m0 : mch;
            J.n0 = ni * nch, J.nb = N - J.n0 < nch ? N - J.n0 : nch;
            J.a_lo = direct ? J.mb / mr * mr : 0;
            J.ldacc = round_up(J.nb, nr);
            choose_blocks(J.mb, J.nb, kcb, mr, nr, threads, mc_max, NC_MAX, 0.5, &J.mc, &J.nc);
            J.tiles_n = (J.nb + J.nc - 1) / J.nc;
            int64_t tiles = ((J.mb + J.mc - 1) / J.mc) * J.tiles_n;
            for (J.k0 = 0; J.k0 < K; J.k0 += kcb) {
                J.kc = K - J.k0 < kcb ? K - J.k0 : kcb;
                J.load = J.k0 > 0, J.last = J.k0 + kcb >= K;
                bool pack_a = multi || n_outer || ni == 0, pack_b = multi || !n_outer || mi == 0;
                int64_t a_panels = (J.mb - J.a_lo + mr - 1) / mr, b_panels = (J.nb + nr - 1) / nr;
                int64_t want = 2 * (int64_t)threads;
                J.a_group = a_panels ? (a_panels + want - 1) / want : 1, J.b_group = (b_panels + want - 1) / want;
                J.a_tasks = pack_a ? (a_panels + J.a_group - 1) / J.a_group : 0;
                int64_t b_tasks = pack_b ? (b_panels + J.b_group - 1) / J.b_group : 0;
                /* A read in place, one K panel: each task takes a group of columns over all rows
                 * and packs each B micro-panel just before its first row block uses it (hot in
                 * L1/L2), so there is no packing phase and no barrier before the tiles (2
                 * threads: 1024^3 3-5% faster, 1024x1024x2048 and x4096 4-8%, 2048^3 and up
                 * within the noise). The variants that pack A keep the shared phase (this way
                 * measured 1-2% slower there: A still needs its phase). Not where A is far taller than B is wide (plan.c's PATH_GEMM_T: W's 4096 rows
                 * against 128 columns of x): each task would read all of A, that is A once per
                 * task (AMX, 2 threads, 128x4096x4096 as its transpose: 1.5x the time). */
                J.own_cols = direct && !multi && pack_b && b_panels >= 2 * (int64_t)threads && J.mb <= 8 * J.nb;
                if (J.own_cols) {
                    int64_t groups = 2 * (int64_t)threads;
                    J.nc = round_up((J.nb + groups - 1) / groups, nr);
                    J.tiles_n = (J.nb + J.nc - 1) / J.nc;
                    tiles = J.tiles_n, b_tasks = 0;
                }
                if (J.a_tasks + b_tasks) /* own_cols: at most the short last row panel, here */
                    run_tasks(J.a_tasks + b_tasks, J.own_cols ? 1 : threads, chunk_pack, &J);
                run_tasks(tiles, threads, chunk_tiles, &J);
            }
        }
    }
    return TGRAD_OK;
}

/* The packed path (route gemm) for A [M, K] @ B [K, N] into out [M, N] row-major: per-block tasks
 * or, for big problems, chunks packed by all threads together. */
tgrad_status tg_cpu_gemm_packed(const tg_ukernel *uk, const tg_operand *A, const tg_operand *B, int64_t M, int64_t N,
                                int64_t K, int32_t threads, uint16_t *out, float *out32, const tg_chain *ep) {
    if (out32 && uk->mr * uk->nr > TILE_MAX) return tg_fail(TGRAD_ERR_INTERNAL, "matmul: the %s tile exceeds TILE_MAX", uk->name);
    tg_kernels k = tg_cpu_kernels_for(uk, M);
    int32_t mr = k.mr;
    bool direct = can_read_a_in_place(uk, mr, A);
    double b_bytes = (double)K * (double)N * 2.0;
    /* Shared chunks once B would be packed again for more than one row block of up to
     * 2 x MC_MAX rows; and where A is read in place and B is 2 MiB or more, when K is at most
     * 1024 or (up to 2048) M is past MC_MAX: there the chunk tasks pack each B micro-panel right
     * before using it, with no barrier, in one K panel (C loop, 2 threads, paired: 64 to 384 x
     * 1024 x 1024 +7-10%, 256x2048x2048 +7%; 64 to 192 x 2048 x 2048 1-3% slower that way, and
     * below 2 MiB of B the per-block path's single job is faster). */
    bool chunked = M > 2 * MC_MAX || atomic_load(&dbg_chunk_bytes) ||
                   (direct && b_bytes >= CHUNKED_B_BYTES &&
                    (K <= 1024 || (K <= 2048 && M > MC_MAX)));
    if (chunked) return matmul_chunked(uk, &k, direct, A, B, M, N, K, threads, out, out32, ep);
    /* Per-block tasks: blocks up to 2 x MC_MAX rows, so that up to there B is packed once rather
     * than once per row block (C loop, 2 threads, paired, against blocks of at most MC_MAX rows
     * and chunks from 3 of them: 200 to 384 x 3000-4096 x 1024-4096 +5-20%, 256x512x512 +10%,
     * 300^3 +5%); and where B streams from memory (8 MiB or more), a K panel's packed B block
     * at most 256 KiB, so that it and the next one's prefetched source fit L2 together
     * (AVX512-BF16, 256 columns: 64 to 256 x 4096 x 4096, 96x2048x4096, 64x8192x1024 +2-5%;
     * 128 columns measured slower, and for a B in cache the extra column blocks cost more,
     * 200x1030x700 -6%; the FMA variants' 256-deep panels are that size at 512 columns). */
    int64_t mc, nc, nc_max = NC_MAX;
    if (b_bytes >= STREAMED_B_BYTES) {
        nc_max = PACKED_B_BLOCK_BYTES / ((uk->kc / 2) * uk->b_entry_bytes) / uk->nr * uk->nr;
        nc_max = nc_max < uk->nr ? uk->nr : nc_max > NC_MAX ? NC_MAX : nc_max;
    }
    choose_blocks(M, N, K, mr, uk->nr, threads, 2 * MC_MAX, nc_max, 8.0, &mc, &nc);
    int64_t tiles_m = (M + mc - 1) / mc, tiles_n = (N + nc - 1) / nc;
    job J = { .uk = uk, .k = k, .direct = direct, .M = M, .N = N, .K = K,
              .mc = mc, .nc = nc, .tiles_n = tiles_n, .out = out, .out32 = out32, .ep = ep, .A = *A, .B = *B };
    atomic_init(&J.failed, 0);
    run_tasks(tiles_m * tiles_n, threads, run_block, &J);
    if (atomic_load(&J.failed))
        return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "matmul: cannot allocate packing buffers");
    return TGRAD_OK;
}
