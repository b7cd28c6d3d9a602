/* The node kinds of the lazy graph: one row each, X(code, NAME, name, role). The registry of what
 * each kind is and how it runs (executor, route, explain text, devices) is kinds.h; this list only
 * numbers them, so that internal.h can declare the node. Adding a kind: docs/architecture.md. */
#ifndef TGRAD_KINDS_LIST_H
#define TGRAD_KINDS_LIST_H

/* Fusion roles: an anchor owns a kernel that elementwise chains attach to; an elementwise kind
 * maps each element alone; a movement kind rearranges elements bit for bit; a reduction folds
 * axes. */
/* Codes are pre-assigned (issue 34): a code may be listed before the kinds below it are, and the
 * registry's rows of the missing codes stay empty. Role none: a source with no inputs (random). */
typedef enum tg_role { TG_ROLE_NONE, TG_ROLE_ANCHOR, TG_ROLE_ELEMENTWISE, TG_ROLE_MOVEMENT, TG_ROLE_REDUCTION } tg_role;

#define TG_KIND_LIST(X)                                   \
    X(0, NONE, none, TG_ROLE_NONE)                        \
    X(1, MATMUL, matmul, TG_ROLE_ANCHOR)                  \
    X(2, COPY, copy, TG_ROLE_MOVEMENT)                    \
    X(3, ELEMENTWISE, elementwise, TG_ROLE_ELEMENTWISE)   \
    X(4, CAST, cast, TG_ROLE_ELEMENTWISE)                 \
    X(5, REDUCE, reduce, TG_ROLE_REDUCTION)               \
    X(6, GATHER, gather, TG_ROLE_MOVEMENT)                \
    X(7, CONCAT, concat, TG_ROLE_MOVEMENT)                \
    X(8, SOFTMAX, softmax, TG_ROLE_REDUCTION)             \
    X(9, NORM, norm, TG_ROLE_NONE)                        \
    X(10, ROPE, rope, TG_ROLE_NONE)                       \
    X(11, RANDOM, random, TG_ROLE_NONE)                   \
    X(12, WHERE, where, TG_ROLE_ELEMENTWISE)              \
    X(13, COMPARE, compare, TG_ROLE_ELEMENTWISE)          \
    X(14, SCATTER_ADD, scatter_add, TG_ROLE_NONE)         \
    X(15, PLACE, place, TG_ROLE_MOVEMENT)                 \
    X(16, OPTIM_STEP, optim_step, TG_ROLE_NONE)           \
    X(17, SLICE_SCATTER, slice_scatter, TG_ROLE_MOVEMENT)

#endif
