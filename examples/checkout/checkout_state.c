/* The state requests share: faults, stored responses (with the ids they
 * issued and whether their effect was undone), the request log and the
 * counters.  One mutex guards all of it; nothing blocks while holding
 * it (delays sleep on a condition variable, outside the critical
 * sections).  Every structure has a fixed cap, so memory stays bounded
 * however long the service runs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkout.h"

#define STORE_BUCKETS (1u << 17)

/* A stored final response of (path, key), for replay.  A success is also
 * the record of the id it issued: found by that id through the id chain,
 * undone_by is the id of the answer that undid it ("" while it stands).
 * An id is forgotten with its response. */
typedef struct stored_s {
    struct stored_s *next;    /* bucket chain by (path, key) */
    struct stored_s *id_next; /* bucket chain by ids.issued */
    int path_idx;
    int status;
    char *key;
    char *body;
    size_t bytes;
    checkout_ids_t ids;
    char undone_by[CHECKOUT_ID_MAX];
} stored_t;

/* A (path, key) whose slow success is being waited for. */
typedef struct progress_s {
    struct progress_s *next;
    int path_idx;
    char *key;
} progress_t;

typedef struct logent_s {
    uint64_t seq; /* 0: empty slot */
    int64_t time_ms;
    char method[16];
    char *path;
    char *key;
    sg_json_t *headers;
    sg_json_t *body;
    int status; /* 0 while not answered */
    bool replayed;
    checkout_ids_t ids;
} logent_t;

struct checkout_state_s {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* signalled on stop */
    pthread_cond_t idle; /* signalled when inflight drops to 0 */
    bool stopping;
    int64_t inflight;

    bool has_fault[CHECKOUT_NPATHS];
    checkout_fault_t faults[CHECKOUT_NPATHS];

    logent_t *log; /* ring of CHECKOUT_LOG_CAP, slot (seq - 1) % cap */
    uint64_t last_seq;

    uint64_t requests[CHECKOUT_NPATHS];
    uint64_t effects[CHECKOUT_NPATHS];
    uint64_t keys[CHECKOUT_NPATHS];
    uint64_t last_id;

    bool checks; /* the id checks of the endpoints that refer to an effect */
    progress_t *progress;

    stored_t **buckets;
    stored_t **id_buckets;
    stored_t **fifo; /* ring of CHECKOUT_STORE_CAP, oldest at fifo_head */
    size_t fifo_head, fifo_count, store_bytes;
};

checkout_state_t *checkout_state_new(void)
{
    checkout_state_t *st = calloc(1, sizeof(*st));
    pthread_condattr_t ca;

    if (!st)
        return NULL;
    st->log = calloc(CHECKOUT_LOG_CAP, sizeof(*st->log));
    st->buckets = calloc(STORE_BUCKETS, sizeof(*st->buckets));
    st->id_buckets = calloc(STORE_BUCKETS, sizeof(*st->id_buckets));
    st->fifo = calloc(CHECKOUT_STORE_CAP, sizeof(*st->fifo));
    if (!st->log || !st->buckets || !st->id_buckets || !st->fifo) {
        free(st->log);
        free(st->buckets);
        free(st->id_buckets);
        free(st->fifo);
        free(st);
        return NULL;
    }
    st->checks = true;
    pthread_mutex_init(&st->mu, NULL);
    /* Sleeps measure a monotonic clock: a wall-clock step must not cut
     * or stretch an injected delay. */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->wake, &ca);
    pthread_cond_init(&st->idle, &ca);
    pthread_condattr_destroy(&ca);
    return st;
}

static void log_clear_slot(logent_t *e)
{
    free(e->path);
    free(e->key);
    sg_json_destroy(e->headers);
    sg_json_destroy(e->body);
    memset(e, 0, sizeof(*e));
}

