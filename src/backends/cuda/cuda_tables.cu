/*
 * The host copy of GGML's IQ codebooks inside the module: the module links
 * nothing of the library (its symbols are hidden from it), so it compiles the
 * library's generated tables itself, from the same source file
 * (quant/ggml_tables.c, written by scripts/gen_ggml_tables.py) — no table is
 * repeated by hand. cuda_backend.cu uploads them into the device copies the
 * kernels read (cuda_quant.cuh, pl_cu_tables_upload_here) at context creation.
 * Hidden like every symbol of the module but pl_cuda_module_init.
 */
extern "C" {
#include "quant/ggml_tables.c"
}
