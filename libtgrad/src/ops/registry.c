/* The op registry (expanded from TGRAD_OP_LIST in tgrad.h): names and arities by frozen code. */
#include "internal.h"

typedef struct { const char *name; int32_t arity; } tg_op_entry;

#define TG_ENTRY_(code, NAME, name, arity) [code] = { #name, arity },
static const tg_op_entry registry[] = { TGRAD_OP_LIST(TG_ENTRY_) };
#undef TG_ENTRY_

enum { REGISTRY_SIZE = (int)(sizeof registry / sizeof registry[0]) };
/* Codes are dense 1..N (slot 0 stays empty: no op), so a gap or a duplicate fails to build. */
_Static_assert((int)REGISTRY_SIZE == (int)TGRAD_OP_END_, "op codes must be dense 1..N");

static const tg_op_entry *entry(tgrad_op op) {
    return (op >= 1 && op < REGISTRY_SIZE) ? &registry[op] : NULL;
}

TGRAD_API int32_t tgrad_op_count(void) { return REGISTRY_SIZE - 1; }

TGRAD_API const char *tgrad_op_name(tgrad_op op) {
    const tg_op_entry *e = entry(op);
    return e ? e->name : "unknown_op";
}

TGRAD_API int32_t tgrad_op_arity(tgrad_op op) {
    const tg_op_entry *e = entry(op);
    return e ? e->arity : 0;
}
