/* The softmax row loops without target flags (kernels/cpu/softmax_rows.h): every CPU runs them. */
#include "softmax_rows.h"

static int available(void) { return 1; }
TG_SM_VARIANT(tg_sm_portable, "portable");
