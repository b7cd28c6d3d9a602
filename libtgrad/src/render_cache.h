/* The render cache: a GPU step's kernel text, kept by what the renderers read (render_cache.c).
 *
 * A device realize renders each step's kernel again before it looks the compiled program up by
 * the text's hash; a decode step on a GPU renders about a hundred kernels, the same ones at every
 * position. The cache keeps each text with its launch, keyed by everything the step renderers
 * (step_kernel.c) read from a step: the language, the route, the kinds and ops, every operand's
 * view and element type, the result's, the nodes' parameters, the fused chains and the matmul
 * precision. A hit still runs the step's renderer, with its text discarded (tg_text.discard), for
 * what changes from launch to launch (the bindings, a draw's words, the flags); the launch it
 * computes must equal the cached one, or the hit is taken as a miss. Bytes never depend on the
 * cache: the text is the one the renderer would write (TGRAD_RENDER_CACHE=verify renders every
 * hit again and compares; tgrad_debug_render_cache). */
#ifndef TGRAD_RENDER_CACHE_H
#define TGRAD_RENDER_CACHE_H

#include "schedule.h"
#include "step_kernel.h"

enum { TG_RENDER_CACHE_OFF = 0, TG_RENDER_CACHE_ON = 1, TG_RENDER_CACHE_VERIFY = 2 };

/* The current mode: TGRAD_RENDER_CACHE ("0" off, "verify", else on) until tgrad_debug_render_cache
 * sets one. */
TG_HIDDEN int32_t tg_render_cache_mode(void);

/* A step's key: its bytes, malloc'ed (NULL when out of memory: then the step is rendered and
 * nothing is kept). */
typedef struct tg_render_key {
    unsigned char *bytes;
    size_t len, cap;
    bool failed;
} tg_render_key;
TG_HIDDEN void tg_render_key_of(const tg_step *st, const tg_route *route, const tg_lang *l, tg_render_key *key);
TG_HIDDEN void tg_render_key_free(tg_render_key *key);

/* The cached text and launch of key: true with a malloc'ed copy of the text in *text (its length
 * in text->len) and the launch in *launch; false on a miss. */
TG_HIDDEN bool tg_render_cache_find(const tg_render_key *key, tg_text *text, struct tgrad_launch *launch);
/* Keep text and launch for key (a copy; nothing when out of memory). */
TG_HIDDEN void tg_render_cache_keep(const tg_render_key *key, const tg_text *text, const struct tgrad_launch *launch);
/* One step's render took ns nanoseconds (the debug counters). */
TG_HIDDEN void tg_render_cache_timed(int64_t ns);
/* A hit that its launch or (verify) its text contradicted: counted, the entry dropped. */
TG_HIDDEN void tg_render_cache_contradicted(const tg_render_key *key, bool text);

#endif
