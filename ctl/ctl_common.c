/* What every sagactl command shares: arguments, config, the connection,
 * durations, input files and the worker's verdict on a submission. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "sagad/sg_alloc.h"
#include "sagad/sg_kafka.h"
#include "sagad/sg_log.h"
#include "sagad/sg_mask.h"
#include "sagad/sg_run.h"
#include "sagad/sg_text.h"

extern char **environ;

/* An offline command (validate, submit, watch) needs no pg.dsn: the
 * config is read as the others read it, without the required-key check. */
static int read_config(ctl_t *c)
{
    char errstr[1024], masked[1024];

    c->own_cfg = sg_config_new();
    if ((c->cmd.cli->config_path &&
         sg_config_load_file(c->own_cfg, c->cmd.cli->config_path, errstr, sizeof(errstr)) < 0) ||
        sg_config_load_env(c->own_cfg, environ, errstr, sizeof(errstr)) < 0) {
        sg_mask(errstr, masked, sizeof(masked));
        sg_cmd_warn(&c->cmd, "%s", masked);
        return SG_EXIT_USAGE;
    }
    c->cfg = c->own_cfg;
    return SG_EXIT_OK;
}

/* The daemons' JSON log lines (librdkafka's connection errors among them)
 * are not for a person at a terminal: sagactl says what failed in its own
 * sentences.  log.level = debug keeps them, for a bug report. */
static void quiet_logs(const ctl_t *c)
{
    static FILE *devnull;

    if (strcmp(sg_config_str(c->cfg, "log.level"), "debug") == 0) {
        sg_log_level = SG_LOG_DEBUG;
        return;
    }
    sg_log_level = SG_LOG_ERROR;
    if (!devnull && (devnull = fopen("/dev/null", "w")))
        sg_log_set_stream(devnull);
}

int ctl_open(ctl_t *c, sg_cli_t *cli, int argc, char **argv, bool connect)
{
    int rc;

    memset(c, 0, sizeof(*c));
    c->cfg = cli->cfg;
    if ((rc = sg_cmd_open(&c->cmd, cli, argc, argv)))
        return rc;
    if (!c->cfg && (rc = read_config(c)))
        return rc;
    quiet_logs(c);
    /* What sagactl reads needs no more than sagad_reader; the role names
     * what a too powerful login is measured against (pg.strict_roles). */
    return connect ? sg_cmd_connect(&c->cmd, c->cfg, SG_PG_ROLE_RUNTIME) : SG_EXIT_OK;
}

int ctl_close(ctl_t *c, int rc)
{
    sg_cmd_close(&c->cmd, rc);
    sg_config_destroy(c->own_cfg);
    memset(c, 0, sizeof(*c));
    return rc;
}

char *ctl_read_input(const ctl_t *c, const char *path, size_t max, size_t *len)
{
    bool std_in = strcmp(path, "-") == 0;
    FILE *fp = std_in ? stdin : fopen(path, "rb");
    size_t cap = 65536, n = 0;
    char *buf;

    if (!fp) {
        sg_cmd_warn(&c->cmd, "cannot read %s: %s", path, strerror(errno));
        *len = 0;
        return NULL;
    }
    buf = sg_xmalloc(cap + 1);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (n > max || got == 0)
            break;
        if (n == cap) {
            cap *= 2;
            buf = sg_xrealloc(buf, cap + 1);
        }
    }
    if (ferror(fp) || n > max) {
        if (n > max)
            sg_cmd_warn(&c->cmd,
                        "%s is larger than limits.max_message_bytes (%zu bytes): the worker "
                        "would dead-letter it (input.too_large)",
                        std_in ? "standard input" : path, max);
        else
            sg_cmd_warn(&c->cmd, "cannot read %s: %s", path, strerror(errno));
        free(buf);
        buf = NULL;
        *len = n > max ? SIZE_MAX : 0;
    } else {
        buf[n] = '\0';
        *len = n;
    }
    if (!std_in)
        fclose(fp);
    return buf;
}

void ctl_limits(const ctl_t *c, sg_json_limits_t *lim)
{
    sg_check_limits(c->cfg, lim);
}