static void store_clear(checkout_state_t *st)
{
    for (size_t i = 0; i < st->fifo_count; i++) {
        stored_t *s = st->fifo[(st->fifo_head + i) % CHECKOUT_STORE_CAP];

        free(s->key);
        free(s->body);
        free(s);
    }
    memset(st->buckets, 0, STORE_BUCKETS * sizeof(*st->buckets));
    memset(st->id_buckets, 0, STORE_BUCKETS * sizeof(*st->id_buckets));
    st->fifo_head = st->fifo_count = st->store_bytes = 0;
    memset(st->keys, 0, sizeof(st->keys));
}

void checkout_state_destroy(checkout_state_t *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < CHECKOUT_LOG_CAP; i++)
        log_clear_slot(&st->log[i]);
    store_clear(st);
    while (st->progress) {
        progress_t *p = st->progress;

        st->progress = p->next;
        free(p->key);
        free(p);
    }
    free(st->log);
    free(st->buckets);
    free(st->id_buckets);
    free(st->fifo);
    pthread_cond_destroy(&st->wake);
    pthread_cond_destroy(&st->idle);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

void checkout_state_set_checks(checkout_state_t *st, bool on)
{
    pthread_mutex_lock(&st->mu);
    st->checks = on;
    pthread_mutex_unlock(&st->mu);
}

/* --- faults --------------------------------------------------------------- */

void checkout_state_set_fault(checkout_state_t *st, int path_idx, const checkout_fault_t *fault)
{
    pthread_mutex_lock(&st->mu);
    st->faults[path_idx] = *fault;
    st->has_fault[path_idx] = true;
    pthread_mutex_unlock(&st->mu);
}

void checkout_state_clear_faults(checkout_state_t *st)
{
    pthread_mutex_lock(&st->mu);
    memset(st->has_fault, 0, sizeof(st->has_fault));
    pthread_mutex_unlock(&st->mu);
}

sg_json_t *checkout_state_faults_json(checkout_state_t *st)
{
    sg_json_t *root = sg_json_new_object(), *arr = sg_json_new_array();

    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < CHECKOUT_NPATHS; i++)
        if (st->has_fault[i])
            sg_json_append(arr, checkout_fault_to_json(i, &st->faults[i]));
    pthread_mutex_unlock(&st->mu);
    sg_json_add_node(root, "faults", arr);
    return root;
}

/* --- request log ---------------------------------------------------------- */

static int64_t wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *dup_or_null(const char *s)
{
    char *d;

    if (!s)
        return NULL;
    d = strdup(s);
    if (!d)
        abort(); /* as sg_json does on OOM */
    return d;
}

uint64_t checkout_state_log_begin(checkout_state_t *st, checkout_logreq_t *req)
{
    int idx = checkout_path_index(req->path);
    uint64_t seq;
    logent_t *e;

    pthread_mutex_lock(&st->mu);
    seq = ++st->last_seq;
    e = &st->log[(seq - 1) % CHECKOUT_LOG_CAP];
    log_clear_slot(e);
    e->seq = seq;
    e->time_ms = wall_ms();
    snprintf(e->method, sizeof(e->method), "%s", req->method);
    e->path = req->path;
    e->key = req->key;
    e->headers = req->headers;
    e->body = req->body;
    req->path = req->key = NULL;
    req->headers = req->body = NULL;
    if (idx >= 0)
        st->requests[idx]++;
    pthread_mutex_unlock(&st->mu);
    return seq;
}

void checkout_state_log_status(checkout_state_t *st, uint64_t seq, int status, bool replayed,
                               const checkout_ids_t *ids)
{
    logent_t *e;

    pthread_mutex_lock(&st->mu);
    e = &st->log[(seq - 1) % CHECKOUT_LOG_CAP];
    if (e->seq == seq) { /* else evicted or reset meanwhile */
        e->status = status;
        e->replayed = replayed;
        if (ids)
            e->ids = *ids;
    }
    pthread_mutex_unlock(&st->mu);
}

static void add_str_or_null(sg_json_t *o, const char *key, const char *val)
{
    if (val[0])
        sg_json_add_str(o, key, val);
    else
        sg_json_add_null(o, key);
}

