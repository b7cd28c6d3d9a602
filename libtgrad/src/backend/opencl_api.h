/* The few OpenCL 1.2 declarations the OpenCL backend uses (private).
 *
 * libtgrad loads the ICD loader with dlopen at run time, so it neither links against libOpenCL nor
 * needs the Khronos headers to build. The types, constants and signatures below are copied by
 * value from the Khronos OpenCL 1.2 specification (and CL/cl.h, cl_ext.h); keep the list to what
 * opencl.c calls. Values are frozen by the spec, so they never need updating. */
#ifndef TGRAD_OPENCL_API_H
#define TGRAD_OPENCL_API_H

#include <stddef.h>
#include <stdint.h>

/* ---- scalar types ---- */
typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_ulong cl_bitfield;
typedef cl_uint cl_bool;
typedef cl_bitfield cl_device_type;
typedef cl_bitfield cl_device_fp_config;
typedef cl_bitfield cl_mem_flags;
typedef cl_bitfield cl_command_queue_properties;
typedef cl_uint cl_platform_info;
typedef cl_uint cl_device_info;
typedef cl_uint cl_program_build_info;
typedef intptr_t cl_context_properties;

/* ---- opaque handles ---- */
typedef struct _cl_platform_id *cl_platform_id;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_mem *cl_mem;
typedef struct _cl_program *cl_program;
typedef struct _cl_kernel *cl_kernel;
typedef struct _cl_event *cl_event;

/* ---- error codes ---- */
#define CL_SUCCESS 0
#define CL_DEVICE_NOT_FOUND (-1)
#define CL_DEVICE_NOT_AVAILABLE (-2)
#define CL_COMPILER_NOT_AVAILABLE (-3)
#define CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)
#define CL_OUT_OF_RESOURCES (-5)
#define CL_OUT_OF_HOST_MEMORY (-6)
#define CL_BUILD_PROGRAM_FAILURE (-11)
#define CL_INVALID_VALUE (-30)
#define CL_INVALID_DEVICE (-33)
#define CL_INVALID_CONTEXT (-34)
#define CL_INVALID_COMMAND_QUEUE (-36)
#define CL_INVALID_MEM_OBJECT (-38)
#define CL_INVALID_BUILD_OPTIONS (-43)
#define CL_INVALID_PROGRAM (-44)
#define CL_INVALID_PROGRAM_EXECUTABLE (-45)
#define CL_INVALID_KERNEL_NAME (-46)
#define CL_INVALID_KERNEL_DEFINITION (-47)
#define CL_INVALID_KERNEL (-48)
#define CL_INVALID_ARG_INDEX (-49)
#define CL_INVALID_ARG_VALUE (-50)
#define CL_INVALID_ARG_SIZE (-51)
#define CL_INVALID_KERNEL_ARGS (-52)
#define CL_INVALID_WORK_DIMENSION (-53)
#define CL_INVALID_WORK_GROUP_SIZE (-54)
#define CL_INVALID_WORK_ITEM_SIZE (-55)
#define CL_INVALID_OPERATION (-59)
#define CL_INVALID_BUFFER_SIZE (-61)
#define CL_INVALID_GLOBAL_WORK_SIZE (-63)
#define CL_PLATFORM_NOT_FOUND_KHR (-1001) /* cl_khr_icd: the loader found no vendor driver */

/* ---- enumerants ---- */
#define CL_TRUE 1
#define CL_PLATFORM_NAME 0x0902
#define CL_DEVICE_TYPE_GPU (1u << 2)
#define CL_DEVICE_TYPE_ALL 0xFFFFFFFFu
#define CL_DEVICE_TYPE 0x1000
#define CL_DEVICE_MAX_WORK_GROUP_SIZE 0x1004
#define CL_DEVICE_MAX_MEM_ALLOC_SIZE 0x1010
#define CL_DEVICE_SINGLE_FP_CONFIG 0x101B
#define CL_DEVICE_LOCAL_MEM_SIZE 0x1023
#define CL_DEVICE_AVAILABLE 0x1027
#define CL_DEVICE_COMPILER_AVAILABLE 0x1028
#define CL_DEVICE_NAME 0x102B
#define CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT (1u << 7)
#define CL_MEM_READ_WRITE (1u << 0)
#define CL_PROGRAM_BUILD_LOG 0x1183
#define CL_CONTEXT_PLATFORM 0x1084

