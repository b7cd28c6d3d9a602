/* The OpenCL backend on a real driver (PoCL in CI): the backend interface (backend.h) directly —
 * memory round trips, compile and launch geometry, a broken kernel's build log — then the kernels
 * libtgrad renders (naive, tiled, copy) against the CPU's bytes, first through the private
 * renderer and then end to end through the public device API.
 *
 * Linked from libtgrad's objects, so it reaches the hidden tg_backend_opencl. Exit 77 (skipped)
 * when the backend is unavailable, unless TGRAD_REQUIRE_OPENCL=1 (CI), where that fails.
 * Modes for the device-choice tests (each needs a fresh process, since init runs once):
 *   test_opencl --expect-unavailable TEXT   init must fail with backend_unavailable naming TEXT
 *   test_opencl --expect-device TEXT        init must pick a device whose name contains TEXT
 * Prints "N passed, N failed". */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gen/gen.h"
#include "tgrad.h"

#include "check.h"

static const tg_backend *be;

static bool contains_nocase(const char *hay, const char *needle) {
    for (; *hay; hay++) {
        size_t i = 0;
        while (needle[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (!needle[i]) return true;
    }
    return !*needle;
}

/* ---- seeded bf16 fills ---- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

enum fill { FILL_NORMAL, FILL_SPECIAL, FILL_TINY };

/* NORMAL: |x| in [2^-17, 2^13]; SPECIAL: that plus zeros of both signs, subnormals, infinities and
 * NaNs; TINY: products near 2^-126, where the kernels' flush logic decides the bytes. */
static uint16_t random_bf16(enum fill fill) {
    uint32_t r = next_u32();
    uint16_t sign = (uint16_t)((r & 1u) << 15), mant = (uint16_t)((r >> 1) & 0x7f);
    uint32_t e = 110 + (r >> 8) % 31;
    if (fill == FILL_TINY) e = 60 + (r >> 8) % 9;
    if (fill == FILL_SPECIAL) {
        switch ((r >> 16) % 16) {
        case 0: return sign;                          /* +-0 */
        case 1: return (uint16_t)(sign | (mant | 1)); /* subnormal */
        case 2: return (uint16_t)(sign | 0x7f80);     /* +-inf */
        case 3: return (uint16_t)(0x7fc0 | mant);     /* NaN */
        default: break;
        }
    }
    return (uint16_t)(sign | (e << 7) | mant);
}

static uint16_t *random_buffer(int64_t n, enum fill fill) {
    uint16_t *p = malloc((size_t)(n > 0 ? n : 1) * 2);
    for (int64_t i = 0; i < n; i++) p[i] = random_bf16(fill);
    return p;
}

static void report_difference(const char *what, const uint16_t *got, const uint16_t *want, int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) bad++, first = first < 0 ? i : first;
    if (bad)
        fprintf(stderr, "  %s: %lld of %lld outputs differ; first at %lld: got 0x%04x, want 0x%04x\n", what,
                (long long)bad, (long long)n, (long long)first, got[first], want[first]);
}

/* ---- the backend interface ---- */
static void test_memory_round_trip(void) {
    enum { N = 4096 };
    unsigned char in[N], out[N], part[100];
    for (int i = 0; i < N; i++) in[i] = (unsigned char)(i * 7 + 3);
    void *mem = NULL;
    EXPECT(be->alloc(N, &mem), TGRAD_OK);
    CHECK(mem != NULL);
    if (!mem) return;
    EXPECT(be->copy_in(mem, 0, in, N), TGRAD_OK);
    memset(part, 0xEE, sizeof part);
    EXPECT(be->copy_in(mem, 1000, part, sizeof part), TGRAD_OK); /* an offset write */
    memset(in + 1000, 0xEE, sizeof part);
    EXPECT(be->copy_out(mem, 0, out, N), TGRAD_OK);
    CHECK(memcmp(in, out, N) == 0);
    memset(out, 0, N);
    EXPECT(be->copy_out(mem, 3000, out, 50), TGRAD_OK); /* an offset read */
    CHECK(memcmp(in + 3000, out, 50) == 0);
    EXPECT(be->copy_in(mem, 0, in, 0), TGRAD_OK); /* zero bytes: nothing to do */
    be->free(mem);
    be->free(NULL);
    /* Larger than the device's largest buffer: out_of_memory with the limit in the detail. */
    mem = NULL;
    EXPECT(be->alloc(SIZE_MAX / 2, &mem), TGRAD_ERR_OUT_OF_MEMORY);
    CHECK(mem == NULL && strstr(tgrad_last_error(), "CL_DEVICE_MAX_MEM_ALLOC_SIZE") != NULL);
}

/* Each work-item writes its global id and local size: global size = grid x threadgroup. */
static const char geometry_src[] =
    "__kernel void geometry(__global const uint *base, __global uint *out) {\n"
    "    size_t x = get_global_id(0), y = get_global_id(1);\n"
    "    size_t i = y * get_global_size(0) + x;\n"
    "    out[2 * i] = base[0] + (uint)(x + 1000 * y);\n"
    "    out[2 * i + 1] = (uint)(get_local_size(0) * 100 + get_local_size(1));\n"
    "}\n";

static void test_compile_and_launch_geometry(void) {
    void *program = NULL;
    EXPECT(be->compile(geometry_src, strlen(geometry_src), "geometry", &program), TGRAD_OK);
    if (!program) return;
    struct tgrad_launch l;
    memset(&l, 0, sizeof l);
    l.grid[0] = 3, l.grid[1] = 2, l.grid[2] = 1;
    l.threadgroup[0] = 8, l.threadgroup[1] = 4, l.threadgroup[2] = 1;
    l.buffer_count = 2;
    snprintf(l.kernel_name, sizeof l.kernel_name, "geometry");
    const int W = 24, H = 8;
    uint32_t base = 7, out[2 * 24 * 8];
    void *bufs[2] = { NULL, NULL };
    EXPECT(be->alloc(sizeof base, &bufs[0]), TGRAD_OK);
    EXPECT(be->alloc(sizeof out, &bufs[1]), TGRAD_OK);
    EXPECT(be->copy_in(bufs[0], 0, &base, sizeof base), TGRAD_OK);
    EXPECT(be->launch(program, &l, bufs, 2), TGRAD_OK);
    memset(out, 0, sizeof out);
    EXPECT(be->copy_out(bufs[1], 0, out, sizeof out), TGRAD_OK);
    int wrong = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int i = y * W + x;
            wrong += out[2 * i] != (uint32_t)(7 + x + 1000 * y) || out[2 * i + 1] != 8 * 100 + 4;
        }
    CHECK(wrong == 0);
    /* A work-group larger than the device allows is refused before the driver sees it. */
    l.threadgroup[0] = 1u << 20;
    EXPECT(be->launch(program, &l, bufs, 2), TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    CHECK(strstr(tgrad_last_error(), "CL_DEVICE_MAX_WORK_GROUP_SIZE") != NULL);
    be->free(bufs[0]);
    be->free(bufs[1]);
    be->release_program(program);
    be->release_program(NULL);
}

static void test_broken_kernel_reports_build_log(void) {
    static const char broken[] =
        "__kernel void broken(__global ushort *c) {\n"
        "    c[get_global_id(0)] = tgrad_no_such_identifier;\n"
        "}\n";
    void *program = (void *)1;
    EXPECT(be->compile(broken, strlen(broken), "broken", &program), TGRAD_ERR_KERNEL_COMPILE_FAILED);
    CHECK(program == (void *)1); /* untouched on failure */
    CHECK(tgrad_last_status() == TGRAD_ERR_KERNEL_COMPILE_FAILED);
    const char *log = tgrad_last_error();
    CHECK(strstr(log, "build log") != NULL);
    CHECK(strstr(log, "tgrad_no_such_identifier") != NULL); /* the compiler's own words */
    CHECK(strstr(log, "error") != NULL);
    printf("  broken kernel: %.200s\n", log);
    /* A program that builds but lacks the entry point. */
    program = NULL;
    EXPECT(be->compile(geometry_src, strlen(geometry_src), "not_there", &program), TGRAD_ERR_KERNEL_COMPILE_FAILED);
    CHECK(program == NULL && strstr(tgrad_last_error(), "not_there") != NULL);
}

/* ---- rendered kernels against the CPU ---- */
typedef struct operand {
    int64_t elements; /* of the base buffer */
    tg_view view;     /* the logical matrix over it */
} operand;

static operand plain(int64_t rows, int64_t cols) {
    operand o = { rows * cols, { 2, { rows, cols }, { cols, 1 }, 0 } };
    return o;
}
static operand transposed(int64_t rows, int64_t cols) { /* base [cols, rows], read .T */
    operand o = { rows * cols, { 2, { rows, cols }, { 1, rows }, 0 } };
    return o;
}
static operand reversed(int64_t rows, int64_t cols) { /* base [rows, cols], read [::-1, ::-1] */
    operand o = { rows * cols, { 2, { rows, cols }, { -cols, -1 }, rows * cols - 1 } };
    return o;
}
static operand sliced(int64_t rows, int64_t cols) { /* base [2 rows + 1, 2 cols + 3], read [1::2, 3::2] */
    int64_t w = 2 * cols + 3;
    operand o = { (2 * rows + 1) * w, { 2, { rows, cols }, { 2 * w, 2 }, w + 3 } };
    return o;
}
static operand expanded(int64_t rows, int64_t cols) { /* base [1, cols] expanded to rows */
    operand o = { cols, { 2, { rows, cols }, { 0, 1 }, 0 } };
    return o;
}

static tg_gen_operand gen_operand(const tg_view *v) {
    return (tg_gen_operand){ v->offset, { v->strides[0], v->strides[1] } };
}

/* Run one rendered kernel: upload the inputs, prefill the output with 0xFFFF (unwritten outputs
 * show), launch, read back. */
static tgrad_status run_rendered(const tg_text *t, const struct tgrad_launch *l, uint16_t *const *inputs,
                                 const int64_t *input_elements, int ninputs, uint16_t *out, int64_t out_elements) {
    void *mem[3] = { NULL, NULL, NULL };
    void *program = NULL;
    tgrad_status s = be->compile(t->data, t->len, l->kernel_name, &program);
    for (int i = 0; i < ninputs && !s; i++) {
        size_t bytes = (size_t)(input_elements[i] > 0 ? input_elements[i] : 1) * 2;
        s = be->alloc(bytes, &mem[i]);
        if (!s) s = be->copy_in(mem[i], 0, inputs[i], (size_t)input_elements[i] * 2);
    }
    if (!s) s = be->alloc((size_t)(out_elements > 0 ? out_elements : 1) * 2, &mem[ninputs]);
    for (int64_t i = 0; i < out_elements; i++) out[i] = 0xFFFF;
    if (!s) s = be->copy_in(mem[ninputs], 0, out, (size_t)out_elements * 2);
    if (!s && l->grid[0] && l->grid[1] && l->grid[2]) s = be->launch(program, l, mem, (uint32_t)ninputs + 1);
    if (!s) s = be->copy_out(mem[ninputs], 0, out, (size_t)out_elements * 2);
    for (int i = 0; i <= ninputs; i++) be->free(mem[i]);
    be->release_program(program);
    return s;
}

typedef struct matmul_case {
    const char *name;
    int64_t m, k, n;
    operand (*a)(int64_t, int64_t), (*b)(int64_t, int64_t);
    enum fill fill;
} matmul_case;

static void check_matmul_case(const matmul_case *c) {
    operand a = c->a(c->m, c->k), b = c->b(c->k, c->n);
    uint16_t *abuf = random_buffer(a.elements, c->fill), *bbuf = random_buffer(b.elements, c->fill);
    int64_t mn = c->m * c->n;
    uint16_t *want = malloc((size_t)(mn > 0 ? mn : 1) * 2), *got = malloc((size_t)(mn > 0 ? mn : 1) * 2);
    EXPECT(tg_cpu_matmul(abuf, &a.view, bbuf, &b.view, want), TGRAD_OK);
    /* the reference runs in the calling thread's order: the rendered kernel takes the same */
    tg_gen_matmul p = { .m = c->m, .k = c->k, .n = c->n, .a = gen_operand(&a.view), .b = gen_operand(&b.view),
                        .c = { 0, { c->n, 1 } }, .order = tgrad_matmul_order() };
    const tg_lang *lang = tg_lang_find(TGRAD_LANG_OPENCL);
    const int32_t routes[] = { TGRAD_ROUTE_NAIVE, TGRAD_ROUTE_TILED };
    for (int r = 0; r < 2; r++) {
        const tg_route *route = tg_route_find(routes[r]);
        tg_text t = { 0 };
        struct tgrad_launch l;
        EXPECT(tg_gen_check_matmul(route, lang, &p), TGRAD_OK);
        EXPECT(tg_gen_render_matmul(route, lang, &p, &t, &l), TGRAD_OK);
        uint16_t *inputs[2] = { abuf, bbuf };
        int64_t elements[2] = { a.elements, b.elements };
        tgrad_status s = run_rendered(&t, &l, inputs, elements, 2, got, mn);
        EXPECT(s, TGRAD_OK);
        bool same = s == TGRAD_OK && memcmp(got, want, (size_t)mn * 2) == 0;
        CHECK(same);
        if (!same) {
            fprintf(stderr, "  case %s (%lldx%lldx%lld), route %s:\n", c->name, (long long)c->m, (long long)c->k,
                    (long long)c->n, route->name);
            if (s == TGRAD_OK) report_difference(c->name, got, want, mn);
        }
        tg_text_free(&t);
    }
    free(abuf), free(bbuf), free(want), free(got);
}

static void test_rendered_matmuls_match_cpu_bytes(void) {
    static const matmul_case cases[] = {
        { "one", 1, 1, 1, plain, plain, FILL_NORMAL },
        { "below-tile odd K", 5, 7, 3, plain, plain, FILL_NORMAL },
        { "tile", 64, 64, 64, plain, plain, FILL_NORMAL },
        { "primes", 33, 65, 97, plain, plain, FILL_NORMAL },
        { "transposed a", 31, 17, 40, transposed, plain, FILL_NORMAL },
        { "reversed b", 29, 34, 21, plain, reversed, FILL_NORMAL },
        { "sliced both", 18, 23, 35, sliced, sliced, FILL_NORMAL },
        { "expanded b", 20, 16, 24, transposed, expanded, FILL_NORMAL },
        { "special values", 24, 40, 20, plain, plain, FILL_SPECIAL },
        { "near the flush boundary", 16, 48, 16, plain, transposed, FILL_TINY },
        { "K = 0", 6, 0, 5, plain, plain, FILL_NORMAL },
        { "M = 0", 0, 4, 5, plain, plain, FILL_NORMAL },
    };
    const int32_t orders[] = { TGRAD_MATMUL_ORDER_BLOCK32, TGRAD_MATMUL_ORDER_PAIRWISE };
    for (int o = 0; o < 2; o++) {
        EXPECT(tgrad_set_matmul_order(orders[o]), TGRAD_OK);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_matmul_case(&cases[i]);
    }
    EXPECT(tgrad_set_matmul_order(TGRAD_MATMUL_ORDER_BLOCK32), TGRAD_OK);
}

static void test_copy_kernel_matches_cpu_bytes(void) {
    const tg_view views[] = {
        { 2, { 13, 9 }, { 1, 13 }, 0 },       /* a transpose of [9, 13] */
        { 2, { 6, 4 }, { -8, -1 }, 8 * 7 + 7 }, /* rows 7..2, columns 7..4 of [8, 8], reversed */
        { 3, { 3, 4, 5 }, { 1, 15, 3 }, 0 },  /* a permutation of [4, 5, 3] */
    };
    const tg_lang *lang = tg_lang_find(TGRAD_LANG_OPENCL);
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) {
        const tg_view *v = &views[i];
        int64_t numel = 1, reach = v->offset;
        for (int d = 0; d < v->ndim; d++) {
            numel *= v->shape[d];
            if (v->strides[d] > 0) reach += v->strides[d] * (v->shape[d] - 1);
        }
        int64_t elements = reach + 1;
        uint16_t *src = random_buffer(elements, FILL_SPECIAL);
        uint16_t *want = malloc((size_t)numel * 2), *got = malloc((size_t)numel * 2);
        tg_cpu_copy_view(src, v, want);
        tg_text t = { 0 };
        struct tgrad_launch l;
        EXPECT(tg_gen_check_copy(lang, v), TGRAD_OK);
        EXPECT(tg_gen_render_copy(lang, v, 2, &t, &l), TGRAD_OK);
        uint16_t *inputs[1] = { src };
        EXPECT(run_rendered(&t, &l, inputs, &elements, 1, got, numel), TGRAD_OK);
        CHECK(memcmp(got, want, (size_t)numel * 2) == 0);
        tg_text_free(&t);
        free(src), free(want), free(got);
    }
}

