/* The portable side of the Metal path (device.c) on Linux, against a stand-in backend that keeps
 * metal.m's rules where they decide what device.c must do: host memory for MTLBuffers, the MSL
 * language and simdgroup matrices (so routes are chosen as on an Apple7 GPU), and a launch that
 * refuses a NULL buffer, as metal_launch does. Kernels do not run here (tests/msl_emu runs the
 * rendered MSL); a launch is counted and otherwise does nothing.
 *
 * Linked from libtgrad's objects (tg_device_use_stand_in is hidden). Prints "N passed, N failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "tgrad.h"

#include "check.h"

TG_HIDDEN void tg_device_use_stand_in(int32_t device, const tg_backend *be);

static int launches, compiles;

static tgrad_status stub_init(void) { return TGRAD_OK; }
static const char *stub_name(void) { return "metal stand-in (tests/c/test_device_stub.c)"; }
static tgrad_status stub_alloc(size_t bytes, void **mem) {
    if (bytes == 0 || !mem) return tg_fail(TGRAD_ERR_INTERNAL, "stub: alloc of 0 bytes"); /* as metal_alloc */
    *mem = calloc(1, bytes + sizeof(size_t));
    if (!*mem) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "stub: out of memory");
    memcpy(*mem, &bytes, sizeof bytes); /* the length first, as -length; the data after it */
    return TGRAD_OK;
}
static void stub_free(void *mem) { free(mem); }
static size_t length_of(const void *mem) {
    size_t n;
    memcpy(&n, mem, sizeof n);
    return n;
}
static tgrad_status stub_copy_in(void *mem, size_t offset, const void *src, size_t bytes) {
    if (!mem || offset > length_of(mem) || bytes > length_of(mem) - offset)
        return tg_fail(TGRAD_ERR_INTERNAL, "stub: copy in outside a buffer");
    if (bytes) memcpy((char *)mem + sizeof(size_t) + offset, src, bytes);
    return TGRAD_OK;
}
static tgrad_status stub_copy_out(const void *mem, size_t offset, void *dst, size_t bytes) {
    if (!mem || offset > length_of(mem) || bytes > length_of(mem) - offset)
        return tg_fail(TGRAD_ERR_INTERNAL, "stub: copy out outside a buffer");
    if (bytes) memcpy(dst, (const char *)mem + sizeof(size_t) + offset, bytes);
    return TGRAD_OK;
}
static tgrad_status stub_compile(const char *source, size_t length, const char *kernel_name, void **program) {
    (void)source, (void)length, (void)kernel_name;
    compiles++;
    *program = malloc(1);
    return *program ? TGRAD_OK : tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "stub: out of memory");
}
static void stub_release_program(void *program) { free(program); }
static tgrad_status stub_launch(void *program, const struct tgrad_launch *launch, void *const *buffers,
                                uint32_t nbuffers) {
    (void)program, (void)launch;
    for (uint32_t i = 0; i < nbuffers; i++) /* metal_launch's rule */
        if (buffers[i] == NULL) return tg_fail(TGRAD_ERR_INTERNAL, "metal: launch without buffer %u", i);
    launches++;
    return TGRAD_OK;
}
static int stub_has_matrix_route(void) { return 1; }

static const tg_backend stub = {
    .name = "metal",
    .lang = TGRAD_LANG_MSL,
    .init = stub_init,
    .device_name = stub_name,
    .alloc = stub_alloc,
    .free = stub_free,
    .copy_in = stub_copy_in,
    .copy_out = stub_copy_out,
    .compile = stub_compile,
    .release_program = stub_release_program,
    .launch = stub_launch,
    .has_matrix_route = stub_has_matrix_route,
};

static tgrad_tensor_t on_metal(int64_t rows, int64_t cols, uint16_t bits) {
    uint16_t *data = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * 2u);
    for (int64_t i = 0; i < rows * cols; i++) data[i] = bits;
    int64_t shape[2] = { rows, cols };
    tgrad_tensor_t host = 0, dev = 0;
    EXPECT(tgrad_tensor_from_bf16(data, 2, shape, &host), TGRAD_OK);
    EXPECT(tgrad_tensor_to(host, TGRAD_DEVICE_METAL, &dev), TGRAD_OK);
    tgrad_tensor_release(host);
    free(data);
    return dev;
}

