/* status.c -- status names, per-thread error messages, version. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvc_check.h"
#include "kvc_internal.h"

static _Thread_local char kvc_message[1024];

unsigned kvc_version_number(void) { return KVC_VERSION_NUMBER; }
const char *kvc_version_string(void) { return KVC_VERSION_STRING; }

const char *kvc_status_string(kvc_status status) {
    static const char *const names[KVC_ERROR_MAX_CODE] = {
        "KVC_OK",
        "KVC_ERROR_GENERIC",
        "KVC_ERROR_NULL_POINTER",
        "KVC_ERROR_BAD_SHAPE",
        "KVC_ERROR_BAD_PARAMETER",
        "KVC_ERROR_INDEX_OUT_OF_RANGE",
        "KVC_ERROR_DUPLICATE_SLOT",
        "KVC_ERROR_BACKEND_UNAVAILABLE",
        "KVC_ERROR_OUT_OF_MEMORY",
        "KVC_ERROR_DEVICE",
        "KVC_ERROR_ALIASING",
    };
    if ((int)status < 0 || (int)status >= KVC_ERROR_MAX_CODE) return "unknown kvc_status";
    return names[status];
}

const char *kvc_check_string(int check) {
    static const char *const names[KVC_CHECK_COUNT] = {
        "none",
        "boundary token index out of range",
        "request index out of range",
        "window starts before position 0",
        "logical block past blocks_per_req",
        "physical block out of range",
        "cos/sin row past max_pos",
        "slot past the last page",
        "two outputs share a slot",
    };
    if (check < 0 || check >= KVC_CHECK_COUNT) return "unknown check";
    return names[check];
}

const char *kvc_last_error_message(void) { return kvc_message; }

void kvc_clear_error(void) { kvc_message[0] = '\0'; }

kvc_status kvc_fail(kvc_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kvc_message, sizeof kvc_message, fmt, ap);
    va_end(ap);
    return status;
}

kvc_status kvc_prefix_error(kvc_status status, const char *fmt, ...) {
    char prefix[64];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    const size_t plen = n < 0 ? 0 : (size_t)n < sizeof prefix ? (size_t)n : sizeof prefix - 1;
    size_t keep = strlen(kvc_message); /* the message, cut to fit */
    if (keep > sizeof kvc_message - 1 - plen) keep = sizeof kvc_message - 1 - plen;
    memmove(kvc_message + plen, kvc_message, keep);
    memcpy(kvc_message, prefix, plen);
    kvc_message[plen + keep] = '\0';
    return status;
}
