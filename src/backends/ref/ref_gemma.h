/* The ref kernels of the ops gemma3 added (ref_gemma.c): GEGLU, SCALE, SOFTCAP. */
#ifndef PL_BACKENDS_REF_GEMMA_H
#define PL_BACKENDS_REF_GEMMA_H
#include "kernels/abi.h"

pl_status pl_ref_geglu(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_ref_scale(pl_exec_ctx *ctx, const pl_node *node);
pl_status pl_ref_softcap(pl_exec_ctx *ctx, const pl_node *node);

#endif