/* ---- the public device API ---- */
static tgrad_tensor_t tensor_2d(const uint16_t *bits, int64_t rows, int64_t cols) {
    tgrad_tensor_t t = 0;
    int64_t shape[2] = { rows, cols };
    EXPECT(tgrad_tensor_from_bf16(bits, 2, shape, &t), TGRAD_OK);
    return t;
}

static tgrad_tensor_t to_device(tgrad_tensor_t t, int32_t device) {
    tgrad_tensor_t out = 0;
    EXPECT(tgrad_tensor_to(t, device, &out), TGRAD_OK);
    return out;
}

static void test_public_api_matmul(void) {
    const int64_t M = 37, K = 29, N = 45;
    uint16_t *abits = random_buffer(K * M, FILL_SPECIAL), *bbits = random_buffer(K * N, FILL_NORMAL);
    /* a is the transpose of a [K, M] tensor: the kernel reads it in place. */
    tgrad_tensor_t a_base = tensor_2d(abits, K, M), b = tensor_2d(bbits, K, N), a = 0, want_t = 0;
    EXPECT(tgrad_tensor_transpose(a_base, 0, 1, &a), TGRAD_OK);
    EXPECT(tgrad_matmul(a, b, &want_t), TGRAD_OK);
    uint16_t *want = malloc((size_t)(M * N) * 2), *got = malloc((size_t)(M * N) * 2);
    EXPECT(tgrad_tensor_read_bf16(want_t, want, (size_t)(M * N)), TGRAD_OK);

    tgrad_tensor_t da_base = to_device(a_base, TGRAD_DEVICE_OPENCL), db = to_device(b, TGRAD_DEVICE_OPENCL), da = 0;
    int32_t device = -1;
    EXPECT(tgrad_tensor_device(db, &device), TGRAD_OK);
    CHECK(device == TGRAD_DEVICE_OPENCL);
    EXPECT(tgrad_tensor_transpose(da_base, 0, 1, &da), TGRAD_OK);
    const int32_t routes[] = { TGRAD_ROUTE_NAIVE, TGRAD_ROUTE_TILED, 0 };
    const char *names[] = { "opencl.naive", "opencl.tiled", "opencl.tiled" };
    for (int r = 0; r < 3; r++) {
        EXPECT(tgrad_set_device_route(routes[r]), TGRAD_OK);
        tgrad_tensor_t c = 0;
        EXPECT(tgrad_matmul(da, db, &c), TGRAD_OK);
        memset(got, 0, (size_t)(M * N) * 2);
        EXPECT(tgrad_tensor_read_bf16(c, got, (size_t)(M * N)), TGRAD_OK);
        bool same = memcmp(got, want, (size_t)(M * N) * 2) == 0;
        CHECK(same);
        if (!same) report_difference(names[r], got, want, M * N);
        char route[64] = "";
        size_t len = 0;
        EXPECT(tgrad_tensor_route(c, route, sizeof route, &len), TGRAD_OK);
        CHECK(strcmp(route, names[r]) == 0);
        tgrad_tensor_release(c);
    }
    /* OpenCL C has no sub-group matrices: a forced tc is refused with the reason. */
    EXPECT(tgrad_set_device_route(TGRAD_ROUTE_TC), TGRAD_OK);
    tgrad_tensor_t c = 0;
    tgrad_status s = tgrad_matmul(da, db, &c);
    if (s == TGRAD_OK) s = tgrad_tensor_realize(c);
    EXPECT(s, TGRAD_ERR_ROUTE_NOT_ELIGIBLE);
    tgrad_tensor_release(c);
    EXPECT(tgrad_set_device_route(0), TGRAD_OK);
    /* Operands on different devices are refused. */
    c = 0;
    EXPECT(tgrad_matmul(a, db, &c), TGRAD_ERR_DEVICE_MISMATCH);
    CHECK(c == 0);
    /* A reshape the strides cannot express materializes with the copy kernel on the device. */
    tgrad_tensor_t flat = 0, dflat = 0;
    int64_t shape[1] = { M * K };
    EXPECT(tgrad_tensor_reshape(a, shape, 1, &flat), TGRAD_OK);
    EXPECT(tgrad_tensor_reshape(da, shape, 1, &dflat), TGRAD_OK);
    uint16_t *fw = malloc((size_t)(M * K) * 2), *fg = malloc((size_t)(M * K) * 2);
    EXPECT(tgrad_tensor_read_bf16(flat, fw, (size_t)(M * K)), TGRAD_OK);
    EXPECT(tgrad_tensor_read_bf16(dflat, fg, (size_t)(M * K)), TGRAD_OK);
    CHECK(memcmp(fw, fg, (size_t)(M * K) * 2) == 0);
    char route[64] = "";
    size_t len = 0;
    EXPECT(tgrad_tensor_route(dflat, route, sizeof route, &len), TGRAD_OK);
    CHECK(strcmp(route, "opencl.copy") == 0);
    tgrad_tensor_t handles[] = { a_base, b, a, want_t, da_base, db, da, flat, dflat };
    for (size_t i = 0; i < sizeof handles / sizeof handles[0]; i++) EXPECT(tgrad_tensor_release(handles[i]), TGRAD_OK);
    CHECK(tgrad_live_tensors() == 0);
    free(abits), free(bbits), free(want), free(got), free(fw), free(fg);
}

