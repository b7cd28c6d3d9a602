/* CPU kernel variants: which one packed and streamed products run (forced, or by a rule). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "frame.h"

/* ---- variant selection ---- */
static const tg_ukernel *const variants[] = {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    &tg_ukernel_avx512bf16,
    &tg_ukernel_avx512f,
    &tg_ukernel_avx2,
#endif
#if defined(TGRAD_HAVE_NEON_VARIANT)
    &tg_ukernel_neon,
#endif
    &tg_ukernel_portable,
};
enum { NVARIANTS = (int)(sizeof variants / sizeof variants[0]) };

/* Packed products (the gemm route) run the "gemm" variant; one-row and few-row products (the
 * rowvec and skinny routes, which stream B in place) run the "stream" variant. A variant forced by
 * TGRAD_CPU_ISA or tgrad_set_cpu_isa is both. Every variant gives the same bytes, so the choice is
 * about speed only, and it is a rule, so that two processes on one machine take the same routes:
 *  - stream = the first variant this CPU runs (the list is in order of capability);
 *  - gemm = the same, unless another variant's core instruction does at least PREFER_RATE times
 *    its flops per cycle, then the fastest. The rates come, in this order, from
 *    tgrad_debug_cpu_isa_rates (tests); from nothing when the CPU has no AVX512-BF16 (avx512f's
 *    zmm FMA does at least avx2's flops per cycle on every AVX-512 core, so the most capable
 *    variant stays); from the table of known CPUs below, by CPUID vendor and family; else
 *    measured once per process (an unknown CPU with AVX512-BF16), with a dead band around
 *    PREFER_RATE where a close measurement is repeated and, if still close, the most capable
 *    variant stays. docs/performance.md ("Which variant") has the measurements behind the table. */
#define PREFER_RATE 1.41421356 /* sqrt(2): halfway, in ratio, between the 1x and 2x cores show */
#define DEAD_BAND 1.15         /* a measured ratio within this factor of PREFER_RATE is not trusted */

/* The selection in one word, so that readers see the gemm variant, the stream variant and why
 * together: bits 0-5 the stream variant's index, 6-11 the gemm variant's index + 1, 12-15 the
 * basis (0 until first use), 16-23 the row of known_cpus for BASIS_TABLE. */
enum basis { BASIS_FORCED = 1, BASIS_ONLY, BASIS_NO_BF16, BASIS_TABLE, BASIS_MEASURED, BASIS_CLOSE, BASIS_RATES };
static atomic_int selection;

static int encode_selection(int gemm, int stream, enum basis basis, int row) {
    return stream | (gemm + 1) << 6 | (int)basis << 12 | row << 16;
}
static enum basis basis_of(int sel) { return (enum basis)((sel >> 12) & 15); }
const tg_ukernel *tg_cpu_gemm_variant(int sel) { return variants[((sel >> 6) & 63) - 1]; }
const tg_ukernel *tg_cpu_stream_variant(int sel) { return variants[sel & 63]; }

/* The block32 order's kernel. Automatic choice: AMX where it runs; else the block32 kernel of the
 * instruction the pairwise packed products use (the gemm variant, chosen by the rule above from
 * the cores' rates): vdpbf16ps (avx512bf16_block32) where that is avx512bf16 (AMD Zen 4 and 5),
 * the FMA kernels (avx512f_block32, avx2_block32) where it is avx512f (Intel) or avx2, NEON's
 * where it is neon; else the portable reference. A forced variant takes its own instruction's
 * block32 kernel, so that forcing each in turn tests each: avx512bf16 the vdpbf16ps one, avx512f
 * and avx2 their FMA ones, portable the portable one. */
const tg_ukernel *tg_cpu_block32_variant(int sel) {
    const tg_ukernel *gemm = tg_cpu_gemm_variant(sel);
    bool forced = basis_of(sel) == BASIS_FORCED;
    if (gemm == &tg_ukernel_portable) return &tg_ukernel_portable_block32;
#if defined(TGRAD_HAVE_AMX_VARIANT)
    if (!forced && tg_ukernel_amx.available()) return &tg_ukernel_amx;
#endif
#if defined(TGRAD_HAVE_X86_VARIANTS)
    if (gemm == &tg_ukernel_avx512bf16 && tg_ukernel_avx512bf16_block32.available())
        return &tg_ukernel_avx512bf16_block32;
    if (gemm == &tg_ukernel_avx512f && tg_ukernel_avx512f_block32.available()) return &tg_ukernel_avx512f_block32;
    if (gemm == &tg_ukernel_avx2 && tg_ukernel_avx2_block32.available()) return &tg_ukernel_avx2_block32;
#endif
#if defined(TGRAD_HAVE_NEON_VARIANT)
    if (gemm == &tg_ukernel_neon) return &tg_ukernel_neon_block32;
#endif
    (void)forced;
    return &tg_ukernel_portable_block32;
}