int ctl_check(const ctl_t *c, const char *text, size_t len, const sg_registry_t *reg,
              sg_problems_t *p)
{
    sg_json_limits_t lim;

    ctl_limits(c, &lim);
    return sg_check_submission(text, len, &lim, reg, p);
}

sg_registry_t *ctl_registry(const ctl_t *c)
{
    const char *path = sg_cli_opt(&c->cmd.args, "--registry");
    sg_registry_t *reg;
    sg_err_t err;

    if (!path)
        path = sg_config_str(c->cfg, "worker.registry");
    if (!(reg = sg_registry_load(path, c->cfg, NULL, &err)))
        sg_cmd_warn(&c->cmd, "cannot use the tool registry: %s", err.message);
    return reg;
}

/* "path: rule" lines of a list on out, shown, never obeyed. */
static void list_print(FILE *out, const sg_problem_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char *path = sg_text_visible(v[i].path, false), *rule = sg_text_visible(v[i].rule, false);
        fprintf(out, "%s: %s\n", path, rule);
        free(path);
        free(rule);
    }
}

void ctl_problems_print(const sg_problems_t *p, bool json)
{
    if (json) {
        sg_json_t *doc = sg_json_new_object();
        char *text;

        sg_json_add_bool(doc, "valid", p->n == 0);
        if (p->n)
            sg_json_add_str(doc, "code", p->code);
        sg_json_add_node(doc, "problems", sg_problems_json(p->v, p->n));
        sg_json_add_node(doc, "warnings", sg_problems_json(p->w, p->nw));
        text = sg_json_print(doc);
        printf("%s\n", text);
        free(text);
        sg_json_destroy(doc);
        return;
    }
    list_print(stdout, p->v, p->n);
    list_print(stderr, p->w, p->nw);
}

bool ctl_event_terminal(const char *type)
{
    static const char *const ends[] = {"saga.completed", "saga.compensated", "saga.failed",
                                       "saga.cancelled", "saga.rejected"};

    for (size_t i = 0; type && i < sizeof(ends) / sizeof(ends[0]); i++)
        if (strcmp(type, ends[i]) == 0)
            return true;
    return false;
}

static int64_t start_at(void *opaque, bool assigned, const char *topic, int32_t partition)
{
    const ctl_events_t *e = opaque;

    (void)topic;
    if (!assigned || e->from_beginning || partition < 0 || partition >= e->nparts)
        return -1;
    return e->end[partition];
}

int ctl_events_open(const ctl_t *c, const char *group, bool from_beginning, ctl_events_t *e)
{
    char gid[96], errstr[512];
    const char *props[] = {"group.id", gid, "auto.offset.reset",
                           from_beginning ? "earliest" : "latest", NULL};
    sg_err_t err;

    memset(e, 0, sizeof(*e));
    e->from_beginning = from_beginning;
    e->topic = sg_config_str(c->cfg, "topic.events");
    snprintf(gid, sizeof(gid), "%s-%ld-%llu", group, (long)getpid(),
             (unsigned long long)sg_run_now_ms());
    if (!(e->k = sg_kafka_new(c->cfg, SG_KAFKA_CONSUMER, props, errstr, sizeof(errstr)))) {
        sg_cmd_warn(&c->cmd, "%s", errstr);
        return SG_EXIT_USAGE;
    }
    if ((e->nparts = sg_kafka_partition_count(e->k, e->topic, 10000)) <= 0) {
        sg_cmd_warn(&c->cmd,
                    "cannot read the events topic %s: Kafka unreachable or no such topic "
                    "(check kafka.bootstrap.servers and topic.events)",
                    e->topic);
        return SG_EXIT_INFRA;
    }
    e->end = sg_xcalloc((size_t)e->nparts, sizeof(*e->end));
    for (int p = 0; !from_beginning && p < e->nparts; p++) {
        int64_t low;
        if (sg_kafka_query_watermarks(e->k, e->topic, p, 10000, &low, &e->end[p]) < 0 ||
            e->end[p] < 0) {
            sg_cmd_warn(&c->cmd, "cannot read where partition %d of %s ends: Kafka unreachable", p,
                        e->topic);
            return SG_EXIT_INFRA;
        }
    }
    sg_kafka_set_rebalance_hook(e->k, start_at, e);
    if (sg_kafka_subscribe(e->k, &e->topic, 1, &err) < 0) {
        sg_cmd_warn(&c->cmd, "cannot follow %s: %s", e->topic, err.message);
        return SG_EXIT_INFRA;
    }
    return SG_EXIT_OK;
}

