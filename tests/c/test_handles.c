/* Handle generations at their limit (a -Dfault_injection=true build: tgrad_debug_handle_generation
 * moves a slot's generation there). A handle is kind(8) | generation(24) | slot+1(32): were the
 * generation to wrap, a handle released 2^24 - 1 cycles ago would name a live tensor again. A slot
 * whose generation reaches the limit is retired instead. Prints "N passed, N failed". */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tgrad.h"

#include "check.h"

#define GEN_LIMIT 0xffffffu
enum { MANY = 300 }; /* more than the handle table's first 64 slots: it grows meanwhile */

static uint32_t slot_of(tgrad_tensor_t h) { return (uint32_t)h; }
static uint32_t generation_of(tgrad_tensor_t h) { return (uint32_t)(h >> 32) & GEN_LIMIT; }

static tgrad_tensor_t make(void) {
    uint16_t v = 0x3f80;
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_tensor_from_bf16(&v, 1, (int64_t[]){ 1 }, &t), TGRAD_OK);
    return t;
}

static bool alive(tgrad_tensor_t h) {
    int32_t nd;
    return tgrad_tensor_ndim(h, &nd) == TGRAD_OK;
}

/* Many new tensors: none takes `slot` and none is `stale`, which stays refused throughout. */
static void expect_slot_never_reused(uint32_t slot, tgrad_tensor_t stale) {
    static tgrad_tensor_t made[MANY];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < MANY; i++) {
            made[i] = make();
            CHECK(slot_of(made[i]) != slot && made[i] != stale);
        }
        CHECK(!alive(stale));
        for (int i = 0; i < MANY; i++) EXPECT(tgrad_tensor_release(made[i]), TGRAD_OK);
    }
    CHECK(!alive(stale));
}

/* A handle at the last generation, released: its slot is retired, so the handle stays stale
 * forever and new tensors get other slots. */
static void test_slot_at_the_last_generation_is_retired(void) {
    tgrad_tensor_t h = make(), last = 0;
    EXPECT(tgrad_debug_handle_generation(h, GEN_LIMIT, &last), TGRAD_OK);
    CHECK(slot_of(last) == slot_of(h) && generation_of(last) == GEN_LIMIT);
    CHECK(!alive(h) && alive(last)); /* re-issued: the old handle is stale */
    EXPECT(tgrad_tensor_release(h), TGRAD_ERR_INVALID_HANDLE);
    EXPECT(tgrad_tensor_release(last), TGRAD_OK);
    EXPECT(tgrad_tensor_release(last), TGRAD_ERR_INVALID_HANDLE);
    expect_slot_never_reused(slot_of(last), last);
}

/* The wrap itself: a handle of generation 1 released long ago must not come back when its slot's
 * generation would pass the limit (2^24 - 1 cycles later; the aid skips them). */
static void test_released_handle_never_comes_back(void) {
    tgrad_tensor_t h = make(), first = 0, next = 0, last = 0;
    EXPECT(tgrad_debug_handle_generation(h, 1, &first), TGRAD_OK);
    EXPECT(tgrad_tensor_release(first), TGRAD_OK);
    next = make(); /* the slot again (its free list is last-in, first-out), generation 2 */
    CHECK(slot_of(next) == slot_of(first) && generation_of(next) == 2);
    EXPECT(tgrad_debug_handle_generation(next, GEN_LIMIT - 1, &last), TGRAD_OK);
    EXPECT(tgrad_tensor_release(last), TGRAD_OK);
    tgrad_tensor_t limit = make(); /* generation 2^24 - 1: still issued once */
    CHECK(slot_of(limit) == slot_of(first) && generation_of(limit) == GEN_LIMIT);
    CHECK(!alive(first) && !alive(last));
    EXPECT(tgrad_tensor_release(limit), TGRAD_OK);
    expect_slot_never_reused(slot_of(first), first);
    CHECK(!alive(limit));
}

static void test_refusals(void) {
    tgrad_tensor_t h = make(), out = 0;
    EXPECT(tgrad_debug_handle_generation(h, 0, &out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_handle_generation(h, GEN_LIMIT + 1, &out), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_handle_generation(h, 5, NULL), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_handle_generation(0, 5, &out), TGRAD_ERR_INVALID_HANDLE);
    CHECK(out == 0 && alive(h));
    EXPECT(tgrad_tensor_release(h), TGRAD_OK);
    EXPECT(tgrad_debug_handle_generation(h, 5, &out), TGRAD_ERR_INVALID_HANDLE);
    CHECK(out == 0);
}

int main(void) {
    tgrad_tensor_t probe = 0;
    if (tgrad_debug_handle_generation(0, 1, &probe) == TGRAD_ERR_BACKEND_UNAVAILABLE) {
        printf("the testing aid is not built (-Dfault_injection=true)\n");
        return 77; /* meson's "skipped" */
    }
    test_slot_at_the_last_generation_is_retired();
    test_released_handle_never_comes_back();
    test_refusals();
    CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0 && tgrad_live_bytes() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