/* K = 0 with M, N > 0: +0 everywhere, as on the CPU. The empty operands have no device memory,
 * so a kernel launch would bind NULL, which Metal refuses: no kernel may run. */
static void test_empty_sum_is_zeros_without_a_launch(int32_t route) {
    EXPECT(tgrad_set_device_route(route), TGRAD_OK);
    tgrad_tensor_t a = on_metal(5, 0, 0), b = on_metal(0, 7, 0), c = 0;
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
    uint16_t got[35];
    memset(got, 0xff, sizeof got);
    int before = launches;
    EXPECT(tgrad_tensor_read_bf16(c, got, 35), TGRAD_OK);
    bool zeros = true;
    for (int i = 0; i < 35; i++) zeros &= got[i] == 0;
    CHECK(zeros);
    CHECK(launches == before);
    int32_t device = -1;
    EXPECT(tgrad_tensor_device(c, &device), TGRAD_OK);
    CHECK(device == TGRAD_DEVICE_METAL);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(c);
    EXPECT(tgrad_set_device_route(0), TGRAD_OK);
}

/* A forced route the problem cannot take is refused for K = 0 too (tc needs K >= 8), and writes
 * nothing (under the bounded policy, which allows tc at all). */
static void test_empty_sum_keeps_the_route_check(void) {
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_BOUNDED), TGRAD_OK);
    EXPECT(tgrad_set_device_route(TGRAD_ROUTE_TC), TGRAD_OK);
    tgrad_tensor_t a = on_metal(8, 0, 0), b = on_metal(0, 8, 0), c = 0;
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
    uint16_t got[64];
    EXPECT(tgrad_tensor_read_bf16(c, got, 64), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    CHECK(strstr(tgrad_last_error(), "8") != NULL && strstr(tgrad_last_error(), "precision") == NULL);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(c);
    EXPECT(tgrad_set_device_route(0), TGRAD_OK);
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_EXACT), TGRAD_OK);
}

/* ---- the matmul precision policy (tgrad_set_matmul_precision) ---- */
static void route_of(tgrad_tensor_t t, char *route, size_t cap) {
    size_t len = 0;
    route[0] = '\0';
    EXPECT(tgrad_tensor_route(t, route, cap, &len), TGRAD_OK);
}

static bool explain_has(tgrad_tensor_t t, const char *needle) {
    char text[4096];
    size_t len = 0;
    EXPECT(tgrad_tensor_explain(t, TGRAD_FORMAT_TEXT, text, sizeof text, &len), TGRAD_OK);
    bool has = strstr(text, needle) != NULL;
    if (!has) fprintf(stderr, "explain lacks \"%s\":\n%s", needle, text);
    return has;
}

/* The default is exact, and a value outside the two policies is refused without a change. */
static void test_precision_defaults_to_exact_and_refuses_other_values(void) {
    CHECK(tgrad_matmul_precision() == TGRAD_MATMUL_PRECISION_EXACT);
    EXPECT(tgrad_set_matmul_precision(2), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_set_matmul_precision(-1), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(tgrad_matmul_precision() == TGRAD_MATMUL_PRECISION_EXACT);
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_BOUNDED), TGRAD_OK);
    EXPECT(tgrad_set_matmul_precision(7), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(tgrad_matmul_precision() == TGRAD_MATMUL_PRECISION_BOUNDED);
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_EXACT), TGRAD_OK);
}

/* Under exact the automatic choice never takes tc, even where the device has matrices and the
 * shape is eligible; under bounded it does. Route, explain and the launch agree. */
