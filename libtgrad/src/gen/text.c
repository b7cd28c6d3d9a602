/* Growing text buffer for the renderer, and the FNV-1a hash of its result. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "gen.h"

void tg_text_free(tg_text *t) {
    free(t->data);
    *t = (tg_text){ 0 };
}

void tg_text_printf(tg_text *t, const char *fmt, ...) {
    if (t->failed || t->discard) return;
    for (;;) {
        size_t room = t->cap - t->len;
        va_list ap;
        va_start(ap, fmt);
        int n = t->data ? vsnprintf(t->data + t->len, room, fmt, ap) : -2;
        va_end(ap);
        if (n == -1) { /* an encoding error: cannot happen with the renderer's ASCII formats */
            t->failed = true;
            return;
        }
        if (n >= 0 && (size_t)n < room) {
            t->len += (size_t)n;
            return;
        }
        size_t need = t->len + (n > 0 ? (size_t)n : 0) + 1;
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < need) cap *= 2;
        char *bigger = tg_realloc(t->data, cap);
        if (!bigger) {
            t->failed = true;
            return;
        }
        if (!t->data) bigger[0] = '\0';
        t->data = bigger;
        t->cap = cap;
    }
}

uint64_t tg_fnv1a64(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
