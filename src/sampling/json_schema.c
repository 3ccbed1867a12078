#include "sampling/grammar.h"
#include "core/status.h"
pl_status pl_json_schema_compile(const char *schema, size_t len, char **gbnf, size_t *gbnf_len) {
    *gbnf = NULL; *gbnf_len = 0;
    return pl_errorf(PL_ERR_UNSUPPORTED, "json schema: not implemented yet");
}
