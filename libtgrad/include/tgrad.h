/*
 * tgrad.h — the stable C ABI of libtgrad, a bf16 2-D matrix-multiply runtime.
 *
 * Contract in brief
 *  - Every fallible call returns a tgrad_status. TGRAD_OK (0) is success; any other value names an
 *    entry of the status registry below. On failure no output argument is written, nothing is
 *    allocated, and tgrad_last_error() holds a one-line detail for the calling thread.
 *  - Objects are opaque 64-bit handles carrying a kind tag and a generation counter: a released,
 *    stale (slot reused) or foreign handle is answered with TGRAD_ERR_INVALID_HANDLE or
 *    TGRAD_ERR_WRONG_HANDLE_KIND, never undefined behaviour. The handle value 0 is "no object";
 *    tgrad_tensor_release(0) is a no-op.
 *  - Thread safety: every function may be called from any thread at any time. Tensors are
 *    immutable values (views and matmul make new tensors), so one tensor may be read, viewed,
 *    multiplied and realized from many threads at once; realization of a shared lazy result happens
 *    once. Releasing a handle while another thread uses it is safe: that thread either completes or
 *    gets TGRAD_ERR_INVALID_HANDLE.
 *  - Numerics (docs/numerics.md): bf16 storage, fp32 accumulation in a documented order, output
 *    rounded to nearest even. The result is bit-identical on every CPU path and thread count.
 *
 * ABI policy: numeric status codes, dtype codes and handle layout are frozen. Functions are only
 * added. Any change to an existing signature bumps TGRAD_VERSION_MAJOR.
 *
 * Experimental API: two fenced blocks below (the tgrad_debug_* testing aids; struct tgrad_launch
 * with the tgrad_render_* calls) are NOT part of the stable ABI and may change in any release,
 * as zstd fences its static-linking-only API. They are declared by default (the Python binding,
 * the tests and tools use them); compile with -DTGRAD_STABLE_ONLY to hide them and be sure a
 * program uses only the frozen API (-DTGRAD_EXPERIMENTAL_API shows them again).
 */
#ifndef TGRAD_H
#define TGRAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- export ------------------------------------------------------------------------------- */
#if defined(_WIN32)
#  if defined(TGRAD_BUILDING)
#    define TGRAD_API __declspec(dllexport)
#  else
#    define TGRAD_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__)
#  define TGRAD_API __attribute__((visibility("default")))
#else
#  define TGRAD_API
#endif

/* ---- version ------------------------------------------------------------------------------ */
#define TGRAD_VERSION_MAJOR 0
#define TGRAD_VERSION_MINOR 2
#define TGRAD_VERSION_PATCH 0
#define TGRAD_VERSION_NUMBER (TGRAD_VERSION_MAJOR * 10000 + TGRAD_VERSION_MINOR * 100 + TGRAD_VERSION_PATCH)
#define TGRAD_VERSION_STRING "0.2.0"

/* The library's TGRAD_VERSION_NUMBER (the header a program compiled against may differ). */
TGRAD_API uint32_t tgrad_version(void);
TGRAD_API const char *tgrad_version_string(void);
/* TGRAD_OK when a program built against header_version (pass TGRAD_VERSION_NUMBER) may use this
 * library: same major version and a library at least as new. Else TGRAD_ERR_VERSION_MISMATCH. */
typedef int32_t tgrad_status;
TGRAD_API tgrad_status tgrad_check_version(uint32_t header_version);

/* ---- status registry ---------------------------------------------------------------------- */
/* The one registry of outcomes. X(code, NAME, name, category, message).
 * Codes are frozen: never renumber, never reuse. Entries at or above TGRAD_STATUS_UNSTABLE_FROM
 * are young and may still be renamed before 1.0. category is one of
 * value | type | index | memory | runtime | lookup | file (the Python binding derives exception
 * bases; file: a file that is not there, a LookupError and a FileNotFoundError). */
#define TGRAD_STATUS_LIST(X)                                                                        \
    X(0, OK, ok, "none", "success")                                                                 \
    X(1, ERR_INVALID_ARGUMENT, invalid_argument, "value", "an argument is invalid (NULL pointer, bad count or flag)") \
    X(2, ERR_INVALID_HANDLE, invalid_handle, "lookup", "handle is released, stale or was never issued") \
    X(3, ERR_WRONG_HANDLE_KIND, wrong_handle_kind, "type", "handle names an object of another kind") \
    X(4, ERR_SHAPE_MISMATCH, shape_mismatch, "value", "operand shapes do not fit together")         \
    X(5, ERR_RANK_MISMATCH, rank_mismatch, "value", "operand has the wrong number of dimensions")   \
    X(6, ERR_BAD_PERMUTATION, bad_permutation, "value", "axes are not a permutation of the tensor's dimensions") \
    X(7, ERR_BAD_EXPAND, bad_expand, "value", "only size-1 axes can be expanded")                   \
    X(8, ERR_BAD_RESHAPE, bad_reshape, "value", "new shape does not hold the same number of elements") \
    X(9, ERR_INDEX_OUT_OF_RANGE, index_out_of_range, "index", "index or axis is out of range")        \
    X(10, ERR_DTYPE_UNSUPPORTED, dtype_unsupported, "type", "element type is not supported")        \
    X(11, ERR_SIZE_OVERFLOW, size_overflow, "value", "size computation overflows 64 bits")          \
    X(12, ERR_VIEW_NOT_EXPRESSIBLE, view_not_expressible, "value", "view cannot be expressed with strides over the existing buffer") \
    X(13, ERR_OUT_OF_MEMORY, out_of_memory, "memory", "memory allocation failed")                   \
    X(14, ERR_BUFFER_TOO_SMALL, buffer_too_small, "value", "destination buffer is smaller than the tensor") \
    X(15, ERR_BACKEND_UNAVAILABLE, backend_unavailable, "runtime", "backend is not built or not available on this machine") \
    X(16, ERR_KERNEL_COMPILE_FAILED, kernel_compile_failed, "runtime", "kernel source failed to compile") \
    X(17, ERR_VERSION_MISMATCH, version_mismatch, "runtime", "library and header versions are incompatible") \
    X(18, ERR_INTERNAL, internal, "runtime", "internal error (a bug in tgrad: please report it)") \
    X(19, ERR_ROUTE_NOT_ELIGIBLE, route_not_eligible, "value", "the kernel route cannot run this problem (shape, view, language or precision policy)") \
    X(20, ERR_TRACE_NO_OUTPUT, trace_no_output, "type", "the traced function returned no Tensor") \
    X(21, ERR_TRACE_NO_INPUT, trace_no_input, "type", "no Tensor was given to trace") \
    X(22, ERR_TRACE_OPTION_UNSUPPORTED, trace_option_unsupported, "value", "the runtime cannot honour this trace option") \
    X(23, ERR_DEVICE_MISMATCH, device_mismatch, "value", "operands live on different devices") \
    X(24, ERR_FILE_MALFORMED, file_malformed, "value", "a tensor file (safetensors, index) is malformed or unsafe to read") \
    X(25, ERR_FILE_MISSING, file_missing, "file", "a file (a checkpoint or one of its shards) does not exist") \
    X(26, ERR_TENSOR_NOT_FOUND, tensor_not_found, "lookup", "no tensor of this name in the file or checkpoint") \
    X(27, ERR_DTYPE_CONVERSION_REFUSED, dtype_conversion_refused, "type", "the data is not bf16 and converting it was not asked for") \
    X(28, ERR_MODEL_UNSUPPORTED, model_unsupported, "value", "the model's architecture or a configuration field it sets is not supported") \
    X(29, ERR_NO_GRADIENT_RULE, no_gradient_rule, "runtime", "a kind on the path to an input has no gradient rule yet (docs/autograd.md)")

#define TGRAD_STATUS_ENUM_(code, NAME, name, category, message) TGRAD_##NAME = code,
enum tgrad_status_code { TGRAD_STATUS_LIST(TGRAD_STATUS_ENUM_) TGRAD_STATUS_COUNT_ };
#undef TGRAD_STATUS_ENUM_
#define TGRAD_STATUS_UNSTABLE_FROM 15

/* Number of registry entries; codes are 0 .. count-1. */
TGRAD_API int32_t tgrad_status_count(void);
/* Stable snake_case name ("shape_mismatch"); "unknown_status" for a code outside the registry. */
TGRAD_API const char *tgrad_status_name(tgrad_status status);
/* One-line message of the registry entry; never NULL. */
TGRAD_API const char *tgrad_status_message(tgrad_status status);
/* Category of the entry (see above); "unknown" outside the registry. */
TGRAD_API const char *tgrad_status_category(tgrad_status status);
/* Detail of the last failed call on this thread ("" if none). Valid until this thread's next
 * failing call. */
TGRAD_API const char *tgrad_last_error(void);
/* Status of the last failed call on this thread (TGRAD_OK if none). */
TGRAD_API tgrad_status tgrad_last_status(void);

/* ---- op registry -------------------------------------------------------------------------- */
/* The one registry of elementwise ops. X(code, NAME, name, arity): arity 1 (unary) or 2 (binary).
 * Codes are frozen: never renumber, never reuse; new ops are appended. Code 0 names no op, so a
 * zeroed field never means one. Every op returns the correctly rounded bf16 (round to nearest
 * even) of the exact result of its bf16 inputs, and the correctly rounded float32 of the exact
 * result of float32 inputs: gradual underflow, overflow to inf, every NaN out the canonical
 * 0x7FC0 (0x7FC00000); the special cases of each op are in docs/numerics.md. gelu is the
 * exact erf form, gelu_tanh torch's approximate="tanh" (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3))), its constants taken as exact reals); maximum and minimum propagate NaN and order
 * -0 < +0; log is the natural logarithm; pow(a, b) is a^b with C99/IEEE 754 pow's special cases
 * (pow(x, 0) = 1 and pow(1, y) = 1 even for NaN, a negative base to a non-integer is NaN).
 * The derivative ops (24-31, hgew) take the forward op's input (or output, as torch's *_backward)
 * first and the cotangent g second, and are correctly rounded as a whole (one rounding of the exact
 * value): gelu_backward(x, g) = g gelu'(x), gelu_tanh_backward(x, g) = g gelu_tanh'(x),
 * silu_backward(x, g) = g silu'(x), sigmoid_backward(y, g) = g y (1 - y), tanh_backward(y, g) =
 * g (1 - y^2), relu_backward(x, g) = g where x > 0 else +0, rsqrt_backward(y, g) = -g y^3 / 2,
 * sqrt_backward(y, g) = g / (2 y). */
#define TGRAD_OP_LIST(X)                                                                            \
    X(1, RELU, relu, 1)                                                                             \
    X(2, GELU, gelu, 1)                                                                             \
    X(3, GELU_TANH, gelu_tanh, 1)                                                                   \
    X(4, SILU, silu, 1)                                                                             \
    X(5, SIGMOID, sigmoid, 1)                                                                       \
    X(6, TANH, tanh, 1)                                                                             \
    X(7, EXP, exp, 1)                                                                               \
    X(8, NEG, neg, 1)                                                                               \
    X(9, ABS, abs, 1)                                                                               \
    X(10, SQUARE, square, 1)                                                                        \
    X(11, RSQRT, rsqrt, 1)                                                                          \
    X(12, ADD, add, 2)                                                                              \
    X(13, SUB, sub, 2)                                                                              \
    X(14, MUL, mul, 2)                                                                              \
    X(15, DIV, div, 2)                                                                              \
    X(16, MAXIMUM, maximum, 2)                                                                      \
    X(17, MINIMUM, minimum, 2)                                                                      \
    X(18, SQRT, sqrt, 1)                                                                            \
    X(19, LOG, log, 1)                                                                              \
    X(20, LOG1P, log1p, 1)                                                                          \
    X(21, SIN, sin, 1)                                                                              \
    X(22, COS, cos, 1)                                                                              \
    X(23, POW, pow, 2)                                                                              \
    X(24, GELU_BACKWARD, gelu_backward, 2)                                                          \
    X(25, GELU_TANH_BACKWARD, gelu_tanh_backward, 2)                                                \
    X(26, SILU_BACKWARD, silu_backward, 2)                                                          \
    X(27, SIGMOID_BACKWARD, sigmoid_backward, 2)                                                    \
    X(28, TANH_BACKWARD, tanh_backward, 2)                                                          \
    X(29, RELU_BACKWARD, relu_backward, 2)                                                          \
    X(30, RSQRT_BACKWARD, rsqrt_backward, 2)                                                        \
    X(31, SQRT_BACKWARD, sqrt_backward, 2)

