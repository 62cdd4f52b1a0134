/* checkout-svc: an example downstream service (inventory, payment, shipping,
 * email) that behaves like a real payment API: Idempotency-Key dedup,
 * injected faults, a request log and counters for tests, the demo and the
 * benchmark.  README.md beside this file is the user's manual.
 *
 * Modules: checkout_fault.c (fault specs from the command line and from
 * JSON; the endpoint table and the error body every module uses), checkout_state.c (everything
 * shared between requests, behind one mutex), checkout_http.c (libmicrohttpd handler and routing),
 * main.c (CLI, daemon, signals). */
#ifndef SAGAD_CHECKOUT_H
#define SAGAD_CHECKOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sagad/sg_json.h"

#define CHECKOUT_NPATHS          9
#define CHECKOUT_LOG_CAP         10000         /* requests kept by /_admin/requests */
#define CHECKOUT_LOG_BODY_MAX    (32 * 1024)   /* request bodies larger are logged as a note */
#define CHECKOUT_STORE_CAP       100000        /* stored responses, oldest evicted first */
#define CHECKOUT_STORE_BYTES     (256u << 20)  /* and at most this many bytes of them */
#define CHECKOUT_KEY_MAX         255           /* Idempotency-Key length, as Stripe's */
#define CHECKOUT_BODY_MAX        (1024 * 1024) /* request body; larger gets 413 */
#define CHECKOUT_RETRY_AFTER_MAX 128

/* The business endpoints, in a fixed order: index i of every per-path
 * array means checkout_endpoints[i]. */
typedef struct checkout_endpoint_s {
    const char *path;
    const char *id_prefix; /* of the ids its successes hand out */
    int status;            /* of a success: 201 creates, 200 undoes */
    const char *id_name;   /* the member naming the id it hands out */
    /* An endpoint that refers to the effect of another: refs is that
     * endpoint's index (-1: none), ref_name the member carrying its id
     * ("charge_id"), undo whether this endpoint undoes it (refund) or only
     * needs it live (book); unknown_code / undone_code the refusals. */
    int refs;
    bool undo;
    const char *ref_name;
    const char *unknown_code;
    const char *undone_code;
} checkout_endpoint_t;

extern const checkout_endpoint_t checkout_endpoints[CHECKOUT_NPATHS];

/* Index of a business path, -1 for any other path. */
int checkout_path_index(const char *path);

/* An injected fault of one path. */
typedef struct checkout_fault_s {
    int status;                                 /* 100..599 */
    int64_t times;                              /* requests left; 0 = forever */
    char retry_after[CHECKOUT_RETRY_AFTER_MAX]; /* "" = no Retry-After header */
    int64_t delay_ms;                           /* wait before answering */
    int64_t body_bytes;                         /* > 0: stream a JSON string this long */
} checkout_fault_t;

/* Parses a --fault SPEC, PATH=STATUS[xTIMES][,retry_after=V][,delay_ms=D]
 * [,body_bytes=B].  Returns 0, or -1 with a message naming the part and
 * the rule in errstr. */
int checkout_fault_parse(const char *spec, int *path_idx, checkout_fault_t *fault, char *errstr,
                         size_t errstr_size) __attribute__((warn_unused_result));

/* The same from a POST /_admin/faults body ({"path", "status", "times",
 * "retry_after", "delay_ms", "body_bytes"}); errors name the JSON path. */
int checkout_fault_from_json(const sg_json_t *obj, int *path_idx, checkout_fault_t *fault,
                             char *errstr, size_t errstr_size) __attribute__((warn_unused_result));

/* A fault as JSON (the caller destroys it). */
sg_json_t *checkout_fault_to_json(int path_idx, const checkout_fault_t *fault);

/* True for statuses a client may retry under the same key: 408, 425, 429
 * and 5xx.  These are never stored for replay. */
bool checkout_status_retriable(int status);

