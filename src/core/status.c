#include "core/status.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char pl_err_msg[1024];

pl_status pl_errorf(pl_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pl_err_msg, sizeof pl_err_msg, fmt, ap);
    va_end(ap);
    return st;
}

pl_status pl_error_prefix(pl_status st, const char *prefix) {
    size_t plen = strlen(prefix) + 2, cap = sizeof pl_err_msg;
    if (plen >= cap) return st;
    size_t mlen = strnlen(pl_err_msg, cap - 1);
    if (mlen + plen >= cap) mlen = cap - 1 - plen;
    memmove(pl_err_msg + plen, pl_err_msg, mlen);
    pl_err_msg[plen + mlen] = 0;
    memcpy(pl_err_msg, prefix, plen - 2);
    pl_err_msg[plen - 2] = ':';
    pl_err_msg[plen - 1] = ' ';
    return st;
}

void pl_error_clear(void) { pl_err_msg[0] = 0; }

PL_API const char *pl_last_error(void) { return pl_err_msg; }

PL_API const char *pl_status_str(pl_status st) {
    switch (st) {
    case PL_OK: return "ok";
    case PL_ERR_INVALID_ARG: return "invalid argument";
    case PL_ERR_IO: return "i/o error";
    case PL_ERR_FORMAT: return "bad file format";
    case PL_ERR_UNSUPPORTED: return "unsupported";
    case PL_ERR_NO_MEMORY: return "out of memory";
    case PL_ERR_NOT_FOUND: return "not found";
    case PL_ERR_CONTEXT_FULL: return "context full";
    case PL_ERR_DOES_NOT_FIT: return "does not fit on the device";
    case PL_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

PL_API const char *pl_version(void) { return "0.1.0"; }