typedef int32_t tgrad_op;
#define TGRAD_OP_ENUM_(code, NAME, name, arity) TGRAD_OP_##NAME = code,
enum tgrad_op_code { TGRAD_OP_NONE = 0, TGRAD_OP_LIST(TGRAD_OP_ENUM_) TGRAD_OP_END_ };
#undef TGRAD_OP_ENUM_

/* Number of ops; their codes are 1 .. count. */
TGRAD_API int32_t tgrad_op_count(void);
/* Stable snake_case name ("gelu_tanh"); "unknown_op" for a code outside the registry. */
TGRAD_API const char *tgrad_op_name(tgrad_op op);
/* 1 for a unary op, 2 for a binary one, 0 for a code outside the registry. */
TGRAD_API int32_t tgrad_op_arity(tgrad_op op);

/* ---- limits and types --------------------------------------------------------------------- */
#define TGRAD_MAX_DIMS 8

/* Element types. Frozen codes. Tensors hold bf16, f32, i32 or bool elements (bool: one byte, 0 or
 * 1; made by the comparisons, tgrad_compare); host data given to the creation calls may also be
 * f64. Matmul and the elementwise ops take bf16 tensors (others are
 * refused with TGRAD_ERR_DTYPE_UNSUPPORTED before anything is allocated; a matmul may give f32,
 * tgrad_matmul_ex); views, copies, casts, reads and reductions take every tensor dtype. */
#define TGRAD_DTYPE_BF16 1
#define TGRAD_DTYPE_F32 2
#define TGRAD_DTYPE_F64 3
#define TGRAD_DTYPE_I32 4
#define TGRAD_DTYPE_BOOL 5

/* A tensor handle: an immutable value (possibly lazy) of one dtype, a view over a shared buffer. */
typedef uint64_t tgrad_tensor_t;

/* ---- tensors: creation, release, reading --------------------------------------------------- */
/* Create a bf16 tensor from contiguous row-major host data of ndim dimensions (0 <= ndim <=
 * TGRAD_MAX_DIMS, every extent >= 0). Every shape, here and in the view calls, obeys one size rule
 * (numpy's): 2 bytes times the product of its non-zero extents fits in int64, else
 * TGRAD_ERR_SIZE_OVERFLOW; so [INT64_MAX, 0, INT64_MAX] is refused although it holds no element,
 * because its row-major strides would overflow. f32/f64 round to nearest even; NaN stays NaN, made quiet,
 * sign kept (f64 rounds once, directly to bf16). bf16 bits are copied unchanged. data may be NULL
 * only when the shape holds no element. The host data is copied; the caller keeps ownership. */
TGRAD_API tgrad_status tgrad_tensor_from_f32(const float *data, int32_t ndim, const int64_t *shape,
                                             tgrad_tensor_t *out);
TGRAD_API tgrad_status tgrad_tensor_from_f64(const double *data, int32_t ndim, const int64_t *shape,
                                             tgrad_tensor_t *out);
TGRAD_API tgrad_status tgrad_tensor_from_bf16(const uint16_t *bits, int32_t ndim, const int64_t *shape,
                                              tgrad_tensor_t *out);
/* Create a tensor of element type `dtype` (bf16, f32, i32 or bool) from contiguous row-major host
 * data of type `src_dtype`, with the size rule above. Floating sources (bf16, f32, f64) give a bf16
 * or f32 tensor, rounded to nearest even where the source is wider (f32 from f32 or bf16 is
 * exact); an i32 source gives an i32 tensor; a bool source (bytes, 0 or 1; any nonzero byte is
 * stored as 1) a bool tensor. Any other pair is TGRAD_ERR_DTYPE_UNSUPPORTED (use
 * tgrad_cast). The host data is copied. */
TGRAD_API tgrad_status tgrad_tensor_from_host(const void *data, int32_t src_dtype, int32_t ndim,
                                              const int64_t *shape, int32_t dtype, tgrad_tensor_t *out);
/* Release a handle (the buffer lives while any view or pending result needs it). 0 is a no-op. */
TGRAD_API tgrad_status tgrad_tensor_release(tgrad_tensor_t tensor);

/* Realize (compute) a lazy tensor and everything it depends on. No-op when already realized. */
TGRAD_API tgrad_status tgrad_tensor_realize(tgrad_tensor_t tensor);
/* Copy the logical view, row-major, into dst (capacity in elements). Realizes first. bf16 bits are
 * the stored bits; f32 is their exact widening. */
TGRAD_API tgrad_status tgrad_tensor_read_bf16(tgrad_tensor_t tensor, uint16_t *dst, size_t capacity);
TGRAD_API tgrad_status tgrad_tensor_read_f32(tgrad_tensor_t tensor, float *dst, size_t capacity);
/* Copy the logical view, row-major, in the tensor's own element type (2 bytes for bf16, 4 for f32
 * and i32) into dst; capacity in bytes. Realizes first. read_bf16 and read_f32 above read bf16
 * tensors; read_f32 also reads f32 tensors (exactly); any other pair is
 * TGRAD_ERR_DTYPE_UNSUPPORTED. */
TGRAD_API tgrad_status tgrad_tensor_read(tgrad_tensor_t tensor, void *dst, size_t capacity);
/* Element size in bytes of a tensor dtype (bf16 2, f32 4, i32 4, bool 1; host-only f64 8), 0
 * otherwise. */
TGRAD_API int32_t tgrad_dtype_size(int32_t dtype);

/* ---- tensors: properties ------------------------------------------------------------------- */
TGRAD_API tgrad_status tgrad_tensor_ndim(tgrad_tensor_t tensor, int32_t *ndim);
/* shape and strides receive ndim values (pass arrays of TGRAD_MAX_DIMS). Strides and offset are in
 * elements of the underlying buffer; strides may be 0 (expand) or negative (reversed slice). */
TGRAD_API tgrad_status tgrad_tensor_shape(tgrad_tensor_t tensor, int64_t *shape);
TGRAD_API tgrad_status tgrad_tensor_strides(tgrad_tensor_t tensor, int64_t *strides);
TGRAD_API tgrad_status tgrad_tensor_offset(tgrad_tensor_t tensor, int64_t *offset);
TGRAD_API tgrad_status tgrad_tensor_numel(tgrad_tensor_t tensor, int64_t *numel);
TGRAD_API tgrad_status tgrad_tensor_dtype(tgrad_tensor_t tensor, int32_t *dtype);
/* 1 when the tensor's buffer holds computed data, 0 while it is a pending (lazy) result. */
TGRAD_API tgrad_status tgrad_tensor_is_realized(tgrad_tensor_t tensor, int32_t *realized);
/* 1 when both tensors are views of one buffer (zero-copy views share their base's buffer). */
TGRAD_API tgrad_status tgrad_tensor_same_buffer(tgrad_tensor_t a, tgrad_tensor_t b, int32_t *same);

/* ---- views (zero-copy unless stated) -------------------------------------------------------- */
/* Axes may be negative (counted from the end), as in numpy. */
TGRAD_API tgrad_status tgrad_tensor_transpose(tgrad_tensor_t tensor, int32_t axis0, int32_t axis1,
                                              tgrad_tensor_t *out);
TGRAD_API tgrad_status tgrad_tensor_permute(tgrad_tensor_t tensor, const int32_t *axes, int32_t naxes,
                                            tgrad_tensor_t *out);
/* Broadcast to shape (ndim >= the tensor's; new axes are prepended). A size-1 axis may take any
 * extent (stride 0); -1 keeps an existing extent; any other change is TGRAD_ERR_BAD_EXPAND. */
TGRAD_API tgrad_status tgrad_tensor_expand(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                                           tgrad_tensor_t *out);
/* numpy basic slicing on one axis: start/stop are clamped like numpy, negative values count from
 * the end, step != 0 (negative steps reverse). flags say which of start/stop are omitted (None). */
#define TGRAD_SLICE_START_NONE 1u
#define TGRAD_SLICE_STOP_NONE 2u
TGRAD_API tgrad_status tgrad_tensor_slice(tgrad_tensor_t tensor, int32_t axis, int64_t start,
                                          int64_t stop, int64_t step, uint32_t flags,
                                          tgrad_tensor_t *out);
/* Integer index on one axis (negative counts from the end); removes that axis. Out of range is
 * TGRAD_ERR_INDEX_OUT_OF_RANGE. */
TGRAD_API tgrad_status tgrad_tensor_select(tgrad_tensor_t tensor, int32_t axis, int64_t index,
                                           tgrad_tensor_t *out);
/* New shape with the same element count (one extent may be -1). view() refuses with
 * TGRAD_ERR_VIEW_NOT_EXPRESSIBLE when strides cannot express it; reshape() then materializes a
 * bit-preserving copy instead (lazily). */
TGRAD_API tgrad_status tgrad_tensor_view(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                                         tgrad_tensor_t *out);
TGRAD_API tgrad_status tgrad_tensor_reshape(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                                            tgrad_tensor_t *out);
/* A row-major compact tensor with the same values (a lazy bit-preserving copy; the same buffer is
 * shared when the view already is compact row-major). */
TGRAD_API tgrad_status tgrad_tensor_contiguous(tgrad_tensor_t tensor, tgrad_tensor_t *out);

/* ---- casts --------------------------------------------------------------------------------- */
/* out = x converted to `dtype`, lazily (compact row-major; x itself when the dtype is the same).
 * bf16 -> f32 is exact; f32 -> bf16 rounds to nearest even (NaN canonical 0x7FC0); i32 -> bf16 or
 * f32 rounds to nearest even; bf16 or f32 -> i32 truncates toward zero, and NaN or a value outside
 * the i32 range is TGRAD_ERR_INVALID_ARGUMENT when the cast runs (at realize). bool -> bf16, f32
 * or i32 gives 0 or 1; bf16, f32 or i32 -> bool gives x != 0 (NaN gives 1, -0 gives 0). */
TGRAD_API tgrad_status tgrad_cast(tgrad_tensor_t x, int32_t dtype, tgrad_tensor_t *out);

/* ---- comparisons and selection ------------------------------------------------------------- */
/* Comparison codes. Frozen. */
#define TGRAD_COMPARE_EQ 1
#define TGRAD_COMPARE_NE 2
#define TGRAD_COMPARE_LT 3
#define TGRAD_COMPARE_LE 4
#define TGRAD_COMPARE_GT 5
#define TGRAD_COMPARE_GE 6
/* out = (a cmp b), a bool tensor, elementwise with numpy broadcasting, lazily. Operands of any
 * tensor dtype (bf16, f32, i32, bool; they may differ): each pair is compared by its exact values
 * (every element is exact in double), as IEEE 754 compares: NaN is unequal to everything, itself
 * included (only NE gives 1), -0 == +0. Both operands on the CPU (a GPU operand:
 * TGRAD_ERR_BACKEND_UNAVAILABLE). Checked before allocating: the code (TGRAD_ERR_INVALID_ARGUMENT),
 * shapes (TGRAD_ERR_SHAPE_MISMATCH), devices. */
TGRAD_API tgrad_status tgrad_compare(int32_t cmp, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);
/* out = cond ? a : b, elementwise with numpy broadcasting of all three, lazily: each element is
 * a's or b's bits, unchanged. cond is bool (another dtype: TGRAD_ERR_DTYPE_UNSUPPORTED); a and b
 * have one dtype, the result's (bf16 with f32 is TGRAD_ERR_DTYPE_UNSUPPORTED: cast first); all on
 * the CPU. Checked before allocating, as tgrad_compare. */
TGRAD_API tgrad_status tgrad_where(tgrad_tensor_t cond, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);

/* ---- reductions ----------------------------------------------------------------------------- */
/* The reduction registry. X(code, NAME, name). Codes are frozen. sum and mean are correctly
 * rounded: the exact sum (or exact sum / count) of the inputs, rounded once to the output dtype
 * (round to nearest even, gradual underflow, overflow to inf), whatever the order, blocking or
 * thread count; max, min, argmax and argmin are exact. NaN: any NaN makes sum, mean, max and min
 * NaN (canonical), +inf plus -inf is NaN; argmax and argmin give the index of the first NaN.
 * Ties: argmax and argmin give the first index; -0 and +0 compare equal (max and min return the
 * first of them). The empty sum is +0, the empty mean NaN; max, min, argmax and argmin of an
 * empty set are TGRAD_ERR_INVALID_ARGUMENT. docs/numerics.md has the definitions. */
