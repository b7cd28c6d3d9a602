/* The portable side of the Metal path (device.c) on Linux, against a stand-in backend that keeps
 * metal.m's rules where they decide what device.c must do: host memory for MTLBuffers, the MSL
 * language and simdgroup matrices (so routes are chosen as on an Apple7 GPU), and a launch that
 * refuses a NULL buffer, as metal_launch does. Kernels do not run here (tests/msl_emu runs the
 * rendered MSL); a launch is counted and otherwise does nothing.
 *
 * Linked from libtgrad's objects (tg_device_use_stand_in is hidden). Prints "N passed, N failed". */
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
 * nothing. */
static void test_empty_sum_keeps_the_route_check(void) {
    EXPECT(tgrad_set_device_route(TGRAD_ROUTE_TC), TGRAD_OK);
    tgrad_tensor_t a = on_metal(8, 0, 0), b = on_metal(0, 8, 0), c = 0;
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
    uint16_t got[64];
    EXPECT(tgrad_tensor_read_bf16(c, got, 64), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    tgrad_tensor_release(a), tgrad_tensor_release(b), tgrad_tensor_release(c);
    EXPECT(tgrad_set_device_route(0), TGRAD_OK);
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

int main(void) {
    tg_device_use_stand_in(TGRAD_DEVICE_METAL, &stub);
    test_empty_sum_is_zeros_without_a_launch(0);
    test_empty_sum_is_zeros_without_a_launch(TGRAD_ROUTE_NAIVE);
    test_empty_sum_is_zeros_without_a_launch(TGRAD_ROUTE_TILED);
    test_empty_sum_keeps_the_route_check();
    test_a_nonempty_product_launches();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
