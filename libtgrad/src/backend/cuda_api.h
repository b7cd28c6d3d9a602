/* The few CUDA driver API and NVRTC declarations the CUDA backend uses (private).
 *
 * libtgrad opens the driver (libcuda.so.1) and NVRTC (libnvrtc.so.*) with dlopen at run time, so it
 * neither links against them nor needs the toolkit's headers to build. The types, values and
 * signatures below are copied by value from cuda.h and nvrtc.h (CUDA 13.0); keep the list to what
 * cuda.c calls. The values are part of NVIDIA's ABI and do not change between releases. The driver
 * exports several calls under versioned names (cuMemAlloc_v2 ...): those are the names looked up. */
#ifndef TGRAD_CUDA_API_H
#define TGRAD_CUDA_API_H

#include <stddef.h>

/* ---- driver types ---- */
typedef int CUresult;
typedef int CUdevice;
typedef int CUdevice_attribute;
typedef unsigned long long CUdeviceptr; /* 64-bit hosts only */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

/* ---- driver error codes (the subset cuda.c names or maps) ---- */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_DEVICE_UNAVAILABLE 46
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NO_BINARY_FOR_GPU 209
#define CUDA_ERROR_INVALID_PTX 218
#define CUDA_ERROR_JIT_COMPILER_NOT_FOUND 221
#define CUDA_ERROR_UNSUPPORTED_PTX_VERSION 222
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES 701
#define CUDA_ERROR_LAUNCH_FAILED 719
#define CUDA_ERROR_SYSTEM_DRIVER_MISMATCH 803
#define CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE 804
#define CUDA_ERROR_UNKNOWN 999

/* ---- device attributes ---- */
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK 8
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

/* ---- driver entry points (CUDAAPI is empty on the platforms this backend builds for) ---- */
typedef CUresult (*tg_cuInit)(unsigned int flags);
typedef CUresult (*tg_cuDeviceGetCount)(int *count);
typedef CUresult (*tg_cuDeviceGet)(CUdevice *device, int ordinal);
typedef CUresult (*tg_cuDeviceGetName)(char *name, int len, CUdevice device);
typedef CUresult (*tg_cuDeviceGetAttribute)(int *value, CUdevice_attribute attribute, CUdevice device);
typedef CUresult (*tg_cuDevicePrimaryCtxRetain)(CUcontext *context, CUdevice device);
typedef CUresult (*tg_cuCtxSetCurrent)(CUcontext context);
typedef CUresult (*tg_cuCtxSynchronize)(void);
typedef CUresult (*tg_cuMemAlloc_v2)(CUdeviceptr *ptr, size_t bytes);
typedef CUresult (*tg_cuMemFree_v2)(CUdeviceptr ptr);
typedef CUresult (*tg_cuMemcpyHtoD_v2)(CUdeviceptr dst, const void *src, size_t bytes);
typedef CUresult (*tg_cuMemcpyDtoH_v2)(void *dst, CUdeviceptr src, size_t bytes);
typedef CUresult (*tg_cuModuleLoadData)(CUmodule *module, const void *image);
typedef CUresult (*tg_cuModuleGetFunction)(CUfunction *function, CUmodule module, const char *name);
typedef CUresult (*tg_cuModuleUnload)(CUmodule module);
typedef CUresult (*tg_cuLaunchKernel)(CUfunction f, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                                      unsigned int block_x, unsigned int block_y, unsigned int block_z,
                                      unsigned int shared_bytes, CUstream stream, void **params, void **extra);
typedef CUresult (*tg_cuGetErrorName)(CUresult error, const char **name);

/* The table cuda.c fills with dlsym: X(name) for each driver entry point above. */
#define TG_CU_FUNCTIONS(X)                                                                                   \
    X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)                  \
    X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemAlloc_v2) X(cuMemFree_v2)      \
    X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuModuleUnload)      \
    X(cuLaunchKernel) X(cuGetErrorName)

/* ---- NVRTC ---- */
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
#define NVRTC_SUCCESS 0
#define NVRTC_ERROR_OUT_OF_MEMORY 1
#define NVRTC_ERROR_INVALID_OPTION 5
#define NVRTC_ERROR_COMPILATION 6

typedef const char *(*tg_nvrtcGetErrorString)(nvrtcResult result);
typedef nvrtcResult (*tg_nvrtcVersion)(int *major, int *minor);
typedef nvrtcResult (*tg_nvrtcCreateProgram)(nvrtcProgram *program, const char *source, const char *name,
                                             int nheaders, const char *const *headers,
                                             const char *const *include_names);
typedef nvrtcResult (*tg_nvrtcDestroyProgram)(nvrtcProgram *program);
typedef nvrtcResult (*tg_nvrtcCompileProgram)(nvrtcProgram program, int noptions, const char *const *options);
typedef nvrtcResult (*tg_nvrtcGetProgramLogSize)(nvrtcProgram program, size_t *size);
typedef nvrtcResult (*tg_nvrtcGetProgramLog)(nvrtcProgram program, char *log);
typedef nvrtcResult (*tg_nvrtcGetCUBINSize)(nvrtcProgram program, size_t *size);
typedef nvrtcResult (*tg_nvrtcGetCUBIN)(nvrtcProgram program, char *cubin);
typedef nvrtcResult (*tg_nvrtcGetPTXSize)(nvrtcProgram program, size_t *size);
typedef nvrtcResult (*tg_nvrtcGetPTX)(nvrtcProgram program, char *ptx);
typedef nvrtcResult (*tg_nvrtcGetNumSupportedArchs)(int *count);
typedef nvrtcResult (*tg_nvrtcGetSupportedArchs)(int *archs);

/* The NVRTC table: X(name) for each entry point above (all in NVRTC 11.2 and later). */
#define TG_NVRTC_FUNCTIONS(X)                                                                                \
    X(nvrtcGetErrorString) X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)                      \
    X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize)              \
    X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetNumSupportedArchs) X(nvrtcGetSupportedArchs)

#endif
