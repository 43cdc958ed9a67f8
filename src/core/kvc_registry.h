/*
 * kvc_registry.h -- the GPU backends' per-stream (CUDA) and per-queue
 * (OpenCL) state: a list that grows with the streams or queues a process
 * calls on and, past a number kept, frees the least recently used entries
 * that are idle, so that no table fills up for good.  A backend embeds a
 * kvc_reg_entry as the first member of its own entry and says, through
 * callbacks, when an entry may go and how it is freed.  Every function
 * here expects the caller to hold the backend's lock.  Not installed.
 */
#ifndef KVC_REGISTRY_H
#define KVC_REGISTRY_H

#include "kvc_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvc_reg_entry {
    struct kvc_reg_entry *next;
    const void *key[3];          /* the backend's key, compared as pointers  */
    int users;                   /* calls in flight on the entry             */
    unsigned long long last_use; /* the registry's clock at the last call    */
} kvc_reg_entry;

typedef struct kvc_registry {
    kvc_reg_entry *head;
    int count;
    unsigned long long clock;
} kvc_registry;

/* The entry of key (k0, k1, k2) with one more call in flight on it, or NULL. */
KVC_HIDDEN kvc_reg_entry *kvc_reg_acquire(kvc_registry *r, const void *k0, const void *k1, const void *k2);
/* Add e (its key set) with one call in flight on it. */
KVC_HIDDEN void kvc_reg_add(kvc_registry *r, kvc_reg_entry *e);
/* One call fewer in flight on e. */
KVC_HIDDEN void kvc_reg_release(kvc_registry *r, kvc_reg_entry *e);
/* While r holds `keep` entries or more, unlink the least recently used one
 * without a call in flight for which idle(e) is 1 (idle NULL: every such
 * one) and hand it to drop(e).  @return how many went. */
KVC_HIDDEN int kvc_reg_sweep(kvc_registry *r, int keep, int (*idle)(kvc_reg_entry *e),
                             void (*drop)(kvc_reg_entry *e));
/* Unlink every entry without a call in flight for which match(e, arg) is 1
 * and hand it to drop(e).  @return how many went. */
KVC_HIDDEN int kvc_reg_drop_if(kvc_registry *r, int (*match)(kvc_reg_entry *e, const void *arg), const void *arg,
                               void (*drop)(kvc_reg_entry *e));

#ifdef __cplusplus
}
#endif
#endif /* KVC_REGISTRY_H */
