/* The scheduler decides each step's route once, and realize runs and records exactly that route:
 * a tgrad_set_cpu_isa between planning and running (or racing with it) cannot make the recorded
 * route name a variant other than the one that ran. Linked from libtgrad's objects (the scheduler
 * is hidden in the shared library). Prints "N passed, N failed". */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "schedule.h"
#include "ukernel.h"
#include "check.h"

static tgrad_tensor_t filled(int64_t rows, int64_t cols) {
    static float v[64 * 64];
    for (int i = 0; i < 64 * 64; i++) v[i] = (float)(i % 11) * 0.5f - 2.0f;
    tgrad_tensor_t t = 0;
    EXPECT(tgrad_tensor_from_f32(v, 2, (int64_t[]){ rows, cols }, &t), TGRAD_OK);
    return t;
}

static void route_of(tgrad_tensor_t t, char *dst, size_t cap) {
    size_t len;
    if (tgrad_tensor_route(t, dst, cap, &len)) snprintf(dst, cap, "(error)");
}

/* A variant other than portable that this CPU runs, or NULL. */
static const char *other_variant(void) {
    int32_t available;
    const char *name;
    for (int32_t i = 0; (name = tgrad_cpu_isa_name(i, &available)); i++)
        if (available && strcmp(name, "portable") != 0) return name;
    return NULL;
}

/* Planned under one variant, run after another was forced: the step's plan runs and is recorded. */
static void test_step_runs_its_plan(const char *other) {
    EXPECT(tgrad_set_matmul_order(TGRAD_MATMUL_ORDER_PAIRWISE), TGRAD_OK); /* the variants' own kernels */
    EXPECT(tgrad_set_cpu_isa("portable"), TGRAD_OK);
    tgrad_tensor_t a = filled(8, 64), b = filled(64, 16), c = 0;
    EXPECT(tgrad_matmul(a, b, &c), TGRAD_OK);
    tg_tensor t;
    EXPECT(tg_handle_get_tensor(c, &t), TGRAD_OK);
    tg_schedule S;
    EXPECT(tg_schedule_build(t.buf, &S), TGRAD_OK);
    CHECK(S.n == 1 && strncmp(S.steps[0].route, "cpu.portable.", 13) == 0);
    char planned[48];
    snprintf(planned, sizeof planned, "%s", S.n ? S.steps[0].route : "");
    CHECK(S.n == 1 && S.steps[0].nfused == 0); /* no fusion yet */
    EXPECT(tgrad_set_cpu_isa(other), TGRAD_OK);
    EXPECT(tg_schedule_run(&S), TGRAD_OK);
    tg_schedule_free(&S);
    tg_tensor_unref(&t);
    char route[48];
    route_of(c, route, sizeof route);
    CHECK(strcmp(route, planned) == 0);
    CHECK(tg_cpu_matmul_ran && strcmp(tg_cpu_matmul_ran->name, "portable") == 0);
    tgrad_tensor_release(c), tgrad_tensor_release(b), tgrad_tensor_release(a);
    EXPECT(tgrad_set_matmul_order(TGRAD_MATMUL_ORDER_BLOCK32), TGRAD_OK);
}

static atomic_int stop;
static const char *flip_names[2];

static void *flipper(void *arg) {
    (void)arg;
    for (int i = 0; !atomic_load(&stop); i++) tgrad_set_cpu_isa(flip_names[i & 1]);
    return NULL;
}

/* While another thread flips the variant: every realized product's route names the variant that
 * ran it (a product of [1, K] rows streams, the others pack: both kinds of variant choice). */