void ctl_events_close(ctl_events_t *e)
{
    sg_kafka_destroy(e->k);
    free(e->end);
    memset(e, 0, sizeof(*e));
}

/* --key, else the config's ctl.key: the key to sign with; *have false
 * when neither is set.  -1 after saying why the key cannot be read. */
static int signing_key(const ctl_t *c, sg_signing_key_t *k, bool *have)
{
    const char *path = sg_cli_opt(&c->cmd.args, "--key");
    char why[512];

    if (!path)
        path = sg_config_str(c->cfg, "ctl.key");
    *have = path && *path;
    if (!*have)
        return 0;
    if (sg_signing_key_load(path, k, why, sizeof(why)) < 0) {
        sg_cmd_warn(&c->cmd, "%s", why);
        return -1;
    }
    return 0;
}

int ctl_produce_command(const ctl_t *c, const char *key, const char *text, size_t len,
                        int64_t timeout_ms)
{
    char errstr[512], tmo[24];
    const char *props[] = {"message.timeout.ms", tmo, NULL};
    const char *topic = sg_config_str(c->cfg, "topic.commands");
    sg_kafka_batch_t batch = {0};
    sg_kafka_t *k;
    sg_err_t err;
    int rc = SG_EXIT_OK;

    sg_signing_key_t sk;
    bool sign;
    char *auth = NULL;
    sg_kafka_header_t hdr = {SG_AUTH_HEADER, NULL, 0};

    if (signing_key(c, &sk, &sign) < 0)
        return SG_EXIT_USAGE;
    if (sign) {
        auth = sg_auth_sign(sk.priv, sk.principal, sk.key_id, (int64_t)time(NULL), key, strlen(key),
                            text, len, &err);
        memset(&sk, 0, sizeof(sk));
        if (!auth) {
            sg_cmd_warn(&c->cmd, "cannot sign: %s", err.message);
            return SG_EXIT_USAGE;
        }
        hdr.value = auth;
        hdr.len = strlen(auth);
    }
    snprintf(tmo, sizeof(tmo), "%lld", (long long)(timeout_ms < 30000 ? timeout_ms : 30000));
    if (!(k = sg_kafka_new(c->cfg, SG_KAFKA_PRODUCER, props, errstr, sizeof(errstr)))) {
        sg_cmd_warn(&c->cmd, "%s", errstr);
        free(auth);
        return SG_EXIT_USAGE;
    }
    if (sg_kafka_produce(k, topic, key, strlen(key), text, len, auth ? &hdr : NULL, auth ? 1 : 0,
                         &batch, &err) < 0) {
        sg_cmd_warn(&c->cmd, "cannot produce to %s: %s", topic, err.message);
        rc = SG_EXIT_INFRA;
    } else if (sg_kafka_flush(k, 60000, &err) < 0 || batch.failed || batch.pending) {
        sg_cmd_warn(&c->cmd, "not delivered to %s: %s (check kafka.bootstrap.servers)", topic,
                    batch.failed ? batch.first_err.message : "Kafka did not acknowledge it");
        rc = SG_EXIT_INFRA;
    }
    sg_kafka_destroy(k);
    free(auth);
    return rc;
}

void ctl_random_hex(char *out, size_t bytes)
{
    unsigned char r[16];
    int fd = open("/dev/urandom", O_RDONLY);
    uint64_t now = sg_run_now_us();

    if (bytes > sizeof(r))
        bytes = sizeof(r);
    if (fd < 0 || read(fd, r, bytes) != (ssize_t)bytes) {
        /* No urandom: time and pid still make a collision unlikely. */
        for (size_t i = 0; i < bytes; i++)
            r[i] = (unsigned char)((now >> (8 * (i % 8))) ^ ((uint64_t)getpid() >> (i % 3)));
    }
    if (fd >= 0)
        close(fd);
    for (size_t i = 0; i < bytes; i++)
        sprintf(out + 2 * i, "%02x", r[i]);
}