#define TGRAD_REDUCE_LIST(X)                                                                        \
    X(1, SUM, sum)                                                                                  \
    X(2, MEAN, mean)                                                                                \
    X(3, MAX, max)                                                                                  \
    X(4, MIN, min)                                                                                  \
    X(5, ARGMAX, argmax)                                                                            \
    X(6, ARGMIN, argmin)
#define TGRAD_REDUCE_ENUM_(code, NAME, name) TGRAD_REDUCE_##NAME = code,
enum tgrad_reduce_code { TGRAD_REDUCE_NONE = 0, TGRAD_REDUCE_LIST(TGRAD_REDUCE_ENUM_) TGRAD_REDUCE_END_ };
#undef TGRAD_REDUCE_ENUM_
/* Stable name ("argmax"); "unknown_reduce" outside the registry. */
TGRAD_API const char *tgrad_reduce_name(int32_t op);
/* out = op over `axes` of x, lazily. axes: naxes entries (negative counts from the end; each at
 * most once), or every axis when naxes < 0 (axes may then be NULL). keepdims 1 keeps each reduced
 * axis with extent 1. out_dtype: 0 for the default (x's dtype; i32 for argmax and argmin), else
 * bf16 or f32 for sum, mean, max and min (a bf16 input may give f32), i32 for argmax and argmin.
 * argmax and argmin take one axis (their index counts along it) or every axis (the index into the
 * row-major flattening). Inputs are bf16 or f32. Checks happen here, before any allocation:
 * unknown op or dtype, axis out of range (TGRAD_ERR_INDEX_OUT_OF_RANGE), repeated axis, several
 * axes for argmax, an empty max/min/arg*. */
TGRAD_API tgrad_status tgrad_reduce(int32_t op, tgrad_tensor_t x, const int32_t *axes, int32_t naxes,
                                    int32_t keepdims, int32_t out_dtype, tgrad_tensor_t *out);

/* ---- concatenation and gather ---------------------------------------------------------------- */
/* out = the n tensors joined along `axis` (negative counts from the end), lazily: every operand
 * is read through its view and copied bit for bit into one compact result. n >= 1; every operand
 * has the same rank (else TGRAD_ERR_RANK_MISMATCH), dtype (any; else TGRAD_ERR_DTYPE_UNSUPPORTED),
 * device (else TGRAD_ERR_DEVICE_MISMATCH) and extents off the axis (else
 * TGRAD_ERR_SHAPE_MISMATCH); an axis outside the rank (a 0-d operand has none) is
 * TGRAD_ERR_INDEX_OUT_OF_RANGE. CPU only for now (a GPU operand: TGRAD_ERR_BACKEND_UNAVAILABLE).
 * Checks happen here, before any allocation; the operands' handles stay the caller's. */
TGRAD_API tgrad_status tgrad_concat(int32_t n, const tgrad_tensor_t *tensors, int32_t axis, tgrad_tensor_t *out);
/* out = dst with out[..., start : start + n, ...] = src along `axis` (n = src's extent there;
 * torch.slice_scatter with step 1), lazily, bit for bit (any dtype). Like every node it changes
 * nothing a handle can see: dst keeps its values for every reader. When the step runs it writes in
 * place if it may: dst's buffer realized, on the CPU, owned by libtgrad (not external memory),
 * read whole by this node and referenced by nothing else (the caller released every handle of
 * dst and no other pending op reads it); the result then takes dst's storage and only src's
 * block is copied (a KV cache written one position per step). Otherwise dst is copied first.
 * Same rank (else TGRAD_ERR_RANK_MISMATCH), dtype (TGRAD_ERR_DTYPE_UNSUPPORTED), device
 * (TGRAD_ERR_DEVICE_MISMATCH) and extents off the axis (TGRAD_ERR_SHAPE_MISMATCH); an axis out of
 * range or a block past dst's end (start < 0, start + n > dst's extent) is
 * TGRAD_ERR_INDEX_OUT_OF_RANGE. On a GPU device the result is a new buffer (the concat route over
 * dst's parts and src; in place on the CPU only), with the same bytes. Checks happen here, before
 * any allocation; the operands' handles stay the caller's. */
TGRAD_API tgrad_status tgrad_slice_scatter(tgrad_tensor_t dst, tgrad_tensor_t src, int32_t axis, int64_t start,
                                           tgrad_tensor_t *out);
/* tgrad_slice_scatter with the start read from `start`, an int32 tensor of one element (else
 * TGRAD_ERR_DTYPE_UNSUPPORTED, TGRAD_ERR_SHAPE_MISMATCH), when the step runs: a graph that writes
 * at a position it computes or is given as data (a KV cache's next slot, a captured program's
 * input). Checked like tgrad_slice_scatter, the block's fit here when start is computed already
 * (host data, read back from a device), else when the step runs, before anything is written
 * (TGRAD_ERR_INDEX_OUT_OF_RANGE). start lives on dst's device (else TGRAD_ERR_DEVICE_MISMATCH); on
 * a GPU device one kernel reads it, the same text at every position. No gradient rule yet (an
 * operand that records one, with gradients enabled: TGRAD_ERR_INVALID_ARGUMENT). */
TGRAD_API tgrad_status tgrad_slice_scatter_at(tgrad_tensor_t dst, tgrad_tensor_t src, int32_t axis,
                                              tgrad_tensor_t start, tgrad_tensor_t *out);
/* out = numpy's take(x, indices, axis), lazily: shape x.shape[:axis] + indices.shape +
 * x.shape[axis+1:], out[..., j..., ...] = x[..., indices[j...], ...], bit for bit (any dtype).
 * indices is an int32 tensor (else TGRAD_ERR_DTYPE_UNSUPPORTED) on x's device; each lies in
 * -n .. n-1 for the axis' extent n (negative ones count from the end). An index outside is
 * TGRAD_ERR_INDEX_OUT_OF_RANGE before any work: here when the indices are computed already (host
 * data), else when the gather runs (realize), before it writes anything. CPU only for now. */
TGRAD_API tgrad_status tgrad_take(tgrad_tensor_t x, tgrad_tensor_t indices, int32_t axis, tgrad_tensor_t *out);
/* ---- random numbers ------------------------------------------------------------------------ */
/* The distribution registry. X(code, NAME, name). Codes are frozen. Every value is a pure function
 * of (seed, offset + i) for element i (row-major) of a draw: Philox-4x32-10 keyed by the 64-bit
 * seed, counter (call index, distribution code), so the bytes do not depend on the thread count,
 * the chunking, the device or the backend. docs/random.md defines each value:
 *   uniform: low + (high - low) U, U = k 2^-b with k the top b bits of one 32-bit word, b = 8 for
 *            bf16 and 24 for f32 (torch's digits), rounded once (uniform(0, 1) is U, exactly; in
 *            [0, 1)). p0 = low, p1 = high (finite, low <= high, high - low finite).
 *   normal:  mean + std z, z from Box-Muller on two words (docs/random.md), rounded once.
 *            p0 = mean (finite), p1 = std (finite, >= 0).
 *   randint: low + floor(x n / 2^64), x a 64-bit word pair, n = high - low (int32 result). p0 =
 *            low, p1 = high: integers, -2^31 <= low < high <= 2^31, n < 2^32. */
#define TGRAD_RANDOM_LIST(X)                                                                        \
    X(1, UNIFORM, uniform)                                                                          \
    X(2, NORMAL, normal)                                                                            \
    X(3, RANDINT, randint)
#define TGRAD_RANDOM_ENUM_(code, NAME, name) TGRAD_RANDOM_##NAME = code,
enum tgrad_random_code { TGRAD_RANDOM_NONE = 0, TGRAD_RANDOM_LIST(TGRAD_RANDOM_ENUM_) TGRAD_RANDOM_END_ };
#undef TGRAD_RANDOM_ENUM_
/* Stable name ("normal"); "unknown_random" outside the registry. */
TGRAD_API const char *tgrad_random_name(int32_t dist);
/* out = a lazy tensor of `shape` (ndim 0 .. TGRAD_MAX_DIMS, extents >= 0, the size rule) whose
 * element i is drawn by `dist` from (seed, offset + i), with parameters p0, p1 (above). dtype:
 * TGRAD_DTYPE_BF16 or TGRAD_DTYPE_F32 for uniform and normal, TGRAD_DTYPE_I32 for randint (0: that
 * default, bf16 for the floating ones). device: TGRAD_DEVICE_CPU or a GPU device (route random,
 * the CPU's bytes: docs/random.md). offset + numel must not pass 2^64. A caller
 * drawing again advances offset by numel (the Python generator does). Checks happen here, before
 * any allocation: an unknown dist (TGRAD_ERR_INVALID_ARGUMENT), a dtype the distribution does not
 * give (TGRAD_ERR_DTYPE_UNSUPPORTED), bad parameters or shape (TGRAD_ERR_INVALID_ARGUMENT). */
TGRAD_API tgrad_status tgrad_random(int32_t dist, uint64_t seed, uint64_t offset, int32_t ndim, const int64_t *shape,
                                    int32_t dtype, double p0, double p1, int32_t device, tgrad_tensor_t *out);
/* ---- norms (hnorm) ------------------------------------------------------------------------- */
/* Correctly rounded norms over the last `naxes` axes of a bf16 x, lazily; bf16 out, x's shape.
 * rms_norm: y = x * w / sqrt(mean(x^2) + eps); layer_norm: y = (x - mean) / sqrt(var + eps) * w
 * + b (biased variance). weight and bias (0: none, i.e. w = 1, b = 0) are bf16 tensors of the
 * shape of x's last naxes axes. Each element is the exact value of the formula rounded once
 * (docs/numerics.md, "Norms"); eps is the double given: 0 or in [2^-256, 2^64]. Checks happen
 * here, before any allocation: handles, dtypes, naxes in 1 .. ndim, eps, shapes
 * (TGRAD_ERR_SHAPE_MISMATCH), devices. */
TGRAD_API tgrad_status tgrad_rms_norm(tgrad_tensor_t x, tgrad_tensor_t weight, int32_t naxes, double eps,
                                      tgrad_tensor_t *out);
TGRAD_API tgrad_status tgrad_layer_norm(tgrad_tensor_t x, tgrad_tensor_t weight, tgrad_tensor_t bias, int32_t naxes,
                                        double eps, tgrad_tensor_t *out);
/* --- the norms' input gradients (issue 36) --- */
/* dx of rms_norm or layer_norm for the gradient g of its result, lazily, over the last naxes axes:
 *   rms_norm:   dx = rinv g w - x rinv^3 sum(g w x) / N,  rinv = 1 / sqrt(mean(x^2) + eps)
 *   layer_norm: dx = rinv (g w - mean(g w) - xh mean(g w xh)),  xh = (x - mean(x)) rinv,
 *               rinv = 1 / sqrt(var(x) + eps) (biased)
 * (sums and means over the row of N elements; w = 1 when weight is 0). Each element is the exact
 * value rounded once to out_dtype (docs/numerics.md, "rms_norm_backward, layer_norm_backward"); an
 * exact zero is +0; a row holding an infinity or NaN gives IEEE's double value of the formula.
 * x and g: one shape, bf16 or f32 each; weight: bf16 or f32 of x's last naxes axes; out_dtype 0
 * for g's dtype, else bf16 or f32; eps as tgrad_rms_norm's. CPU only. Checks happen here, before
 * any allocation: dtypes (TGRAD_ERR_DTYPE_UNSUPPORTED), shapes (TGRAD_ERR_SHAPE_MISMATCH), naxes
 * and eps (TGRAD_ERR_INVALID_ARGUMENT), devices (TGRAD_ERR_DEVICE_MISMATCH, a GPU operand:
 * TGRAD_ERR_BACKEND_UNAVAILABLE). */
TGRAD_API tgrad_status tgrad_rms_norm_backward(tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t weight,
                                               int32_t naxes, double eps, int32_t out_dtype, tgrad_tensor_t *out);
TGRAD_API tgrad_status tgrad_layer_norm_backward(tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t weight,
                                                 int32_t naxes, double eps, int32_t out_dtype, tgrad_tensor_t *out);

