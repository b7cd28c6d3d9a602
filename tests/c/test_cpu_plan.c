/* The CPU frame's cache-dependent choices, for caches this machine may not have: linked from
 * libtgrad's objects (the functions are hidden in the shared library). Prints "N passed, N failed". */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../../libtgrad/src/internal.h"
#include "check.h"

int main(void) {
    const tg_l1d_geometry zen4 = { .ways = 8, .sets = 64, .line = 64 };   /* 32 KiB, 8 ways */
    const tg_l1d_geometry zen5 = { .ways = 12, .sets = 64, .line = 64 };  /* 48 KiB, 12 ways */
    const tg_l1d_geometry unknown = { 0, 0, 0 };
    /* 12 rows of A at K = 2048 (4 KiB apart) and K = 4096 (8 KiB) all share one set */
    CHECK(tg_cpu_rows_per_l1_set(12, 4096, &zen4) == 12);
    CHECK(tg_cpu_rows_per_l1_set(12, 8192, &zen4) == 12);
    CHECK(tg_cpu_rows_per_l1_set(12, -8192, &zen4) == 12); /* rows in reverse: the same sets */
    /* 2 KiB apart (K = 1024, 3072): two sets of 6; 1 KiB (K = 512): four of 3 */
    CHECK(tg_cpu_rows_per_l1_set(12, 2048, &zen4) == 6);
    CHECK(tg_cpu_rows_per_l1_set(12, 6144, &zen4) == 6);
    CHECK(tg_cpu_rows_per_l1_set(12, 1024, &zen4) == 3);
    /* strides that are not a power of two spread the rows: K = 1000 (2000 bytes) */
    CHECK(tg_cpu_rows_per_l1_set(12, 2000, &zen4) == 1);
    CHECK(tg_cpu_rows_per_l1_set(12, 4096, &unknown) == 0);
    /* any stride, without overflow: -2^63 is 0 mod 4 KiB (one set); 2^63 - 1 puts rows 1..11 in set 63 */
    CHECK(tg_cpu_rows_per_l1_set(12, INT64_MIN, &zen4) == 12);
    CHECK(tg_cpu_rows_per_l1_set(12, INT64_MAX, &zen4) == 11);
    CHECK(tg_cpu_rows_per_l1_set(64, INT64_MAX - 1, &zen4) == 32);
    /* read in place where the rows fit the ways: not at 4 KiB on Zen 4, still on Zen 5 */
    CHECK(!tg_cpu_direct_a_fits_l1(12, 4096, &zen4));
    CHECK(!tg_cpu_direct_a_fits_l1(12, 16384, &zen4));
    CHECK(tg_cpu_direct_a_fits_l1(12, 2048, &zen4));
    CHECK(tg_cpu_direct_a_fits_l1(12, 2000, &zen4));
    CHECK(tg_cpu_direct_a_fits_l1(12, 4096, &zen5));
    CHECK(tg_cpu_direct_a_fits_l1(12, 4096, &unknown));
    /* the shared-chunk path's row blocks fill half of L2: 2 MiB (Sapphire Rapids) at K = 4096 of
     * bf16 (8 KiB a row): 128 rows; at K = 2048: 256, capped at 192; 1 MiB (Zen 4) at K = 2048:
     * 128; unknown L2: the cap; a row longer than half of L2: one panel of mr rows */
    CHECK(tg_cpu_l2_block_rows(2 << 20, 8192, 32, 192) == 128);
    CHECK(tg_cpu_l2_block_rows(2 << 20, 4096, 32, 192) == 192);
    CHECK(tg_cpu_l2_block_rows(1 << 20, 4096, 12, 192) == 120);
    CHECK(tg_cpu_l2_block_rows(0, 8192, 32, 192) == 192);
    CHECK(tg_cpu_l2_block_rows(2 << 20, (int64_t)4 << 20, 32, 192) == 32);
    CHECK(tg_cpu_l2_block_rows(2 << 20, 0, 32, 192) == 192);
    /* this machine's caches, as read: an L2 bigger than its L1 (x86 and Linux say) */
    const tg_cpu_caches *c = tg_cpu_cache_sizes();
    printf("this CPU: L1d %d ways x %d sets x %d bytes, L2 %lld bytes\n", (int)c->l1d.ways, (int)c->l1d.sets,
           (int)c->l1d.line, (long long)c->l2_bytes);
#if defined(__x86_64__) || defined(__linux__)
    CHECK(c->l2_bytes > (int64_t)c->l1d.ways * c->l1d.sets * c->l1d.line);
#endif
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
