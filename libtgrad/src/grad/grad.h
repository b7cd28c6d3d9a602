/* The gradient engine's private contract (grad/engine.c walks the graph; grad/vjp_*.c hold each
 * kind's vector-Jacobian rule, the `vjp` row of the kind registry, kinds.h). A rule builds its
 * part of the backward graph lazily from the library's own constructors (the public ABI calls),
 * so gradients are pending tensors realized like any other. Every handle a rule makes goes into
 * the engine's arena (released when tgrad_grad returns; the nodes keep what they read alive). */
#ifndef TGRAD_GRAD_H
#define TGRAD_GRAD_H

#include "../schedule.h"

typedef struct tg_grad_arena {
    tgrad_tensor_t *h;
    int32_t n, cap;
    /* What a rule built for one input of a node and can give its next input (vjp_rows.c's norm:
     * the float32 x, g, rinv, ...): valid while node and key (the node's cotangent) match. */
    struct { const void *node; tgrad_tensor_t key, h[5]; } memo;
} tg_grad_arena;

/* Keep h (a handle just made) in the arena; on failure (out of memory) h is released. A status
 * s != 0 is passed through (h is then 0): rules write `s = tg_keep(A, tgrad_x(..., &t), t)`. */
TG_HIDDEN tgrad_status tg_keep(tg_grad_arena *A, tgrad_status s, tgrad_tensor_t h);
/* The same for the handle a call (status s) wrote to *out: kept on success, *out = 0 on failure. */
TG_HIDDEN tgrad_status tg_keep_out(tg_grad_arena *A, tgrad_status s, tgrad_tensor_t *out);

/* One call of a rule: the node, its result y (shaped node->out), the result's cotangent g (the
 * same shape, dtype cd) and each input read through its view, x[i] (shaped inputs[i].view). */
typedef struct tg_vjp_args {
    tg_grad_arena *A;
    const tg_node *node;
    tgrad_tensor_t y, g;
    const tgrad_tensor_t *x;
    int32_t cd; /* the cotangent chain's dtype (bf16 or f32) */
} tg_vjp_args;

/* A kind's rule. check (NULL: every node of the kind has a rule) says before anything is built
 * whether this node has one (TGRAD_ERR_NO_GRADIENT_RULE naming it, else TGRAD_OK). input makes
 * the cotangent of input i, shaped as that input's view (*gi = 0: none flows into it, as into a
 * where's condition). */
typedef struct tg_vjp {
    tgrad_status (*check)(const tg_node *n);
    tgrad_status (*input)(const tg_vjp_args *a, int32_t i, tgrad_tensor_t *gi);
} tg_vjp;

TG_HIDDEN extern const tg_vjp tg_vjp_matmul, tg_vjp_elementwise, tg_vjp_cast, tg_vjp_reduce, tg_vjp_copy,
    tg_vjp_where, tg_vjp_concat, tg_vjp_random, tg_vjp_place, tg_vjp_gather, tg_vjp_scatter_add;
/* --- hwire: the row kinds (grad/vjp_rows.c) --- */
TG_HIDDEN extern const tg_vjp tg_vjp_softmax, tg_vjp_rope, tg_vjp_norm, tg_vjp_slice_scatter;

/* Helpers the rules compose with (grad/engine.c): each makes one handle into the arena. */
/* A 0-d constant v of dtype on the device `like` lives on (tg_g_scalar_on: on `device`). */
TG_HIDDEN tgrad_status tg_g_scalar(tg_grad_arena *A, double v, int32_t dtype, tgrad_tensor_t like, tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_g_scalar_on(tg_grad_arena *A, double v, int32_t dtype, int32_t device, tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_g_cast(tg_grad_arena *A, tgrad_tensor_t x, int32_t dtype, tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_g_un(tg_grad_arena *A, tgrad_op op, tgrad_tensor_t x, tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_g_bin(tg_grad_arena *A, tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);
/* a op c for a scalar constant c (of a's dtype) */
TG_HIDDEN tgrad_status tg_g_binc(tg_grad_arena *A, tgrad_op op, tgrad_tensor_t a, double c, tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_g_cmpc(tg_grad_arena *A, int32_t cmp, tgrad_tensor_t a, double c, tgrad_tensor_t *out);
/* cond ? a : 0 (zero: a 0-d zero of a's dtype broadcast) */
TG_HIDDEN tgrad_status tg_g_mask(tg_grad_arena *A, tgrad_tensor_t cond, tgrad_tensor_t a, tgrad_tensor_t *out);
/* x read with the shape of `like` (reshape of the same elements) */
TG_HIDDEN tgrad_status tg_g_reshape(tg_grad_arena *A, tgrad_tensor_t x, int32_t ndim, const int64_t *shape,
                                    tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_g_expand(tg_grad_arena *A, tgrad_tensor_t x, int32_t ndim, const int64_t *shape,
                                   tgrad_tensor_t *out);
/* Sum g (shaped v->shape) into the cotangent of the buffer that v reads (numel elements, a compact
 * 1-D tensor): a correctly rounded sum over v's broadcast (stride 0) axes, then the PLACE kind's
 * transpose of the remaining (injective) view; nothing but a reshape when v reads the whole
 * buffer in order. */
TG_HIDDEN tgrad_status tg_g_unview(tg_grad_arena *A, tgrad_tensor_t g, const tg_view *v, int64_t numel,
                                   tgrad_tensor_t *out);
/* A handle over buffer b read through view v (retains b), kept in the arena. */
TG_HIDDEN tgrad_status tg_g_handle(tg_grad_arena *A, tg_buffer *b, const tg_view *v, tgrad_tensor_t *out);

/* PLACE (grad/place.c): out = a compact 1-D tensor of numel elements of g's dtype, +0 where
 * nothing lands, g's elements at v's positions (v injective, v->shape = g's shape). */
TG_HIDDEN tgrad_status tg_place(tgrad_tensor_t g, const tg_view *v, int64_t numel, tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_place_execute(const tg_step *st);
/* SCATTER_ADD (grad/scatter_add.c): the transpose of tgrad_take(x, indices, axis) for an x read
 * through xv: g summed (correctly rounded) into the positions its indices name. */
TG_HIDDEN tgrad_status tg_scatter_add(tgrad_tensor_t g, tgrad_tensor_t indices, int32_t axis, const tg_view *xv,
                                      tgrad_tensor_t *out);
TG_HIDDEN tgrad_status tg_scatter_add_execute(const tg_step *st);

#endif
