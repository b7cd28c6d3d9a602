"""The cffi declarations of libtgrad, transcribed from libtgrad/include/tgrad.h.

cffi cannot read the header itself (export macro, X-macro registry, computed #defines), so this text
repeats it in the subset cffi parses: typedefs, the status enum with explicit values, integer
#defines as literals, and every function. tests/python/test_cdef.py preprocesses tgrad.h with the C
compiler and compares it with this text in both directions; edit both together.
"""

from __future__ import annotations

CDEF = """
#define TGRAD_VERSION_MAJOR 0
#define TGRAD_VERSION_MINOR 2
#define TGRAD_VERSION_PATCH 0
#define TGRAD_VERSION_NUMBER 200

typedef int32_t tgrad_status;

uint32_t tgrad_version(void);
const char *tgrad_version_string(void);
tgrad_status tgrad_check_version(uint32_t header_version);

enum tgrad_status_code {
    TGRAD_OK = 0,
    TGRAD_ERR_INVALID_ARGUMENT = 1,
    TGRAD_ERR_INVALID_HANDLE = 2,
    TGRAD_ERR_WRONG_HANDLE_KIND = 3,
    TGRAD_ERR_SHAPE_MISMATCH = 4,
    TGRAD_ERR_RANK_MISMATCH = 5,
    TGRAD_ERR_BAD_PERMUTATION = 6,
    TGRAD_ERR_BAD_EXPAND = 7,
    TGRAD_ERR_BAD_RESHAPE = 8,
    TGRAD_ERR_INDEX_OUT_OF_RANGE = 9,
    TGRAD_ERR_DTYPE_UNSUPPORTED = 10,
    TGRAD_ERR_SIZE_OVERFLOW = 11,
    TGRAD_ERR_VIEW_NOT_EXPRESSIBLE = 12,
    TGRAD_ERR_OUT_OF_MEMORY = 13,
    TGRAD_ERR_BUFFER_TOO_SMALL = 14,
    TGRAD_ERR_BACKEND_UNAVAILABLE = 15,
    TGRAD_ERR_KERNEL_COMPILE_FAILED = 16,
    TGRAD_ERR_VERSION_MISMATCH = 17,
    TGRAD_ERR_INTERNAL = 18,
    TGRAD_ERR_ROUTE_NOT_ELIGIBLE = 19,
    TGRAD_ERR_TRACE_NO_OUTPUT = 20,
    TGRAD_ERR_TRACE_NO_INPUT = 21,
    TGRAD_ERR_TRACE_OPTION_UNSUPPORTED = 22,
    TGRAD_ERR_DEVICE_MISMATCH = 23,
    TGRAD_ERR_FILE_MALFORMED = 24,
    TGRAD_ERR_FILE_MISSING = 25,
    TGRAD_ERR_TENSOR_NOT_FOUND = 26,
    TGRAD_ERR_DTYPE_CONVERSION_REFUSED = 27,
    TGRAD_ERR_MODEL_UNSUPPORTED = 28,
    TGRAD_ERR_NO_GRADIENT_RULE = 29,
    TGRAD_STATUS_COUNT_ = 30
};
#define TGRAD_STATUS_UNSTABLE_FROM 15

int32_t tgrad_status_count(void);
const char *tgrad_status_name(tgrad_status status);
const char *tgrad_status_message(tgrad_status status);
const char *tgrad_status_category(tgrad_status status);
const char *tgrad_last_error(void);
tgrad_status tgrad_last_status(void);

typedef int32_t tgrad_op;
enum tgrad_op_code {
    TGRAD_OP_NONE = 0,
    TGRAD_OP_RELU = 1,
    TGRAD_OP_GELU = 2,
    TGRAD_OP_GELU_TANH = 3,
    TGRAD_OP_SILU = 4,
    TGRAD_OP_SIGMOID = 5,
    TGRAD_OP_TANH = 6,
    TGRAD_OP_EXP = 7,
    TGRAD_OP_NEG = 8,
    TGRAD_OP_ABS = 9,
    TGRAD_OP_SQUARE = 10,
    TGRAD_OP_RSQRT = 11,
    TGRAD_OP_ADD = 12,
    TGRAD_OP_SUB = 13,
    TGRAD_OP_MUL = 14,
    TGRAD_OP_DIV = 15,
    TGRAD_OP_MAXIMUM = 16,
    TGRAD_OP_MINIMUM = 17,
    TGRAD_OP_SQRT = 18,
    TGRAD_OP_LOG = 19,
    TGRAD_OP_LOG1P = 20,
    TGRAD_OP_SIN = 21,
    TGRAD_OP_COS = 22,
    TGRAD_OP_POW = 23,
    TGRAD_OP_GELU_BACKWARD = 24,
    TGRAD_OP_GELU_TANH_BACKWARD = 25,
    TGRAD_OP_SILU_BACKWARD = 26,
    TGRAD_OP_SIGMOID_BACKWARD = 27,
    TGRAD_OP_TANH_BACKWARD = 28,
    TGRAD_OP_RELU_BACKWARD = 29,
    TGRAD_OP_RSQRT_BACKWARD = 30,
    TGRAD_OP_SQRT_BACKWARD = 31,
    TGRAD_OP_END_ = 32
};
int32_t tgrad_op_count(void);
const char *tgrad_op_name(tgrad_op op);
int32_t tgrad_op_arity(tgrad_op op);

#define TGRAD_MAX_DIMS 8
#define TGRAD_DTYPE_BF16 1
#define TGRAD_DTYPE_F32 2
#define TGRAD_DTYPE_F64 3
#define TGRAD_DTYPE_I32 4
#define TGRAD_DTYPE_BOOL 5

typedef uint64_t tgrad_tensor_t;

tgrad_status tgrad_tensor_from_f32(const float *data, int32_t ndim, const int64_t *shape,
                                   tgrad_tensor_t *out);
tgrad_status tgrad_tensor_from_f64(const double *data, int32_t ndim, const int64_t *shape,
                                   tgrad_tensor_t *out);
tgrad_status tgrad_tensor_from_bf16(const uint16_t *bits, int32_t ndim, const int64_t *shape,
                                    tgrad_tensor_t *out);
tgrad_status tgrad_tensor_from_host(const void *data, int32_t src_dtype, int32_t ndim,
                                    const int64_t *shape, int32_t dtype, tgrad_tensor_t *out);
tgrad_status tgrad_tensor_release(tgrad_tensor_t tensor);
tgrad_status tgrad_tensor_realize(tgrad_tensor_t tensor);
tgrad_status tgrad_tensor_read_bf16(tgrad_tensor_t tensor, uint16_t *dst, size_t capacity);
tgrad_status tgrad_tensor_read_f32(tgrad_tensor_t tensor, float *dst, size_t capacity);
tgrad_status tgrad_tensor_read(tgrad_tensor_t tensor, void *dst, size_t capacity);
int32_t tgrad_dtype_size(int32_t dtype);

tgrad_status tgrad_tensor_ndim(tgrad_tensor_t tensor, int32_t *ndim);
tgrad_status tgrad_tensor_shape(tgrad_tensor_t tensor, int64_t *shape);
tgrad_status tgrad_tensor_strides(tgrad_tensor_t tensor, int64_t *strides);
tgrad_status tgrad_tensor_offset(tgrad_tensor_t tensor, int64_t *offset);
tgrad_status tgrad_tensor_numel(tgrad_tensor_t tensor, int64_t *numel);
tgrad_status tgrad_tensor_dtype(tgrad_tensor_t tensor, int32_t *dtype);
tgrad_status tgrad_tensor_is_realized(tgrad_tensor_t tensor, int32_t *realized);
tgrad_status tgrad_tensor_same_buffer(tgrad_tensor_t a, tgrad_tensor_t b, int32_t *same);

tgrad_status tgrad_tensor_transpose(tgrad_tensor_t tensor, int32_t axis0, int32_t axis1,
                                    tgrad_tensor_t *out);
tgrad_status tgrad_tensor_permute(tgrad_tensor_t tensor, const int32_t *axes, int32_t naxes,
                                  tgrad_tensor_t *out);
tgrad_status tgrad_tensor_expand(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                                 tgrad_tensor_t *out);
#define TGRAD_SLICE_START_NONE 1
#define TGRAD_SLICE_STOP_NONE 2
tgrad_status tgrad_tensor_slice(tgrad_tensor_t tensor, int32_t axis, int64_t start, int64_t stop,
                                int64_t step, uint32_t flags, tgrad_tensor_t *out);
tgrad_status tgrad_tensor_select(tgrad_tensor_t tensor, int32_t axis, int64_t index,
                                 tgrad_tensor_t *out);
tgrad_status tgrad_tensor_view(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                               tgrad_tensor_t *out);
tgrad_status tgrad_tensor_reshape(tgrad_tensor_t tensor, const int64_t *shape, int32_t ndim,
                                  tgrad_tensor_t *out);
tgrad_status tgrad_tensor_contiguous(tgrad_tensor_t tensor, tgrad_tensor_t *out);

tgrad_status tgrad_cast(tgrad_tensor_t x, int32_t dtype, tgrad_tensor_t *out);
tgrad_status tgrad_concat(int32_t n, const tgrad_tensor_t *tensors, int32_t axis, tgrad_tensor_t *out);
tgrad_status tgrad_slice_scatter(tgrad_tensor_t dst, tgrad_tensor_t src, int32_t axis, int64_t start, tgrad_tensor_t *out);
tgrad_status tgrad_slice_scatter_at(tgrad_tensor_t dst, tgrad_tensor_t src, int32_t axis, tgrad_tensor_t start, tgrad_tensor_t *out);
tgrad_status tgrad_take(tgrad_tensor_t x, tgrad_tensor_t indices, int32_t axis, tgrad_tensor_t *out);

#define TGRAD_COMPARE_EQ 1
#define TGRAD_COMPARE_NE 2
#define TGRAD_COMPARE_LT 3
#define TGRAD_COMPARE_LE 4
#define TGRAD_COMPARE_GT 5
#define TGRAD_COMPARE_GE 6
tgrad_status tgrad_compare(int32_t cmp, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);
tgrad_status tgrad_where(tgrad_tensor_t cond, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);

enum tgrad_reduce_code {
    TGRAD_REDUCE_NONE = 0,
    TGRAD_REDUCE_SUM = 1,
    TGRAD_REDUCE_MEAN = 2,
    TGRAD_REDUCE_MAX = 3,
    TGRAD_REDUCE_MIN = 4,
    TGRAD_REDUCE_ARGMAX = 5,
    TGRAD_REDUCE_ARGMIN = 6,
    TGRAD_REDUCE_END_ = 7
};
const char *tgrad_reduce_name(int32_t op);
tgrad_status tgrad_reduce(int32_t op, tgrad_tensor_t x, const int32_t *axes, int32_t naxes,
                          int32_t keepdims, int32_t out_dtype, tgrad_tensor_t *out);
tgrad_status tgrad_rms_norm(tgrad_tensor_t x, tgrad_tensor_t weight, int32_t naxes, double eps,
                            tgrad_tensor_t *out);
tgrad_status tgrad_layer_norm(tgrad_tensor_t x, tgrad_tensor_t weight, tgrad_tensor_t bias, int32_t naxes,
                              double eps, tgrad_tensor_t *out);
tgrad_status tgrad_rms_norm_backward(tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t weight, int32_t naxes,
                                     double eps, int32_t out_dtype, tgrad_tensor_t *out);
tgrad_status tgrad_layer_norm_backward(tgrad_tensor_t x, tgrad_tensor_t g, tgrad_tensor_t weight, int32_t naxes,
                                       double eps, int32_t out_dtype, tgrad_tensor_t *out);
tgrad_status tgrad_rope(tgrad_tensor_t x, tgrad_tensor_t positions, tgrad_tensor_t inv_freq, double base,
                        int32_t rotary_dim, int32_t interleaved, tgrad_tensor_t *out);
tgrad_status tgrad_rope_backward(tgrad_tensor_t g, tgrad_tensor_t positions, tgrad_tensor_t inv_freq, double base,
                                 int32_t rotary_dim, int32_t interleaved, tgrad_tensor_t *out);

enum tgrad_random_code {
    TGRAD_RANDOM_NONE = 0,
    TGRAD_RANDOM_UNIFORM = 1,
    TGRAD_RANDOM_NORMAL = 2,
    TGRAD_RANDOM_RANDINT = 3,
    TGRAD_RANDOM_END_ = 4
};
const char *tgrad_random_name(int32_t dist);
tgrad_status tgrad_random(int32_t dist, uint64_t seed, uint64_t offset, int32_t ndim, const int64_t *shape,
                          int32_t dtype, double p0, double p1, int32_t device, tgrad_tensor_t *out);

enum tgrad_softmax_code {
    TGRAD_SOFTMAX_NONE = 0,
    TGRAD_SOFTMAX_SOFTMAX = 1,
    TGRAD_SOFTMAX_LOG_SOFTMAX = 2,
    TGRAD_SOFTMAX_LOGSUMEXP = 3,
    TGRAD_SOFTMAX_END_ = 4
};
const char *tgrad_softmax_name(int32_t op);
#define TGRAD_OPTIM_NSCALARS 8
enum tgrad_optim_code { TGRAD_OPTIM_SGD = 1, TGRAD_OPTIM_ADAMW = 2 };
enum tgrad_optim_flag { TGRAD_OPTIM_MAXIMIZE = 1, TGRAD_OPTIM_DECAY = 2, TGRAD_OPTIM_MOMENTUM = 4,
                        TGRAD_OPTIM_NESTEROV = 8, TGRAD_OPTIM_AMSGRAD = 16 };
enum tgrad_optim_out { TGRAD_OPTIM_OUT_PARAM = 0, TGRAD_OPTIM_OUT_STATE1 = 1, TGRAD_OPTIM_OUT_STATE2 = 2,
                       TGRAD_OPTIM_OUT_STATE3 = 3 };
tgrad_status tgrad_optim_step(int32_t algo, int32_t which, int32_t flags, int32_t ninputs,
                              const tgrad_tensor_t *inputs, const float *scalars, tgrad_tensor_t *out);
tgrad_status tgrad_optim_step_many(int32_t algo, int32_t flags, int32_t n, int32_t ninputs,
                                   const tgrad_tensor_t *inputs, const float *scalars, int32_t bf16_param,
                                   tgrad_tensor_t *outs);
tgrad_status tgrad_softmax(int32_t op, tgrad_tensor_t x, int32_t axis, int32_t keepdims, int32_t out_dtype,
                           tgrad_tensor_t *out);
tgrad_status tgrad_softmax_backward(int32_t op, tgrad_tensor_t y, tgrad_tensor_t g, int32_t axis, int32_t out_dtype,
                                    tgrad_tensor_t *out);

tgrad_status tgrad_matmul(tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);
tgrad_status tgrad_matmul_ex(tgrad_tensor_t a, tgrad_tensor_t b, int32_t out_dtype, tgrad_tensor_t *out);
#define TGRAD_MATMUL_ORDER_PAIRWISE 0
#define TGRAD_MATMUL_ORDER_BLOCK32 1
tgrad_status tgrad_set_matmul_order(int32_t order);
int32_t tgrad_matmul_order(void);
const char *tgrad_matmul_order_kernel(int32_t order);
tgrad_status tgrad_cpu_amx_check(void);
tgrad_status tgrad_matmul_ordered(tgrad_tensor_t a, tgrad_tensor_t b, int32_t out_dtype, int32_t order,
                                  tgrad_tensor_t *out);

tgrad_status tgrad_unary(tgrad_op op, tgrad_tensor_t x, tgrad_tensor_t *out);
tgrad_status tgrad_binary(tgrad_op op, tgrad_tensor_t a, tgrad_tensor_t b, tgrad_tensor_t *out);
tgrad_status tgrad_set_fusion(int32_t enabled);
int32_t tgrad_fusion_enabled(void);

tgrad_status tgrad_set_num_threads(int32_t n);
int32_t tgrad_num_threads(void);
int64_t tgrad_live_tensors(void);
int64_t tgrad_live_buffers(void);
int64_t tgrad_live_bytes(void);
const char *tgrad_cpu_isa(void);
const char *tgrad_cpu_stream_isa(void);
int32_t tgrad_cpu_isa_forced(void);
const char *tgrad_cpu_isa_reason(void);
tgrad_status tgrad_set_cpu_isa(const char *name);
const char *tgrad_cpu_isa_name(int32_t index, int32_t *available);
tgrad_status tgrad_cpu_peak_gflops(int32_t threads, double *gflops);
tgrad_status tgrad_cpu_peak_run(int32_t threads, double flops);
tgrad_status tgrad_cpu_read_run(const void *data, int64_t bytes, int32_t threads);
int64_t tgrad_cpu_scratch_bytes(void);
int64_t tgrad_cached_bytes(void);
void tgrad_release_cached(void);
tgrad_status tgrad_set_memory_limit(int64_t bytes);
int64_t tgrad_memory_limit(void);
#define TGRAD_DEVICE_CPU 0
#define TGRAD_DEVICE_METAL 1
#define TGRAD_DEVICE_OPENCL 2
#define TGRAD_DEVICE_CUDA 3
tgrad_status tgrad_device_by_name(const char *name, int32_t *device);
tgrad_status tgrad_tensor_device(tgrad_tensor_t tensor, int32_t *device);
tgrad_status tgrad_tensor_to(tgrad_tensor_t tensor, int32_t device, tgrad_tensor_t *out);
tgrad_status tgrad_set_device_route(int32_t route);
#define TGRAD_MATMUL_PRECISION_EXACT 0
#define TGRAD_MATMUL_PRECISION_BOUNDED 1
tgrad_status tgrad_set_matmul_precision(int32_t precision);
int32_t tgrad_matmul_precision(void);
typedef void (*tgrad_deleter)(void *context);
tgrad_status tgrad_tensor_from_external(const uint16_t *data, int64_t extent, int32_t ndim,
                                        const int64_t *shape, const int64_t *strides,
                                        tgrad_deleter deleter, void *context, tgrad_tensor_t *out);
tgrad_status tgrad_tensor_data(tgrad_tensor_t tensor, const uint16_t **data);
tgrad_status tgrad_tensor_set_requires_grad(tgrad_tensor_t tensor, int32_t on);
tgrad_status tgrad_tensor_requires_grad(tgrad_tensor_t tensor, int32_t *on);
tgrad_status tgrad_set_grad_enabled(int32_t on);
int32_t tgrad_grad_enabled(void);
tgrad_status tgrad_grad(int32_t n_outputs, const tgrad_tensor_t *outputs, const tgrad_tensor_t *seeds,
                        int32_t n_inputs, const tgrad_tensor_t *inputs, int32_t grad_dtype,
                        tgrad_tensor_t *grads);
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
tgrad_status tgrad_debug_use_backend(int32_t device, const tgrad_debug_backend *backend);
tgrad_status tgrad_debug_fail_allocation(int64_t n, int64_t *failures);
tgrad_status tgrad_debug_handle_generation(tgrad_tensor_t tensor, uint32_t generation, tgrad_tensor_t *out);
#define TGRAD_DEBUG_CPU_NO_DIRECT_A 1
#define TGRAD_DEBUG_CPU_NO_GEMM_T 2
tgrad_status tgrad_debug_cpu_blocking(int64_t chunk_bytes, int64_t panel_k, int32_t flags);
tgrad_status tgrad_debug_cpu_isa_rates(const double *rates, int32_t count);
tgrad_status tgrad_debug_cpu_identity(const char *vendor, int32_t family);
tgrad_status tgrad_debug_elementwise(tgrad_op op, const uint16_t *a, const uint16_t *b, uint16_t *out,
                                     int64_t n);
tgrad_status tgrad_debug_elementwise_f32(tgrad_op op, const uint32_t *a, const uint32_t *b, uint32_t *out,
                                         int64_t n);
#define TGRAD_DEBUG_F32_EVALUATED 0
#define TGRAD_DEBUG_F32_SLOW 1
#define TGRAD_DEBUG_F32_UNDECIDED 2
#define TGRAD_DEBUG_F32_DEVICE_HOST 3
#define TGRAD_DEBUG_F32_COUNT 4
tgrad_status tgrad_debug_f32_slow_path(tgrad_op op, int64_t *counts, int32_t count);
tgrad_status tgrad_debug_philox(const uint32_t *counter, const uint32_t *key, uint32_t *out);
#define TGRAD_DEBUG_RANDOM_SLOW 0
#define TGRAD_DEBUG_RANDOM_UNDECIDED 1
#define TGRAD_DEBUG_RANDOM_COUNT 2
tgrad_status tgrad_debug_random_slow_path(int32_t dist, int64_t *counts, int32_t count);
#define TGRAD_DEBUG_SOFTMAX_ROWS 0
#define TGRAD_DEBUG_SOFTMAX_ELEMENTS 1
#define TGRAD_DEBUG_SOFTMAX_SLOW 2
#define TGRAD_DEBUG_SOFTMAX_UNDECIDED 3
#define TGRAD_DEBUG_SOFTMAX_DEVICE_ROWS 4
#define TGRAD_DEBUG_SOFTMAX_COUNT 5
tgrad_status tgrad_debug_softmax_slow_path(int64_t *counts, int32_t count);
#define TGRAD_DEBUG_RENDER_CACHE_HITS 0
#define TGRAD_DEBUG_RENDER_CACHE_MISSES 1
#define TGRAD_DEBUG_RENDER_CACHE_ENTRIES 2
#define TGRAD_DEBUG_RENDER_CACHE_BYTES 3
#define TGRAD_DEBUG_RENDER_CACHE_LAUNCH_DIFFERENCES 4
#define TGRAD_DEBUG_RENDER_CACHE_TEXT_DIFFERENCES 5
#define TGRAD_DEBUG_RENDER_CACHE_RENDER_NS 6
#define TGRAD_DEBUG_RENDER_CACHE_RENDERS 7
#define TGRAD_DEBUG_RENDER_CACHE_COUNT 8
tgrad_status tgrad_debug_render_cache(int32_t mode, int64_t *counts, int32_t count);
tgrad_status tgrad_debug_bf16_slow_path(tgrad_op op, int64_t *counts, int32_t count);
tgrad_status tgrad_debug_device_table(tgrad_op op, uint16_t *out, int64_t count);
tgrad_status tgrad_debug_cuda_compile(const char *source, int32_t sm, int64_t *image_bytes);
tgrad_status tgrad_debug_exact_sum(const void *data, int32_t dtype, int64_t n, int64_t stride, int32_t mean,
                                   int32_t out_dtype, uint32_t *out_bits);
tgrad_status tgrad_debug_extrema(const void *data, int32_t dtype, int64_t n, int64_t stride, int32_t want_max,
                                 uint32_t *value_bits, int64_t *index);
#define TGRAD_DEBUG_WORK_STEPS 0
#define TGRAD_DEBUG_WORK_READS 1
#define TGRAD_DEBUG_WORK_PROBES 2
#define TGRAD_DEBUG_WORK_RELEASE_CHECKS 3
#define TGRAD_DEBUG_WORK_BUILD_NS 4
#define TGRAD_DEBUG_WORK_COUNT 5
tgrad_status tgrad_debug_schedule_work(int64_t *work, int32_t count);
tgrad_status tgrad_debug_exact_sum_2d(const void *data, int32_t dtype, int64_t rows, int64_t row_stride,
                                      int64_t cols, int64_t col_stride, int32_t axis, int32_t mean,
                                      int32_t out_dtype, uint32_t *out_bits);
#define TGRAD_DEBUG_NORM_EVALUATED 0
#define TGRAD_DEBUG_NORM_SLOW 1
#define TGRAD_DEBUG_ROPE_EVALUATED 2
#define TGRAD_DEBUG_ROPE_SLOW 3
#define TGRAD_DEBUG_ROPE_UNDECIDED 4
#define TGRAD_DEBUG_NORM_DEVICE_ROWS 5
#define TGRAD_DEBUG_ROPE_DEVICE_ROWS 6
#define TGRAD_DEBUG_NORM_COUNT 7
tgrad_status tgrad_debug_norm_slow_path(int64_t *counts, int32_t count);

typedef struct tgrad_program tgrad_program;
tgrad_status tgrad_program_capture(int32_t nout, const tgrad_tensor_t *outputs, int32_t nin, const tgrad_tensor_t *inputs, tgrad_program **out);
tgrad_status tgrad_program_run(const tgrad_program *program, int32_t nin, const tgrad_tensor_t *inputs, int32_t nout, tgrad_tensor_t *outputs);
tgrad_status tgrad_program_info(const tgrad_program *program, int32_t *nodes, int32_t *inputs, int32_t *constants, int32_t *outputs);
void tgrad_program_release(tgrad_program *program);

#define TGRAD_FORMAT_TEXT 1
#define TGRAD_FORMAT_JSON 2
tgrad_status tgrad_tensor_explain(tgrad_tensor_t tensor, int32_t format, char *dst, size_t cap,
                                  size_t *len);
tgrad_status tgrad_tensor_route(tgrad_tensor_t tensor, char *dst, size_t cap, size_t *len);
tgrad_status tgrad_tensor_buffer_id(tgrad_tensor_t tensor, uint64_t *id);
tgrad_status tgrad_capability(int32_t index, const char **backend, const char **capability,
                              const char **value, const char **note);
tgrad_status tgrad_backend(int32_t index, const char **name, int32_t *built, int32_t *available,
                           const char **device);

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
#define TGRAD_LANG_MSL 1
#define TGRAD_LANG_OPENCL 2
#define TGRAD_LANG_CUDA 3
#define TGRAD_LANG_COUNT 3
#define TGRAD_LAUNCH_MAX_BUFFERS 16
#define TGRAD_KERNEL_NAME_MAX 64

struct tgrad_launch {
    uint32_t size;
    uint32_t grid[3];
    uint32_t threadgroup[3];
    uint32_t threadgroup_memory;
    uint32_t buffer_count;
    uint64_t buffer_elements[16];
    uint64_t source_hash;
    char kernel_name[64];
    char buffer_names[16][8];
    uint64_t buffer_ids[16];
};

const char *tgrad_route_name(int32_t route);
const char *tgrad_lang_name(int32_t lang);
tgrad_status tgrad_route_check(int32_t route, int32_t lang, tgrad_tensor_t a, tgrad_tensor_t b);
tgrad_status tgrad_render_matmul(int32_t route, int32_t lang, tgrad_tensor_t a, tgrad_tensor_t b,
                                 char *dst, size_t capacity, size_t *length,
                                 struct tgrad_launch *launch);
tgrad_status tgrad_render_copy(int32_t lang, tgrad_tensor_t src, char *dst, size_t capacity,
                               size_t *length, struct tgrad_launch *launch);
tgrad_status tgrad_render_tensor(int32_t route, int32_t lang, tgrad_tensor_t t, int32_t step, char *dst,
                                 size_t capacity, size_t *length, struct tgrad_launch *launch);
"""