/* One-row block32 products stream B: with vdpbf16ps (avx512bf16_block32's rowvec) where the CPU
 * has it, as the pairwise order's one-row products do (automatic choice, or a forced avx512bf16),
 * else with AVX-512F FMAs (avx512f_block32, and a forced avx512f); with AVX2 FMAs where the
 * pairwise order's products take avx2 (avx2_block32: AVX2-only CPUs, and a forced avx2). */
/* The block32 order's few-row kernel (row-major B read in place) and the most rows it takes: the
 * packed kernel's own skinny hook where it has one (vdpbf16ps, 16 rows); under AMX the vdpbf16ps
 * kernel's up to 8 rows when B has 2^16 elements or more (AMX packs B for its 16-row tiles:
 * 4x4096x4096 1.44 against 2.07 ms, 8 rows 1.98 against 2.17, 16 rows 2.94 against 1.90; but a
 * decoding step's 4x80x64 attention product 4.1 against 2.9 us; 2 threads, the Xeon at load 3-4);
 * on AVX2 the stream kernel's, 4 rows (its L1 chains lose to the packed kernel past that, and to
 * avx512f_block32's packed kernel at any height); none on portable. */
const tg_ukernel *tg_cpu_block32_skinny_variant(int sel, double b_elements, int64_t *max_rows) {
    const tg_ukernel *uk = tg_cpu_block32_variant(sel);
    *max_rows = 16;
    if (uk->skinny) return uk;
#if defined(TGRAD_HAVE_AMX_VARIANT) && defined(TGRAD_HAVE_X86_VARIANTS)
    if (uk == &tg_ukernel_amx && b_elements >= 65536.0 && tg_ukernel_avx512bf16_block32.available()) {
        *max_rows = 8;
        return &tg_ukernel_avx512bf16_block32;
    }
#endif
#if defined(TGRAD_HAVE_X86_VARIANTS)
    if (uk == &tg_ukernel_avx2_block32 && tg_ukernel_avx2_block32_stream.available()) {
        *max_rows = 4;
        return &tg_ukernel_avx2_block32_stream;
    }
#endif
    (void)b_elements;
    return NULL;
}

const tg_ukernel *tg_cpu_block32_stream_variant(int sel) {
#if defined(TGRAD_HAVE_X86_VARIANTS)
    const tg_ukernel *gemm = tg_cpu_gemm_variant(sel);
    bool forced = basis_of(sel) == BASIS_FORCED;
    if (gemm == &tg_ukernel_avx2) return tg_ukernel_avx2_block32_stream.available() ? &tg_ukernel_avx2_block32_stream : NULL;
    if (gemm != &tg_ukernel_avx512f && gemm != &tg_ukernel_avx512bf16) return NULL;
    if ((!forced || gemm == &tg_ukernel_avx512bf16) && tg_ukernel_avx512bf16_block32.available())
        return &tg_ukernel_avx512bf16_block32;
    if (tg_ukernel_avx512f_block32_stream.available()) return &tg_ukernel_avx512f_block32_stream;
#else
    (void)sel;
#endif
    return NULL;
}

const tg_ukernel *tg_cpu_order_current(void) {
    int sel = tg_cpu_selected();
    return tgrad_matmul_order() == TGRAD_MATMUL_ORDER_BLOCK32 ? tg_cpu_block32_variant(sel) : tg_cpu_gemm_variant(sel);
}

TGRAD_API tgrad_status tgrad_cpu_amx_check(void) {
#if defined(TGRAD_HAVE_AMX_VARIANT)
    const char *why = tg_amx_unavailable();
    if (!why) return TGRAD_OK;
    return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "cpu_amx_check: AMX does not run here: %s", why);
