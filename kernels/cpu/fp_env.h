/* The IEEE floating-point environment for code whose results must not depend on the caller's:
 * round to nearest even, subnormal inputs and results kept (no DAZ/FTZ, no FPCR.FZ), every
 * exception masked. The matmul kernels set x86 MXCSR's DAZ and FTZ (and Arm's FPCR.FZ) around
 * their loops, and a thread may inherit flush modes or another rounding mode from its caller:
 * elementwise ops must give the same bytes under all of them. tg_fp_env_ieee() installs the IEEE
 * environment and returns what tg_fp_env_restore() puts back (sticky exception flags raised in
 * between are dropped with it). Costs a few tens of cycles: once per call, not per element. */
#ifndef TGRAD_CPU_FP_ENV_H
#define TGRAD_CPU_FP_ENV_H

#include <stdint.h>

typedef struct { uint64_t saved; } tg_fp_env;

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
/* MXCSR: exceptions masked (bits 7-12), round to nearest (RC = 0), FTZ (15) and DAZ (6) clear. */
#define TG_MXCSR_IEEE 0x1f80u

static inline tg_fp_env tg_fp_env_ieee(void) {
    tg_fp_env e = { _mm_getcsr() };
    _mm_setcsr(TG_MXCSR_IEEE);
    return e;
}
static inline void tg_fp_env_restore(tg_fp_env e) { _mm_setcsr((unsigned)e.saved); }
/* MXCSR for the fp32 FMA matmul kernels (packed and streaming), from the caller's csr: round to
 * nearest even, FTZ (15) and DAZ (6) set, the caller's exception masks kept. */
static inline unsigned tg_mxcsr_fma(unsigned csr) { return (csr & ~0x6000u) | 0x8040u; }

#elif defined(__aarch64__)
/* FPCR: FZ (24), RMode (22-23), FZ16 (19), AH and FIZ (1, 0, FEAT_AFP) cleared; trap enables
 * (8-12, 15) cleared so no exception traps. */
#define TG_FPCR_NOT_IEEE ((1u << 24) | (3u << 22) | (1u << 19) | (0x9fu << 8) | 3u)
static inline uint64_t tg_read_fpcr(void) { uint64_t v; __asm__ volatile("mrs %0, fpcr" : "=r"(v)); return v; }
static inline void tg_write_fpcr(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v) : "memory"); }
/* FPSR: the sticky exception flags (the NEON matmul kernels read UFC, bit 3) */
static inline uint64_t tg_read_fpsr(void) { uint64_t v; __asm__ volatile("mrs %0, fpsr" : "=r"(v)); return v; }
static inline void tg_write_fpsr(uint64_t v) { __asm__ volatile("msr fpsr, %0" : : "r"(v) : "memory"); }

static inline tg_fp_env tg_fp_env_ieee(void) {
    tg_fp_env e = { tg_read_fpcr() };
    tg_write_fpcr(e.saved & ~(uint64_t)TG_FPCR_NOT_IEEE);
    return e;
}
static inline void tg_fp_env_restore(tg_fp_env e) { tg_write_fpcr(e.saved); }
/* FPCR for the NEON fp32 matmul kernels, from the caller's fpcr: FZ (24) set, RMode (22-23) round to
 * nearest even, the rest kept. */
static inline uint64_t tg_fpcr_fma(uint64_t fpcr) { return (fpcr & ~(3ull << 22)) | (1ull << 24); }

#else
/* Elsewhere the C default environment (round to nearest, no flush) is assumed. */
static inline tg_fp_env tg_fp_env_ieee(void) { return (tg_fp_env){ 0 }; }
static inline void tg_fp_env_restore(tg_fp_env e) { (void)e; }
#endif

#endif