/* Rotary position embedding of a bf16 x [..., L, d], lazily; bf16 out, x's shape. positions:
 * int32 [L], or [B, L] with B = x's first axis. Pairs (i, i + rotary_dim/2) ("rotate half",
 * interleaved 0) or (2i, 2i + 1) (interleaved 1) of the first rotary_dim features (0: d; even,
 * 2 .. d) rotate by theta_i = p * f_i: (x1 cos - x2 sin, x2 cos + x1 sin); the other features pass
 * through. f_i = base^(-2i / rotary_dim) (exact), or inv_freq's float32 values taken as exact
 * (inv_freq: float32 [rotary_dim / 2], or 0). Each output is the exact value rounded once
 * (docs/numerics.md, "Rotary position embedding"). Every check happens here, before allocating. */
TGRAD_API tgrad_status tgrad_rope(tgrad_tensor_t x, tgrad_tensor_t positions, tgrad_tensor_t inv_freq, double base,
                                  int32_t rotary_dim, int32_t interleaved, tgrad_tensor_t *out);
/* --- hgsoft: rope's derivative --- */
/* The transpose of rope's rotation applied to a bf16 gradient g (x's shape): each pair rotates by
 * -theta_i = p (-f_i), (g1 cos + g2 sin, g2 cos - g1 sin), the exact value rounded once to bf16;
 * the other features pass through. The same arguments and checks as tgrad_rope (docs/numerics.md,
 * "Rotary position embedding"). */
TGRAD_API tgrad_status tgrad_rope_backward(tgrad_tensor_t g, tgrad_tensor_t positions, tgrad_tensor_t inv_freq,
                                           double base, int32_t rotary_dim, int32_t interleaved, tgrad_tensor_t *out);

/* ---- softmax, log_softmax, logsumexp -------------------------------------------------------- */
/* The softmax registry. X(code, NAME, name). Codes are frozen. Along one axis of x, with S the sum
 * over that axis of exp(x_j): softmax = exp(x_i) / S, log_softmax = x_i - log(S) (both x's shape),
 * logsumexp = log(S) (the axis removed, or kept with extent 1). Each output is the exact value of
 * that mathematics on the inputs, rounded once to the output dtype (round to nearest even): the
 * same bytes on every thread count, CPU variant and fusion setting. -inf entries contribute 0; a
 * NaN anywhere in a row makes the row's outputs NaN; a row whose maximum is +inf or -inf (every
 * entry -inf) gives NaN for softmax and log_softmax, +inf or -inf for logsumexp; an empty axis
 * gives an empty softmax and a logsumexp of -inf. docs/numerics.md has the definitions and the
 * method. */
#define TGRAD_SOFTMAX_LIST(X)                                                                       \
    X(1, SOFTMAX, softmax)                                                                          \
    X(2, LOG_SOFTMAX, log_softmax)                                                                  \
    X(3, LOGSUMEXP, logsumexp)
#define TGRAD_SOFTMAX_ENUM_(code, NAME, name) TGRAD_SOFTMAX_##NAME = code,
enum tgrad_softmax_code { TGRAD_SOFTMAX_NONE = 0, TGRAD_SOFTMAX_LIST(TGRAD_SOFTMAX_ENUM_) TGRAD_SOFTMAX_END_ };
#undef TGRAD_SOFTMAX_ENUM_
/* Stable name ("log_softmax"); "unknown_softmax" outside the registry. */
TGRAD_API const char *tgrad_softmax_name(int32_t op);
/* out = op of x along `axis` (negative counts from the end; a 0-d x is one row of one element),
 * lazily. keepdims: 0, or 1 for logsumexp (the axis kept with extent 1). out_dtype: 0 for x's
 * dtype, else bf16 or f32 (from either input dtype). x is bf16 or f32, on the CPU. Checks happen
 * here, before any allocation: unknown op (TGRAD_ERR_INVALID_ARGUMENT), keepdims, dtypes
 * (TGRAD_ERR_DTYPE_UNSUPPORTED), axis out of range (TGRAD_ERR_INDEX_OUT_OF_RANGE), a GPU operand
 * (TGRAD_ERR_BACKEND_UNAVAILABLE). */
TGRAD_API tgrad_status tgrad_softmax(int32_t op, tgrad_tensor_t x, int32_t axis, int32_t keepdims, int32_t out_dtype,
                                     tgrad_tensor_t *out);
/* --- hgsoft: the derivative --- */
/* out = the derivative of op along `axis` applied to the gradient g, lazily: for op =
 * TGRAD_SOFTMAX_SOFTMAX, y is softmax's output and out_i = y_i (g_i - sum_j g_j y_j) (torch's
 * _softmax_backward_data); for op = TGRAD_SOFTMAX_LOG_SOFTMAX, y is log_softmax's output and
 * out_i = g_i - exp(y_i) sum_j g_j (torch's _log_softmax_backward_data). Each output is the exact
 * value of that expression rounded once to out_dtype (docs/numerics.md, "softmax_backward,
 * log_softmax_backward"). y and g: the same shape, bf16 or f32 each, on the CPU; out_dtype 0 for
 * g's dtype, else bf16 or f32. A NaN or infinity gives IEEE's value of the expression with the
 * row's sum (the docs list the cases); an exact zero has the sign IEEE's operations give it.
 * Checks happen here, before any allocation: another op (logsumexp has none here,
 * TGRAD_ERR_INVALID_ARGUMENT), dtypes (TGRAD_ERR_DTYPE_UNSUPPORTED), shapes
 * (TGRAD_ERR_SHAPE_MISMATCH), axis (TGRAD_ERR_INDEX_OUT_OF_RANGE), devices
 * (TGRAD_ERR_DEVICE_MISMATCH, TGRAD_ERR_BACKEND_UNAVAILABLE). */
TGRAD_API tgrad_status tgrad_softmax_backward(int32_t op, tgrad_tensor_t y, tgrad_tensor_t g, int32_t axis,
                                              int32_t out_dtype, tgrad_tensor_t *out);

/* ---- optimizer step (hgoptim; kind 16) ------------------------------------------------------ */
/* One output of one optimizer step over float32 tensors of one shape, lazily: torch's
 * single-tensor float32 update (docs/nn.md, "Optimizers"), each op one IEEE float32 operation and
 * its fused multiply-adds fmaf (one rounding). algo TGRAD_OPTIM_SGD: inputs P, g[, buf] (buf: the
 * momentum buffer, absent on the first step), scalars {wd, momentum, 1 - dampening, -lr}; which
 * OUT_PARAM gives the new P, OUT_STATE1 the new buffer. algo TGRAD_OPTIM_ADAMW: inputs P, g, m, v
 * [, vmax], scalars {1 - lr*wd, 1 - b1, (1 - b1) - 1, b2, 1 - b2, sqrt(1 - b2^t), eps,
 * -lr / (1 - b1^t)} (each already rounded to float32); which OUT_PARAM, OUT_STATE1 (m),
 * OUT_STATE2 (v), OUT_STATE3 (max(vmax, v), amsgrad). scalars: TGRAD_OPTIM_NSCALARS floats.
 * CPU only. Every check happens here, before allocating. */
enum tgrad_optim_code { TGRAD_OPTIM_SGD = 1, TGRAD_OPTIM_ADAMW = 2 };
enum tgrad_optim_flag { TGRAD_OPTIM_MAXIMIZE = 1, TGRAD_OPTIM_DECAY = 2, TGRAD_OPTIM_MOMENTUM = 4,
                        TGRAD_OPTIM_NESTEROV = 8, TGRAD_OPTIM_AMSGRAD = 16 };
enum tgrad_optim_out { TGRAD_OPTIM_OUT_PARAM = 0, TGRAD_OPTIM_OUT_STATE1 = 1, TGRAD_OPTIM_OUT_STATE2 = 2,
                       TGRAD_OPTIM_OUT_STATE3 = 3 };
#define TGRAD_OPTIM_NSCALARS 8
TGRAD_API tgrad_status tgrad_optim_step(int32_t algo, int32_t which, int32_t flags, int32_t ninputs,
                                        const tgrad_tensor_t *inputs, const float *scalars, tgrad_tensor_t *out);
/* Every output of one optimizer step over n tensors at once, computed now (no lazy node): for
 * tensor i, its ninputs inputs are inputs[i*ninputs ..] (tgrad_optim_step's, the same count for
 * every tensor; the gradient, input 1, may also be bfloat16, read exactly as float32), its scalars
 * scalars[i*TGRAD_OPTIM_NSCALARS ..]; its results are outs[i*nout ..], nout = 1 + the states (SGD:
 * 0, or 1 with momentum; AdamW: 2, or 3 with amsgrad) + bf16_param: the new parameter, each new
 * state in TGRAD_OPTIM_OUT_* order, and with bf16_param = 1 the new parameter rounded to bfloat16
 * (tgrad_cast's rounding). The results are realized, contiguous, and have the bytes
 * tgrad_optim_step's nodes (and their cast) would have; they require a gradient when gradients are
 * enabled on this thread and an input requires one, as a node's result would, but have no history
 * (leaves). The inputs are realized first. Every check happens before anything is allocated: a
 * refused call leaves outs unwritten. CPU only. */
TGRAD_API tgrad_status tgrad_optim_step_many(int32_t algo, int32_t flags, int32_t n, int32_t ninputs,
                                             const tgrad_tensor_t *inputs, const float *scalars, int32_t bf16_param,
                                             tgrad_tensor_t *outs);

/* ---- matmul --------------------------------------------------------------------------------- */
/* out = a @ b, lazily: the result is computed when read or realized. torch.matmul's rule: a
 * [M, K] @ b [K, N] gives [M, N]; operands of rank > 2, a [..., M, K] @ b [..., K, N], give
 * [..., M, N], the batch axes (all but the last two) broadcast by numpy's rule (aligned at the
 * right, each pair equal or one of them 1), each batch's bytes those of the 2-D product of its
 * matrices; a 1-D operand is read as [1, K] on the left or [K, 1] on the right and that axis is
 * removed from the result ([K] @ [K] gives a 0-d tensor). Both operands are read through their
 * views (strides, expand, transposes: no copies). bf16 in, fp32 accumulation in the documented
 * order (docs/numerics.md), bf16 out (round to nearest even, NaN canonical). M, N, K or a batch
 * extent may be 0 (K = 0 gives zeros). Checks happen here, before any allocation: a 0-d operand
 * is TGRAD_ERR_RANK_MISMATCH, batch axes that do not broadcast or inner dimensions that differ
 * TGRAD_ERR_SHAPE_MISMATCH, and a batched product (a result of rank > 2) on a GPU device
 * TGRAD_ERR_BACKEND_UNAVAILABLE (the GPU routes render 2-D products only for now). (This extends
 * the earlier rule, which refused every rank but 2 with TGRAD_ERR_RANK_MISMATCH.) */
TGRAD_API tgrad_status tgrad_matmul(tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);
/* tgrad_matmul with the result's dtype: TGRAD_DTYPE_BF16 (tgrad_matmul itself) or TGRAD_DTYPE_F32,
 * the fp32 accumulator of the documented order without its final rounding (NaN as the canonical
 * 0x7FC00000; K = 0 gives +0). The bf16 result is that value rounded to nearest even, on every
 * route. Another out_dtype is TGRAD_ERR_DTYPE_UNSUPPORTED, and so is F32 for operands on a GPU
 * device (the GPU routes store bf16 only); checked here, before any allocation. */
TGRAD_API tgrad_status tgrad_matmul_ex(tgrad_tensor_t a, tgrad_tensor_t b, int32_t out_dtype, tgrad_tensor_t *out);
/* The accumulation order of a product (docs/numerics.md), recorded in its node when it is made:
 *  - TGRAD_MATMUL_ORDER_BLOCK32 (1, the default since 0.2): AMX's TDPBF16PS's, per block of 32 k
 *    two fp32 chains (even k, odd k) from +0, then acc + (even + odd); K padded with +0 to whole
 *    blocks. It runs on AMX where the CPU has it, else on the CPU variant's own block32 kernel
 *    (vdpbf16ps, FMA or portable: the same bytes; one-row products stream B on AVX-512);
 *  - TGRAD_MATMUL_ORDER_PAIRWISE (0, the default until 0.1): vdpbf16ps's, per k-pair the odd
 *    product then the even one, one rounding per addition.
 * On GPU devices both render on the naive and tiled routes; the tc route (only under
 * tgrad_set_matmul_precision BOUNDED) accumulates in the hardware's order whatever the product's.
 * Both are exact, documented orders: each gives the same bytes on every CPU, thread count and
 * fusion setting; the two orders' bf16 results agree in almost every element, their fp32
 * accumulators in few. tgrad_set_matmul_order sets the order of the products tgrad_matmul and
 * tgrad_matmul_ex make on the calling thread (thread-local, like tgrad_set_grad_enabled; a new
 * thread starts at BLOCK32); tgrad_matmul_ordered names it per call. Another order is
 * TGRAD_ERR_INVALID_ARGUMENT, checked before anything is allocated. */