#else
    return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE,
                   "cpu_amx_check: this build has no AMX kernel (not x86-64, or the compiler knows no AMX)");
#endif
}

TGRAD_API const char *tgrad_matmul_order_kernel(int32_t order) {
    int sel = tg_cpu_selected();
    if (order == TGRAD_MATMUL_ORDER_PAIRWISE) return tg_cpu_gemm_variant(sel)->name;
    if (order == TGRAD_MATMUL_ORDER_BLOCK32) return tg_cpu_block32_variant(sel)->name;
    return NULL;
}

static const tg_ukernel *find_variant(const char *name) {
    for (int i = 0; i < NVARIANTS; i++)
        if (strcmp(variants[i]->name, name) == 0) return variants[i];
    return NULL;
}

static int variant_index(const tg_ukernel *k) {
    for (int i = 0; i < NVARIANTS; i++)
        if (variants[i] == k) return i;
    return NVARIANTS - 1;
}

double tg_cpu_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the CPU's identity and the known CPUs ---- */
typedef struct {
    char vendor[13];
    int family, model;
} cpu_identity;

/* Cores whose core-instruction rates are known: flops per cycle and core of vdpbf16ps (zmm,
 * avx512bf16) and of an fp32 FMA (zmm, avx512f), in any common unit; a row applies to a CPU of
 * that vendor and family with AVX512-BF16. */
static const struct known_cpu {
    const char *vendor;
    int family;
    double bf16_rate, fma_rate;
    const char *why; /* tgrad_cpu_isa_reason's text */
} known_cpus[] = {
    { "GenuineIntel", 6, 1, 2,
      "rule: an Intel family-6 core with AVX512-BF16: vdpbf16ps does half the flops of an fp32 FMA, so "
      "packed products take avx512f's FMA kernel" },
    { "AuthenticAMD", 0x19, 2, 1,
      "rule: an AMD Zen 4 core (family 0x19) with AVX512-BF16: vdpbf16ps does twice the flops of an fp32 "
      "FMA, so every route takes avx512bf16" },
    { "AuthenticAMD", 0x1a, 2, 1,
      "rule: an AMD Zen 5 core (family 0x1a) with AVX512-BF16: vdpbf16ps does twice the flops of an fp32 "
      "FMA, so every route takes avx512bf16" },
};
enum { NKNOWN = (int)(sizeof known_cpus / sizeof known_cpus[0]) };

static cpu_identity cpuid_identity(void) {
    cpu_identity id = { "", 0, 0 };
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        memcpy(id.vendor, &b, 4), memcpy(id.vendor + 4, &d, 4), memcpy(id.vendor + 8, &c, 4);
        id.vendor[12] = 0;
    }
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        int family = (a >> 8) & 15, model = (a >> 4) & 15;
        if (family == 15) family += (a >> 20) & 255;
        if (family == 6 || family >= 15) model |= ((a >> 16) & 15) << 4;
        id.family = family, id.model = model;
    }
#endif
    return id;
}

static cpu_identity real_identity, dbg_identity;
static atomic_int dbg_identity_set;
static pthread_once_t identity_once = PTHREAD_ONCE_INIT;
static void read_identity(void) { real_identity = cpuid_identity(); }

static cpu_identity identity(void) {
    if (atomic_load(&dbg_identity_set)) return dbg_identity;
    pthread_once(&identity_once, read_identity);
    return real_identity;
}

static int known_row(cpu_identity id) {
    for (int r = 0; r < NKNOWN; r++)
        if (strcmp(known_cpus[r].vendor, id.vendor) == 0 && known_cpus[r].family == id.family) return r;
    return -1;
}

/* ---- measured rates: the fallback for an unknown CPU ---- */
/* Flops per second of each variant's core instruction on the calling thread (0: not measured:
 * unavailable, or the portable variant), best of the runs taken in turn (ROUND runs of ~2000
 * iterations per variant each, well under a millisecond); or the rates a test set with
 * tgrad_debug_cpu_isa_rates. */
static double measured_rate[NVARIANTS], dbg_rates[NVARIANTS];
static atomic_int dbg_rates_set;

static bool simd_available(int i) { return variants[i] != &tg_ukernel_portable && variants[i]->available(); }