/* Every allocation on the device path failing in turn (-Dfault_injection=true builds): a clean
 * out_of_memory each time, nothing leaked, and the run that completes gives the CPU's bytes. */
static tgrad_status device_scenario(const uint16_t *abits, const uint16_t *bbits, uint16_t *out) {
    tgrad_tensor_t a = 0, b = 0, da = 0, db = 0, dat = 0, c = 0, flat = 0;
    int64_t as[2] = { 12, 9 }, bs[2] = { 12, 7 }, fs[1] = { 63 };
    tgrad_status s = tgrad_tensor_from_bf16(abits, 2, as, &a);
    if (!s) s = tgrad_tensor_from_bf16(bbits, 2, bs, &b);
    if (!s) s = tgrad_tensor_to(a, TGRAD_DEVICE_OPENCL, &da);
    if (!s) s = tgrad_tensor_to(b, TGRAD_DEVICE_OPENCL, &db);
    if (!s) s = tgrad_tensor_transpose(da, 0, 1, &dat);
    if (!s) s = tgrad_matmul(dat, db, &c);                   /* [9, 7] on the device */
    if (!s) s = tgrad_tensor_transpose(c, 0, 1, &flat);
    if (!s) tgrad_tensor_release(c), c = flat, flat = 0;
    if (!s) s = tgrad_tensor_reshape(c, fs, 1, &flat);        /* the copy kernel */
    if (!s) s = tgrad_tensor_read_bf16(flat, out, 63);
    tgrad_tensor_t all[] = { a, b, da, db, dat, c, flat };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tgrad_tensor_release(all[i]);
    return s;
}