#define TGRAD_MATMUL_ORDER_PAIRWISE 0
#define TGRAD_MATMUL_ORDER_BLOCK32 1
TGRAD_API tgrad_status tgrad_set_matmul_order(int32_t order);
TGRAD_API int32_t tgrad_matmul_order(void);
/* The CPU kernel variant that packed products of `order` take now ("amx", "portable_block32",
 * "avx512bf16", ...: the route's middle name), or NULL for an unknown order. */
TGRAD_API const char *tgrad_matmul_order_kernel(int32_t order);
/* Whether the AMX kernel runs here (block32 products take it): TGRAD_OK, or
 * TGRAD_ERR_BACKEND_UNAVAILABLE saying why (the CPU, the OS's tile state, arch_prctl's refusal, or
 * a build without it); block32 products then take the next kernel, with the same bytes. */
TGRAD_API tgrad_status tgrad_cpu_amx_check(void);
TGRAD_API tgrad_status tgrad_matmul_ordered(tgrad_tensor_t a, tgrad_tensor_t b, int32_t out_dtype, int32_t order,
                                            tgrad_tensor_t *out);

/* ---- elementwise ops ------------------------------------------------------------------------ */
/* out = op(x) for a unary op of the registry, lazily, with x's shape. out = op(a, b) for a binary
 * one with numpy broadcasting: the shapes are aligned at their last axis (the shorter one padded
 * with leading 1s) and each pair of extents must be equal or one of them 1 (a 0-d tensor is a
 * scalar). Operands are read through their views (a broadcast is a stride-0 read, no copy); out
 * is compact row-major. Each element is correctly rounded (docs/numerics.md). Operands are
 * TGRAD_DTYPE_BF16 or TGRAD_DTYPE_F32; out is float32 when any operand is (a bf16 operand is first
 * widened exactly: torch's promotion), else bf16. Checks happen here, before any allocation: an
 * op code outside the registry or of the other arity is TGRAD_ERR_INVALID_ARGUMENT, another dtype
 * (int32), or a float32 op a GPU device does not render (the transcendental ones, pow, the
 * derivative ops: CPU only), TGRAD_ERR_DTYPE_UNSUPPORTED, shapes that
 * do not broadcast TGRAD_ERR_SHAPE_MISMATCH (the message names both), operands on two devices
 * TGRAD_ERR_DEVICE_MISMATCH. */
TGRAD_API tgrad_status tgrad_unary(tgrad_op op, tgrad_tensor_t x, tgrad_tensor_t *out);
TGRAD_API tgrad_status tgrad_binary(tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);
/* Fusion: when on (the default; TGRAD_FUSION=0 at start-up turns it off), realize runs an
 * elementwise op that alone reads a pending matmul's or elementwise op's result inside that
 * kernel (its epilogue) instead of storing the intermediate. It never changes a byte: the fused
 * kernel rounds each op's result to bf16 exactly as the separate ops do. Process-wide; enabled
 * is 0 or 1 (else TGRAD_ERR_INVALID_ARGUMENT). Realizations already scheduled are unaffected. */
TGRAD_API tgrad_status tgrad_set_fusion(int32_t enabled);
TGRAD_API int32_t tgrad_fusion_enabled(void);

/* ---- runtime ------------------------------------------------------------------------------- */
/* Worker threads used by CPU kernels (default: the machine's cores, or TGRAD_NUM_THREADS). n >= 1. */
TGRAD_API tgrad_status tgrad_set_num_threads(int32_t n);
TGRAD_API int32_t tgrad_num_threads(void);
/* Live-object counters for leak checks: tensor handles, buffers, and bytes held by buffers. */
TGRAD_API int64_t tgrad_live_tensors(void);
TGRAD_API int64_t tgrad_live_buffers(void);
TGRAD_API int64_t tgrad_live_bytes(void);
/* Freed large tensor blocks are kept for reuse (a fresh mapping costs a page fault per page):
 * bytes held now, and a call that returns them all to the OS. Cap: TGRAD_CACHE_BYTES (default
 * 512 MiB, 0 disables). */
TGRAD_API int64_t tgrad_cached_bytes(void);
TGRAD_API void tgrad_release_cached(void);
/* The memory limit: the most bytes one tensor may hold. Making a tensor over it (host data, a
 * product, an elementwise op, a materializing reshape, a copy to a device) fails at once with
 * TGRAD_ERR_OUT_OF_MEMORY, before anything is allocated, so a huge broadcast is refused when it
 * is written rather than when it is realized. Default: the machine's physical memory;
 * TGRAD_MEMORY_LIMIT=<bytes> at start-up or tgrad_set_memory_limit(bytes) change it (0 restores
 * the default; negative: TGRAD_ERR_INVALID_ARGUMENT). Process-wide, any thread. Tensors that exist
 * are unaffected; an allocation that fails below the limit is TGRAD_ERR_OUT_OF_MEMORY too. */
TGRAD_API tgrad_status tgrad_set_memory_limit(int64_t bytes);
TGRAD_API int64_t tgrad_memory_limit(void);
/* CPU kernel variants ("avx512bf16", "portable", ...). Every variant produces the same bytes.
 * tgrad_cpu_isa() names the one packed products (route gemm) use, tgrad_cpu_stream_isa() the one
 * one-row and few-row products (routes rowvec, skinny) use. Automatic choice (the default, and
 * "auto"), a rule so that every process on one machine takes the same routes: streaming from the
 * first variant this CPU runs (the list is in order of capability); packed products from the
 * same one unless another variant's core instruction does at least sqrt(2) times its flops per
 * cycle, by a table of known CPUs (CPUID vendor and family: fp32 FMA does twice vdpbf16ps's flops
 * on Intel cores with AVX512-BF16, half on AMD Zen 4 and 5), or, for a CPU with AVX512-BF16 the
 * table does not know, by rates measured once per process (docs/performance.md).
 * tgrad_cpu_isa_reason() says which of these made the present choice, in one line of text (a
 * static string). TGRAD_CPU_ISA at start-up or tgrad_set_cpu_isa() force one variant for both;
 * tgrad_cpu_isa_forced() is 1 while one is forced, 0 under the automatic choice. A variant this
 * CPU cannot run is refused with TGRAD_ERR_BACKEND_UNAVAILABLE, an unknown name with
 * TGRAD_ERR_INVALID_ARGUMENT. */
TGRAD_API const char *tgrad_cpu_isa(void);
TGRAD_API const char *tgrad_cpu_stream_isa(void);
TGRAD_API int32_t tgrad_cpu_isa_forced(void);
TGRAD_API const char *tgrad_cpu_isa_reason(void);
TGRAD_API tgrad_status tgrad_set_cpu_isa(const char *name);
/* Variant names, most capable first, for index 0 .. count-1 (NULL past the end); *available tells
 * whether this CPU runs it. */
TGRAD_API const char *tgrad_cpu_isa_name(int32_t index, int32_t *available);
/* Measured peak of the packed products' variant (tgrad_cpu_isa(); under the calling thread's
 * matmul order: tgrad_matmul_order_kernel, e.g. AMX's TDPBF16PS for block32): its core instruction
 * (vdpbf16ps, FMA, ...) run on `threads` threads (0: the pool's count) for about 60 ms; GFLOP/s
 * counting a multiply-add as 2.
 * The matmul's "% of peak" is judged against this number, not an assumed clock. */
TGRAD_API tgrad_status tgrad_cpu_peak_gflops(int32_t threads, double *gflops);
/* Limits to time beside a matmul, round by round (the bench's paired "% of peak" and "% of read
 * bw": docs/performance.md), so that a clock or a neighbour that slows one slows the other too.
 * tgrad_cpu_peak_run does `flops` floating-point operations of tgrad_cpu_peak_gflops's instruction
 * stream, split evenly over `threads` threads (0: the pool's count; at most 256). tgrad_cpu_read_run
 * reads the `bytes` bytes at `data` once, in `threads` contiguous parts, one per thread: the plain
 * streaming read of a memory-bound matmul's operands. TGRAD_ERR_INVALID_ARGUMENT for a thread count
 * outside 0..256, flops outside 0..1e15, negative bytes, or NULL data with bytes > 0. */
TGRAD_API tgrad_status tgrad_cpu_peak_run(int32_t threads, double flops);
TGRAD_API tgrad_status tgrad_cpu_read_run(const void *data, int64_t bytes, int32_t threads);
/* Bytes the CPU kernels hold for packing and fp32 accumulator tiles, all threads together. Each
 * thread keeps its own buffers, grown to the largest block it has worked on and reused after
 * (never allocated per call, never in proportion to M*N*K: docs/performance.md gives the bound);
 * a thread's are freed when it exits. */
TGRAD_API int64_t tgrad_cpu_scratch_bytes(void);

/* ---- devices ------------------------------------------------------------------------------ */
/* Where a tensor's buffer lives. The numbers are tgrad_backend()'s indices. A GPU device runs the
 * kernels libtgrad renders for it (tgrad_render_*): tiled and naive routes bit-identical to the
 * CPU, the tc route (only under TGRAD_MATMUL_PRECISION_BOUNDED) within the bound of
 * docs/kernels.md. */
#define TGRAD_DEVICE_CPU 0
#define TGRAD_DEVICE_METAL 1
#define TGRAD_DEVICE_OPENCL 2
#define TGRAD_DEVICE_CUDA 3
/* Device number by name ("cpu", "metal", "opencl", "cuda"); TGRAD_ERR_INVALID_ARGUMENT for others. */
TGRAD_API tgrad_status tgrad_device_by_name(const char *name, int32_t *device);
TGRAD_API tgrad_status tgrad_tensor_device(tgrad_tensor_t tensor, int32_t *device);
/* The tensor's values on `device`: a new handle on the same view when it is already there,
 * otherwise the view realized and copied there as a compact row-major tensor (this realizes the
 * source now). TGRAD_ERR_BACKEND_UNAVAILABLE, with the reason, for a device this machine cannot
 * use. Operands of tgrad_matmul must share a device (else TGRAD_ERR_DEVICE_MISMATCH); the result
 * lives there too, and reading it copies it back. */
TGRAD_API tgrad_status tgrad_tensor_to(tgrad_tensor_t tensor, int32_t device, tgrad_tensor_t *out);
/* The route GPU matmuls take: 0 chooses (under TGRAD_MATMUL_PRECISION_BOUNDED tc where the device
 * and shape allow; then naive for products of at most 4 rows, else tiled; under EXACT, the
 * default, never tc); TGRAD_ROUTE_NAIVE / TILED
 * / TC force one (a forced route a problem cannot take is refused when the result is realized,
 * with TGRAD_ERR_ROUTE_NOT_ELIGIBLE; so is a forced tc under EXACT). Process-wide. */
TGRAD_API tgrad_status tgrad_set_device_route(int32_t route);
/* The matmul precision policy: whether a product may run on matrix hardware whose accumulation
 * order is not documented, so that it cannot give the documented order's bytes and is held to an
 * error bound instead (docs/kernels.md, "Numerics of tc"; docs/numerics.md, "Precision policy").
 *  - TGRAD_MATMUL_PRECISION_EXACT (0, the default): every product gives the bytes of its
 *    documented order (tgrad_set_matmul_order) on every device. GPU matmuls take tiled (naive
 *    for at most 4 rows, or a forced naive); a forced TGRAD_ROUTE_TC is refused, with TGRAD_ERR_ROUTE_NOT_ELIGIBLE naming
 *    this policy, when the result is realized.
 *  - TGRAD_MATMUL_PRECISION_BOUNDED (1): the bounded routes are allowed too: GPU matmuls take tc
 *    where the device and shape allow (MSL simdgroup 8x8 matrices, CUDA mma.sync on sm_80+), each
 *    within its bound of docs/kernels.md and deterministic run to run. The CPU has no bounded
 *    route: its products are exact under either policy.
 * Process-wide, like tgrad_set_device_route (any thread; a context manager in Python), read when a
 * realization is planned: the route, tgrad_tensor_route and tgrad_tensor_explain (which shows the
 * policy on each GPU matmul step) follow the policy in force when they are asked; a tensor
 * realized before keeps its bytes. The kernel generator (tgrad_render_matmul, tgrad_route_check,
 * tgrad_render_tensor with a route named) renders tc on request under either policy: it runs
 * nothing. Another value is TGRAD_ERR_INVALID_ARGUMENT, and changes nothing. */
