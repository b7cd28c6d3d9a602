/* Compiled kernel images kept on disk between processes (kernel_cache.h): one file per (tag,
 * source), named by hashes of both and holding both in full, so a load compares them byte for byte
 * and a hash collision, a truncated file or another compiler's image is a miss, never a wrong
 * kernel. Writes go to a temporary file in the same directory, renamed into place, so a reader
 * never sees half a file. Every failure is a miss or a skipped store: the cache only saves time. */
#include "kernel_cache.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gen/gen.h"
#include "internal.h"

static const char MAGIC[8] = { 't', 'g', 'k', 'c', 'a', 'c', 'h', '1' };

/* The cache directory: TGRAD_KERNEL_CACHE (a path; empty or "0": no cache), else
 * $XDG_CACHE_HOME/tgrad/kernels, else $HOME/.cache/tgrad/kernels. False when there is none. */
static bool cache_dir(char *dir, size_t n) {
    const char *env = getenv("TGRAD_KERNEL_CACHE");
    if (env) return env[0] && strcmp(env, "0") != 0 && (size_t)snprintf(dir, n, "%s", env) < n;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int len = xdg && xdg[0] ? snprintf(dir, n, "%s/tgrad/kernels", xdg)
              : home && home[0] ? snprintf(dir, n, "%s/.cache/tgrad/kernels", home) : -1;
    return len > 0 && (size_t)len < n;
}

static bool make_dirs(char *path) { /* mkdir -p; path is restored */
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        bool ok = mkdir(path, 0700) == 0 || errno == EEXIST;
        *p = '/';
        if (!ok) return false;
    }
    return mkdir(path, 0700) == 0 || errno == EEXIST;
}

/* The cache's directory and the file of (backend, tag, source) in it, named by the tag's and the
 * source's FNV-1a hashes (the source's is the in-memory program cache's key, launch->source_hash). */
static bool file_of(const char *backend, const char *tag, const char *source, size_t length, char *dir, size_t dn,
                    char *path, size_t pn) {
    if (!cache_dir(dir, dn)) return false;
    unsigned long long th = tg_fnv1a64(tag, strlen(tag)), sh = tg_fnv1a64(source, length);
    return (size_t)snprintf(path, pn, "%s/%s-%016llx-%016llx.bin", dir, backend, th, sh) < pn;
}

static bool read_exact(FILE *f, void *buf, size_t n) { return fread(buf, 1, n, f) == n; }

/* Whether the file's tag and source are these, byte for byte. */
static bool same_key(FILE *f, const char *tag, const char *source, size_t length) {
    char magic[8];
    uint64_t sizes[2];
    if (!read_exact(f, magic, sizeof magic) || memcmp(magic, MAGIC, sizeof magic) != 0) return false;
    if (!read_exact(f, sizes, sizeof sizes) || sizes[0] != strlen(tag) || sizes[1] != length) return false;
    char chunk[4096];
    for (size_t done = 0, total = strlen(tag) + length; done < total;) {
        size_t k = total - done < sizeof chunk ? total - done : sizeof chunk;
        if (!read_exact(f, chunk, k)) return false;
        for (size_t i = 0; i < k; i++) {
            size_t at = done + i;
            char want = at < sizes[0] ? tag[at] : source[at - sizes[0]];
            if (chunk[i] != want) return false;
        }
        done += k;
    }
    return true;
}

bool tg_kernel_cache_load(const char *backend, const char *tag, const char *source, size_t length, char **image,
                          size_t *size) {
    char dir[900], path[1024];
    *image = NULL, *size = 0;
    if (!file_of(backend, tag, source, length, dir, sizeof dir, path, sizeof path)) return false;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint64_t n = 0;
    bool ok = same_key(f, tag, source, length) && read_exact(f, &n, sizeof n) && n > 0 && n < ((uint64_t)1 << 31);
    char *data = ok ? tg_malloc((size_t)n + 1) : NULL;
    ok = data && read_exact(f, data, (size_t)n) && fgetc(f) == EOF; /* nothing after the image */
    fclose(f);
    if (!ok) {
        free(data);
        return false;
    }
    data[n] = 0; /* a PTX image is read as a C string */
    *image = data, *size = (size_t)n;
    return true;
}

void tg_kernel_cache_store(const char *backend, const char *tag, const char *source, size_t length,
                           const char *image, size_t size) {
    char path[1024], tmp[1100], dir[900];
    if (!size || !file_of(backend, tag, source, length, dir, sizeof dir, path, sizeof path) || !make_dirs(dir)) return;
    static int serial;
    snprintf(tmp, sizeof tmp, "%s.%ld.%d.tmp", path, (long)getpid(), __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED));
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    uint64_t sizes[2] = { strlen(tag), length }, n = size;
    bool ok = fwrite(MAGIC, 1, sizeof MAGIC, f) == sizeof MAGIC && fwrite(sizes, sizeof sizes, 1, f) == 1 &&
              fwrite(tag, 1, sizes[0], f) == sizes[0] && fwrite(source, 1, length, f) == length &&
              fwrite(&n, sizeof n, 1, f) == 1 && fwrite(image, 1, size, f) == size;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) remove(tmp);
}