/* ---- entry points (CL_API_CALL is empty on every platform libtgrad builds for) ---- */
typedef cl_int (*tg_clGetPlatformIDs)(cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms);
typedef cl_int (*tg_clGetPlatformInfo)(cl_platform_id platform, cl_platform_info param, size_t size,
                                       void *value, size_t *size_ret);
typedef cl_int (*tg_clGetDeviceIDs)(cl_platform_id platform, cl_device_type type, cl_uint num_entries,
                                    cl_device_id *devices, cl_uint *num_devices);
typedef cl_int (*tg_clGetDeviceInfo)(cl_device_id device, cl_device_info param, size_t size, void *value,
                                     size_t *size_ret);
typedef cl_context (*tg_clCreateContext)(const cl_context_properties *properties, cl_uint num_devices,
                                         const cl_device_id *devices,
                                         void (*notify)(const char *, const void *, size_t, void *),
                                         void *user_data, cl_int *errcode_ret);
typedef cl_int (*tg_clReleaseContext)(cl_context context);
typedef cl_command_queue (*tg_clCreateCommandQueue)(cl_context context, cl_device_id device,
                                                    cl_command_queue_properties properties, cl_int *errcode_ret);
typedef cl_mem (*tg_clCreateBuffer)(cl_context context, cl_mem_flags flags, size_t size, void *host_ptr,
                                    cl_int *errcode_ret);
typedef cl_int (*tg_clReleaseMemObject)(cl_mem mem);
typedef cl_int (*tg_clEnqueueWriteBuffer)(cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset,
                                          size_t size, const void *ptr, cl_uint num_events,
                                          const cl_event *wait_list, cl_event *event);
typedef cl_int (*tg_clEnqueueReadBuffer)(cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset,
                                         size_t size, void *ptr, cl_uint num_events, const cl_event *wait_list,
                                         cl_event *event);
typedef cl_program (*tg_clCreateProgramWithSource)(cl_context context, cl_uint count, const char **strings,
                                                   const size_t *lengths, cl_int *errcode_ret);
typedef cl_int (*tg_clBuildProgram)(cl_program program, cl_uint num_devices, const cl_device_id *devices,
                                    const char *options, void (*notify)(cl_program, void *), void *user_data);
typedef cl_int (*tg_clGetProgramBuildInfo)(cl_program program, cl_device_id device, cl_program_build_info param,
                                           size_t size, void *value, size_t *size_ret);
typedef cl_int (*tg_clReleaseProgram)(cl_program program);
typedef cl_kernel (*tg_clCreateKernel)(cl_program program, const char *name, cl_int *errcode_ret);
typedef cl_int (*tg_clReleaseKernel)(cl_kernel kernel);
typedef cl_int (*tg_clSetKernelArg)(cl_kernel kernel, cl_uint index, size_t size, const void *value);
typedef cl_int (*tg_clEnqueueNDRangeKernel)(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim,
                                            const size_t *global_offset, const size_t *global_size,
                                            const size_t *local_size, cl_uint num_events,
                                            const cl_event *wait_list, cl_event *event);
typedef cl_int (*tg_clFinish)(cl_command_queue queue);

/* The table opencl.c fills with dlsym: X(name) for each entry point above. */
#define TG_CL_FUNCTIONS(X)                                                                               \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext)     \
    X(clReleaseContext) X(clCreateCommandQueue) X(clCreateBuffer)                                      \
    X(clReleaseMemObject) X(clEnqueueWriteBuffer) X(clEnqueueReadBuffer) X(clCreateProgramWithSource)    \
    X(clBuildProgram) X(clGetProgramBuildInfo) X(clReleaseProgram) X(clCreateKernel) X(clReleaseKernel)  \
    X(clSetKernelArg) X(clEnqueueNDRangeKernel) X(clFinish)

#endif