static sg_json_t *log_entry_json(const logent_t *e)
{
    sg_json_t *o = sg_json_new_object();

    sg_json_add_int(o, "seq", (int64_t)e->seq);
    sg_json_add_int(o, "time_ms", e->time_ms);
    sg_json_add_str(o, "method", e->method);
    sg_json_add_str(o, "path", e->path);
    if (e->key)
        sg_json_add_str(o, "idempotency_key", e->key);
    else
        sg_json_add_null(o, "idempotency_key");
    sg_json_add_node(o, "headers", e->headers ? sg_json_dup(e->headers) : sg_json_new_object());
    if (e->body)
        sg_json_add_node(o, "body", sg_json_dup(e->body));
    else
        sg_json_add_null(o, "body");
    if (e->status)
        sg_json_add_int(o, "status", e->status);
    else
        sg_json_add_null(o, "status");
    sg_json_add_bool(o, "replayed", e->replayed);
    add_str_or_null(o, "issued_id", e->ids.issued);
    add_str_or_null(o, "ref_id", e->ids.ref);
    add_str_or_null(o, "ref_from", e->ids.ref_from);
    return o;
}

sg_json_t *checkout_state_requests_json(checkout_state_t *st, const char *path_filter)
{
    sg_json_t *root = sg_json_new_object(), *arr = sg_json_new_array();
    uint64_t first;

    pthread_mutex_lock(&st->mu);
    first = st->last_seq > CHECKOUT_LOG_CAP ? st->last_seq - CHECKOUT_LOG_CAP + 1 : 1;
    for (uint64_t seq = first; seq <= st->last_seq; seq++) {
        const logent_t *e = &st->log[(seq - 1) % CHECKOUT_LOG_CAP];

        if (e->seq == seq && (!path_filter || strcmp(e->path, path_filter) == 0))
            sg_json_append(arr, log_entry_json(e));
    }
    pthread_mutex_unlock(&st->mu);
    sg_json_add_node(root, "requests", arr);
    return root;
}

static sg_json_t *per_path_json(const uint64_t *counts)
{
    sg_json_t *o = sg_json_new_object();

    for (int i = 0; i < CHECKOUT_NPATHS; i++)
        sg_json_add_int(o, checkout_endpoints[i].path, (int64_t)counts[i]);
    return o;
}

sg_json_t *checkout_state_stats_json(checkout_state_t *st)
{
    sg_json_t *root = sg_json_new_object();

    pthread_mutex_lock(&st->mu);
    sg_json_add_node(root, "requests", per_path_json(st->requests));
    sg_json_add_node(root, "effects", per_path_json(st->effects));
    sg_json_add_node(root, "keys", per_path_json(st->keys));
    pthread_mutex_unlock(&st->mu);
    return root;
}

void checkout_state_reset(checkout_state_t *st)
{
    pthread_mutex_lock(&st->mu);
    /* Sequence numbers and ids keep counting: a request in flight across
     * the reset must not land on a newer request's log slot. */
    for (size_t i = 0; i < CHECKOUT_LOG_CAP; i++)
        log_clear_slot(&st->log[i]);
    store_clear(st);
    memset(st->requests, 0, sizeof(st->requests));
    memset(st->effects, 0, sizeof(st->effects));
    memset(st->has_fault, 0, sizeof(st->has_fault));
    pthread_mutex_unlock(&st->mu);
}

/* --- stored responses ----------------------------------------------------- */

static size_t store_hash(int path_idx, const char *key)
{
    uint32_t h = 2166136261u ^ (uint32_t)path_idx; /* FNV-1a */

    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h & (STORE_BUCKETS - 1);
}

static stored_t *store_find(checkout_state_t *st, int path_idx, const char *key)
{
    for (stored_t *s = st->buckets[store_hash(path_idx, key)]; s; s = s->next)
        if (s->path_idx == path_idx && strcmp(s->key, key) == 0)
            return s;
    return NULL;
}

