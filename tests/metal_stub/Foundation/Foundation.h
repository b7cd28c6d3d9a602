/* STUB — not Apple's Foundation. Declares only what libtgrad/src/backend/metal.m uses, spelled as in
 * the macOS SDK, so that clang can type-check metal.m on Linux (tests/metal_stub/README.md). */
#ifndef TGRAD_STUB_FOUNDATION_H
#define TGRAD_STUB_FOUNDATION_H

#include <stddef.h>
#include <stdint.h>

/* The SDK's <Availability.h>, as Xcode 16 (macOS 15 SDK) defines it, so that metal.m's
 * macOS-15-only branch (MTLCompileOptions.mathMode) is type-checked too. */
#define __MAC_OS_X_VERSION_MAX_ALLOWED 150000

/* <os/availability.h>: a Linux target ignores availability, so these only document it; a
 * deprecation is kept as a plain deprecation, so -Werror sees every use outside a pragma. */
#define API_AVAILABLE(...)
#define API_DEPRECATED(message, ...) __attribute__((deprecated(message)))

/* Apple's <sys/cdefs.h> also spells _Nullable as __nullable (glibc has no such macro; its
 * __nonnull is a different, function-attribute macro, so only __nullable is defined here). */
#define __nullable _Nullable

#define NS_RETURNS_RETAINED __attribute__((ns_returns_retained))
#define NS_RETURNS_INNER_POINTER __attribute__((objc_returns_inner_pointer))
#define NS_ASSUME_NONNULL_BEGIN _Pragma("clang assume_nonnull begin")
#define NS_ASSUME_NONNULL_END _Pragma("clang assume_nonnull end")
#define NS_ENUM(_type, _name) enum _name : _type _name; enum _name : _type
#define NS_OPTIONS(_type, _name) enum _name : _type _name; enum _name : _type

typedef long NSInteger;
typedef unsigned long NSUInteger;
typedef signed char BOOL; /* x86_64; arm64 uses bool — either way a 1-byte truth value */
#define YES __objc_yes
#define NO __objc_no
#ifndef nil
#define nil ((void *)0)
#endif

NS_ASSUME_NONNULL_BEGIN

@protocol NSObject
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)alloc;
- (instancetype)init;
@end

typedef NSUInteger NSStringEncoding;
enum { NSUTF8StringEncoding = 4 };

@interface NSString : NSObject
- (nullable instancetype)initWithBytes:(const void *)bytes length:(NSUInteger)len encoding:(NSStringEncoding)encoding;
+ (nullable instancetype)stringWithUTF8String:(const char *)nullTerminatedCString;
@property (nullable, readonly) const char *UTF8String NS_RETURNS_INNER_POINTER;
- (BOOL)isEqualToString:(NSString *)aString;
@end

@interface NSArray<__covariant ObjectType> : NSObject
@property (readonly) NSUInteger count;
@property (nullable, nonatomic, readonly) ObjectType firstObject;
@end

typedef NSString *NSErrorDomain;

@interface NSError : NSObject
@property (readonly, copy) NSErrorDomain domain;
@property (readonly) NSInteger code;
@property (readonly, copy) NSString *localizedDescription;
@end

NS_ASSUME_NONNULL_END

#endif
