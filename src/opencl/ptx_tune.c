/* ptx_tune.c -- see ptx_tune.h. */
#include "ptx_tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry's text [*begin, *end): from ".entry name(" to the next ".entry"
 * or the end.  @return 0 if the entry is missing. */
static int entry_span(const char *ptx, const char *entry, const char **begin, const char **end) {
    char tag[128];
    if (snprintf(tag, sizeof tag, ".entry %s(", entry) >= (int)sizeof tag) return 0;
    const char *at = strstr(ptx, tag);
    if (!at) return 0;
    const char *next = strstr(at + 1, ".entry ");
    *begin = at;
    *end = next ? next : ptx + strlen(ptx);
    return 1;
}

char *kvc_ptx_minb(char *ptx, const char *entry, int n, int *done) {
    const char *at, *end;
    if (n <= 0 || !entry_span(ptx, entry, &at, &end)) return ptx;
    /* the parameter list closes at the first ')' after the tag, the body
     * opens at the next '{'; performance directives go between */
    const char *close = strchr(at, ')');
    const char *body = close ? strchr(close, '{') : NULL;
    if (!body || body >= end) return ptx;
    char extra[40];
    const size_t len = (size_t)snprintf(extra, sizeof extra, ".minnctapersm %d\n", n);
    const size_t head = (size_t)(body - ptx), total = strlen(ptx);
    char *out = malloc(total + len + 1);
    if (!out) return ptx;
    memcpy(out, ptx, head);
    memcpy(out + head, extra, len);
    memcpy(out + head + len, ptx + head, total - head + 1);
    free(ptx);
    *done = 1;
    return out;
}

char *kvc_ptx_streaming(char *ptx, const char *entry, int forms, int *done) {
    const char *at, *end;
    if (!entry_span(ptx, entry, &at, &end)) return ptx;
    enum { NF = 5 }; /* form k: mask bit 1 << k */
    static const char *from[NF] = {"ld.global.f32", "ld.global.v2.f32", "ld.global.v4.f32", "ld.global.v2.u32",
                                   "ld.global.u32"};
    static const char *to[NF] = {"ld.global.cs.f32", "ld.global.cs.v2.f32", "ld.global.cs.v4.f32",
                                 "ld.global.cs.v2.u32", "ld.global.cs.u32"};
    size_t n = 0;
    for (const char *p = at; p < end; p++)
        for (int k = 0; k < NF; k++)
            if ((forms >> k & 1) && !strncmp(p, from[k], strlen(from[k]))) n++;
    if (n == 0) return ptx;
    const size_t grow = strlen(".cs"); /* what each edit adds */
    char *out = malloc(strlen(ptx) + grow * n + 1);
    if (!out) return ptx;
    char *w = out;
    for (const char *p = ptx; *p;) {
        int hit = -1;
        for (int k = 0; k < NF && p >= at && p < end; k++)
            if ((forms >> k & 1) && !strncmp(p, from[k], strlen(from[k]))) hit = k;
        if (hit < 0) {
            *w++ = *p++;
            continue;
        }
        memcpy(w, to[hit], strlen(to[hit]));
        w += strlen(to[hit]);
        p += strlen(from[hit]);
    }
    *w = 0;
    free(ptx);
    *done = 1;
    return out;
}
