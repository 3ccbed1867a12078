/* Runtime CPU feature detection. See cpu_features.h. */
#include "core/cpu_features.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define PL_X86 1
#endif

static pl_cpu_features g_features;
static char g_description[160];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_has_avx2;

#ifdef PL_X86
/* XGETBV without needing -mxsave: which register states the OS saves. */
static unsigned long long pl_xgetbv0(void) {
    unsigned int eax, edx;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#endif

static void pl_append(const char *name, bool on) {
    if (!on) return;
    size_t len = strlen(g_description);
    size_t n = strlen(name);
    if (len + n + 2 >= sizeof g_description) return;
    if (len) g_description[len++] = ' ';
    memcpy(g_description + len, name, n + 1);
}

static void pl_detect(void) {
    pl_cpu_features f;
    memset(&f, 0, sizeof f);
#ifdef PL_X86
    unsigned int a, b, c, d;
    unsigned int max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
        bool osxsave = (c >> 27) & 1;
        unsigned long long xcr0 = osxsave ? pl_xgetbv0() : 0;
        /* The OS must save XMM+YMM (bits 1,2) for AVX, and additionally
         * opmask+ZMM (bits 5,6,7) for AVX-512. */
        bool os_ymm = (xcr0 & 0x6) == 0x6;
        bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
        f.sse42 = (c >> 20) & 1;
        f.avx = os_ymm && ((c >> 28) & 1);
        f.fma = f.avx && ((c >> 12) & 1);
        f.f16c = f.avx && ((c >> 29) & 1);
        if (max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            f.avx2 = f.avx && ((b >> 5) & 1);
            f.avx512f = os_zmm && ((b >> 16) & 1);
            f.avx512bw = f.avx512f && ((b >> 30) & 1);
            f.avx512vl = f.avx512f && ((b >> 31) & 1);
            f.avx512vnni = f.avx512f && ((c >> 11) & 1);
            unsigned int a1, b1, c1, d1;
            if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) {
                f.avxvnni = f.avx && ((a1 >> 4) & 1);
                f.avx512bf16 = f.avx512f && ((a1 >> 5) & 1);
            }
        }
    }
#endif
    const char *env = getenv("PL_CPU_FEATURES");
    if (env && (strcasecmp(env, "none") == 0 || strcasecmp(env, "scalar") == 0)) {
        memset(&f, 0, sizeof f);
    }
    g_description[0] = 0;
    pl_append("sse4.2", f.sse42);
    pl_append("avx", f.avx);
    pl_append("avx2", f.avx2);
    pl_append("fma", f.fma);
    pl_append("f16c", f.f16c);
    pl_append("avxvnni", f.avxvnni);
    pl_append("avx512f", f.avx512f);
    pl_append("avx512bw", f.avx512bw);
    pl_append("avx512vl", f.avx512vl);
    pl_append("avx512vnni", f.avx512vnni);
    pl_append("avx512bf16", f.avx512bf16);
    if (!g_description[0]) strcpy(g_description, "none");
    f.description = g_description;
    g_features = f;
    g_has_avx2 = f.avx2 && f.fma && f.f16c;
}

const pl_cpu_features *pl_cpu_features_get(void) {
    pthread_once(&g_once, pl_detect);
    return &g_features;
}

bool pl_cpu_has_avx2(void) {
    pthread_once(&g_once, pl_detect);
    return g_has_avx2;
}
