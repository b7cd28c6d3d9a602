/* The scheduler at scale (issue 32): the walk and the release are iterative and the planning uses a
 * buffer-to-step index, so that
 *  - random graphs get the schedule the recursive walk and the quadratic planner gave (the same post
 *    order, frees and release points: checked against both, re-implemented here as references);
 *  - a 10^5-op chain that cannot fuse (a handle on every intermediate, or fusion off) realizes with
 *    the right bytes, and a 10^6-op chain fused or dropped unrealized takes no C stack per node;
 *  - the work is linear: tgrad_debug_schedule_work's index probes per step and read stay under a
 *    constant (6; about 3.5 in practice) at 10^3 and 10^5 steps, and dropping the schedule's
 *    references examines each step once (counts, not timings).
 * Linked from libtgrad's objects (the scheduler is hidden in the shared library). Arguments: the
 * long-chain length (default 100000) and the dropped-chain length (default 1000000). Prints
 * "N passed, N failed". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"
#include "check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32) % n;
}

static tgrad_tensor_t tensor_of(float v0, float v1, int64_t rows, int64_t cols) {
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = i % 2 ? v1 : v0 + 0.25f * (float)(i / 2);
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_tensor_from_f32(v, 2, (int64_t[]){ rows, cols }, &t), TGRAD_OK);
    return t;
}

/* ---- references: the recursive walk and the quadratic planner, over a built schedule ---------- */
static int32_t scan_step(const tg_schedule *S, const tg_buffer *b) {
    for (int32_t i = 0; i < S->n; i++)
        if (S->steps[i].buf == b) return i;
    return -1;
}

/* The post order of the recursive walk, following each step's reads: order[k] = the step it
 * emits k-th. */
static void ref_visit(const tg_schedule *S, const tg_buffer *b, int32_t *order, int32_t *n, bool *done) {
    if (!b->node) return;
    int32_t s = scan_step(S, b);
    if (s < 0) { /* a pending buffer that the schedule lacks */
        order[0] = -1;
        return;
    }
    if (done[s]) return;
    for (int32_t i = 0; i < S->steps[s].nreads; i++) ref_visit(S, S->steps[s].reads[i]->buf, order, n, done);
    done[s] = true;
    order[(*n)++] = s;
}

static int32_t ref_readers(const tg_schedule *S, const tg_buffer *b, int32_t *last) {
    int32_t count = 0;
    *last = -1;
    for (int32_t s = 0; s < S->n; s++)
        for (int32_t i = 0; i < S->steps[s].nreads; i++)
            if (S->steps[s].reads[i]->buf == b) count++, *last = s;
    return count;
}

/* The schedule equals the references': its order, each step's frees and release point. */
static bool matches_references(const tg_schedule *S, const tg_buffer *target) {
    int32_t *order = calloc((size_t)S->n + 1, sizeof *order), *release = calloc((size_t)S->n + 1, sizeof *release);
    bool *done = calloc((size_t)S->n + 1, 1), ok = order && release && done;
    int32_t n = 0;
    if (ok) ref_visit(S, target, order, &n, done);
    ok = ok && n == S->n;
    for (int32_t k = 0; ok && k < n; k++) ok = order[k] == k;
    for (int32_t s = 0; ok && s < S->n; s++) release[s] = s;
    for (int32_t s = 0, nfree = 0; ok && s < S->n; s++) {
        const tg_step *st = &S->steps[s];
        ok = st->first_free == nfree;
        for (int32_t i = 0; ok && i < st->nreads; i++) {
            const tg_buffer *in = st->reads[i]->buf;
            bool again = false;
            for (int32_t j = 0; j < i; j++) again |= st->reads[j]->buf == in;
            if (again) continue;
            int32_t last, count = ref_readers(S, in, &last), from = scan_step(S, in);
            if (from >= 0) release[from] = last;
            if (last == s && (int64_t)count == (int64_t)atomic_load(&in->refs)) ok = S->free[nfree++] == in;
        }
        ok = ok && st->nfree == nfree - st->first_free;
    }
    for (int32_t s = 0; ok && s < S->n; s++) ok = S->steps[s].release_after == release[s];
    free(order), free(release), free(done);
    return ok;
}

/* A random graph over 4x4 tensors: elementwise ops, products and transposed views of earlier
 * tensors, with a handle kept on some intermediates. Returns the last; *kept holds the others. */
