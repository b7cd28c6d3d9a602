/* A program compiled with -DTGRAD_STABLE_ONLY sees only the frozen API of tgrad.h: the experimental
 * blocks (the tgrad_debug_* calls; struct tgrad_launch with the tgrad_render_* calls) are hidden.
 * The check is the compilation itself: each experimental name is declared here as something else
 * (a macro would trip #error, a function or the struct a redeclaration), which compiles only when
 * the header did not declare it. Without -DTGRAD_STABLE_ONLY this file must not compile
 * (tests/python/test_header_fences.py checks both). Prints "stable-only: ok". */
#include <stdio.h>

#include "tgrad.h"

#if defined(TGRAD_LAUNCH_MAX_BUFFERS) || defined(TGRAD_KERNEL_NAME_MAX) || defined(TGRAD_DEBUG_CPU_NO_DIRECT_A) || \
    defined(TGRAD_DEBUG_F32_COUNT) || defined(TGRAD_DEBUG_RANDOM_COUNT) || defined(TGRAD_DEBUG_NORM_COUNT) || \
    defined(TGRAD_DEBUG_SOFTMAX_COUNT)
#error "an experimental macro of tgrad.h is visible under TGRAD_STABLE_ONLY"
#endif

/* Redeclaring a declared function as an enumerator, or redefining a defined struct, is an error. */
enum experimental_names {
    tgrad_debug_fail_allocation = 1,
    tgrad_debug_handle_generation,
    tgrad_debug_cpu_blocking,
    tgrad_debug_cpu_isa_rates,
    tgrad_debug_cpu_identity,
    tgrad_debug_elementwise,
    tgrad_debug_elementwise_f32,
    tgrad_debug_f32_slow_path,
    tgrad_debug_schedule_work,
    tgrad_render_matmul,
    tgrad_render_copy,
    tgrad_render_tensor, /* main checks its value */
    tgrad_debug_exact_sum,
    tgrad_debug_extrema,
    tgrad_debug_exact_sum_2d,
    tgrad_debug_philox,
    tgrad_debug_random_slow_path,
    tgrad_debug_norm_slow_path,
    tgrad_debug_softmax_slow_path,
    tgrad_debug_bf16_slow_path,
    tgrad_debug_device_table,
};
struct tgrad_launch {
    int not_the_header_s;
};

int main(void) {
    struct tgrad_launch mine = { tgrad_render_tensor };
    /* The frozen API around the fences stays: route names and checks, explain, the basics. */
    size_t length = 0;
    int ok = tgrad_check_version(TGRAD_VERSION_NUMBER) == TGRAD_OK && tgrad_route_name(TGRAD_ROUTE_TILED) != NULL &&
             tgrad_lang_name(TGRAD_LANG_OPENCL) != NULL &&
             tgrad_route_check(TGRAD_ROUTE_TILED, TGRAD_LANG_OPENCL, 0, 0) == TGRAD_ERR_INVALID_HANDLE &&
             tgrad_tensor_explain(0, TGRAD_FORMAT_TEXT, NULL, 0, &length) == TGRAD_ERR_INVALID_HANDLE &&
             mine.not_the_header_s == 12;
    printf("stable-only: %s\n", ok ? "ok" : "FAILED");
    return !ok;
}