static void measure_round(double rate[NVARIANTS]) {
    enum { ITERS = 2000, REPS = 5 };
    for (int i = 0; i < NVARIANTS; i++)
        if (simd_available(i)) variants[i]->peak(ITERS / 4); /* wake the vector units up */
    for (int rep = 0; rep < REPS; rep++)
        for (int i = 0; i < NVARIANTS; i++) {
            if (!simd_available(i)) continue;
            double t0 = tg_cpu_now_s(), f = variants[i]->peak(ITERS), dt = tg_cpu_now_s() - t0;
            if (dt > 0 && f / dt > rate[i]) rate[i] = f / dt;
        }
}

/* The gemm variant the rates give: the fastest whose rate is at least PREFER_RATE x the first's. */
static int gemm_by_rates(int first, const double rate[NVARIANTS]) {
    int gemm = first;
    for (int i = 0; i < NVARIANTS; i++)
        if (variants[i]->available() && rate[i] >= PREFER_RATE * rate[first] && rate[i] > rate[gemm]) gemm = i;
    return gemm;
}

/* Is any variant's measured ratio to the first within DEAD_BAND of PREFER_RATE? */
static bool close_call(int first, const double rate[NVARIANTS]) {
    for (int i = 0; i < NVARIANTS; i++)
        if (i != first && simd_available(i) && rate[i] > PREFER_RATE / DEAD_BAND * rate[first] &&
            rate[i] < PREFER_RATE * DEAD_BAND * rate[first])
            return true;
    return false;
}

/* Measured once per process: up to 4 rounds while the call is close, the best rates kept. */
static int measured_gemm = -1;
static bool measured_close;
static pthread_once_t measure_once = PTHREAD_ONCE_INIT;
static int first_available(void) {
    for (int i = 0; i < NVARIANTS; i++)
        if (variants[i]->available()) return i;
    return NVARIANTS - 1; /* the portable variant is always available */
}
static void measure(void) {
    int first = first_available();
    for (int round = 0; round < 4; round++) {
        measure_round(measured_rate);
        measured_close = close_call(first, measured_rate);
        if (!measured_close) break;
    }
    measured_gemm = measured_close ? first : gemm_by_rates(first, measured_rate);
}

static int index_of_name(const char *name) {
    const tg_ukernel *k = find_variant(name);
    return k ? variant_index(k) : -1;
}

static int auto_selection(void) {
    int first = first_available(), simd = 0;
    for (int i = 0; i < NVARIANTS; i++) simd += simd_available(i);
    if (atomic_load(&dbg_rates_set)) {
        double rate[NVARIANTS];
        memcpy(rate, dbg_rates, sizeof rate);
        return encode_selection(gemm_by_rates(first, rate), first, BASIS_RATES, 0);
    }
    if (simd < 2) return encode_selection(first, first, BASIS_ONLY, 0);
    int bf16 = index_of_name("avx512bf16"), fma = index_of_name("avx512f");
    if (bf16 < 0 || fma < 0 || !variants[bf16]->available() || !variants[fma]->available())
        return encode_selection(first, first, BASIS_NO_BF16, 0);
    int row = known_row(identity());
    if (row >= 0) {
        double rate[NVARIANTS] = { 0 };
        rate[bf16] = known_cpus[row].bf16_rate, rate[fma] = known_cpus[row].fma_rate;
        return encode_selection(gemm_by_rates(first, rate), first, BASIS_TABLE, row);
    }
    pthread_once(&measure_once, measure);
    return encode_selection(measured_gemm, first, measured_close ? BASIS_CLOSE : BASIS_MEASURED, 0);
}

int tg_cpu_selected(void) {
    int sel = atomic_load(&selection);
    if (sel) return sel;
    const char *env = getenv("TGRAD_CPU_ISA");
    int pick = 0;
    if (env && *env && strcmp(env, "auto") != 0) {
        const tg_ukernel *want = find_variant(env);
        if (want && want->available()) { /* an unusable request falls back to the automatic choice */
            int i = variant_index(want);
            pick = encode_selection(i, i, BASIS_FORCED, 0);
        }
    }
    if (!pick) pick = auto_selection();
    int expected = 0;
    atomic_compare_exchange_strong(&selection, &expected, pick);
    return atomic_load(&selection);
}

const tg_ukernel *tg_cpu_current(void) { return tg_cpu_gemm_variant(tg_cpu_selected()); }

