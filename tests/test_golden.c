/*
 * test_golden -- regenerate every golden case with kvc-rand, check the input
 * checksums, run a backend and require its bytes == *.canon.bin exactly;
 * check SPEC 4 / 7 conformance against *.ref.bin; check that every byte
 * outside the written slots kept its (poisoned) value.
 *
 * usage: test_golden GOLDEN_DIR [dirs=main,edge,dsv4,...] [backend=cpu|cuda|opencl]
 *                    [formats=int8|fp8|indexer_fp8|indexer_mxfp4|all] [overlap=0|1|all] [threads=N] [repeat=N]
 * repeat=N runs the selection N times (device backends: a race shows up as a
 * case that fails in some runs only).  numerics=fast asks for SPEC 8's FAST
 * mode: a call that reports FAST must conform to *.ref.bin (to *.canon.bin
 * where the case has no reference) instead of equalling *.canon.bin; one
 * that reports EXACT must still equal it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "test_util.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_DIR [dirs=..] [backend=..] [formats=..] [overlap=..] [repeat=N]\n", argv[0]);
        return 2;
    }
    const char *dirs = "main,engine,edge,dsv4", *formats = "all", *overlap = "all";
    int repeat = 1;
    kvc_numerics numerics = KVC_NUMERICS_EXACT;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    for (int i = 2; i < argc; i++) {
        if (!strncmp(argv[i], "dirs=", 5)) dirs = argv[i] + 5;
        else if (!strncmp(argv[i], "formats=", 8)) formats = argv[i] + 8;
        else if (!strncmp(argv[i], "overlap=", 8)) overlap = argv[i] + 8;
        else if (!strncmp(argv[i], "threads=", 8)) ex.num_threads = atoi(argv[i] + 8);
        else if (!strncmp(argv[i], "repeat=", 7)) repeat = atoi(argv[i] + 7);
        else if (!strcmp(argv[i], "numerics=fast")) numerics = KVC_NUMERICS_FAST;
        else if (!strncmp(argv[i], "backend=", 8)) {
            if (tu_parse_backend(argv[i] + 8, &ex.backend)) return 2;
        }
    }
    if (!kvc_backend_available(ex.backend)) {
        printf("SKIP: backend %d not available\n", (int)ex.backend);
        return TU_SKIP;
    }
    kvc_golden_case *cases = NULL;
    int n = kvc_kit_load_index(argv[1], &cases);
    if (n <= 0) return 1;
    int ran = 0, failed = 0;
    for (int pass = 0; pass < (repeat > 0 ? repeat : 1); pass++)
    for (int i = 0; i < n; i++) {
        kvc_golden_case *g = &cases[i];
        if (!strstr(dirs, g->dir)) continue;
        const int64_t SB = kvc_slot_bytes(g->params.nope_format); /* a golden row: 584, 132 or 68 bytes */
        if (strcmp(formats, "all") && strcmp(formats, kvc_kit_format_name(g->params.nope_format))) continue;
        if (strcmp(overlap, "all") && atoi(overlap) != (int)g->params.overlap) continue;
        ran++;
        char msg[512] = "";
        kvc_case c;
        if (kvc_case_generate(&g->params, 0, &c) != KVC_OK) {
            printf("FAIL %s: generate: %s\n", g->name, kvc_last_error_message());
            failed++;
            continue;
        }
        int bad = 0;
        if (c.args.num_outputs != g->outputs || (g->pages >= 0 && c.args.num_pages != g->pages)) {
            printf("FAIL %s: %lld outputs / %lld pages, manifest says %lld / %lld\n", g->name,
                   (long long)c.args.num_outputs, (long long)c.args.num_pages, (long long)g->outputs,
                   (long long)g->pages);
            bad = 1;
        }
        if (!bad && kvc_kit_check_inputs(g, &c, msg, sizeof msg)) {
            printf("FAIL %s: %s\n", g->name, msg);
            bad = 1;
        }
        uint8_t *ours = NULL, *canon = NULL, *ref = NULL, *before = NULL;
        kvc_report rep;
        memset(&rep, 0, sizeof rep);
        c.args.numerics = numerics;
        if (!bad) {
            kvc_kit_poison(c.kv_cache, c.kv_cache_bytes, g->params.seed);
            before = tu_dup(c.kv_cache, c.kv_cache_bytes);
            kvc_status st = tu_run(&c.args, &ex, &rep);
            if (st != KVC_OK) {
                printf("FAIL %s: %s: %s\n", g->name, kvc_status_string(st), kvc_last_error_message());
                bad = 1;
            } else if (rep.outputs_written != g->outputs || rep.outputs_nonfinite != g->num_nonfinite) {
                printf("FAIL %s: report written=%lld nonfinite=%lld, expected %lld / %d\n", g->name,
                       (long long)rep.outputs_written, (long long)rep.outputs_nonfinite, (long long)g->outputs,
                       g->num_nonfinite);
                bad = 1;
            }
        }
        if (!bad) {
            char path[4096];
            size_t len = 0;
            snprintf(path, sizeof path, "%s/%s/%s.canon.bin", argv[1], g->dir, g->name);
            canon = kvc_kit_read_file(path, &len);
            if (!canon || len != (size_t)g->outputs * SB) {
                printf("FAIL %s: cannot read %s (or wrong size)\n", g->name, path);
                bad = 1;
            }
            ours = malloc((size_t)g->outputs * SB);
            for (int64_t o = 0; !bad && o < g->outputs; o++) kvc_kit_slot_row(&c.args, o, ours + o * SB);
            const int fast = rep.numerics == KVC_NUMERICS_FAST;
            int64_t differ = 0;
            if (!bad && fast && !g->has_ref && kvc_kit_conforms(ours, canon, g->outputs, (int)g->params.nope_format, &differ, msg, sizeof msg)) {
                printf("FAIL %s: fast numerics: conformance to canon: %s\n", g->name, msg);
                bad = 1;
            }
            for (int64_t o = 0; !bad && !fast && o < g->outputs; o++)
                for (int k = 0; k < SB; k++)
                    if (ours[o * SB + k] != canon[o * SB + k]) {
                        printf("FAIL %s: output %lld byte %d is 0x%02x, canon 0x%02x\n", g->name, (long long)o, k,
                               ours[o * SB + k], canon[o * SB + k]);
                        bad = 1;
                        break;
                    }
            if (!bad && tu_check_untouched(&c.args, before, c.kv_cache, msg, sizeof msg)) {
                printf("FAIL %s: %s\n", g->name, msg);
                bad = 1;
            }
            if (!bad && g->has_ref) {
                snprintf(path, sizeof path, "%s/%s/%s.ref.bin", argv[1], g->dir, g->name);
                ref = kvc_kit_read_file(path, &len);
                if (!ref || len != (size_t)g->outputs * SB) {
                    printf("FAIL %s: cannot read %s\n", g->name, path);
                    bad = 1;
                } else if (kvc_kit_conforms(ours, ref, g->outputs, (int)g->params.nope_format, &differ, msg, sizeof msg)) {
                    printf("FAIL %s: conformance: %s\n", g->name, msg);
                    bad = 1;
                } else {
                    printf("ok   %-58s %s; %lld NOPE values differ from the reference\n", g->name,
                           fast ? "fast, conforms" : "exact", (long long)differ);
                }
            } else if (!bad) {
                printf("ok   %-58s %s (no reference)\n", g->name, fast ? "fast, conforms to canon" : "exact");
            }
        }
        failed += bad;
        free(ours);
        free(canon);
        free(ref);
        free(before);
        kvc_case_free(&c);
        fflush(stdout);
    }
    free(cases);
    printf("%d cases, %d failed\n", ran, failed);
    if (ran == 0) {
        printf("FAIL: no case selected\n");
        return 1;
    }
    return failed ? 1 : 0;
}