static tgrad_tensor_t random_graph(int nops, tgrad_tensor_t *kept, int *nkept) {
    tgrad_tensor_t t[64];
    int n = 0;
    *nkept = 0;
    t[n++] = tensor_of(0.5f, -1.0f, 4, 4), t[n++] = tensor_of(-0.75f, 2.0f, 4, 4);
    for (int k = 0; k < nops; k++) {
        tgrad_tensor_t a = t[n - 1 - (int)rnd((uint32_t)(n < 6 ? n : 6))], b = t[rnd((uint32_t)n)], out = 0;
        uint32_t kind = rnd(10);
        if (kind < 4) EXPECT(tgrad_unary(TGRAD_OP_NEG + (int32_t)rnd(2), a, &out), TGRAD_OK); /* neg, abs */
        else if (kind < 8) EXPECT(tgrad_binary(TGRAD_OP_ADD + (int32_t)rnd(3), a, b, &out), TGRAD_OK);
        else if (kind < 9) EXPECT(tgrad_matmul(a, b, &out), TGRAD_OK);
        else EXPECT(tgrad_tensor_transpose(a, 0, 1, &out), TGRAD_OK);
        if (n == 64) { /* keep the newest: the oldest go to `kept` or are dropped */
            if (rnd(3) == 0) kept[(*nkept)++] = t[0];
            else tgrad_tensor_release(t[0]);
            memmove(t, t + 1, sizeof t[0] * 63), n--;
        }
        t[n++] = out;
    }
    for (int i = 0; i < n - 1; i++) {
        if (rnd(4) == 0) kept[(*nkept)++] = t[i];
        else tgrad_tensor_release(t[i]);
    }
    return t[n - 1];
}

static void release_all(tgrad_tensor_t *t, int n) {
    for (int i = 0; i < n; i++) tgrad_tensor_release(t[i]);
}

/* Random graphs, fused and unfused: the schedule is the references', dropping its references by
 * steps drops exactly those whose release point has passed, and fused and unfused bytes agree. */
static void test_random_graphs_match_the_references(void) {
    enum { GRAPHS = 300, MAX_OPS = 120 };
    int mismatched = 0, misreleased = 0, differ = 0;
    static tgrad_tensor_t kept[MAX_OPS + 64];
    for (int g = 0; g < GRAPHS; g++) {
        uint16_t bits[2][16];
        uint64_t seed = rng_state;
        for (int fused = 0; fused < 2; fused++) {
            rng_state = seed;
            EXPECT(tgrad_set_fusion(fused), TGRAD_OK);
            int nkept;
            tgrad_tensor_t top = random_graph(1 + (int)rnd(MAX_OPS), kept, &nkept);
            tg_tensor t;
            EXPECT(tg_handle_get_tensor(top, &t), TGRAD_OK);
            tg_schedule S;
            pthread_mutex_lock(&tg_graph_lock);
            EXPECT(tg_schedule_build_locked(t.buf, &S), TGRAD_OK);
            mismatched += !matches_references(&S, t.buf);
            pthread_mutex_unlock(&tg_graph_lock);
            tg_schedule_free(&S);
            /* the same schedule holding references: drop them step by step (then the rest at once) */
            EXPECT(tg_schedule_build(t.buf, &S), TGRAD_OK);
            int32_t stop = S.n ? (int32_t)rnd((uint32_t)S.n) : 0;
            for (int32_t i = 0; i < stop; i++) {
                tg_schedule_release_through(&S, i);
                for (int32_t s = 0; s < S.n; s++) misreleased += S.steps[s].released != (S.steps[s].release_after <= i);
            }
            int32_t jump = stop + 1 + (int32_t)rnd(3);
            tg_schedule_release_through(&S, jump);
            for (int32_t s = 0; s < S.n; s++) misreleased += S.steps[s].released != (S.steps[s].release_after <= jump);
            tg_schedule_free(&S);
            tg_tensor_unref(&t);
            EXPECT(tgrad_tensor_read_bf16(top, bits[fused], 16), TGRAD_OK);
            tgrad_tensor_release(top);
            release_all(kept, nkept);
        }
        differ += memcmp(bits[0], bits[1], sizeof bits[0]) != 0;
    }
    EXPECT(tgrad_set_fusion(1), TGRAD_OK);
    CHECK(mismatched == 0);
    CHECK(misreleased == 0);
    CHECK(differ == 0);
    CHECK(tgrad_live_buffers() == 0);
}

static void work(int64_t w[TGRAD_DEBUG_WORK_COUNT]) { EXPECT(tgrad_debug_schedule_work(w, TGRAD_DEBUG_WORK_COUNT), TGRAD_OK); }