static void test_automatic_route_follows_the_policy(void) {
    char route[64];
    tgrad_tensor_t a = on_metal(64, 64, 0x3f80), c = 0;
    EXPECT(tgrad_matmul(a, a, &c), TGRAD_OK);
    route_of(c, route, sizeof route);
    CHECK(strcmp(route, "metal.tiled") == 0);
    CHECK(explain_has(c, "precision exact: tiled, the documented order's bytes"));
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_BOUNDED), TGRAD_OK);
    route_of(c, route, sizeof route); /* read when asked: the pending product follows the policy */
    CHECK(strcmp(route, "metal.tc") == 0);
    CHECK(explain_has(c, "precision bounded: tc, |out - s| <= 2^-8 |s| + "));
    CHECK(explain_has(c, "(K = 64; docs/kernels.md)"));
    int before = launches;
    EXPECT(tgrad_tensor_realize(c), TGRAD_OK);
    CHECK(launches == before + 1);
    route_of(c, route, sizeof route);
    CHECK(strcmp(route, "metal.tc") == 0); /* the route it ran, recorded */
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_EXACT), TGRAD_OK);
    route_of(c, route, sizeof route);
    CHECK(strcmp(route, "metal.tc") == 0); /* realized before: the policy does not change it */
    tgrad_tensor_release(c);
    /* a shape tc cannot take (M < 8) goes to tiled under bounded too, or naive for at most 4 rows */
    tgrad_tensor_t s = on_metal(6, 64, 0x3f80), t = on_metal(64, 64, 0x3f80), d = 0;
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_BOUNDED), TGRAD_OK);
    EXPECT(tgrad_matmul(s, t, &d), TGRAD_OK);
    route_of(d, route, sizeof route);
    CHECK(strcmp(route, "metal.tiled") == 0);
    CHECK(explain_has(d, "precision bounded: tiled, the documented order's bytes"));
    tgrad_tensor_t few = on_metal(4, 64, 0x3f80), e = 0;
    EXPECT(tgrad_matmul(few, t, &e), TGRAD_OK);
    route_of(e, route, sizeof route);
    CHECK(strcmp(route, "metal.naive") == 0);
    CHECK(explain_has(e, "precision bounded: naive, the documented order's bytes"));
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_EXACT), TGRAD_OK);
    route_of(e, route, sizeof route);
    CHECK(strcmp(route, "metal.naive") == 0);
    tgrad_tensor_release(a), tgrad_tensor_release(s), tgrad_tensor_release(t), tgrad_tensor_release(d);
    tgrad_tensor_release(few), tgrad_tensor_release(e);
}

/* A forced tc under exact is refused when the product is realized, naming the policy: nothing is
 * launched or written, and the product stays pending (the bounded policy then realizes it). */
static void test_forced_tc_under_exact_is_refused_and_changes_nothing(void) {
    EXPECT(tgrad_set_device_route(TGRAD_ROUTE_TC), TGRAD_OK);
    tgrad_tensor_t a = on_metal(64, 64, 0x3f80), c = 0;
    EXPECT(tgrad_matmul(a, a, &c), TGRAD_OK);
    CHECK(explain_has(c, "precision exact: tc refused"));
    int before = launches, compiled = compiles;
    EXPECT(tgrad_tensor_realize(c), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    CHECK(strstr(tgrad_last_error(), "metal: route tc is bounded") != NULL);
    CHECK(strstr(tgrad_last_error(), "matmul precision is exact") != NULL);
    CHECK(launches == before && compiles == compiled);
    int32_t realized = -1;
    EXPECT(tgrad_tensor_is_realized(c, &realized), TGRAD_OK);
    CHECK(realized == 0);
    tgrad_tensor_t e = on_metal(8, 0, 0), f = on_metal(0, 8, 0), g = 0; /* K = 0 writes zeros itself */
    EXPECT(tgrad_matmul(e, f, &g), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(g), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    CHECK(strstr(tgrad_last_error(), "matmul precision is exact") != NULL);
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_BOUNDED), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(c), TGRAD_OK);
    CHECK(launches == before + 1);
    EXPECT(tgrad_set_matmul_precision(TGRAD_MATMUL_PRECISION_EXACT), TGRAD_OK);
    EXPECT(tgrad_set_device_route(0), TGRAD_OK);
    tgrad_tensor_release(a), tgrad_tensor_release(c);
    tgrad_tensor_release(e), tgrad_tensor_release(f), tgrad_tensor_release(g);
}

/* The control: a product with K > 0 does launch (so the count above can see a launch). */
static void test_a_nonempty_product_launches(void) {
    tgrad_tensor_t a = on_metal(3, 2, 0x3f80), b = on_metal(2, 4, 0x3f80), c = 0;
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
    int before = launches;
    EXPECT(tgrad_tensor_realize(c), TGRAD_OK);
    CHECK(launches == before + 1);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(c);
}

