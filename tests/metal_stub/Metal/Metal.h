/* STUB — not Apple's Metal framework. Declares only what libtgrad/src/backend/metal.m uses, spelled
 * as in the macOS SDK's Metal headers (MTLDevice.h, MTLBuffer.h, MTLLibrary.h, MTLCommandQueue.h,
 * MTLCommandBuffer.h, MTLComputeCommandEncoder.h, MTLComputePipeline.h, MTLResource.h, MTLTypes.h)
 * and their pages on developer.apple.com/documentation/metal, so that clang can type-check metal.m
 * on Linux (tests/metal_stub/README.md). Enum values are Apple's. */
#ifndef TGRAD_STUB_METAL_H
#define TGRAD_STUB_METAL_H

#include <Foundation/Foundation.h>

NS_ASSUME_NONNULL_BEGIN

/* ---- MTLTypes.h ---- */
typedef struct {
    NSUInteger width, height, depth;
} MTLSize;

static inline MTLSize MTLSizeMake(NSUInteger width, NSUInteger height, NSUInteger depth) {
    MTLSize size = { width, height, depth };
    return size;
}

/* ---- MTLResource.h ---- */
#define MTLResourceStorageModeShift 4
typedef NS_OPTIONS(NSUInteger, MTLResourceOptions) {
    MTLResourceStorageModeShared = 0UL << MTLResourceStorageModeShift,
    MTLResourceStorageModeManaged API_AVAILABLE(macos(10.11)) = 1UL << MTLResourceStorageModeShift,
    MTLResourceStorageModePrivate = 2UL << MTLResourceStorageModeShift,
};

@protocol MTLResource <NSObject>
@end

/* ---- MTLBuffer.h ---- */
@protocol MTLBuffer <MTLResource>
@property (readonly) NSUInteger length;
- (void *)contents NS_RETURNS_INNER_POINTER;
@end

/* ---- MTLLibrary.h ---- */
typedef NS_ENUM(NSUInteger, MTLLanguageVersion) {
    MTLLanguageVersion2_2 API_AVAILABLE(macos(10.15)) = (2 << 16) + 2,
    MTLLanguageVersion2_3 API_AVAILABLE(macos(11.0)) = (2 << 16) + 3,
    MTLLanguageVersion2_4 API_AVAILABLE(macos(12.0)) = (2 << 16) + 4,
    MTLLanguageVersion3_0 API_AVAILABLE(macos(13.0)) = (3 << 16) + 0,
    MTLLanguageVersion3_1 API_AVAILABLE(macos(14.0)) = (3 << 16) + 1,
};

typedef NS_ENUM(NSInteger, MTLMathMode) {
    MTLMathModeSafe = 0,
    MTLMathModeRelaxed = 1,
    MTLMathModeFast = 2,
} API_AVAILABLE(macos(15.0));

typedef NS_ENUM(NSInteger, MTLMathFloatingPointFunctions) {
    MTLMathFloatingPointFunctionsFast = 0,
    MTLMathFloatingPointFunctionsPrecise = 1,
} API_AVAILABLE(macos(15.0));

@interface MTLCompileOptions : NSObject
@property (readwrite, nonatomic) BOOL fastMathEnabled API_DEPRECATED("Use mathMode instead", macos(10.11, 15.0));
@property (readwrite, nonatomic) MTLMathMode mathMode API_AVAILABLE(macos(15.0));
@property (nonatomic) MTLMathFloatingPointFunctions mathFloatingPointFunctions API_AVAILABLE(macos(15.0));
@property (readwrite, nonatomic) MTLLanguageVersion languageVersion API_AVAILABLE(macos(10.11));
@end

@protocol MTLFunction <NSObject>
@end

@protocol MTLLibrary <NSObject>
- (nullable id <MTLFunction>)newFunctionWithName:(NSString *)functionName;
@end

/* ---- MTLComputePipeline.h ---- */
@protocol MTLComputePipelineState <NSObject>
@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@property (readonly) NSUInteger threadExecutionWidth;
@property (readonly) NSUInteger staticThreadgroupMemoryLength API_AVAILABLE(macos(10.13));
@end

/* ---- MTLCommandEncoder.h, MTLComputeCommandEncoder.h ---- */
@protocol MTLCommandEncoder <NSObject>
- (void)endEncoding;
@end

@protocol MTLComputeCommandEncoder <MTLCommandEncoder>
- (void)setComputePipelineState:(id <MTLComputePipelineState>)state;
- (void)setBuffer:(nullable id <MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;
@end

/* ---- MTLCommandBuffer.h ---- */
typedef NS_ENUM(NSUInteger, MTLCommandBufferStatus) {
    MTLCommandBufferStatusNotEnqueued = 0,
    MTLCommandBufferStatusEnqueued = 1,
    MTLCommandBufferStatusCommitted = 2,
    MTLCommandBufferStatusScheduled = 3,
    MTLCommandBufferStatusCompleted = 4,
    MTLCommandBufferStatusError = 5,
};

extern NSErrorDomain const MTLCommandBufferErrorDomain;

typedef NS_ENUM(NSUInteger, MTLCommandBufferError) {
    MTLCommandBufferErrorNone = 0,
    MTLCommandBufferErrorInternal = 1,
    MTLCommandBufferErrorTimeout = 2,
    MTLCommandBufferErrorPageFault = 3,
    MTLCommandBufferErrorNotPermitted = 7,
    MTLCommandBufferErrorOutOfMemory = 8,
    MTLCommandBufferErrorInvalidResource = 9,
};

@protocol MTLCommandBuffer <NSObject>
@property (readonly) MTLCommandBufferStatus status;
@property (nullable, readonly) NSError *error;
- (nullable id <MTLComputeCommandEncoder>)computeCommandEncoder;
- (void)commit;
- (void)waitUntilCompleted;
@end

/* ---- MTLCommandQueue.h ---- */
@protocol MTLCommandQueue <NSObject>
- (nullable id <MTLCommandBuffer>)commandBuffer;
@end

/* ---- MTLDevice.h ---- */
typedef NS_ENUM(NSInteger, MTLGPUFamily) {
    MTLGPUFamilyApple6 = 1006,
    MTLGPUFamilyApple7 = 1007,
    MTLGPUFamilyApple8 = 1008,
    MTLGPUFamilyApple9 = 1009,
    MTLGPUFamilyMac2 = 2002,
    MTLGPUFamilyMetal3 = 5001,
} API_AVAILABLE(macos(10.15));

@protocol MTLDevice <NSObject>
@property (nonnull, readonly) NSString *name;
@property (readonly) NSUInteger maxThreadgroupMemoryLength API_AVAILABLE(macos(10.13));
@property (readonly) NSUInteger maxBufferLength API_AVAILABLE(macos(10.14));
- (nullable id <MTLCommandQueue>)newCommandQueue;
- (nullable id <MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (nullable id <MTLLibrary>)newLibraryWithSource:(NSString *)source
                                         options:(nullable MTLCompileOptions *)options
                                           error:(__autoreleasing NSError **)error;
- (nullable id <MTLComputePipelineState>)newComputePipelineStateWithFunction:(id <MTLFunction>)computeFunction
                                                                       error:(__autoreleasing NSError **)error;
- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily API_AVAILABLE(macos(10.15));
@end

extern id <MTLDevice> __nullable MTLCreateSystemDefaultDevice(void) NS_RETURNS_RETAINED;
extern NSArray<id <MTLDevice>> *MTLCopyAllDevices(void) NS_RETURNS_RETAINED API_AVAILABLE(macos(10.11));

NS_ASSUME_NONNULL_END

#endif