static void test_allocation_failures(void) {
    int64_t fired = 0;
    if (tgrad_debug_fail_allocation(0, &fired) == TGRAD_ERR_BACKEND_UNAVAILABLE) return; /* not built */
    uint16_t *abits = random_buffer(12 * 9, FILL_NORMAL), *bbits = random_buffer(12 * 7, FILL_NORMAL);
    uint16_t want[63], got[63];
    EXPECT(device_scenario(abits, bbits, want), TGRAD_OK);
    int walked = 0;
    for (int64_t n = 1; n < 1000; n++) {
        int64_t before = 0, after = 0;
        tgrad_debug_fail_allocation(n, &before);
        memset(got, 0xAB, sizeof got);
        tgrad_status s = device_scenario(abits, bbits, got);
        tgrad_debug_fail_allocation(0, &after);
        if (after == before) {
            CHECK(s == TGRAD_OK && memcmp(got, want, sizeof got) == 0);
            break;
        }
        walked++;
        CHECK(s == TGRAD_ERR_OUT_OF_MEMORY);
        tgrad_release_cached();
        CHECK(tgrad_live_tensors() == 0 && tgrad_live_buffers() == 0 && tgrad_live_bytes() == 0);
    }
    CHECK(walked > 5);
    printf("  walked %d allocation sites on the device path\n", walked);
    free(abits), free(bbits);
}