/* The program cache evicts the least recently used program: a kernel launched between every one
 * of 1,500 one-off kernels (each product's K is new, so its text is; more texts than the cache
 * holds) is compiled once, as a decoding step's fixed kernels must be beside its per-length ones;
 * and a one-off kernel evicted since is compiled again when it comes back. */
static void test_a_kernel_in_use_outlives_one_off_kernels(void) {
    tgrad_tensor_t a = on_metal(3, 5, 0x3f80), b = on_metal(5, 3, 0x3f80), c = 0;
    int first = compiles;
    for (int32_t k = 1; k <= 1500; k++) {
        tgrad_tensor_t x = on_metal(2, k + 7, 0x3f80), y = on_metal(k + 7, 2, 0x3f80), z = 0;
        EXPECT(tgrad_matmul(x, y, &z), TGRAD_OK);
        EXPECT(tgrad_tensor_realize(z), TGRAD_OK);
        EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
        EXPECT(tgrad_tensor_realize(c), TGRAD_OK);
        tgrad_tensor_release(x), tgrad_tensor_release(y), tgrad_tensor_release(z), tgrad_tensor_release(c);
    }
    CHECK(compiles - first == 1500 + 1);
    tgrad_tensor_t x = on_metal(2, 8, 0x3f80), y = on_metal(8, 2, 0x3f80), z = 0; /* k = 1: long evicted */
    int before = compiles;
    EXPECT(tgrad_matmul(x, y, &z), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(z), TGRAD_OK);
    CHECK(compiles == before + 1);
    tgrad_tensor_release(x), tgrad_tensor_release(y), tgrad_tensor_release(z);
    tgrad_tensor_release(a), tgrad_tensor_release(b);
}

/* The double kinds on Metal (MSL has no double: their kernels run kernels/gpu/softdouble.h, binary64
 * in integers): softmax, the norms, normal and float32 uniform(low, high) draws are made and
 * launched like any other kind. */
static void test_the_double_kinds_run_on_metal(void) {
    tgrad_tensor_t x = on_metal(2, 8, 0x3f80), y = 0;
    for (int32_t op = TGRAD_SOFTMAX_SOFTMAX; op <= TGRAD_SOFTMAX_LOGSUMEXP; op++) {
        int before = launches;
        EXPECT(tgrad_softmax(op, x, -1, 0, 0, &y), TGRAD_OK);
        EXPECT(tgrad_tensor_realize(y), TGRAD_OK);
        CHECK(launches == before + 1);
        tgrad_tensor_release(y), y = 0;
    }
    int before = launches;
    EXPECT(tgrad_rms_norm(x, 0, 1, 1e-6, &y), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(y), TGRAD_OK);
    tgrad_tensor_release(y), y = 0;
    EXPECT(tgrad_layer_norm(x, 0, 0, 1, 1e-5, &y), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(y), TGRAD_OK);
    tgrad_tensor_release(y), y = 0;
    const int64_t shape[1] = { 9 };
    EXPECT(tgrad_random(TGRAD_RANDOM_NORMAL, 1, 0, 1, shape, 0, 0, 1, TGRAD_DEVICE_METAL, &y), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(y), TGRAD_OK);
    tgrad_tensor_release(y), y = 0;
    EXPECT(tgrad_random(TGRAD_RANDOM_UNIFORM, 1, 0, 1, shape, TGRAD_DTYPE_F32, -1, 1, TGRAD_DEVICE_METAL, &y), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(y), TGRAD_OK); /* float32 uniform(low, high): binary64 too */
    CHECK(launches == before + 4);
    tgrad_tensor_release(y);
    tgrad_tensor_release(x);
}

int main(void) {
    tg_device_use_stand_in(TGRAD_DEVICE_METAL, &stub);
    test_empty_sum_is_zeros_without_a_launch(0);
    test_empty_sum_is_zeros_without_a_launch(TGRAD_ROUTE_NAIVE);
    test_empty_sum_is_zeros_without_a_launch(TGRAD_ROUTE_TILED);
    test_empty_sum_keeps_the_route_check();
    test_a_nonempty_product_launches();
    test_precision_defaults_to_exact_and_refuses_other_values();
    test_automatic_route_follows_the_policy();
    test_forced_tc_under_exact_is_refused_and_changes_nothing();
    test_the_double_kinds_run_on_metal();
    test_a_kernel_in_use_outlives_one_off_kernels();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