#define TGRAD_MATMUL_PRECISION_EXACT 0
#define TGRAD_MATMUL_PRECISION_BOUNDED 1
TGRAD_API tgrad_status tgrad_set_matmul_precision(int32_t precision);
TGRAD_API int32_t tgrad_matmul_precision(void);

/* ---- sharing memory (DLPack and other zero-copy exchanges) ------------------------------------ */
/* Host memory libtgrad does not own, viewed as a bf16 tensor without a copy: `data` holds `extent`
 * bf16 values (0 <= extent <= INT64_MAX / 2, else TGRAD_ERR_SIZE_OVERFLOW); shape and strides
 * (elements, any sign; NULL: row-major) describe the view, whose lowest-addressed element is
 * data[0] (with non-negative strides: element [0, ..., 0]). A view reaching past extent is refused
 * (TGRAD_ERR_VIEW_NOT_EXPRESSIBLE; TGRAD_ERR_SIZE_OVERFLOW where the distance between its lowest
 * and highest element, or a stride times an extent, overflows int64; row-major without strides:
 * TGRAD_ERR_BUFFER_TOO_SMALL). A view with no element reaches nothing and takes any strides. The
 * stride of an axis of extent 1 is never used: one outside (-extent, extent) is recorded as 0.
 * The shape obeys the size rule of every shape (2 bytes times the product of its non-zero extents
 * fits in int64, else TGRAD_ERR_SIZE_OVERFLOW). When the last tensor using the memory is
 * released, libtgrad calls deleter(context) (if not NULL) from whichever thread releases it. The
 * caller must not change the memory while tgrad may read it (tensors are immutable values). */
typedef void (*tgrad_deleter)(void *context);
TGRAD_API tgrad_status tgrad_tensor_from_external(const uint16_t *data, int64_t extent, int32_t ndim,
                                                  const int64_t *shape, const int64_t *strides,
                                                  tgrad_deleter deleter, void *context, tgrad_tensor_t *out);
/* The address of the tensor's first viewed element in host memory (realizing it first), for
 * zero-copy export (a tensor with no element: its buffer's start); strides come from
 * tgrad_tensor_strides. The memory stays valid while any handle to the tensor (or a view of it)
 * lives, and must be treated as read-only.
 * TGRAD_ERR_BACKEND_UNAVAILABLE for a tensor on a GPU device (move it with tgrad_tensor_to). */
TGRAD_API tgrad_status tgrad_tensor_data(tgrad_tensor_t tensor, const uint16_t **data);

/* ---- gradients (hgcore; docs/autograd.md) --------------------------------------------------- */
/* Mark a tensor's buffer as a leaf that requires a gradient (on 1) or not (on 0): nodes made from
 * it while gradients are enabled on the calling thread record history, kept past realization
 * (so a result may be read before its gradient is asked for) and released with the buffer.
 * bf16 and f32 tensors only (else TGRAD_ERR_DTYPE_UNSUPPORTED); on must be 0 or 1 (else
 * TGRAD_ERR_INVALID_ARGUMENT). The flag belongs to the buffer, so every view of it shares it. */
TGRAD_API tgrad_status tgrad_tensor_set_requires_grad(tgrad_tensor_t tensor, int32_t on);
TGRAD_API tgrad_status tgrad_tensor_requires_grad(tgrad_tensor_t tensor, int32_t *on);
/* Whether nodes made on the calling thread record gradient history (1, the default) or not (0,
 * torch's no_grad). Thread-local. TGRAD_ERR_INVALID_ARGUMENT for another value. */
TGRAD_API tgrad_status tgrad_set_grad_enabled(int32_t on);
TGRAD_API int32_t tgrad_grad_enabled(void);
/* grads[j] = the sum over k of seeds[k] times d outputs[k] / d inputs[j] (a vector-Jacobian
 * product), as pending tensors built from the library's own ops (realize them as any other; the
 * forward part still pending is computed in the same realization). seeds: NULL for ones (every
 * output must then hold one element), else one tensor per output, of its shape (bf16 or f32).
 * grad_dtype: 0 gives each gradient in its input's dtype and runs the cotangent chain in each
 * buffer's dtype; TGRAD_DTYPE_F32 or TGRAD_DTYPE_BF16 runs the whole chain, and gives every
 * gradient, in that dtype. grads[j] is 0 where no path of history links inputs[j] to an output.
 * Cotangents reaching a buffer by several paths are summed correctly rounded (one rounding),
 * whatever their order. Checked before anything is allocated: handles, counts (>= 1), NULL
 * pointers, grad_dtype, seed shapes (TGRAD_ERR_SHAPE_MISMATCH) and dtypes, a NULL seed for an
 * output of several elements (TGRAD_ERR_INVALID_ARGUMENT), and a kind on the path without a
 * rule (TGRAD_ERR_NO_GRADIENT_RULE naming it). On failure nothing is changed and grads is not
 * written. The caller releases each nonzero grads[j]. */
TGRAD_API tgrad_status tgrad_grad(int32_t n_outputs, const tgrad_tensor_t *outputs, const tgrad_tensor_t *seeds,
                                  int32_t n_inputs, const tgrad_tensor_t *inputs, int32_t grad_dtype,
                                  tgrad_tensor_t *grads);

/* ==== EXPERIMENTAL: not part of the stable ABI; may change in any release ==================== *
 * The tgrad_debug_* testing aids: signatures and effects follow the tests' needs.
 * Hidden with -DTGRAD_STABLE_ONLY (unless TGRAD_EXPERIMENTAL_API is defined too). */
#if defined(TGRAD_EXPERIMENTAL_API) || defined(TGRAD_BUILDING) || !defined(TGRAD_STABLE_ONLY)
/* ---- testing aids --------------------------------------------------------------------------- */
/* Fault injection, for tests: make the n-th heap allocation from now fail (n >= 1; 0 disarms),
 * and report in *failures (if not NULL) how many injected failures have happened so far. Only a
 * library built with -Dfault_injection=true injects; elsewhere this returns
 * TGRAD_ERR_BACKEND_UNAVAILABLE. */
TGRAD_API tgrad_status tgrad_debug_fail_allocation(int64_t n, int64_t *failures);

/* A stand-in driver for a GPU device, for tests: `device`'s backend becomes these calls (as
 * src/backend.h's, which they mirror: memory, copies, compile, launch), so the device's portable
 * side (routes, rendered kernels, the program cache, host reruns of flagged rows) runs against
 * them. tests/msl_emu/device.py makes the MSL emulator the Metal device on a machine without
 * Metal this way. Call it before the device's first use (TGRAD_ERR_INVALID_ARGUMENT after, or
 * for the CPU, an unknown device or a missing call); has_matrix_route may be NULL (no tc route). */
struct tgrad_launch;
typedef struct tgrad_debug_backend {
    tgrad_status (*alloc)(size_t bytes, void **mem);
    void (*free)(void *mem);
    tgrad_status (*copy_in)(void *mem, size_t offset, const void *src, size_t bytes);
    tgrad_status (*copy_out)(const void *mem, size_t offset, void *dst, size_t bytes);
    tgrad_status (*compile)(const char *source, size_t length, const char *kernel_name, void **program);
    void (*release_program)(void *program);
    tgrad_status (*launch)(void *program, const struct tgrad_launch *launch, void *const *buffers,
                           uint32_t nbuffers);
    int (*has_matrix_route)(void);
} tgrad_debug_backend;
TGRAD_API tgrad_status tgrad_debug_use_backend(int32_t device, const tgrad_debug_backend *backend);

/* Handle generations, for tests: re-issue the live tensor's handle slot at `generation` (1 ..
 * 2^24 - 1) and write the new handle to *out; `tensor` becomes stale. A test can then reach the
 * generation's limit without 16.7 million releases (a slot whose generation is at the limit is
 * retired on release, never reused). TGRAD_ERR_INVALID_ARGUMENT for a generation outside that
 * range or a NULL out, and a bad handle's status, in every build; a valid call moves the slot only
 * in a -Dfault_injection=true build and returns TGRAD_ERR_BACKEND_UNAVAILABLE elsewhere. */
TGRAD_API tgrad_status tgrad_debug_handle_generation(tgrad_tensor_t tensor, uint32_t generation, tgrad_tensor_t *out);

/* CPU blocking, for tests: send every CPU matmul through the shared-chunk path with packed chunks
 * capped at chunk_bytes and K panels at most panel_k deep (even), so small shapes cover many
 * chunks and K panels; flags TGRAD_DEBUG_CPU_NO_DIRECT_A packs A even where the variant could read
 * it in place, TGRAD_DEBUG_CPU_NO_GEMM_T plans a few rows times a column-major B on the packed
 * route instead of route gemm_t (products planned after the call). (0, 0, 0) restores the
 * automatic choice. Results never depend on these. */
#define TGRAD_DEBUG_CPU_NO_DIRECT_A 1
#define TGRAD_DEBUG_CPU_NO_GEMM_T 2
TGRAD_API tgrad_status tgrad_debug_cpu_blocking(int64_t chunk_bytes, int64_t panel_k, int32_t flags);

/* CPU variant choice, for tests: the automatic choice uses these flops-per-second figures (one per
 * variant, in tgrad_cpu_isa_name's order; 0 = none) instead of its table or a measurement, from
 * the next tgrad_set_cpu_isa("auto") on; count 0 returns to the rule. TGRAD_ERR_INVALID_ARGUMENT
 * unless count is 0 or the number of variants and every rate is >= 0. Results never depend on the
 * choice. */
TGRAD_API tgrad_status tgrad_debug_cpu_isa_rates(const double *rates, int32_t count);
/* The same, for the rule's table: the automatic choice reads this CPUID vendor string (at most 12
 * characters, e.g. "GenuineIntel") and family instead of the CPU's own, from the next
 * tgrad_set_cpu_isa("auto") on (which variants the CPU runs is still its own); vendor NULL returns
 * to the CPU's. TGRAD_ERR_INVALID_ARGUMENT for a longer vendor or a negative family. Not for use
 * while another thread makes the automatic choice. */
TGRAD_API tgrad_status tgrad_debug_cpu_identity(const char *vendor, int32_t family);

/* Elementwise kernels, for tests (an independent check against an outside oracle): out[i] =
 * op(a[i]) for a unary op (b must be NULL) or op(a[i], b[i]) for a binary one, over n bf16
 * values, run by the CPU kernel tensors will use. TGRAD_ERR_INVALID_ARGUMENT for a code outside
 * the registry, n < 0, a NULL array with n > 0, or b given to a unary op; out is then untouched. */
TGRAD_API tgrad_status tgrad_debug_elementwise(tgrad_op op, const uint16_t *a, const uint16_t *b, uint16_t *out,
                                               int64_t n);

/* float32 elementwise kernels, for tests: as tgrad_debug_elementwise over n float32 values (bits
 * as uint32_t), run by the CPU loops float32 tensors use; the same refusals. */
TGRAD_API tgrad_status tgrad_debug_elementwise_f32(tgrad_op op, const uint32_t *a, const uint32_t *b, uint32_t *out,
                                                   int64_t n);
/* How the float32 ops of `op` have been computed in this process, in counts[0 .. count) (count
 * 1 .. TGRAD_DEBUG_F32_COUNT): the values a transcendental op evaluated, the ones whose double
 * evaluation could not decide the rounding and took the slow path (rsqrt: whose exact midpoint
 * test corrected the double), the ones the slow path could not decide either (rounded from
 * its value and counted: none is known), and the elements a GPU kernel's bound left undecided,
 * recomputed on the host (each also counted as evaluated there). TGRAD_ERR_INVALID_ARGUMENT for
 * a code outside the registry, a NULL counts or another count. */
#define TGRAD_DEBUG_F32_EVALUATED 0
#define TGRAD_DEBUG_F32_SLOW 1
#define TGRAD_DEBUG_F32_UNDECIDED 2
#define TGRAD_DEBUG_F32_DEVICE_HOST 3
#define TGRAD_DEBUG_F32_COUNT 4
TGRAD_API tgrad_status tgrad_debug_f32_slow_path(tgrad_op op, int64_t *counts, int32_t count);
/* The same counts for the bf16 ops computed at run time rather than read from a table (pow: its
 * slow path is an exact dyadic evaluation or binary128; gelu_backward, gelu_tanh_backward and
 * silu_backward: binary128); zeros for the others, and for TGRAD_DEBUG_F32_DEVICE_HOST but pow's
 * (a bf16 GPU kernel decides every element of the others). The same indices and refusals as
 * tgrad_debug_f32_slow_path. */