static void test_route_names_what_ran(const char *other) {
    flip_names[0] = "portable", flip_names[1] = other;
    tgrad_tensor_t a = filled(8, 64), row = filled(1, 64), b = filled(64, 16);
    pthread_t th;
    pthread_create(&th, NULL, flipper, NULL);
    int mismatches = 0;
    for (int i = 0; i < 4000; i++) {
        tgrad_tensor_t c = 0;
        if (tgrad_matmul(i & 1 ? row : a, b, &c) || tgrad_tensor_realize(c)) {
            mismatches++;
            continue;
        }
        char route[48], want[48];
        route_of(c, route, sizeof route);
        snprintf(want, sizeof want, "cpu.%s.", tg_cpu_matmul_ran ? tg_cpu_matmul_ran->name : "?");
        if (strncmp(route, want, strlen(want)) != 0) {
            if (!mismatches) fprintf(stderr, "recorded %s, ran %s\n", route, want);
            mismatches++;
        }
        tgrad_tensor_release(c);
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    CHECK(mismatches == 0);
    tgrad_tensor_release(b), tgrad_tensor_release(row), tgrad_tensor_release(a);
}

/* A device product planned on one forced route and run after another was forced: the step's route
 * runs and is recorded (OpenCL, where a device is available). */
static void test_device_step_runs_its_route(void) {
    tg_error_saved saved;
    tg_error_save(&saved);
    bool ready = tg_device_ready(TGRAD_DEVICE_OPENCL) == TGRAD_OK;
    tg_error_restore(&saved);
    if (!ready) {
        printf("no OpenCL device: the device route is not checked\n");
        return;
    }
    tgrad_tensor_t a = filled(8, 64), b = filled(64, 16), ga = 0, gb = 0, c = 0;
    EXPECT(tgrad_tensor_to(a, TGRAD_DEVICE_OPENCL, &ga), TGRAD_OK);
    EXPECT(tgrad_tensor_to(b, TGRAD_DEVICE_OPENCL, &gb), TGRAD_OK);
    EXPECT(tgrad_set_device_route(TGRAD_ROUTE_NAIVE), TGRAD_OK);
    EXPECT(tgrad_matmul(ga, gb, &c), TGRAD_OK);
    tg_tensor t;
    EXPECT(tg_handle_get_tensor(c, &t), TGRAD_OK);
    tg_schedule S;
    EXPECT(tg_schedule_build(t.buf, &S), TGRAD_OK);
    CHECK(S.n == 1 && strcmp(S.steps[0].route, "opencl.naive") == 0);
    EXPECT(tgrad_set_device_route(TGRAD_ROUTE_TILED), TGRAD_OK);
    EXPECT(tg_schedule_run(&S), TGRAD_OK);
    tg_schedule_free(&S);
    tg_tensor_unref(&t);
    char route[48];
    route_of(c, route, sizeof route);
    CHECK(strcmp(route, "opencl.naive") == 0);
    EXPECT(tgrad_set_device_route(0), TGRAD_OK);
    tgrad_tensor_release(c), tgrad_tensor_release(gb), tgrad_tensor_release(ga);
    tgrad_tensor_release(b), tgrad_tensor_release(a);
}

/* A node of three inputs (one buffer twice): the schedule orders both producers first, frees them
 * after their last reader, and realizing runs it (a copy reads its first input). */
static void test_node_of_three_inputs(void) {
    tgrad_tensor_t a = filled(4, 8), b = filled(8, 6), p = 0, q = 0;
    EXPECT(tgrad_matmul(a, b, &p), TGRAD_OK);
    EXPECT(tgrad_matmul(a, b, &q), TGRAD_OK);
    tg_tensor tp, tq;
    EXPECT(tg_handle_get_tensor(p, &tp), TGRAD_OK);
    EXPECT(tg_handle_get_tensor(q, &tq), TGRAD_OK);
    tgrad_tensor_release(p), tgrad_tensor_release(q); /* only the node will hold them */
    tg_node *n = tg_node_new(TG_OP_COPY, 3);
    CHECK(n != NULL);
    if (!n) return;
    tg_buffer_retain(tp.buf);
    n->inputs[0] = (tg_node_input){ tp.buf, tp.view };
    n->inputs[1] = (tg_node_input){ tp.buf, tp.view }; /* the node's second reference to p */
    n->inputs[2] = (tg_node_input){ tq.buf, tq.view };
    n->out = tp.view;
    tg_buffer *x = NULL;
    EXPECT(tg_buffer_new(24, n, &x), TGRAD_OK);
    tg_schedule S;
    EXPECT(tg_schedule_build(x, &S), TGRAD_OK);
    CHECK(S.n == 3 && S.steps[0].buf == tp.buf && S.steps[1].buf == tq.buf && S.steps[2].buf == x);
    CHECK(S.n == 3 && S.steps[2].nfree == 2 && S.free[S.steps[2].first_free] == tp.buf &&
          S.free[S.steps[2].first_free + 1] == tq.buf);
    CHECK(S.n == 3 && S.steps[0].release_after == 2 && S.steps[1].release_after == 2 && S.steps[2].release_after == 2);
    EXPECT(tg_schedule_run(&S), TGRAD_OK);
    tg_schedule_free(&S);
    CHECK(atomic_load(&x->realized) && x->node == NULL && tgrad_live_buffers() == 3); /* a, b, x */
    uint16_t want[24];
    EXPECT(tgrad_matmul(a, b, &p), TGRAD_OK);
    EXPECT(tgrad_tensor_read_bf16(p, want, 24), TGRAD_OK);
    CHECK(x->data && memcmp(x->data, want, sizeof want) == 0);
    tg_buffer_release(x);
    tgrad_tensor_release(p), tgrad_tensor_release(b), tgrad_tensor_release(a);
}

/* Threads race to realize one lazy chain, some from its end, some from its middle: each step runs
 * once, every thread reads the same bytes, and the intermediates die. */
static tgrad_tensor_t chain_mid, chain_end;
static uint16_t chain_got[4][8 * 8];

static void *realize_chain(void *arg) {
    int id = (int)(intptr_t)arg;
    if (id % 2) tgrad_tensor_realize(chain_mid);
    tgrad_tensor_read_bf16(chain_end, chain_got[id], 8 * 8);
    return NULL;
}

static void test_threads_share_a_chain(void) {
    tgrad_tensor_t a = filled(8, 8), m1 = 0, m2 = 0;
    EXPECT(tgrad_matmul(a, a, &m1), TGRAD_OK);
    EXPECT(tgrad_matmul(m1, a, &chain_mid), TGRAD_OK);
    EXPECT(tgrad_matmul(chain_mid, a, &m2), TGRAD_OK);
    EXPECT(tgrad_tensor_transpose(m2, 0, 1, &chain_end), TGRAD_OK);
    tgrad_tensor_t end = 0;
    EXPECT(tgrad_tensor_contiguous(chain_end, &end), TGRAD_OK);
    tgrad_tensor_release(chain_end), chain_end = end;
    tgrad_tensor_release(m1), tgrad_tensor_release(m2);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, realize_chain, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 1; i < 4; i++) CHECK(memcmp(chain_got[0], chain_got[i], sizeof chain_got[0]) == 0);
    tgrad_tensor_release(chain_mid);
    CHECK(tgrad_live_buffers() == 2); /* a and the end */
    tgrad_tensor_release(chain_end), tgrad_tensor_release(a);
}

int main(void) {
    test_device_step_runs_its_route();
    test_threads_share_a_chain();
    test_node_of_three_inputs();
    const char *other = other_variant();
    if (other) {
        test_step_runs_its_plan(other);
        test_route_names_what_ran(other);
    } else {
        printf("only the portable variant runs here: nothing to flip\n");
    }
    EXPECT(tgrad_set_cpu_isa("auto"), TGRAD_OK);
    CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0 && tgrad_live_bytes() == 0);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
