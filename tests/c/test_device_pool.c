/* The device buffer pool (src/device_pool.c) and its use by device.c, against a stand-in backend
 * that counts the driver's allocations: a freed buffer is reused by the next allocation of its
 * size class instead of reaching the driver, the cached bytes never exceed TGRAD_DEVICE_POOL_BYTES
 * (meson runs this with 65536), a buffer larger than that is allocated at its exact size and
 * freed at once, and a driver out of memory gets the pool's memory back before the allocation is
 * tried again. Linked from libtgrad's objects (the pool and tg_device_use_stand_in are hidden).
 * Prints "N passed, N failed". */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "device_pool.h"
#include "tgrad.h"

#include "check.h"

TG_HIDDEN void tg_device_use_stand_in(int32_t device, const tg_backend *be);
TG_HIDDEN void tg_device_pool_stats(int32_t device, size_t *cached, int32_t *count);

static int allocs, frees, live, fail_next_alloc;
static size_t largest_alloc;

static tgrad_status stub_init(void) { return TGRAD_OK; }
static const char *stub_name(void) { return "pool stand-in (tests/c/test_device_pool.c)"; }
static tgrad_status stub_alloc(size_t bytes, void **mem) {
    if (fail_next_alloc && live > 0) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "stub: the device is full");
    if (!(*mem = calloc(1, bytes))) return tg_fail(TGRAD_ERR_OUT_OF_MEMORY, "stub: out of memory");
    allocs++, live++;
    if (bytes > largest_alloc) largest_alloc = bytes;
    return TGRAD_OK;
}
static void stub_free(void *mem) { free(mem), frees++, live--; }
static tgrad_status stub_copy_in(void *mem, size_t offset, const void *src, size_t bytes) {
    memcpy((char *)mem + offset, src, bytes);
    return TGRAD_OK;
}
static tgrad_status stub_copy_out(const void *mem, size_t offset, void *dst, size_t bytes) {
    memcpy(dst, (const char *)mem + offset, bytes);
    return TGRAD_OK;
}
static const tg_backend stub = {
    .name = "cuda", .lang = TGRAD_LANG_CUDA, .init = stub_init, .device_name = stub_name,
    .alloc = stub_alloc, .free = stub_free, .copy_in = stub_copy_in, .copy_out = stub_copy_out,
};

static tgrad_tensor_t on_device(int64_t n, uint16_t bits) {
    uint16_t *data = malloc((size_t)n * 2u);
    for (int64_t i = 0; i < n; i++) data[i] = bits;
    int64_t shape[1] = { n };
    tgrad_tensor_t host = 0, dev = 0;
    EXPECT(tgrad_tensor_from_bf16(data, 1, shape, &host), TGRAD_OK);
    EXPECT(tgrad_tensor_to(host, TGRAD_DEVICE_CUDA, &dev), TGRAD_OK);
    tgrad_tensor_release(host);
    free(data);
    return dev;
}

static void pool_state(size_t *cached, int32_t *count) { tg_device_pool_stats(TGRAD_DEVICE_CUDA, cached, count); }

static void test_size_classes(void) {
    CHECK(tg_pool_limit() == 65536);
    CHECK(tg_pool_size(1) == 256 && tg_pool_size(256) == 256 && tg_pool_size(257) == 320);
    CHECK(tg_pool_size(1000) == 1024 && tg_pool_size(1025) == 1280 && tg_pool_size(65536) == 65536);
    for (size_t b = 1; b <= 65536; b += 37) {
        size_t c = tg_pool_size(b);
        if (c < b || c > b + b / 4 + 256 || tg_pool_size(c) != c) {
            CHECK(!"a class holds the size, at most 25% more, and is its own class");
            return;
        }
    }
    CHECK(tg_pool_size(65537) == 65537); /* above the bound: exact, never pooled */
}

static void test_a_freed_buffer_is_reused(void) {
    tgrad_tensor_t a = on_device(500, 0x3f80); /* 1000 bytes: class 1024 */
    int before = allocs;
    tgrad_tensor_release(a);
    size_t cached;
    int32_t count;
    pool_state(&cached, &count);
    CHECK(cached == 1024 && count == 1 && frees == 0);
    tgrad_tensor_t b = on_device(450, 0x4000); /* 900 bytes: the same class */
    CHECK(allocs == before);
    uint16_t got[450];
    EXPECT(tgrad_tensor_read_bf16(b, got, 450), TGRAD_OK);
    CHECK(got[0] == 0x4000 && got[449] == 0x4000);
    pool_state(&cached, &count);
    CHECK(cached == 0 && count == 0);
    tgrad_tensor_release(b);
}

static void test_the_bound_holds_and_large_buffers_go_back(void) {
    tgrad_tensor_t t[40];
    for (int i = 0; i < 40; i++) t[i] = on_device(1000 + 100 * i, 0); /* 2000 .. 9800 bytes */
    int before = frees;
    for (int i = 0; i < 40; i++) tgrad_tensor_release(t[i]);
    size_t cached;
    int32_t count;
    pool_state(&cached, &count);
    CHECK(cached <= 65536 && count > 0 && frees > before); /* some kept, the rest freed */
    tgrad_tensor_t big = on_device(40000, 0); /* 80,000 bytes: above the bound */
    CHECK(largest_alloc == 80000);
    before = frees;
    tgrad_tensor_release(big);
    CHECK(frees == before + 1);
}

static void test_out_of_memory_drains_the_pool_and_retries(void) {
    size_t cached;
    int32_t count;
    pool_state(&cached, &count);
    CHECK(count > 0);
    fail_next_alloc = 1; /* the stub refuses while anything of its memory is live */
    tgrad_tensor_t t = 0;
    int64_t shape[1] = { 3000 };
    uint16_t data[3000] = { 0 };
    tgrad_tensor_t host = 0;
    EXPECT(tgrad_tensor_from_bf16(data, 1, shape, &host), TGRAD_OK);
    EXPECT(tgrad_tensor_to(host, TGRAD_DEVICE_CUDA, &t), TGRAD_OK);
    pool_state(&cached, &count);
    CHECK(cached == 0 && count == 0 && live == 1);
    fail_next_alloc = 0;
    tgrad_tensor_release(t), tgrad_tensor_release(host);
}

int main(void) {
    tg_device_use_stand_in(TGRAD_DEVICE_CUDA, &stub);
    test_size_classes();
    test_a_freed_buffer_is_reused();
    test_the_bound_holds_and_large_buffers_go_back();
    test_out_of_memory_drains_the_pool_and_retries();
    CHECK(tgrad_live_tensors() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
