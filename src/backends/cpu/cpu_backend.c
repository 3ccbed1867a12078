/* Placeholder until the optimized CPU backend lands: an empty dispatch table. */
#include "kernels/abi.h"
const pl_backend pl_backend_cpu = {"cpu", "optimized CPU backend (placeholder)", NULL, 0, NULL, NULL};