/* The success of path_idx that issued id, or NULL. */
static stored_t *id_find(checkout_state_t *st, int path_idx, const char *id)
{
    for (stored_t *s = st->id_buckets[store_hash(0, id)]; s; s = s->id_next)
        if (s->path_idx == path_idx && strcmp(s->ids.issued, id) == 0)
            return s;
    return NULL;
}

/* Forgets the oldest stored response, as a real API expires old keys. */
static void store_evict_oldest(checkout_state_t *st)
{
    stored_t *old = st->fifo[st->fifo_head], **pp;

    for (pp = &st->buckets[store_hash(old->path_idx, old->key)]; *pp != old; pp = &(*pp)->next)
        ;
    *pp = old->next;
    if (old->ids.issued[0]) {
        for (pp = &st->id_buckets[store_hash(0, old->ids.issued)]; *pp != old; pp = &(*pp)->id_next)
            ;
        *pp = old->id_next;
    }
    st->fifo_head = (st->fifo_head + 1) % CHECKOUT_STORE_CAP;
    st->fifo_count--;
    st->store_bytes -= old->bytes;
    st->keys[old->path_idx]--;
    free(old->key);
    free(old->body);
    free(old);
}

static void store_add(checkout_state_t *st, int path_idx, const char *key, int status,
                      const char *body, const checkout_ids_t *ids)
{
    stored_t *s = calloc(1, sizeof(*s));
    size_t h = store_hash(path_idx, key);

    if (!s)
        abort();
    s->path_idx = path_idx;
    s->status = status;
    s->key = dup_or_null(key);
    s->body = dup_or_null(body);
    s->ids = *ids;
    s->bytes = sizeof(*s) + strlen(key) + strlen(body) + 2;
    while (st->fifo_count > 0 && (st->fifo_count == CHECKOUT_STORE_CAP ||
                                  st->store_bytes + s->bytes > CHECKOUT_STORE_BYTES))
        store_evict_oldest(st);
    s->next = st->buckets[h];
    st->buckets[h] = s;
    if (s->ids.issued[0]) {
        h = store_hash(0, s->ids.issued);
        s->id_next = st->id_buckets[h];
        st->id_buckets[h] = s;
    }
    st->fifo[(st->fifo_head + st->fifo_count) % CHECKOUT_STORE_CAP] = s;
    st->fifo_count++;
    st->store_bytes += s->bytes;
    st->keys[path_idx]++;
}

static void reply_from_store(checkout_reply_t *reply, const stored_t *s)
{
    memset(reply, 0, sizeof(*reply));
    reply->status = s->status;
    reply->body = dup_or_null(s->body);
    reply->replayed = true;
    reply->ids = s->ids;
}

void checkout_reply_free(checkout_reply_t *reply)
{
    free(reply->body);
    reply->body = NULL;
}

static bool in_progress(const checkout_state_t *st, int path_idx, const char *key)
{
    for (const progress_t *p = st->progress; p; p = p->next)
        if (p->path_idx == path_idx && strcmp(p->key, key) == 0)
            return true;
    return false;
}

checkout_admit_t checkout_state_admit(checkout_state_t *st, int path_idx, const char *key,
                                      checkout_reply_t *reply, checkout_fault_t *fault)
{
    checkout_admit_t verdict = CHECKOUT_ADMIT_GO;
    const stored_t *s;

    pthread_mutex_lock(&st->mu);
    if ((s = store_find(st, path_idx, key)) != NULL) {
        reply_from_store(reply, s);
        verdict = CHECKOUT_ADMIT_REPLAY;
    } else if (st->has_fault[path_idx]) {
        *fault = st->faults[path_idx];
        /* Counted per request, whatever its key: x2 means the next two. */
        if (st->faults[path_idx].times > 0 && --st->faults[path_idx].times == 0)
            st->has_fault[path_idx] = false;
        verdict = CHECKOUT_ADMIT_FAULT;
        if (fault->status >= 200 && fault->status <= 299 && fault->body_bytes == 0) {
            progress_t *p = calloc(1, sizeof(*p));

            if (!p)
                abort();
            p->path_idx = path_idx;
            p->key = dup_or_null(key);
            p->next = st->progress;
            st->progress = p;
        }
    }
    pthread_mutex_unlock(&st->mu);
    return verdict;
}

