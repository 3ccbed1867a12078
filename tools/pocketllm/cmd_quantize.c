/*
 * pocketllm quantize IN.gguf OUT.gguf TYPE [--imatrix F] [--threads N]
 *
 * Writes IN requantized to the file type TYPE with llama-quantize's
 * per-tensor mixes and quantizers (quant/quantize_model.h). The IQ2/IQ1
 * types need an importance matrix (pocketllm imatrix).
 */
#include "cli.h"
#include "quant/quantize_mix.h"
#include "quant/quantize_model.h"
#include <stdio.h>
#include <string.h>

static void usage(void) {
    int n;
    const pl_ftype_info *ft = pl_ftypes(&n);
    puts("usage: pocketllm quantize IN.gguf OUT.gguf TYPE [--imatrix IMATRIX.gguf] [--threads N] [--quiet]\n"
         "  IN may be f32, f16 or bf16 (or a quantized file, which is dequantized first).\n"
         "  TYPE (the ladder's rungs are Q8_0 Q6_K Q4_K_M Q2_K IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ2_0 TQ1_0):");
    for (int i = 0; i < n; i++)
        printf("    %-8s %s%s\n", ft[i].name, ft[i].summary, ft[i].needs_imatrix ? " (needs --imatrix)" : "");
}

static int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL}, *imatrix = NULL, *v;
    long long threads = 0;
    int npos = 0;
    bool bad = false, quiet = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        } else if (!strcmp(argv[i], "--quiet")) quiet = true;
        else if (pl_cli_opt(argc, argv, &i, "--imatrix", &imatrix, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--threads", &v, &bad) || pl_cli_opt(argc, argv, &i, "-t", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1024, &threads)) return pl_cli_error("bad --threads '%s'", v);
        } else if (argv[i][0] == '-' && argv[i][1]) return pl_cli_error("quantize: unknown option '%s'", argv[i]);
        else if (npos < 3) pos[npos++] = argv[i];
        else return pl_cli_error("quantize: unexpected argument '%s'", argv[i]);
    }
    if (bad) return 1;
    if (npos != 3) return pl_cli_error("quantize: expected IN.gguf OUT.gguf TYPE (see --help)");
    const pl_ftype_info *ft = pl_ftype_find(pos[2]);
    if (!ft) return pl_cli_error("quantize: unknown type '%s' (see --help)", pos[2]);
    if (ft->needs_imatrix && !imatrix)
        return pl_cli_error("quantize: %s needs an importance matrix: pass --imatrix (make one with 'pocketllm imatrix')",
                            ft->name);
    pl_quantize_params p = {ft->name, imatrix, (int)threads, quiet ? NULL : stderr};
    pl_quantize_stats s;
    if (pl_quantize_file(pos[0], pos[1], &p, &s) != PL_OK) return pl_cli_error("%s", pl_last_error());
    fprintf(stderr, "wrote %s: %s, %d tensors (%d converted), %.2f MiB, %.2f bits per weight\n", pos[1], ft->name,
            s.n_tensors, s.n_quantized, s.file_size / 1048576.0, s.bytes_out * 8.0 / (double)s.n_elements);
    return 0;
}

PL_CLI_COMMAND(pl_cmd_quantize, "quantize", "requantize a GGUF model (llama-quantize's types and mixes)", cmd_quantize)