TGRAD_API tgrad_status tgrad_debug_bf16_slow_path(tgrad_op op, int64_t *counts, int32_t count);

/* The table a GPU kernel binds for op, as the launcher uploads it (for the emulators' harnesses):
 * a unary op's 65,536 bf16 results (count 65536), or gelu_backward's, gelu_tanh_backward's or
 * silu_backward's table of f'(x) (count 524288: 8 ushorts per x, kernels/gpu/elementwise.h).
 * TGRAD_ERR_INVALID_ARGUMENT for a NULL out, an op without a table or another count;
 * TGRAD_ERR_ROUTE_NOT_ELIGIBLE for a derivative table in a build without binary128. */
TGRAD_API tgrad_status tgrad_debug_device_table(tgrad_op op, uint16_t *out, int64_t count);

/* Philox-4x32-10 of counter[0..4) under key[0..2) into out[0..4) (kernels/gpu/philox.h), for the
 * known-answer tests. TGRAD_ERR_INVALID_ARGUMENT for a NULL pointer. */
TGRAD_API tgrad_status tgrad_debug_philox(const uint32_t *counter, const uint32_t *key, uint32_t *out);
/* How the values of distribution `dist` have been computed in this process, in counts[0 .. count)
 * (count 1 .. TGRAD_DEBUG_RANDOM_COUNT): the values whose double evaluation could not decide the
 * rounding and took the slow path (uniform: exact arithmetic; normal: binary128), and the ones the
 * slow path could not decide (normal only; rounded from its binary128 value and counted: none is
 * known). TGRAD_ERR_INVALID_ARGUMENT for an unknown dist, a NULL counts or another count. */
#define TGRAD_DEBUG_RANDOM_SLOW 0
#define TGRAD_DEBUG_RANDOM_UNDECIDED 1
#define TGRAD_DEBUG_RANDOM_COUNT 2
TGRAD_API tgrad_status tgrad_debug_random_slow_path(int32_t dist, int64_t *counts, int32_t count);
/* How the softmax kind has computed in this process, in counts[0 .. count) (count 1 ..
 * TGRAD_DEBUG_SOFTMAX_COUNT): the rows it ran, the outputs it evaluated, the ones whose double
 * evaluation could not decide the rounding and took the binary128 path, and the ones that path
 * could not decide either (rounded from its value and counted: none is known), and the rows a GPU
 * kernel flagged and the host reran (route softmax, the backward ops' too; the forward's rows are
 * counted in the others too).
 * TGRAD_ERR_INVALID_ARGUMENT for a NULL counts or another count. */
#define TGRAD_DEBUG_SOFTMAX_ROWS 0
#define TGRAD_DEBUG_SOFTMAX_ELEMENTS 1
#define TGRAD_DEBUG_SOFTMAX_SLOW 2
#define TGRAD_DEBUG_SOFTMAX_UNDECIDED 3
#define TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS 4
#define TGRAD_DEBUG_SOFTMAX_COUNT 5
TGRAD_API tgrad_status tgrad_debug_softmax_slow_path(int64_t *counts, int32_t count);

/* The render cache of GPU kernels (docs/kernels.md, "The render cache"): its counters since the
 * last mode change into counts[0 .. count) (count 0 with counts NULL: none): the hits, the
 * misses, the kernels and the key and text bytes it holds, the hits whose launch differed from
 * the one the step computes (taken as misses), and the hits whose text differed from the step's
 * render (verify mode: the step fails with TGRAD_ERR_INTERNAL), the nanoseconds spent rendering
 * steps' kernels (hits and misses, the cache off too) and how many were rendered. Then, for a
 * mode of 0 (off), 1
 * (on) or 2 (verify: every hit rendered again and compared), the cache is emptied, the counters
 * zeroed and the mode set (TGRAD_RENDER_CACHE sets it at load: "0", "verify", else on); -1
 * leaves both. TGRAD_ERR_INVALID_ARGUMENT for another mode or count. */
#define TGRAD_DEBUG_RENDER_CACHE_HITS 0
#define TGRAD_DEBUG_RENDER_CACHE_MISSES 1
#define TGRAD_DEBUG_RENDER_CACHE_ENTRIES 2
#define TGRAD_DEBUG_RENDER_CACHE_BYTES 3
#define TGRAD_DEBUG_RENDER_CACHE_LAUNCH_DIFFERENCES 4
#define TGRAD_DEBUG_RENDER_CACHE_TEXT_DIFFERENCES 5
#define TGRAD_DEBUG_RENDER_CACHE_RENDER_NS 6
#define TGRAD_DEBUG_RENDER_CACHE_RENDERS 7
#define TGRAD_DEBUG_RENDER_CACHE_COUNT 8
TGRAD_API tgrad_status tgrad_debug_render_cache(int32_t mode, int64_t *counts, int32_t count);

/* The CUDA backend's compiler, for tests (no driver or GPU needed): compile CUDA C++ `source` with
 * NVRTC as the backend does (--fmad=false, no fast math) into a CUBIN for sm_<sm> (e.g. 90) and
 * report its size in *image_bytes. TGRAD_ERR_KERNEL_COMPILE_FAILED with NVRTC's log in
 * tgrad_last_error(); TGRAD_ERR_BACKEND_UNAVAILABLE where NVRTC is not found or the backend is not
 * built; TGRAD_ERR_INVALID_ARGUMENT for NULL pointers or sm outside 10..999. */
TGRAD_API tgrad_status tgrad_debug_cuda_compile(const char *source, int32_t sm, int64_t *image_bytes);

/* Exact reductions, for tests (before the graph has a reduction kind): the n values data[i * stride]
 * (dtype 1 = bfloat16 bits as uint16_t, 2 = float32, the codes TGRAD_DTYPE_BF16 and
 * TGRAD_DTYPE_F32; stride in elements, may be 0 or negative),
 * reduced by the engine the reductions use.
 * tgrad_debug_exact_sum: their exact sum (mean = 0) or exact sum / n (mean = 1), rounded once to
 * out_dtype (1 or 2) by round to nearest even, written to *out_bits (bf16 in the low 16 bits):
 * gradual underflow, overflow to +-inf, NaN (canonical 0x7FC0 / 0x7FC00000) if any value is NaN or
 * both infinities occur; a zero result is -0.0 only when every value is -0.0; the empty sum is
 * +0.0 and the empty mean NaN (docs/numerics.md).
 * tgrad_debug_extrema: the maximum (want_max = 1) or minimum (0) and its index: the first NaN if
 * any; else the first index of the extreme value, -0.0 and +0.0 comparing equal; *value_bits is
 * the element at *index. n = 0 is TGRAD_ERR_INVALID_ARGUMENT (the extremum of nothing).
 * Both: TGRAD_ERR_INVALID_ARGUMENT for an unknown dtype, n < 0, data NULL with n > 0, a NULL
 * output or a flag other than 0 or 1; outputs are then untouched. */
TGRAD_API tgrad_status tgrad_debug_exact_sum(const void *data, int32_t dtype, int64_t n, int64_t stride, int32_t mean,
                                             int32_t out_dtype, uint32_t *out_bits);
TGRAD_API tgrad_status tgrad_debug_extrema(const void *data, int32_t dtype, int64_t n, int64_t stride, int32_t want_max,
                                           uint32_t *value_bits, int64_t *index);
/* The scheduler's work, for tests and the scheduling benchmark: what the calling thread's latest
 * schedule (built by realize, explain or render_tensor) has done since its build began, in
 * work[0 .. count) (count 1 .. TGRAD_DEBUG_WORK_COUNT): the steps it emitted, the operand reads
 * it planned, the slots of its buffer-to-step index it inspected (walk, memory plan, explain's
 * look-ups), the steps it examined dropping its references, and the nanoseconds its build took
 * under the graph lock (measured once any thread has called this function: 0 before, so that
 * realize does not read the clock otherwise). Recorded when the schedule is freed (realize and
 * explain free theirs before returning); all 0 on a thread that freed none.
 * TGRAD_ERR_INVALID_ARGUMENT for a NULL work or another count. */
#define TGRAD_DEBUG_WORK_STEPS 0
#define TGRAD_DEBUG_WORK_READS 1
#define TGRAD_DEBUG_WORK_PROBES 2
#define TGRAD_DEBUG_WORK_RELEASE_CHECKS 3
#define TGRAD_DEBUG_WORK_BUILD_NS 4
#define TGRAD_DEBUG_WORK_COUNT 5
TGRAD_API tgrad_status tgrad_debug_schedule_work(int64_t *work, int32_t count);
/* The same sums over one axis of a 2-D view: element (r, c) is data[r * row_stride + c * col_stride];
 * axis = 1 reduces each row (out_bits[r], r < rows: what a reduction over the last axis runs,
 * the next row prefetched), axis = 0 each column (out_bits[c], c < cols: every row read once for
 * many columns). Errors as tgrad_debug_exact_sum's, and for an axis other than 0 or 1, rows or
 * cols < 0, or out_bits NULL with outputs to write. */
TGRAD_API tgrad_status tgrad_debug_exact_sum_2d(const void *data, int32_t dtype, int64_t rows, int64_t row_stride,
                                                int64_t cols, int64_t col_stride, int32_t axis, int32_t mean,
                                                int32_t out_dtype, uint32_t *out_bits);
/* How the norms (tgrad_rms_norm, tgrad_layer_norm, and their backward ops, counted with them) and
 * rope have been computed in this process,
 * in counts[0 .. count) (count 1 .. TGRAD_DEBUG_NORM_COUNT): the norm elements evaluated, those
 * whose double evaluation could not decide the rounding and were decided exactly; the rope
 * values evaluated, those decided in binary128, and those binary128 could not decide either
 * (rounded from it and counted: none is known); the norm rows a GPU kernel flagged and the host
 * reran (route norm), and the rope positions ((row, l) pairs) a GPU kernel flagged and the host
 * reran (route rope). */
#define TGRAD_DEBUG_NORM_EVALUATED 0
#define TGRAD_DEBUG_NORM_SLOW 1
#define TGRAD_DEBUG_ROPE_EVALUATED 2
#define TGRAD_DEBUG_ROPE_SLOW 3
#define TGRAD_DEBUG_ROPE_UNDECIDED 4
#define TGRAD_DEBUG_NORM_DEVICE_ROWS 5
#define TGRAD_DEBUG_ROPE_DEVICE_ROWS 6
#define TGRAD_DEBUG_NORM_COUNT 7
TGRAD_API tgrad_status tgrad_debug_norm_slow_path(int64_t *counts, int32_t count);
#endif /* EXPERIMENTAL: tgrad_debug_* */

/* ---- programs: a pending graph made again over new inputs ------------------------------------ */
/* A program is the pending graph behind `outputs`, captured as data: every pending node reachable
 * from them (its kind, parameters, dtype and views), each node input named as an earlier node, as
 * one of `inputs` (by its buffer: a node reading it through any view of it), or as a constant
 * (any other realized buffer, which the program retains until released). tgrad_program_run makes
 * that graph again over new inputs in one call, as the caller's own calls would have made it: new
 * pending tensors, realized as usual, with the bytes those calls would give (every node is the
 * same node). Capturing reads the graph and changes nothing: the outputs stay pending and are
 * realized by the caller as before; the inputs' buffers are not retained. Refused before anything
 * is kept (TGRAD_ERR_INVALID_ARGUMENT): no outputs, a NULL array, two inputs sharing a buffer, a
 * node that records gradients, a node drawing random numbers (a rerun would draw the same ones).
 * The handles stay the caller's. */
typedef struct tgrad_program tgrad_program;
TGRAD_API tgrad_status tgrad_program_capture(int32_t nout, const tgrad_tensor_t *outputs, int32_t nin,
                                             const tgrad_tensor_t *inputs, tgrad_program **out);
/* outputs[0 .. nout) = new handles of the program's outputs over `inputs` (as many as captured).
 * Input i must be a tensor with input i's view (shape, strides, offset) of a buffer of the same
 * size (else TGRAD_ERR_SHAPE_MISMATCH), dtype (TGRAD_ERR_DTYPE_UNSUPPORTED) and device
 * (TGRAD_ERR_DEVICE_MISMATCH); counts that differ are TGRAD_ERR_INVALID_ARGUMENT. Checked before
 * any node is made; on failure no handle is written. */