void checkout_state_progress_end(checkout_state_t *st, int path_idx, const char *key)
{
    pthread_mutex_lock(&st->mu);
    for (progress_t **pp = &st->progress; *pp; pp = &(*pp)->next) {
        progress_t *p = *pp;

        if (p->path_idx == path_idx && strcmp(p->key, key) == 0) {
            *pp = p->next;
            free(p->key);
            free(p);
            break;
        }
    }
    pthread_mutex_unlock(&st->mu);
}

/* The effect a request of endpoint idx refers to (args and forward from
 * its body doc), checked: *target is that effect's stored success, or the
 * answer is an error (its status in *status, its body returned).  The id
 * comes from, first to last: forward.result.NAME (an undo), args.NAME,
 * and (an undo) the success made on the forward path under
 * forward.idempotency_key, for a forward call whose outcome the caller
 * does not know.  ids->ref and ref_from say which id was asked for. */
static char *check_ref(checkout_state_t *st, int idx, const sg_json_t *doc, checkout_ids_t *ids,
                       int *status, stored_t **target)
{
    const checkout_endpoint_t *ep = &checkout_endpoints[idx];
    const char *fwd_path = checkout_endpoints[ep->refs].path;
    const sg_json_t *fwd = sg_json_member(doc, "forward");
    const char *id = NULL, *fkey = NULL, *from = NULL;
    stored_t *t = NULL;

    *target = NULL;
    if (ep->undo &&
        (id = sg_json_string(sg_json_member(sg_json_member(fwd, "result"), ep->ref_name))) != NULL)
        from = "forward.result";
    else if ((id = sg_json_string(sg_json_member(sg_json_member(doc, "args"), ep->ref_name))))
        from = "args";
    else if (ep->undo && (fkey = sg_json_string(sg_json_member(fwd, "idempotency_key"))))
        from = "forward.idempotency_key";
    if (from)
        snprintf(ids->ref_from, sizeof(ids->ref_from), "%s", from);
    if (fkey) {
        t = store_find(st, ep->refs, fkey);
        if (t && t->ids.issued[0]) {
            id = t->ids.issued;
        } else if (in_progress(st, ep->refs, fkey)) {
            *status = 425;
            return checkout_error_body("in_progress", true,
                                       "the %s under Idempotency-Key %s is still being processed: "
                                       "try again",
                                       fwd_path, fkey);
        } else {
            *status = 404;
            return checkout_error_body(ep->unknown_code, false,
                                       "forward.idempotency_key: no %s was made under key %s",
                                       fwd_path, fkey);
        }
    }
    if (!id) {
        *status = 400;
        if (!ep->undo)
            return checkout_error_body(ep->unknown_code, false, "args.%s: missing", ep->ref_name);
        return checkout_error_body("missing_ref", false,
                                   "%s: missing from forward.result and args, and no "
                                   "forward.idempotency_key",
                                   ep->ref_name);
    }
    snprintf(ids->ref, sizeof(ids->ref), "%s", id);
    if (!t && !(t = id_find(st, ep->refs, id))) {
        *status = ep->undo ? 404 : 400;
        return checkout_error_body(ep->unknown_code, false, "%s%s%s %s: no %s issued this id", from,
                                   fkey ? "" : ".", fkey ? "" : ep->ref_name, id, fwd_path);
    }
    if (t->undone_by[0]) {
        *status = ep->undo ? 409 : 400;
        return checkout_error_body(ep->undone_code, false, "%s %s: already undone by %s",
                                   ep->ref_name, id, t->undone_by);
    }
    *target = t;
    return NULL;
}

/* A success: a new id, named id and id_name, the id referred to, and the
 * request's args echoed. */
