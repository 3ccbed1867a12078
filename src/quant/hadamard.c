/* Walsh-Hadamard rotation of K/V cache rows (see hadamard.h). */
#include "quant/hadamard.h"
#include <math.h>

void pl_hadamard_rows(float *x, int64_t len, int n) {
    if (n <= 1) return;
    const float scale = 1.0f / sqrtf((float)n);
    for (int64_t c = 0; c + n <= len; c += n) {
        float *r = x + c;
        for (int j = 0; j < n; j++) r[j] *= scale;
        /* butterflies, span 1, 2, 4, ...: (u, v) -> (u + v, u - v) */
        for (int span = 1; span < n; span <<= 1)
            for (int i = 0; i < n; i += 2 * span)
                for (int j = i; j < i + span; j++) {
                    const float u = r[j], v = r[j + span];
                    r[j] = u + v;
                    r[j + span] = u - v;
                }
    }
}

int pl_hadamard_k_size(int64_t head_dim) {
    if (head_dim <= 0 || head_dim % 64) return 0;
    int n = 64;
    while (head_dim % (2 * (int64_t)n) == 0) n *= 2;   /* the largest power of two dividing it */
    return n;
}

int pl_hadamard_v_size(int64_t head_dim) { return head_dim > 0 && head_dim % 64 == 0 ? 64 : 0; }
