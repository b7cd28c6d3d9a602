/* Compiled kernel images on disk, shared between processes (private). A GPU backend whose compiler
 * is slow (NVRTC: a tenth of a second or more a kernel, and a decoding step makes new kernel texts)
 * asks here before compiling and stores what it compiled. The key is the backend's name, a tag
 * naming everything else the image depends on (device, compiler version, options), and the
 * kernel's whole source: a file is used only when its tag and source equal these byte for byte.
 *
 * Where: TGRAD_KERNEL_CACHE (a directory; empty or "0" turns the cache off), else
 * $XDG_CACHE_HOME/tgrad/kernels, else $HOME/.cache/tgrad/kernels (made on the first store). Every
 * failure (no directory, a file that does not match, a full disk) is a miss or a skipped store. */
#ifndef TGRAD_KERNEL_CACHE_H
#define TGRAD_KERNEL_CACHE_H

#include <stdbool.h>
#include <stddef.h>

/* The stored image of (backend, tag, source): true and a malloc'ed copy (NUL-terminated past
 * *size) in *image, else false with *image NULL. */
bool tg_kernel_cache_load(const char *backend, const char *tag, const char *source, size_t length, char **image,
                          size_t *size);
/* Keep `image` for (backend, tag, source); replaces what was there. */
void tg_kernel_cache_store(const char *backend, const char *tag, const char *source, size_t length,
                           const char *image, size_t size);

#endif
