/* Queries and probes leave the caller's last error alone: backends, capabilities, CPU variants,
 * device names, and the device checks inside successful calls (readiness, route choice). After a
 * failure, tgrad_last_error() still holds its detail however many of them run, whether a device
 * is available or its probe fails inside (meson runs this with and without an OpenCL loader).
 * Backends are probed for the first time here. Prints "N passed, N failed". */
#include <stdio.h>
#include <string.h>

#include "tgrad.h"

#include "check.h"

static tgrad_tensor_t make_f32(int64_t rows, int64_t cols, const float *data) {
    tgrad_tensor_t t = 0;
    int64_t shape[2] = { rows, cols };
    EXPECT(tgrad_tensor_from_f32(data, 2, shape, &t), TGRAD_OK);
    return t;
}

static void expect_last_error(tgrad_status status, const char *detail, int line) {
    if (tgrad_last_status() == status && strcmp(tgrad_last_error(), detail) == 0) {
        passed++;
        return;
    }
    failed++;
    fprintf(stderr, "%s:%d: the last error changed to %s [%s]\n", __FILE__, line, tgrad_status_name(tgrad_last_status()),
            tgrad_last_error());
}
#define KEPT() expect_last_error(status, detail, __LINE__)

static void test_probes_keep_the_last_error(void) {
    const char *name, *device, *backend, *capability, *value, *note;
    int32_t built, available, opencl = 0, index, rows = 0, variants = 0;
    while (tgrad_capability(rows, &backend, &capability, &value, &note) == TGRAD_OK) rows++; /* the end fails */
    while (tgrad_cpu_isa_name(variants, NULL)) variants++;
    int32_t nd = 0;
    tgrad_status status = tgrad_tensor_ndim(0x0100000500000007ull, &nd);
    CHECK(status == TGRAD_ERR_INVALID_HANDLE);
    char detail[512];
    snprintf(detail, sizeof detail, "%s", tgrad_last_error());
    CHECK(strlen(detail) > 0);
    for (index = 0; index < 3; index++) {
        EXPECT(tgrad_backend(index, &name, &built, &available, &device), TGRAD_OK);
        KEPT();
        if (index == TGRAD_DEVICE_OPENCL) opencl = available;
        EXPECT(tgrad_device_by_name(name, &index), TGRAD_OK);
        KEPT();
    }
    for (index = 0; index < rows; index++) {
        EXPECT(tgrad_capability(index, &backend, &capability, &value, &note), TGRAD_OK);
        KEPT();
    }
    for (index = 0; index < variants; index++) {
        CHECK(tgrad_cpu_isa_name(index, &available) != NULL);
        KEPT();
    }
    CHECK(tgrad_cpu_isa() != NULL && tgrad_cpu_stream_isa() != NULL && tgrad_cpu_isa_forced() >= 0);
    CHECK(tgrad_num_threads() >= 1 && tgrad_cpu_scratch_bytes() >= 0 && tgrad_cached_bytes() >= 0);
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
    EXPECT(tgrad_check_version(TGRAD_VERSION_NUMBER), TGRAD_OK);
    KEPT();
    /* successful calls that check a device on the way */
    float v[4] = { 1, 2, 3, 4 };
    tgrad_tensor_t a = make_f32(2, 2, v), c = 0, g = 0, gc = 0;
    EXPECT(tgrad_tensor_to(a, TGRAD_DEVICE_CPU, &c), TGRAD_OK);
    EXPECT(tgrad_matmul(a, c, &gc), TGRAD_OK);
    char text[4096], route[64];
    size_t len = 0;
    EXPECT(tgrad_tensor_explain(gc, TGRAD_FORMAT_JSON, text, sizeof text, &len), TGRAD_OK);
    EXPECT(tgrad_tensor_route(gc, route, sizeof route, &len), TGRAD_OK);
    EXPECT(tgrad_tensor_realize(gc), TGRAD_OK);
    KEPT();
    tgrad_tensor_release(gc), gc = 0;
    if (opencl) { /* the device path: readiness, route choice, compile, launch, download */
        EXPECT(tgrad_tensor_to(a, TGRAD_DEVICE_OPENCL, &g), TGRAD_OK);
        EXPECT(tgrad_matmul(g, g, &gc), TGRAD_OK);
        EXPECT(tgrad_tensor_explain(gc, TGRAD_FORMAT_TEXT, text, sizeof text, &len), TGRAD_OK);
        EXPECT(tgrad_tensor_route(gc, route, sizeof route, &len), TGRAD_OK);
        float out[4];
        EXPECT(tgrad_tensor_read_f32(gc, out, 4), TGRAD_OK);
        CHECK(out[0] == 7 && out[3] == 22);
        KEPT();
    }
    tgrad_tensor_release(gc), tgrad_tensor_release(g), tgrad_tensor_release(c), tgrad_tensor_release(a);
    KEPT();
}

int main(void) {
    test_probes_keep_the_last_error();
    CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0 && tgrad_live_bytes() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
