/*
 * cpu_example.c -- kvcompress on the CPU, start to finish: a kvc-rand case
 * (kvcompress_rand.h builds every tensor), one call, the report, the bytes
 * of the first slot, and a second call with another thread count that must
 * give the same bytes.
 *
 *   cc cpu_example.c $(pkg-config --cflags --libs kvcompress) -o cpu_example && ./cpu_example
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvcompress.h>
#include <kvcompress_rand.h>

int main(void) {
    /* 2 requests x 4096 tokens, windows of C = 128, 8 tokens per state block,
     * a shuffled block table: 64 outputs in slots 0..63 */
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = 2;
    p.total_tokens = 8192;
    p.compress_ratio = 128;
    p.block_size = 8;
    p.shuffle = 1;
    p.seed = 7;
    kvc_case c;
    if (kvc_case_generate(&p, 0, &c) != KVC_OK) {
        fprintf(stderr, "kvc_case_generate: %s\n", kvc_last_error_message());
        return 1;
    }

    kvc_exec e;
    kvc_exec_init(&e); /* AUTO: host pointers run on the CPU backend */
    kvc_report rep;
    kvc_status st = kvc_compress(&c.args, &e, &rep);
    if (st != KVC_OK) {
        fprintf(stderr, "%s: %s\n", kvc_status_string(st), kvc_last_error_message());
        return 1;
    }
    printf("%lld outputs written, %lld padding, %lld non-finite\n", (long long)rep.outputs_written,
           (long long)rep.outputs_padding, (long long)rep.outputs_nonfinite);
    /* slot 0 is page 0's first slot: 576 payload bytes, its 8 scale bytes after the page's payloads */
    const uint8_t *slot0 = c.kv_cache, *scales0 = c.kv_cache + c.args.kv_block_size * KVC_PAYLOAD_BYTES;
    printf("slot 0: payload %02x %02x %02x %02x ..., scale bytes", slot0[0], slot0[1], slot0[2], slot0[3]);
    for (int i = 0; i < KVC_SCALE_BYTES; i++) printf(" %02x", scales0[i]);
    printf("\n");

    /* the same call on one thread: the same bytes */
    uint8_t *first = malloc(c.kv_cache_bytes);
    memcpy(first, c.kv_cache, c.kv_cache_bytes);
    memset(c.kv_cache, 0, c.kv_cache_bytes);
    e.backend = KVC_BACKEND_CPU;
    e.num_threads = 1;
    st = kvc_compress(&c.args, &e, NULL);
    const int same = st == KVC_OK && memcmp(first, c.kv_cache, c.kv_cache_bytes) == 0;
    printf("one thread: %s\n", same ? "the same bytes" : "DIFFERENT BYTES");
    free(first);
    kvc_case_free(&c);
    return same ? 0 : 1;
}