/* x, then n ops cycling through +1, neg, +1, neg (0.5 -> 1.5 -> -1.5 -> -0.5 -> 0.5, exact in bf16):
 * the value after k ops. */
static float chain_value(float x, int64_t k) {
    for (int64_t i = 0; i < k % 4; i++) x = i % 2 ? -x : x + 1.0f;
    return x;
}

/* A chain of n such ops on a [1, 2] tensor; every intermediate's handle in all[1 .. n] when all
 * is given (nothing fuses), else only the end is kept. Returns the end. */
static tgrad_tensor_t chain(int64_t n, tgrad_tensor_t one, tgrad_tensor_t *all) {
    tgrad_tensor_t y = tensor_of(0.5f, 0.5f, 1, 2);
    if (all) all[0] = y;
    for (int64_t i = 0; i < n; i++) {
        tgrad_tensor_t z = 0;
        tgrad_status s = i % 2 ? tgrad_unary(TGRAD_OP_NEG, y, &z) : tgrad_binary(TGRAD_OP_ADD, y, one, &z);
        if (s) {
            CHECK(s == TGRAD_OK);
            return y;
        }
        if (all) all[i + 1] = z;
        else tgrad_tensor_release(y);
        y = z;
    }
    return y;
}

static bool holds(tgrad_tensor_t t, float v) {
    float got[2] = { 0, 0 };
    return tgrad_tensor_read_f32(t, got, 2) == TGRAD_OK && got[0] == v && got[1] == v;
}

/* n unfusable ops realize with the right bytes: a handle on every intermediate, fusion on. One step
 * per op; the index's probes stay under a constant per step and read, and each step's reference
 * is examined once when dropped. */
static void test_kept_chain_realizes(int64_t n, int64_t w[TGRAD_DEBUG_WORK_COUNT]) {
    tgrad_tensor_t one = tensor_of(1.0f, 1.0f, 1, 2), *all = calloc((size_t)n + 1, sizeof *all);
    if (!all) return;
    tgrad_tensor_t end = chain(n, one, all);
    EXPECT(tgrad_tensor_realize(end), TGRAD_OK);
    work(w);
    CHECK(w[TGRAD_DEBUG_WORK_STEPS] == n && w[TGRAD_DEBUG_WORK_READS] == n + n / 2);
    /* about 3.5 (each read looked up by the walk, the two planning passes and note_unfused, each
     * step added once); a scan per step or per read would make it grow with n */
    CHECK(w[TGRAD_DEBUG_WORK_PROBES] <= 6 * (w[TGRAD_DEBUG_WORK_STEPS] + w[TGRAD_DEBUG_WORK_READS]));
    CHECK(w[TGRAD_DEBUG_WORK_RELEASE_CHECKS] == n);
    int wrong = 0;
    for (int64_t i = 0; i <= n; i += 1 + i / 64) wrong += !holds(all[i], chain_value(0.5f, i));
    CHECK(wrong == 0 && holds(end, chain_value(0.5f, n)));
    release_all(all, (int)n + 1); /* n + 1 fits: the lengths run are far below 2^31 */
    tgrad_tensor_release(one);
    free(all);
    CHECK(tgrad_live_buffers() == 0);
}

/* With fusion off, the same chain without handles: one step per op, each intermediate freed after
 * its reader. */
static void test_unfused_chain_realizes(int64_t n) {
    EXPECT(tgrad_set_fusion(0), TGRAD_OK);
    tgrad_tensor_t one = tensor_of(1.0f, 1.0f, 1, 2), end = chain(n, one, NULL);
    EXPECT(tgrad_tensor_realize(end), TGRAD_OK);
    int64_t w[TGRAD_DEBUG_WORK_COUNT];
    work(w);
    CHECK(w[TGRAD_DEBUG_WORK_STEPS] == n && w[TGRAD_DEBUG_WORK_RELEASE_CHECKS] == n);
    CHECK(holds(end, chain_value(0.5f, n)));
    CHECK(tgrad_live_buffers() == 2); /* the end and `one`: the start went with its reader */
    tgrad_tensor_release(end), tgrad_tensor_release(one);
    EXPECT(tgrad_set_fusion(1), TGRAD_OK);
}

/* A chain of n ops with only its end held: dropped unrealized, every node and buffer is freed
 * (no C stack per node); then built again and realized fused (a step per 9 ops). */
