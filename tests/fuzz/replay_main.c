/* Corpus replay without libFuzzer: a main() that feeds every file of the directories (or files)
 * given to the target's LLVMFuzzerTestOneInput, in name order, so that `meson test` replays the
 * committed corpora with any compiler (gcc included) and any sanitizer. A target aborts on a
 * disagreement with its model; an empty or unreadable corpus fails too. */
#define _POSIX_C_SOURCE 200809L /* scandir, alphasort */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (!bigger) free(buf);
            buf = bigger;
        }
    }
    int failed = ferror(f) || !buf;
    fclose(f);
    if (failed) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        free(buf);
        return -1;
    }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 1;
}

static int not_hidden(const struct dirent *e) { return e->d_name[0] != '.'; }

/* Inputs replayed from path (a file, or a directory's files), or -1 on an error. */
static int replay(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s does not exist\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return replay_file(path);
    struct dirent **names = NULL;
    int n = scandir(path, &names, not_hidden, alphasort), count = 0;
    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s\n", path);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, names[i]->d_name);
        if (count >= 0 && stat(file, &st) == 0 && S_ISREG(st.st_mode)) {
            int r = replay_file(file);
            count = r < 0 ? -1 : count + r;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        int n = replay(argv[i]);
        if (n <= 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], n == 0 ? "no input to replay" : "failed");
            return 1;
        }
        printf("replayed %d inputs from %s\n", n, argv[i]);
    }
    return 0;
}
