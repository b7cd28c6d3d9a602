/* The status registry (expanded from TGRAD_STATUS_LIST in tgrad.h) and per-thread error detail. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef struct { const char *name, *category, *message; } tg_status_entry;

#define TG_ENTRY_(code, NAME, name, category, message) [code] = { #name, category, message },
static const tg_status_entry registry[] = { TGRAD_STATUS_LIST(TG_ENTRY_) };
#undef TG_ENTRY_

enum { REGISTRY_SIZE = (int)(sizeof registry / sizeof registry[0]) };
_Static_assert((int)REGISTRY_SIZE == (int)TGRAD_STATUS_COUNT_, "status codes must be dense 0..N-1");

static _Thread_local char last_detail[512];
static _Thread_local tgrad_status last_status;

static const tg_status_entry *entry(tgrad_status s) {
    return (s >= 0 && s < REGISTRY_SIZE) ? &registry[s] : NULL;
}

TGRAD_API int32_t tgrad_status_count(void) { return REGISTRY_SIZE; }

TGRAD_API const char *tgrad_status_name(tgrad_status s) {
    const tg_status_entry *e = entry(s);
    return e ? e->name : "unknown_status";
}

TGRAD_API const char *tgrad_status_message(tgrad_status s) {
    const tg_status_entry *e = entry(s);
    return e ? e->message : "unknown status code";
}

TGRAD_API const char *tgrad_status_category(tgrad_status s) {
    const tg_status_entry *e = entry(s);
    return e ? e->category : "unknown";
}

TGRAD_API const char *tgrad_last_error(void) { return last_detail; }
TGRAD_API tgrad_status tgrad_last_status(void) { return last_status; }

tgrad_status tg_fail(tgrad_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_detail, sizeof last_detail, fmt, ap);
    va_end(ap);
    last_status = status;
    return status;
}

_Static_assert(sizeof last_detail == sizeof ((tg_error_saved *)0)->detail, "a saved detail holds a whole one");

void tg_error_save(tg_error_saved *saved) {
    saved->status = last_status;
    memcpy(saved->detail, last_detail, sizeof last_detail);
}

void tg_error_restore(const tg_error_saved *saved) {
    last_status = saved->status;
    memcpy(last_detail, saved->detail, sizeof last_detail);
}

TGRAD_API uint32_t tgrad_version(void) { return TGRAD_VERSION_NUMBER; }
TGRAD_API const char *tgrad_version_string(void) { return TGRAD_VERSION_STRING; }

TGRAD_API tgrad_status tgrad_check_version(uint32_t header_version) {
    uint32_t major = header_version / 10000;
    if (major != TGRAD_VERSION_MAJOR || header_version > TGRAD_VERSION_NUMBER)
        return tg_fail(TGRAD_ERR_VERSION_MISMATCH,
                       "program built against tgrad %u.%u.%u, library is %s", major,
                       (header_version / 100) % 100, header_version % 100, TGRAD_VERSION_STRING);
    return TGRAD_OK;
}