static void test_backend_listing(void) {
    const char *name = NULL, *device = NULL;
    int32_t built = 0, available = 0;
    EXPECT(tgrad_backend(TGRAD_DEVICE_OPENCL, &name, &built, &available, &device), TGRAD_OK);
    CHECK(name && strcmp(name, "opencl") == 0 && built == 1 && available == 1);
    CHECK(device && strcmp(device, be->device_name()) == 0);
}

/* ---- device choice (separate processes) ---- */
static bool required(void) {
    const char *v = getenv("TGRAD_REQUIRE_OPENCL");
    return v && strcmp(v, "1") == 0;
}

/* A machine with no OpenCL at all cannot show the other refusals: skip there (unless required). */
static bool no_opencl_here(const char *reason) {
    return strstr(reason, "no OpenCL ICD loader") != NULL || strstr(reason, "no OpenCL platform") != NULL;
}

static int expect_unavailable(const char *text) {
    EXPECT(be->init(), TGRAD_ERR_BACKEND_UNAVAILABLE);
    if (!strstr(tgrad_last_error(), text) && no_opencl_here(tgrad_last_error()) && !required()) {
        printf("SKIP: no OpenCL here: %s\n", tgrad_last_error());
        return 77;
    }
    CHECK(strstr(tgrad_last_error(), text) != NULL);
    printf("  unavailable as expected: %s\n", tgrad_last_error());
    EXPECT(be->init(), TGRAD_ERR_BACKEND_UNAVAILABLE); /* the first result, again */
    CHECK(strstr(tgrad_last_error(), text) != NULL);
    /* The public side says the same, without failing anything else. */
    const char *name = NULL, *device = NULL;
    int32_t built = 0, available = 1;
    EXPECT(tgrad_backend(TGRAD_DEVICE_OPENCL, &name, &built, &available, &device), TGRAD_OK);
    CHECK(built == 1 && available == 0 && device && strstr(device, text) != NULL);
    tgrad_tensor_t t = 0, moved = 0;
    uint16_t one = 0x3f80;
    int64_t shape[2] = { 1, 1 };
    EXPECT(tgrad_tensor_from_bf16(&one, 2, shape, &t), TGRAD_OK);
    EXPECT(tgrad_tensor_to(t, TGRAD_DEVICE_OPENCL, &moved), TGRAD_ERR_BACKEND_UNAVAILABLE);
    CHECK(moved == 0 && strstr(tgrad_last_error(), "opencl") != NULL);
    EXPECT(tgrad_tensor_release(t), TGRAD_OK);
    return 0;
}

