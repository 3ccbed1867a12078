/* pocketllm chat-template: renders a chat template with a JSON input, the
 * way Hugging Face's apply_chat_template does, and prints the text exactly
 * (no newline added). */
#include "cli.h"
#include "cli_buf.h"
#include "pocketllm.h"
#include <jansson.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The template stored in a GGUF file under tokenizer.chat_template (read
 * with the file inspector: no model, no tokenizer needed). */
static char *template_from_model(const char *path, size_t *len) {
    pl_inspect *f = NULL;
    if (pl_inspect_open(path, &f) != PL_OK) {
        pl_cli_error("%s", pl_last_error());
        return NULL;
    }
    const char *p;
    size_t n;
    char *text = NULL;
    if (pl_inspect_meta_str(f, "tokenizer.chat_template", -1, &p, &n) != PL_OK) {
        pl_cli_error("%s: no chat template (tokenizer.chat_template)", path);
    } else if (!(text = malloc(n + 1))) {
        pl_cli_error("out of memory");
    } else {
        memcpy(text, p, n);
        text[n] = 0;
        *len = n;
    }
    pl_inspect_close(f);
    return text;
}

/* "YYYY-MM-DD HH:MM:SS", UTC, as seconds since the epoch (for reproducible
 * strftime_now output) */
static bool parse_now(const char *s, int64_t *secs) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int n = 0;
    if (sscanf(s, "%d-%d-%d %d:%d:%d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
               &tm.tm_sec, &n) != 6 || s[n])
        return false;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_isdst = -1;
    time_t t = timegm(&tm);   /* normalises out-of-range fields */
    if (t == (time_t)-1) return false;
    *secs = (int64_t)t;
    return true;
}

static int cmd_chat_template(int argc, char **argv) {
    const char *tmpl_path = NULL, *model_path = NULL, *input_path = NULL, *now_str = NULL;
    bool bad = false;
    for (int i = 1; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--help")) {
            puts("usage: pocketllm chat-template (--template FILE.jinja | --model M.gguf) --input INPUT.json\n"
                 "                               [--now 'YYYY-MM-DD HH:MM:SS']\n"
                 "Renders a chat template like transformers' apply_chat_template. Every top-level key\n"
                 "of INPUT.json (messages, tools, add_generation_prompt, bos_token, eos_token,\n"
                 "enable_thinking, ...) is a template variable. The text is printed as is.");
            return 0;
        } else if (pl_cli_opt(argc, argv, &i, "--template", &tmpl_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--model", &model_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--input", &input_path, &bad)) {}
        else if (pl_cli_opt(argc, argv, &i, "--now", &now_str, &bad)) {}
        else return pl_cli_error("chat-template: unknown option '%s'", argv[i]);
    }
    if (bad) return 1;
    if (!tmpl_path == !model_path) return pl_cli_error("chat-template: give one of --template or --model");
    if (!input_path) return pl_cli_error("chat-template: --input is required");
    int64_t now;
    if (now_str && !parse_now(now_str, &now))
        return pl_cli_error("chat-template: --now wants 'YYYY-MM-DD HH:MM:SS'");

    size_t len = 0;
    char *text;
    if (tmpl_path) {
        text = pl_cli_read_file(tmpl_path, &len);
        if (!text) return pl_cli_error("%s: cannot read the template: %s", tmpl_path, strerror(errno));
    } else {
        text = template_from_model(model_path, &len);
        if (!text) return 1;
    }
    json_error_t jerr;
    json_t *input = json_load_file(input_path, JSON_ALLOW_NUL, &jerr);
    if (!input) {
        free(text);
        return pl_cli_error("%s:%d:%d: %s", input_path, jerr.line, jerr.column, jerr.text);
    }
    if (!json_is_object(input)) {
        free(text);
        json_decref(input);
        return pl_cli_error("%s: the input must be a JSON object", input_path);
    }
    /* The input was read here for its file:line:col errors; the library
     * takes it back as text (every key a template variable, order kept). */
    char *context = json_dumps(input, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(input);
    if (!context) {
        free(text);
        return pl_cli_error("out of memory");
    }
    pl_chat_template *t = NULL;
    int rc = 0;
    if (pl_chat_template_parse(text, len, &t) != PL_OK) {
        rc = pl_cli_error("%s", pl_last_error());
    } else {
        pl_chat_template_params p = pl_chat_template_default_params();
        p.context = context;
        p.now = now_str ? &now : NULL;
        char *out = NULL;
        size_t n = 0;
        if (pl_chat_template_apply(t, &p, &out, &n) != PL_OK) {
            rc = pl_cli_error("%s", pl_last_error());
        } else {
            if (fwrite(out, 1, n, stdout) != n || fflush(stdout) != 0) rc = pl_cli_error("write error");
            pl_free(out);
        }
        pl_chat_template_free(t);
    }
    free(context);
    free(text);
    return rc;
}

PL_CLI_COMMAND(chat_template_cmd, "chat-template", "render a chat template with a JSON input", cmd_chat_template)
