/* A decided step (schedule.h) as a GPU kernel: the renderer's problem (gen/), the text, and which
 * buffer each of the kernel's bindings is. One place, used by the device executor (device.c) and
 * by tgrad_render_tensor (gen/api.c), so what `python -m tgrad render` prints is what runs. */
#ifndef TGRAD_STEP_KERNEL_H
#define TGRAD_STEP_KERNEL_H

#include "schedule.h"

typedef struct tg_step_kernel {
    tg_text text;
    struct tgrad_launch launch;
    /* binding i: the graph buffer bound there, or NULL for table_op's 65,536-entry table, or (op
     * 0) for the launch's words below */
    const tg_buffer *bufs[TGRAD_LAUNCH_MAX_BUFFERS];
    tgrad_op table_op[TGRAD_LAUNCH_MAX_BUFFERS];
    /* Values that change from launch to launch of one text (a draw's seed and offset, an
     * optimizer step's scalars), so that the text, and its compiled program, is shared: uploaded
     * to a small buffer bound at words_at (-1: none) for the launch, freed after it. */
    int32_t words_at, nwords;
    uint32_t words[8]; /* a draw's seed and offset (4); an optimizer step's scalars (8) */
    /* A flag per row (the softmax kind), bound at flags_at (-1: none): a device buffer of nflags
     * uints that the kernel writes, read back after the launch and handed to the kind's
     * gpu_finish (kinds.h), freed after it. */
    int32_t flags_at;
    int64_t nflags;
    /* Words the host makes from the step's data before the launch (the kind's gpu_host_words:
     * scatter_add's positions), bound at host_at (-1: none), nhost of them; the text does not
     * depend on them. */
    int32_t host_at;
    int64_t nhost;
} tg_step_kernel;

/* Render step st (a matmul by `route`, a copy, an elementwise chain or a reduction; its fused ops
 * as the epilogue, a reduction's prologue in its read) in language l. Caller holds what keeps
 * st's nodes alive (tg_graph_lock, or st->buf's lock while it is pending). On failure nothing is
 * held. */
TG_HIDDEN tgrad_status tg_step_kernel_render(const tg_step *st, const tg_route *route, const tg_lang *l,
                                             tg_step_kernel *k);
TG_HIDDEN void tg_step_kernel_free(tg_step_kernel *k);
/* The step's kind's emitter into k, uncached (the render cache's: render_cache.h); discard: the
 * text is not written, only the launch and the bindings, words and flags. */
TG_HIDDEN tgrad_status tg_step_kernel_emit(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k,
                                           bool discard);

/* The GPU emitters of the kinds that have one (their rows in kinds.c name them): fill k's text,
 * launch and bindings for step st. */
TG_HIDDEN tgrad_status tg_step_render_matmul(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_elementwise(const tg_step *st, const tg_route *route, const tg_lang *l,
                                                  tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_reduce(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_cast(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_copy(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_gather(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_pointwise(const tg_step *st, const tg_route *route, const tg_lang *l,
                                                tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_random(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_norm(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_rope(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_softmax(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_concat(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_place(const tg_step *st, const tg_route *route, const tg_lang *l, tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_scatter_add(const tg_step *st, const tg_route *route, const tg_lang *l,
                                                  tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_optim_step(const tg_step *st, const tg_route *route, const tg_lang *l,
                                                 tg_step_kernel *k);
TG_HIDDEN tgrad_status tg_step_render_slice_scatter(const tg_step *st, const tg_route *route, const tg_lang *l,
                                                    tg_step_kernel *k);

#endif
