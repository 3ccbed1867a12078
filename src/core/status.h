/* Internal error reporting: pl_errorf() records a thread-local message for
 * pl_last_error() and returns the status, so callers write
 *     return pl_errorf(PL_ERR_FORMAT, "%s: tensor '%s' extends past end of file", path, name);
 */
#ifndef PL_CORE_STATUS_H
#define PL_CORE_STATUS_H
#include "pocketllm.h"

#if defined(__GNUC__)
#define PL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PL_PRINTF(a, b)
#endif

pl_status pl_errorf(pl_status st, const char *fmt, ...) PL_PRINTF(2, 3);
/* Prefixes the current message: "<prefix>: <old message>". Returns st. */
pl_status pl_error_prefix(pl_status st, const char *prefix);
void pl_error_clear(void);

#define PL_TRY(expr) do { pl_status pl_try_st_ = (expr); if (pl_try_st_ != PL_OK) return pl_try_st_; } while (0)

#endif
