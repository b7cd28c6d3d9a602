/* A C user of libtgrad: build two matrices, multiply them through views, check the result against
 * values known in advance, print a checksum. Build against an installed tgrad:
 *     cc matmul.c $(pkg-config --cflags --libs tgrad) -o matmul && ./matmul
 */
#include <stdio.h>
#include <stdlib.h>

#include <tgrad.h>

#define TRY(call)                                                                         \
    do {                                                                                  \
        tgrad_status s_ = (call);                                                         \
        if (s_ != TGRAD_OK) {                                                             \
            fprintf(stderr, "%s failed: %s: %s\n", #call, tgrad_status_name(s_), tgrad_last_error()); \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

enum { M = 64, K = 48, N = 80 };

int main(void) {
    TRY(tgrad_check_version(TGRAD_VERSION_NUMBER));
    /* A is stored transposed ([K, M]) and viewed back with a transpose; B is stored with every
     * second row dropped by a slice of a [2K, N] buffer. Small integers keep every sum exact. */
    static float at[K * M], b2[2 * K * N];
    for (int k = 0; k < K; k++)
        for (int m = 0; m < M; m++) at[k * M + m] = (float)((m + 2 * k) % 5 - 2);
    for (int k = 0; k < 2 * K; k++)
        for (int n = 0; n < N; n++) b2[k * N + n] = (k % 2) ? 99.0f : (float)((3 * n + k / 2) % 7 - 3);

    tgrad_tensor_t ta = 0, tb = 0, a = 0, b = 0, c = 0;
    TRY(tgrad_tensor_from_f32(at, 2, (int64_t[]){ K, M }, &ta));
    TRY(tgrad_tensor_from_f32(b2, 2, (int64_t[]){ 2 * K, N }, &tb));
    TRY(tgrad_tensor_transpose(ta, 0, 1, &a));                                                /* [M, K] */
    TRY(tgrad_tensor_slice(tb, 0, 0, 0, 2, TGRAD_SLICE_START_NONE | TGRAD_SLICE_STOP_NONE, &b)); /* [K, N] */
    TRY(tgrad_matmul(a, b, &c));

    static float out[M * N];
    TRY(tgrad_tensor_read_f32(c, out, M * N));
    double checksum = 0;
    int wrong = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float want = 0;
            for (int k = 0; k < K; k++) want += at[k * M + m] * b2[2 * k * N + n];
            wrong += out[m * N + n] != want;
            checksum += out[m * N + n] * (double)(1 + (m * N + n) % 13);
        }
    tgrad_tensor_release(ta), tgrad_tensor_release(tb), tgrad_tensor_release(a);
    tgrad_tensor_release(b), tgrad_tensor_release(c);
    printf("tgrad %s, cpu %s: %dx%dx%d through views, %d wrong, checksum %.1f, live tensors %lld\n",
           tgrad_version_string(), tgrad_cpu_isa(), M, K, N, wrong, checksum, (long long)tgrad_live_tensors());
    return wrong != 0 || tgrad_live_tensors() != 0;
}