TGRAD_API const char *tgrad_cpu_isa(void) { return tg_cpu_current()->name; }
TGRAD_API const char *tgrad_cpu_stream_isa(void) { return tg_cpu_stream_variant(tg_cpu_selected())->name; }
TGRAD_API int32_t tgrad_cpu_isa_forced(void) { return basis_of(tg_cpu_selected()) == BASIS_FORCED; }

TGRAD_API const char *tgrad_cpu_isa_reason(void) {
    int sel = tg_cpu_selected();
    switch (basis_of(sel)) {
    case BASIS_FORCED: return "forced: TGRAD_CPU_ISA or tgrad_set_cpu_isa names the variant for every route";
    case BASIS_ONLY: return "rule: the most capable variant this CPU runs (it runs one SIMD variant at most)";
    case BASIS_NO_BF16:
        return "rule: the most capable variant this CPU runs (without AVX512-BF16, avx512f's zmm FMA does at least "
               "avx2's flops per cycle on every AVX-512 core)";
    case BASIS_TABLE: return known_cpus[(sel >> 16) & 255].why;
    case BASIS_MEASURED:
        return "measured: a CPU with AVX512-BF16 that the rule does not know; each variant's core instruction was "
               "timed at first use and packed products take one that did at least 1.41x the flops of the most "
               "capable one";
    case BASIS_CLOSE:
        return "measured: a CPU with AVX512-BF16 that the rule does not know; the core instructions' timed rates "
               "stayed within 15% of the 1.41x threshold over 4 rounds, so the most capable variant stays";
    case BASIS_RATES: return "rates set by tgrad_debug_cpu_isa_rates (a testing aid)";
    }
    return "unknown";
}

TGRAD_API tgrad_status tgrad_set_cpu_isa(const char *name) {
    if (!name) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_cpu_isa: name is NULL");
    if (strcmp(name, "auto") == 0) {
        atomic_store(&selection, auto_selection());
        return TGRAD_OK;
    }
    const tg_ukernel *k = find_variant(name);
    if (!k) return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "set_cpu_isa: unknown variant '%s'", name);
    if (!k->available())
        return tg_fail(TGRAD_ERR_BACKEND_UNAVAILABLE, "set_cpu_isa: this CPU cannot run '%s'", name);
    int i = variant_index(k);
    atomic_store(&selection, encode_selection(i, i, BASIS_FORCED, 0));
    return TGRAD_OK;
}

TGRAD_API tgrad_status tgrad_debug_cpu_isa_rates(const double *rates, int32_t count) {
    if (count == 0) {
        atomic_store(&dbg_rates_set, 0);
        return TGRAD_OK;
    }
    if (!rates || count != NVARIANTS)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_cpu_isa_rates: need %d rates (one per variant), got %d%s",
                       NVARIANTS, count, rates ? "" : " and a NULL pointer");
    for (int i = 0; i < NVARIANTS; i++)
        if (!(rates[i] >= 0))
            return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_cpu_isa_rates: rate %d is negative or NaN", i);
    memcpy(dbg_rates, rates, sizeof dbg_rates);
    atomic_store(&dbg_rates_set, 1);
    return TGRAD_OK;
}

TGRAD_API const char *tgrad_cpu_isa_name(int32_t index, int32_t *available) {
    if (index < 0 || index >= NVARIANTS) return NULL;
    if (available) *available = variants[index]->available();
    return variants[index]->name;
}

TGRAD_API tgrad_status tgrad_debug_cpu_identity(const char *vendor, int32_t family) {
    if (!vendor) {
        atomic_store(&dbg_identity_set, 0);
        return TGRAD_OK;
    }
    if (strlen(vendor) > 12)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_cpu_identity: a CPUID vendor has 12 characters, got %zu",
                       strlen(vendor));
    if (family < 0)
        return tg_fail(TGRAD_ERR_INVALID_ARGUMENT, "debug_cpu_identity: family %d is negative", (int)family);
    atomic_store(&dbg_identity_set, 0); /* no reader sees half a new identity: it is off while written */
    snprintf(dbg_identity.vendor, sizeof dbg_identity.vendor, "%s", vendor);
    dbg_identity.family = family, dbg_identity.model = 0;
    atomic_store(&dbg_identity_set, 1);
    return TGRAD_OK;
}
