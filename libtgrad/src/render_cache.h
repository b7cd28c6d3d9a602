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

/* Step st's kernel into k as tg_step_kernel_render gives it (step_kernel.h): from the cache where
 * the mode and the step allow, else rendered whole (tg_step_kernel_emit) and kept; timed for the
 * debug counters. */
TG_HIDDEN tgrad_status tg_render_cache_render(const tg_step *st, const tg_route *route, const tg_lang *l,
                                              tg_step_kernel *k);

#endif