static void test_long_chain_drops_and_realizes(int64_t n) {
    tgrad_tensor_t one = tensor_of(1.0f, 1.0f, 1, 2), end = chain(n, one, NULL);
    CHECK(tgrad_live_buffers() == n + 2);
    tgrad_tensor_release(end);
    CHECK(tgrad_live_buffers() == 1);
    end = chain(n, one, NULL);
    EXPECT(tgrad_tensor_realize(end), TGRAD_OK);
    int64_t w[TGRAD_DEBUG_WORK_COUNT];
    work(w);
    CHECK(w[TGRAD_DEBUG_WORK_STEPS] == (n + TG_MAX_FUSED) / (TG_MAX_FUSED + 1));
    CHECK(holds(end, chain_value(0.5f, n)));
    tgrad_tensor_release(end), tgrad_tensor_release(one);
    CHECK(tgrad_live_buffers() == 0);
}

/* Out of memory anywhere in realizing or explaining a graph past the scan size (the index and its
 * growth, the walk's path on the heap, the memory plan, the steps' storage): the call reports
 * out_of_memory, holds nothing (the live counters come back), and the graph realizes after (in a
 * -Dfault_injection=true build; elsewhere there is nothing to inject). */
static void test_out_of_memory_holds_nothing(void) {
    int64_t fired = 0;
    if (tgrad_debug_fail_allocation(0, &fired) == TGRAD_ERR_BACKEND_UNAVAILABLE) {
        printf("fault injection not built: the out-of-memory walk is not checked\n");
        return;
    }
    enum { OPS = 40 }; /* 40 steps, 40 deep: an index grown twice, a walk path moved to the heap */
    int walked = 0, wrong = 0;
    for (int64_t n = 1; n < 1000; n++) {
        tgrad_tensor_t one = tensor_of(1.0f, 1.0f, 1, 2), all[OPS + 1];
        tgrad_tensor_t end = chain(OPS, one, all);
        int64_t base = tgrad_live_buffers(), before = 0, after = 0;
        char text[1 << 16];
        size_t len;
        tgrad_debug_fail_allocation(n, &before);
        tgrad_status e = tgrad_tensor_explain(end, TGRAD_FORMAT_TEXT, text, sizeof text, &len);
        tgrad_status s = tgrad_tensor_realize(end);
        tgrad_debug_fail_allocation(0, &after);
        wrong += (e != TGRAD_OK && e != TGRAD_ERR_OUT_OF_MEMORY) || (s != TGRAD_OK && s != TGRAD_ERR_OUT_OF_MEMORY);
        wrong += tgrad_live_buffers() != base; /* realized in place: nothing made, nothing lost */
        wrong += tgrad_tensor_realize(end) != TGRAD_OK || !holds(end, chain_value(0.5f, OPS));
        release_all(all, OPS + 1);
        tgrad_tensor_release(one);
        wrong += tgrad_live_buffers() != 0;
        if (after == before) break; /* every allocation was reached and failed once */
        walked++;
    }
    CHECK(wrong == 0);
    CHECK(walked > 10);
    printf("out of memory at each of %d allocations: handled\n", walked);
}

int main(int argc, char **argv) {
    int64_t n_long = argc > 1 ? atoll(argv[1]) : 100000, n_drop = argc > 2 ? atoll(argv[2]) : 1000000;
    test_random_graphs_match_the_references();
    test_out_of_memory_holds_nothing();
    /* linear work: the probes per step and read stay under the same constant at both lengths */
    int64_t small[TGRAD_DEBUG_WORK_COUNT], large[TGRAD_DEBUG_WORK_COUNT];
    test_kept_chain_realizes(1000, small);
    test_kept_chain_realizes(n_long, large);
    double per_small = (double)small[TGRAD_DEBUG_WORK_PROBES] / (double)(small[0] + small[1]);
    double per_large = (double)large[TGRAD_DEBUG_WORK_PROBES] / (double)(large[0] + large[1]);
    printf("index probes per step and read: %.2f at 1000 ops, %.2f at %lld\n", per_small, per_large, (long long)n_long);
    test_unfused_chain_realizes(n_long);
    test_long_chain_drops_and_realizes(n_drop);
    int64_t w[TGRAD_DEBUG_WORK_COUNT];
    EXPECT(tgrad_debug_schedule_work(NULL, 1), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_schedule_work(w, 0), TGRAD_ERR_INVALID_ARGUMENT);
    EXPECT(tgrad_debug_schedule_work(w, TGRAD_DEBUG_WORK_COUNT + 1), TGRAD_ERR_INVALID_ARGUMENT);
    CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0 && tgrad_live_bytes() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
