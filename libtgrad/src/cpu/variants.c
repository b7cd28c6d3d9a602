/* CPU kernel variants: which one packed and streamed products run (forced or measured). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
 * TGRAD_CPU_ISA or tgrad_set_cpu_isa is both. The automatic choice: stream = the first variant
 * this CPU runs (the list is in order of capability); gemm = the same, unless another SIMD
 * variant's core instruction runs at least PREFER_RATE times as many flops per second on this CPU
 * (measured once, below), then the fastest. Every variant gives the same bytes, so the choice is
 * about speed only. Why it is measured: on Intel Xeons with AVX512-BF16 (an Emerald Rapids here)
 * fp32 FMA runs 2.0x the flops of vdpbf16ps, so avx512f's packed kernel is 1.6x faster there,
 * while on AMD Zen 5 vdpbf16ps runs 2x the FMA's flops (docs/performance.md). */
#define PREFER_RATE 1.3
/* The selection in one word, so that readers see the gemm variant, the stream variant and
 * whether it was forced together: (gemm index + 1) * 64 + stream index, plus FORCED when it came
 * from TGRAD_CPU_ISA or tgrad_set_cpu_isa; 0 until first use. */
enum { FORCED = 1 << 12 };
static atomic_int selection;

static int encode_selection(int gemm, int stream, bool forced) {
    return (gemm + 1) * 64 + stream + (forced ? FORCED : 0);
}
const tg_ukernel *tg_cpu_gemm_variant(int sel) { return variants[(sel & (FORCED - 1)) / 64 - 1]; }
const tg_ukernel *tg_cpu_stream_variant(int sel) { return variants[sel % 64]; }

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

/* Flops per second of each variant's core instruction on the calling thread (0: not measured:
 * unavailable, or the portable variant), best of 5 short runs taken in turn (well under 1 ms in
 * all), measured once per process; or the rates a test set with tgrad_debug_cpu_isa_rates. */
static double measured_rate[NVARIANTS], dbg_rates[NVARIANTS];
static atomic_int dbg_rates_set;
static pthread_once_t rates_once = PTHREAD_ONCE_INIT;

static bool simd_available(int i) { return variants[i] != &tg_ukernel_portable && variants[i]->available(); }

static void measure_rates(void) {
    enum { ITERS = 2000, REPS = 5 };
    for (int i = 0; i < NVARIANTS; i++)
        if (simd_available(i)) variants[i]->peak(ITERS / 4); /* wake the vector units up */
    for (int rep = 0; rep < REPS; rep++)
        for (int i = 0; i < NVARIANTS; i++) {
            if (!simd_available(i)) continue;
            double t0 = tg_cpu_now_s(), f = variants[i]->peak(ITERS), dt = tg_cpu_now_s() - t0;
            if (dt > 0 && f / dt > measured_rate[i]) measured_rate[i] = f / dt;
        }
}

static int auto_selection(void) {
    int first = NVARIANTS - 1, simd = 0;
    for (int i = NVARIANTS - 1; i >= 0; i--)
        if (variants[i]->available()) first = i, simd += simd_available(i);
    int gemm = first;
    if (simd >= 2) {
        double rate[NVARIANTS];
        if (atomic_load(&dbg_rates_set)) {
            memcpy(rate, dbg_rates, sizeof rate);
        } else {
            pthread_once(&rates_once, measure_rates);
            memcpy(rate, measured_rate, sizeof rate);
        }
        for (int i = 0; i < NVARIANTS; i++)
            if (variants[i]->available() && rate[i] >= PREFER_RATE * rate[first] && rate[i] > rate[gemm]) gemm = i;
    }
    return encode_selection(gemm, first, false);
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
            pick = encode_selection(i, i, true);
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
TGRAD_API int32_t tgrad_cpu_isa_forced(void) { return (tg_cpu_selected() & FORCED) != 0; }

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
    atomic_store(&selection, encode_selection(i, i, true));
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