TGRAD_API tgrad_status tgrad_program_run(const tgrad_program *program, int32_t nin, const tgrad_tensor_t *inputs,
                                         int32_t nout, tgrad_tensor_t *outputs);
/* Its nodes, inputs, constants and outputs (each pointer may be NULL). */
TGRAD_API tgrad_status tgrad_program_info(const tgrad_program *program, int32_t *nodes, int32_t *inputs,
                                          int32_t *constants, int32_t *outputs);
/* Releases the program and its constants' references (NULL: nothing). */
TGRAD_API void tgrad_program_release(tgrad_program *program);

/* ---- seeing the graph: explain, routes, capabilities, backends ------------------------------ */
#define TGRAD_FORMAT_TEXT 1
#define TGRAD_FORMAT_JSON 2

/* What realizing `tensor` runs, in order, or (once realized) what ran: one line per kernel with
 * its route, shapes, the operands' views and whether each is composed into the kernel's loads or
 * was materialized by a copy, bytes read and written, and the buffers allocated before and freed
 * after it (an intermediate is freed as soon as its last reader ran, unless a handle holds it).
 * format is TGRAD_FORMAT_TEXT or TGRAD_FORMAT_JSON (one object, "steps": [...]). Writes at most
 * cap bytes including the NUL; *len receives the full length without the NUL; when cap <= *len
 * nothing is written and the status is TGRAD_ERR_BUFFER_TOO_SMALL (call again with *len + 1).
 * Explaining plans only: it runs, allocates and changes nothing of the graph. */
TGRAD_API tgrad_status tgrad_tensor_explain(tgrad_tensor_t tensor, int32_t format, char *dst, size_t cap,
                                            size_t *len);
/* The route that computed (or will compute) the tensor's buffer, e.g. "cpu.avx512bf16.gemm",
 * "cpu.avx512bf16.rowvec", "cpu.copy", "cpu.zeros" (K = 0), "host" (made from host data). Same
 * buffer-size contract as tgrad_tensor_explain. A pending buffer reports the route it would take
 * now (the CPU variant can still be changed until it runs). */
TGRAD_API tgrad_status tgrad_tensor_route(tgrad_tensor_t tensor, char *dst, size_t cap, size_t *len);
/* A number naming the tensor's buffer, unique for the library's lifetime: views of one buffer
 * share it, and explain's lines use it ("buf#12"). */
TGRAD_API tgrad_status tgrad_tensor_buffer_id(tgrad_tensor_t tensor, uint64_t *id);

/* The capability table: one row per (backend, capability), index 0, 1, ... until
 * TGRAD_ERR_INDEX_OUT_OF_RANGE. value is a short word ("bit-exact", "composed", "materialized",
 * "refused", "yes", "no", "not built") and note one line of why. The strings are static. */
TGRAD_API tgrad_status tgrad_capability(int32_t index, const char **backend, const char **capability,
                                        const char **value, const char **note);
/* Backends, index 0, 1, ... until TGRAD_ERR_INDEX_OUT_OF_RANGE: name ("cpu", "metal", "opencl", "cuda"),
 * built (compiled into this library), available (usable on this machine now) and a device
 * description, or why it is not available. */
TGRAD_API tgrad_status tgrad_backend(int32_t index, const char **name, int32_t *built, int32_t *available,
                                     const char **device);

/* ---- kernel generation ------------------------------------------------------------------- */
/* libtgrad renders the GPU kernels it runs: a route (a parametric kernel declared once in
 * kernels/routes.h) plus a problem (shapes, both operands' views, the output layout) becomes kernel
 * source in a language, with its launch geometry. The views' offsets and strides are baked into
 * the source as constants, so any view that strides express is read in place (docs/kernels.md).
 * The same problem renders the same bytes; source_hash (FNV-1a 64 of the text) is the cache key.
 * Rendering reads only views and shapes: operands may be lazy (unrealized) tensors.
 * Thread safety: every function below may be called from any thread. */

/* Routes. Frozen codes (1 .. TGRAD_ROUTE_COUNT). naive and tiled follow the documented fp32 order
 * (docs/numerics.md) and match the CPU bit for bit; tc uses 8x8 simdgroup matrices (CUDA: mma.sync)
 * and meets the error bound of docs/kernels.md (a device runs it only under
 * TGRAD_MATMUL_PRECISION_BOUNDED; it renders under either policy); copy materializes a view bit for bit; elementwise applies a chain
 * of elementwise ops (tgrad_unary, tgrad_binary and the ops fused into them) to an operand's view,
 * correctly rounded as on the CPU (render it with tgrad_render_tensor); reduce runs tgrad_reduce
 * (the exact sum and mean, rounded once, and the exact extrema) with the CPU's bytes; cast runs
 * tgrad_cast between bfloat16 and float32 (int32 casts stay on the CPU); gather runs tgrad_take and
 * concat tgrad_concat, bit for bit, any element size; where runs tgrad_where (bits copied) and
 * compare tgrad_compare (exact, in integer arithmetic), both with the CPU's bytes; random runs
 * tgrad_random's draws (Philox-4x32-10 in integers; normal and float32 uniform(low, high) in
 * binary64, undecided calls redrawn on the host) with the CPU's bytes; softmax runs tgrad_softmax's
 * softmax, log_softmax and logsumexp in binary64 (MSL: the software double of
 * kernels/gpu/softdouble.h), its rows near a rounding boundary rerun on the host, with the CPU's
 * bytes; norm runs
 * tgrad_rms_norm and tgrad_layer_norm the same way, and rope tgrad_rope and tgrad_rope_backward;
 * place and scatter_add run the gradient's transposes of a view and of tgrad_take (bits moved; the
 * exact sum rounded once), and optim_step tgrad_optim_step (float32 in integers), with the CPU's
 * bytes. */
#define TGRAD_ROUTE_NAIVE 1
#define TGRAD_ROUTE_TILED 2
#define TGRAD_ROUTE_TC 3
#define TGRAD_ROUTE_COPY 4
#define TGRAD_ROUTE_ELEMENTWISE 5
#define TGRAD_ROUTE_REDUCE 6
#define TGRAD_ROUTE_CAST 7
#define TGRAD_ROUTE_GATHER 8
#define TGRAD_ROUTE_CONCAT 9
#define TGRAD_ROUTE_WHERE 10
#define TGRAD_ROUTE_COMPARE 11
#define TGRAD_ROUTE_RANDOM 12
#define TGRAD_ROUTE_SOFTMAX 13
#define TGRAD_ROUTE_NORM 14
#define TGRAD_ROUTE_ROPE 15
#define TGRAD_ROUTE_PLACE 16
#define TGRAD_ROUTE_SCATTER_ADD 17
#define TGRAD_ROUTE_OPTIM_STEP 18
#define TGRAD_ROUTE_COUNT 18
/* Kernel languages. Metal Shading Language 2.3+ (bf16 kept as ushort bits; tc needs Apple GPU
 * family 7+), OpenCL C 1.2 (no tc), CUDA C++ (NVRTC or nvcc; no headers; sm_52+, tc sm_80+). */
#define TGRAD_LANG_MSL 1
#define TGRAD_LANG_OPENCL 2
#define TGRAD_LANG_CUDA 3
#define TGRAD_LANG_COUNT 3
/* Name of a route or language ("tiled", "msl"); NULL for an unknown code. */
TGRAD_API const char *tgrad_route_name(int32_t route);
TGRAD_API const char *tgrad_lang_name(int32_t lang);
/* Can `route` in `lang` run out = a @ b (b = 0 and route TGRAD_ROUTE_COPY: materialize a)?
 * TGRAD_OK, or TGRAD_ERR_ROUTE_NOT_ELIGIBLE with the reason in tgrad_last_error(); the operand
 * checks of tgrad_matmul come first (handles, ranks, inner dimensions). */
TGRAD_API tgrad_status tgrad_route_check(int32_t route, int32_t lang, tgrad_tensor_t a, tgrad_tensor_t b);

/* ==== EXPERIMENTAL: not part of the stable ABI; may change in any release ==================== *
 * struct tgrad_launch and the tgrad_render_* calls: the launch record grows with the GPU routes.
 * Hidden with -DTGRAD_STABLE_ONLY (unless TGRAD_EXPERIMENTAL_API is defined too). */
#if defined(TGRAD_EXPERIMENTAL_API) || defined(TGRAD_BUILDING) || !defined(TGRAD_STABLE_ONLY)
#define TGRAD_LAUNCH_MAX_BUFFERS 16
#define TGRAD_KERNEL_NAME_MAX 64

/* The caller sets launch->size to sizeof(struct tgrad_launch) before a render call: the struct
 * may grow (fields are only appended), and the library refuses a size below this version's with
 * TGRAD_ERR_INVALID_ARGUMENT rather than write past a smaller struct. */
/* How to launch a rendered kernel. Buffers are bound at indices 0 .. buffer_count-1 (matmul:
 * a's buffer, b's buffer, the output; copy: the source's buffer, the output; elementwise: the
 * first operand's buffer, the output), then one per fused op that reads a buffer: a binary op's
 * other operand ("e<i>", op i of the chain) or a table op's 65,536-entry table ("t<i>": the op
 * of each bf16 bit pattern in order, as tgrad_unary computes it), each holding bf16 bits; the kernel indexes its inputs through their
 * views from the buffer's first element, and writes the output compact row-major. A grid with a 0 extent means there is nothing to
 * dispatch (an empty result). */
struct tgrad_launch {
    uint32_t size;                                       /* set by the caller: sizeof(struct tgrad_launch) */
    uint32_t grid[3];                                    /* threadgroups along x, y, z */
    uint32_t threadgroup[3];                             /* threads per threadgroup along x, y, z */
    uint32_t threadgroup_memory;                         /* bytes the kernel declares */
    uint32_t buffer_count;
    uint64_t buffer_elements[TGRAD_LAUNCH_MAX_BUFFERS];  /* elements each buffer must hold at least */
    uint64_t source_hash;                                /* FNV-1a 64 of the source text */
    char kernel_name[TGRAD_KERNEL_NAME_MAX];             /* the entry point, NUL-terminated */
    char buffer_names[TGRAD_LAUNCH_MAX_BUFFERS][8];      /* each buffer's parameter name ("a", "e3", "t1") */
    uint64_t buffer_ids[TGRAD_LAUNCH_MAX_BUFFERS];       /* tgrad_render_tensor: the tensor buffer bound
                                                            there (tgrad_tensor_buffer_id; 0: a table) */
};

/* Render the kernel computing a @ b (2-D, [M, K] @ [K, N]) by a matmul route into dst, a NUL-
 * terminated string of *length bytes plus the NUL, and its launch geometry into *launch.
 * dst = NULL with capacity 0 asks for the length only (*length and *launch are written); a
 * capacity smaller than *length + 1 is TGRAD_ERR_BUFFER_TOO_SMALL. */
TGRAD_API tgrad_status tgrad_render_matmul(int32_t route, int32_t lang, tgrad_tensor_t a, tgrad_tensor_t b,
                                           char *dst, size_t capacity, size_t *length,
                                           struct tgrad_launch *launch);
/* Render the bit-preserving copy of src's view (any rank) into a compact row-major buffer. */
TGRAD_API tgrad_status tgrad_render_copy(int32_t lang, tgrad_tensor_t src, char *dst, size_t capacity,
                                         size_t *length, struct tgrad_launch *launch);
/* Render a kernel of the schedule that realizing pending tensor t runs now (the steps
 * tgrad_explain prints, numbered from 0): step `step`, or t's own (the last) for step -1. A step
 * is a matmul, by `route` (0: the route t's device takes; TGRAD_ROUTE_TILED for a CPU tensor),
 * an elementwise chain (TGRAD_ROUTE_ELEMENTWISE) or a copy, each with the elementwise ops fused
 * into it (tgrad_set_fusion) as its epilogue; `route` applies to matmul steps only and must be 0
 * or a matmul route. launch->buffer_ids names the tensor buffer behind each binding. A realized
 * t has nothing to compute: TGRAD_ERR_INVALID_ARGUMENT, as is a step outside the schedule. */
TGRAD_API tgrad_status tgrad_render_tensor(int32_t route, int32_t lang, tgrad_tensor_t t, int32_t step, char *dst,
                                           size_t capacity, size_t *length, struct tgrad_launch *launch);
#endif /* EXPERIMENTAL: struct tgrad_launch, tgrad_render_* */

#ifdef __cplusplus
}
#endif
#endif /* TGRAD_H */