int main(int argc, char **argv) {
    be = tg_backend_opencl;
    if (!be) {
        printf("%s: the OpenCL backend is not built into this library\n", required() ? "FAIL" : "SKIP");
        return required() ? 1 : 77;
    }
    if (argc == 3 && strcmp(argv[1], "--expect-unavailable") == 0) {
        int rc = expect_unavailable(argv[2]);
        if (rc) return rc;
    } else {
        tgrad_status s = be->init();
        if (s != TGRAD_OK) {
            printf("%s: OpenCL backend unavailable: %s\n", required() ? "FAIL (TGRAD_REQUIRE_OPENCL=1)" : "SKIP",
                   tgrad_last_error());
            return required() ? 1 : 77;
        }
        printf("  device: %s\n", be->device_name());
        CHECK(be->device_name()[0] != 0);
        CHECK(strcmp(be->name, "opencl") == 0 && be->lang == TGRAD_LANG_OPENCL);
        CHECK(be->has_matrix_route() == 0);
        if (argc == 3 && strcmp(argv[1], "--expect-device") == 0) {
            CHECK(contains_nocase(be->device_name(), argv[2]));
        } else {
            test_memory_round_trip();
            test_compile_and_launch_geometry();
            test_broken_kernel_reports_build_log();
            test_rendered_matmuls_match_cpu_bytes();
            test_copy_kernel_matches_cpu_bytes();
            test_public_api_matmul();
            test_backend_listing();
            test_allocation_failures();
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
