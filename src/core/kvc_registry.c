/* kvc_registry.c -- see kvc_registry.h. */
#include <stddef.h>

#include "kvc_registry.h"

kvc_reg_entry *kvc_reg_acquire(kvc_registry *r, const void *k0, const void *k1, const void *k2) {
    for (kvc_reg_entry *e = r->head; e; e = e->next)
        if (e->key[0] == k0 && e->key[1] == k1 && e->key[2] == k2) {
            e->users++;
            e->last_use = ++r->clock;
            return e;
        }
    return NULL;
}

void kvc_reg_add(kvc_registry *r, kvc_reg_entry *e) {
    e->users = 1;
    e->last_use = ++r->clock;
    e->next = r->head;
    r->head = e;
    r->count++;
}

void kvc_reg_release(kvc_registry *r, kvc_reg_entry *e) {
    (void)r;
    e->users--;
}

int kvc_reg_sweep(kvc_registry *r, int keep, int (*idle)(kvc_reg_entry *e), void (*drop)(kvc_reg_entry *e)) {
    int gone = 0;
    while (r->count >= keep) {
        kvc_reg_entry **lru = NULL;
        for (kvc_reg_entry **pe = &r->head; *pe; pe = &(*pe)->next) {
            kvc_reg_entry *e = *pe;
            if (e->users || (lru && (*lru)->last_use <= e->last_use) || (idle && !idle(e))) continue;
            lru = pe;
        }
        if (!lru) break;
        kvc_reg_entry *e = *lru;
        *lru = e->next;
        r->count--;
        drop(e);
        gone++;
    }
    return gone;
}

int kvc_reg_drop_if(kvc_registry *r, int (*match)(kvc_reg_entry *e, const void *arg), const void *arg,
                    void (*drop)(kvc_reg_entry *e)) {
    int gone = 0;
    for (kvc_reg_entry **pe = &r->head; *pe;) {
        kvc_reg_entry *e = *pe;
        if (e->users == 0 && match(e, arg)) {
            *pe = e->next;
            r->count--;
            drop(e);
            gone++;
        } else {
            pe = &e->next;
        }
    }
    return gone;
}
