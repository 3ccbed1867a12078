/*
 * pocketllm quantize IN.gguf OUT.gguf TYPE [--imatrix F] [--tensor-type PATTERN=TYPE]... [--threads N]
 *
 * Writes IN requantized to the file type TYPE with llama-quantize's
 * per-tensor mixes and quantizers (pl_quantize_file, pocketllm.h). The
 * IQ2/IQ1 types need an importance matrix (pocketllm imatrix).
 */
#include "cli.h"
#include "pocketllm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OVERRIDES 64

static void usage(void) {
    puts("usage: pocketllm quantize IN.gguf OUT.gguf TYPE [--imatrix IMATRIX.gguf] [--threads N] [--quiet]\n"
         "                          [--tensor-type PATTERN=TYPE]...\n"
         "  IN may be f32, f16 or bf16 (or a quantized file, which is dequantized first).\n"
         "  --tensor-type: tensors whose name matches PATTERN (a regular expression) get the tensor\n"
         "  type TYPE (q8_0, q6_K, f16, ...) instead of the mix's; the last match wins.\n"
         "  TYPE (the ladder's rungs are Q8_0 Q6_K Q4_K_M Q2_K IQ2_XS IQ2_XXS IQ1_M IQ1_S TQ2_0 TQ1_0):");
    for (int32_t i = 0; i < pl_quant_n_mixes(); i++) {
        pl_quant_mix_info mi;
        if (pl_quant_mix(i, &mi) == PL_OK)
            printf("    %-8s %s%s\n", mi.name, mi.summary, mi.needs_imatrix ? " (needs --imatrix)" : "");
    }
}

/* The progress lines go to stderr as the library produces them. */
static void log_stderr(void *user, const char *text) {
    (void)user;
    fputs(text, stderr);
    fflush(stderr);
}

static int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {NULL, NULL, NULL}, *imatrix = NULL, *v;
    long long threads = 0;
    int npos = 0;
    bool bad = false, quiet = false;
    pl_quant_override ov[MAX_OVERRIDES];
    char *ov_text[MAX_OVERRIDES];
    int n_ov = 0, rc = 0;
    for (int i = 1; i < argc && !bad && !rc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            goto out;
        } else if (!strcmp(argv[i], "--quiet")) quiet = true;
        else if (pl_cli_opt(argc, argv, &i, "--imatrix", &imatrix, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--tensor-type", &v, &bad)) {
            const char *eq = bad ? NULL : strrchr(v, '=');
            if (bad) break;
            if (!eq || eq == v || !eq[1]) rc = pl_cli_error("quantize: --tensor-type wants PATTERN=TYPE, not '%s'", v);
            else if (n_ov == MAX_OVERRIDES) rc = pl_cli_error("quantize: at most %d --tensor-type", MAX_OVERRIDES);
            else if (!(ov_text[n_ov] = strdup(v))) rc = pl_cli_error("out of memory");
            else {
                ov_text[n_ov][eq - v] = 0;
                ov[n_ov] = (pl_quant_override){ov_text[n_ov], ov_text[n_ov] + (eq - v) + 1};
                n_ov++;
            }
        } else if (pl_cli_opt(argc, argv, &i, "--threads", &v, &bad) || pl_cli_opt(argc, argv, &i, "-t", &v, &bad)) {
            if (!bad && !pl_cli_parse_int(v, 0, 1024, &threads)) rc = pl_cli_error("bad --threads '%s'", v);
        } else if (argv[i][0] == '-' && argv[i][1]) rc = pl_cli_error("quantize: unknown option '%s'", argv[i]);
        else if (npos < 3) pos[npos++] = argv[i];
        else rc = pl_cli_error("quantize: unexpected argument '%s'", argv[i]);
    }
    if (rc || bad) {
        rc = 1;
        goto out;
    }
    if (npos != 3) {
        rc = pl_cli_error("quantize: expected IN.gguf OUT.gguf TYPE (see --help)");
        goto out;
    }
    pl_quant_mix_info mi;
    if (pl_quant_mix_find(pos[2], &mi) != PL_OK) {
        rc = pl_cli_error("quantize: unknown type '%s' (see --help)", pos[2]);
        goto out;
    }
    if (mi.needs_imatrix && !imatrix) {
        rc = pl_cli_error("quantize: %s needs an importance matrix: pass --imatrix (make one with 'pocketllm imatrix')",
                          mi.name);
        goto out;
    }
    pl_quantize_stats s;
    pl_quantize_params p = pl_quantize_default_params();
    p.type = mi.name;
    p.imatrix_path = imatrix;
    p.overrides = ov;
    p.n_overrides = n_ov;
    p.n_threads = (int)threads;
    p.log = quiet ? NULL : log_stderr;
    p.stats = &s;
    if (pl_quantize_file(pos[0], pos[1], &p) != PL_OK) {
        /* a tensor that needs an importance matrix: say how to make one */
        const bool im_hint = !imatrix && strstr(pl_last_error(), "needs an importance matrix");
        rc = pl_cli_error("%s%s", pl_last_error(), im_hint ? ": pass --imatrix (see 'pocketllm imatrix')" : "");
        goto out;
    }
    fprintf(stderr, "wrote %s: %s, %d tensors (%d converted), %.2f MiB, %.2f bits per weight\n", pos[1], mi.name,
            (int)s.n_tensors, (int)s.n_quantized, s.file_size / 1048576.0, s.bytes_out * 8.0 / (double)s.n_elements);
out:
    for (int i = 0; i < n_ov; i++) free(ov_text[i]);
    return rc;
}

PL_CLI_COMMAND(pl_cmd_quantize, "quantize", "requantize a GGUF model (llama-quantize's types and mixes)", cmd_quantize)
