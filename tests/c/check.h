/* The C tests' assertions: count passes and failures, report a failure with the library's detail,
 * for the "N passed, N failed" line each test prints at the end. */
#ifndef TGRAD_TESTS_CHECK_H
#define TGRAD_TESTS_CHECK_H

#include <stdio.h>

#include "tgrad.h"

static int passed, failed;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (cond) passed++;                                                             \
        else { failed++; fprintf(stderr, "%s:%d: CHECK(%s) failed [%s]\n", __FILE__, __LINE__, #cond, tgrad_last_error()); } \
    } while (0)
#define EXPECT(call, status) CHECK((call) == (status))

#endif