/* {"error_code", "retriable", "message"} as JSON text (malloc'd). */
char *checkout_error_body(const char *code, bool retriable, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Everything requests share, behind one mutex. */
typedef struct checkout_state_s checkout_state_t;

/* NULL only when memory runs out.  The id checks are on. */
checkout_state_t *checkout_state_new(void);
/* Off: book, refund, cancel and release accept any ids or none, as before
 * the checks (for tests that use the service as a plain HTTP endpoint). */
void checkout_state_set_checks(checkout_state_t *st, bool on);
/* NULL is a no-op.  No request may be in flight. */
void checkout_state_destroy(checkout_state_t *st);

/* Adds or replaces the fault of a path / removes all faults. */
void checkout_state_set_fault(checkout_state_t *st, int path_idx, const checkout_fault_t *fault);
void checkout_state_clear_faults(checkout_state_t *st);
/* {"faults":[...]} (the caller destroys it). */
sg_json_t *checkout_state_faults_json(checkout_state_t *st);

/* One received request, as the log records it.  path, key, headers and
 * body (malloc'd) pass to the log, which sets these pointers to NULL. */
typedef struct checkout_logreq_s {
    const char *method;
    char *path;
    char *key; /* NULL when absent */
    sg_json_t *headers;
    sg_json_t *body;
} checkout_logreq_t;

#define CHECKOUT_ID_MAX 64

/* The ids of an answer: the id it issued, the id its request referred to
 * (an unknown one included) and where that id was taken from
 * ("forward.result", "args", "forward.idempotency_key"); "" when none. */
typedef struct checkout_ids_s {
    char issued[CHECKOUT_ID_MAX];
    char ref[CHECKOUT_ID_MAX];
    char ref_from[32];
} checkout_ids_t;

/* Appends a request to the log (status null until checkout_state_log_status)
 * and counts it for its path.  Returns its sequence number. */
uint64_t checkout_state_log_begin(checkout_state_t *st, checkout_logreq_t *req);
/* ids may be NULL. */
void checkout_state_log_status(checkout_state_t *st, uint64_t seq, int status, bool replayed,
                               const checkout_ids_t *ids);

/* {"requests":[...]} oldest first, only path_filter's when not NULL. */
sg_json_t *checkout_state_requests_json(checkout_state_t *st, const char *path_filter);
/* {"requests":{path:n},"effects":{path:n},"keys":{path:n}}. */
sg_json_t *checkout_state_stats_json(checkout_state_t *st);
/* Forgets requests, counters, stored responses and faults. */
void checkout_state_reset(checkout_state_t *st);

/* What a business request is answered with. */
typedef struct checkout_reply_s {
    int status;
    char *body; /* JSON text, malloc'd; NULL when streamed */
    bool replayed;
    char retry_after[CHECKOUT_RETRY_AFTER_MAX];
    int64_t body_bytes; /* > 0: stream that many bytes instead of body */
    checkout_ids_t ids;
} checkout_reply_t;

void checkout_reply_free(checkout_reply_t *reply);

typedef enum checkout_admit_e {
    CHECKOUT_ADMIT_GO,     /* no stored response, no fault: do the work */
    CHECKOUT_ADMIT_REPLAY, /* *reply holds the stored response */
    CHECKOUT_ADMIT_FAULT,  /* *fault holds the fault this request consumed */
} checkout_admit_t;

/* First decision on a business request with an Idempotency-Key: the stored
 * response of (path, key) wins, then a fault of the path (one of its
 * TIMES is consumed), else the request goes on.  A consumed slow-success
 * fault (2xx, no body_bytes) marks (path, key) in progress until
 * checkout_state_progress_end: an undo looking its effect up by key is
 * then answered 425, to come back later. */
checkout_admit_t checkout_state_admit(checkout_state_t *st, int path_idx, const char *key,
                                      checkout_reply_t *reply, checkout_fault_t *fault);
void checkout_state_progress_end(checkout_state_t *st, int path_idx, const char *key);

/* Final decision, atomic with the dedup lookup: when (path, key) has a
 * stored response by now (a concurrent request), *reply is that, replayed.
 * Otherwise with error_body NULL the request body doc (an object, or NULL)
 * is checked (the ids it refers to) and, when right, the effect happens
 * (counted, a new id) and the success body echoing its args is built;
 * with error_body (owned by this call) that is the answer.  A final
 * status is stored. */
void checkout_state_complete(checkout_state_t *st, int path_idx, const char *key, int status,
                             char *error_body, const sg_json_t *doc, checkout_reply_t *reply);

/* Requests in flight, from their first byte to the end of their answer
 * (libmicrohttpd's completion callback), so shutdown can drain them. */
void checkout_state_enter(checkout_state_t *st);
void checkout_state_leave(checkout_state_t *st);
/* Waits up to ms for no request to be in flight; false on timeout. */
bool checkout_state_drain(checkout_state_t *st, int64_t ms);

/* Sleeps ms, or less when the service is stopping: returns false then. */
bool checkout_state_sleep(checkout_state_t *st, int64_t ms);
/* Wakes every sleeper for good (shutdown). */
void checkout_state_stop(checkout_state_t *st);

/* The HTTP side.  srv must outlive the daemon. */
typedef struct checkout_server_s {
    checkout_state_t *st;
    int64_t delay_ms; /* before every business response */
} checkout_server_t;

/* Starts listening on addr (IPv4 or IPv6).  Returns the daemon, or NULL
 * (libmicrohttpd's reason is logged). */
struct sockaddr;
struct MHD_Daemon;
struct MHD_Daemon *checkout_http_start(checkout_server_t *srv, const struct sockaddr *addr);

#endif
