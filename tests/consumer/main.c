/* Calls the installed library: version, a refused argument, a tiny run. */
#include <stdio.h>
#include <string.h>

#include <kvcompress.h>
#include <kvcompress_rand.h>

int main(void) {
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = 1, p.total_tokens = 256, p.compress_ratio = 128, p.block_size = 8, p.seed = 1;
    kvc_case c;
    if (kvc_case_generate(&p, 1, &c) != KVC_OK) return 1;
    kvc_report rep;
    kvc_status st = kvc_compress(&c.args, NULL, &rep);
    printf("kvcompress %s: %s, %lld outputs\n", kvc_version_string(), kvc_status_string(st),
           (long long)rep.outputs_written);
    c.args.compress_ratio = 0;
    int refused = kvc_compress(&c.args, NULL, NULL) == KVC_ERROR_BAD_PARAMETER;
    kvc_case_free(&c);
    return st == KVC_OK && rep.outputs_written == 2 && refused ? 0 : 1;
}