static char *success_body(checkout_state_t *st, int path_idx, const char *key,
                          const sg_json_t *args, checkout_ids_t *ids)
{
    const checkout_endpoint_t *ep = &checkout_endpoints[path_idx];
    sg_json_t *o = sg_json_new_object();
    char *text;

    snprintf(ids->issued, sizeof(ids->issued), "%s_%06llu", ep->id_prefix,
             (unsigned long long)++st->last_id);
    sg_json_add_bool(o, "ok", true);
    sg_json_add_str(o, "id", ids->issued);
    sg_json_add_str(o, ep->id_name, ids->issued);
    if (ids->ref[0])
        sg_json_add_str(o, ep->ref_name, ids->ref);
    sg_json_add_str(o, "path", ep->path);
    sg_json_add_str(o, "idempotency_key", key);
    if (args)
        sg_json_add_node(o, "echo", sg_json_dup(args));
    else
        sg_json_add_null(o, "echo");
    text = sg_json_print(o);
    sg_json_destroy(o);
    return text;
}

void checkout_state_complete(checkout_state_t *st, int path_idx, const char *key, int status,
                             char *error_body, const sg_json_t *doc, checkout_reply_t *reply)
{
    const checkout_endpoint_t *ep = &checkout_endpoints[path_idx];
    stored_t *s, *target = NULL;

    pthread_mutex_lock(&st->mu);
    if ((s = store_find(st, path_idx, key)) != NULL) {
        reply_from_store(reply, s);
        free(error_body);
        pthread_mutex_unlock(&st->mu);
        return;
    }
    memset(reply, 0, sizeof(*reply));
    reply->status = status;
    if (!error_body && st->checks && ep->refs >= 0)
        error_body = check_ref(st, path_idx, doc, &reply->ids, &reply->status, &target);
    if (error_body) {
        reply->body = error_body;
    } else {
        reply->body = success_body(st, path_idx, key, sg_json_member(doc, "args"), &reply->ids);
        st->effects[path_idx]++;
        /* Before the store below, which may evict the target. */
        if (target && ep->undo)
            snprintf(target->undone_by, sizeof(target->undone_by), "%s", reply->ids.issued);
    }
    /* 408/425/429/5xx are not stored, so a retry under the same key can
     * still succeed (what the runtime's retry of a transient error needs). */
    if (!checkout_status_retriable(reply->status))
        store_add(st, path_idx, key, reply->status, reply->body, &reply->ids);
    pthread_mutex_unlock(&st->mu);
}

/* --- delays and shutdown -------------------------------------------------- */

static struct timespec deadline_in(int64_t ms)
{
    struct timespec until;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    return until;
}

bool checkout_state_sleep(checkout_state_t *st, int64_t ms)
{
    struct timespec until = deadline_in(ms);
    bool stopping;

    pthread_mutex_lock(&st->mu);
    while (!st->stopping && pthread_cond_timedwait(&st->wake, &st->mu, &until) == 0)
        ;
    stopping = st->stopping;
    pthread_mutex_unlock(&st->mu);
    return !stopping;
}

void checkout_state_stop(checkout_state_t *st)
{
    pthread_mutex_lock(&st->mu);
    st->stopping = true;
    pthread_cond_broadcast(&st->wake);
    pthread_mutex_unlock(&st->mu);
}

void checkout_state_enter(checkout_state_t *st)
{
    pthread_mutex_lock(&st->mu);
    st->inflight++;
    pthread_mutex_unlock(&st->mu);
}

void checkout_state_leave(checkout_state_t *st)
{
    pthread_mutex_lock(&st->mu);
    if (--st->inflight == 0)
        pthread_cond_broadcast(&st->idle);
    pthread_mutex_unlock(&st->mu);
}

bool checkout_state_drain(checkout_state_t *st, int64_t ms)
{
    struct timespec until = deadline_in(ms);
    bool idle;

    pthread_mutex_lock(&st->mu);
    while (st->inflight > 0 && pthread_cond_timedwait(&st->idle, &st->mu, &until) == 0)
        ;
    idle = st->inflight == 0;
    pthread_mutex_unlock(&st->mu);
    return idle;
}
