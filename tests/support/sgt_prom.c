#include "sgt_prom.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

typedef struct family_s {
    char name[128];
    char type[16];
    bool help;
} family_t;

typedef struct parser_s {
    family_t fam[256];
    size_t nfam;
    int line;
    char *err;
    size_t err_size;
} parser_t;

static int fail(parser_t *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(parser_t *ps, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(ps->err, ps->err_size, "line %d: ", ps->line);

    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->err_size - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static size_t name_len(const char *s, bool metric)
{
    size_t n = 0;

    if (!(isalpha((unsigned char)s[0]) || s[0] == '_' || (metric && s[0] == ':')))
        return 0;
    while (isalnum((unsigned char)s[n]) || s[n] == '_' || (metric && s[n] == ':'))
        n++;
    return n;
}

static family_t *family(parser_t *ps, const char *name)
{
    for (size_t i = 0; i < ps->nfam; i++)
        if (strcmp(ps->fam[i].name, name) == 0)
            return &ps->fam[i];
    return NULL;
}

static int comment(parser_t *ps, const char *line)
{
    char name[128];
    const char *rest;
    family_t *f;
    size_t n;
    bool help = strncmp(line, "# HELP ", 7) == 0;

    if (!help && strncmp(line, "# TYPE ", 7) != 0)
        return fail(ps, "a comment must be # HELP or # TYPE: %s", line);
    n = name_len(line + 7, true);
    if (n == 0 || n >= sizeof(name) || line[7 + n] != ' ')
        return fail(ps, "bad metric name in: %s", line);
    memcpy(name, line + 7, n);
    name[n] = '\0';
    rest = line + 7 + n + 1;
    f = family(ps, name);
    if (!f) {
        if (ps->nfam == sizeof(ps->fam) / sizeof(ps->fam[0]))
            return fail(ps, "too many families");
        f = &ps->fam[ps->nfam++];
        memset(f, 0, sizeof(*f));
        snprintf(f->name, sizeof(f->name), "%s", name);
    }
    if (help) {
        if (f->help)
            return fail(ps, "second HELP for %s", name);
        f->help = true;
        return 0;
    }
    if (f->type[0])
        return fail(ps, "second TYPE for %s", name);
    if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
        strcmp(rest, "summary") && strcmp(rest, "untyped"))
        return fail(ps, "unknown type \"%s\"", rest);
    snprintf(f->type, sizeof(f->type), "%s", rest);
    return 0;
}

/* {a="x",b="y"}: canonical text into out; *p moves past the brace. */
static int labels(parser_t *ps, const char **p, char *out, size_t out_size, char *le,
                  size_t le_size)
{
    const char *s = *p + 1;
    size_t o = 0;

    out[0] = le[0] = '\0';
    while (*s != '}') {
        char lname[128], val[512];
        size_t n = name_len(s, false), v = 0;

        if (n == 0 || n >= sizeof(lname))
            return fail(ps, "bad label name at: %s", s);
        memcpy(lname, s, n);
        lname[n] = '\0';
        s += n;
        if (s[0] != '=' || s[1] != '"')
            return fail(ps, "label %s: expected =\"", lname);
        for (s += 2; *s != '"'; s++) {
            char c = *s;
            if (!c || c == '\n')
                return fail(ps, "label %s: unterminated value", lname);
            if (c == '\\') {
                s++;
                if (*s == 'n')
                    c = '\n';
                else if (*s == '\\' || *s == '"')
                    c = *s;
                else
                    return fail(ps, "label %s: bad escape \\%c", lname, *s);
            }
            if (v + 1 < sizeof(val))
                val[v++] = c;
        }
        val[v] = '\0';
        s++;
        if (strcmp(lname, "le") == 0)
            snprintf(le, le_size, "%s", val);
        else
            o += (size_t)snprintf(out + o, out_size - o, "%s%s=\"%s\"", o ? "," : "", lname, val);
        if (*s == ',')
            s++;
        else if (*s != '}')
            return fail(ps, "expected , or } after label %s", lname);
    }
    *p = s + 1;
    return 0;
}

static int value(parser_t *ps, const char *s, double *out)
{
    char *end;

    if (strcmp(s, "+Inf") == 0)
        return (*out = INFINITY), 0;
    if (strcmp(s, "-Inf") == 0)
        return (*out = -INFINITY), 0;
    if (strcmp(s, "NaN") == 0)
        return (*out = NAN), 0;
    *out = strtod(s, &end);
    if (end == s || *end != '\0' || isnan(*out) || isinf(*out))
        return fail(ps, "bad value \"%s\"", s);
    return 0;
}

static void push(sgt_prom_t *p, const char *name, const char *lab, double v)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        p->v = realloc(p->v, p->cap * sizeof(*p->v));
        if (!p->v)
            abort();
    }
    p->v[p->n].name = strdup(name);
    p->v[p->n].labels = strdup(lab);
    p->v[p->n].value = v;
    p->n++;
}

/* The family a sample belongs to: its own name, or a histogram's base. */
static family_t *owner(parser_t *ps, const char *name, const char **suffix)
{
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};
    family_t *f = family(ps, name);
    char base[128];

    *suffix = "";
    if (f && f->type[0])
        return f;
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(name), k = strlen(sfx[i]);
        if (n > k && n - k < sizeof(base) && strcmp(name + n - k, sfx[i]) == 0) {
            memcpy(base, name, n - k);
            base[n - k] = '\0';
            f = family(ps, base);
            if (f && strcmp(f->type, "histogram") == 0) {
                *suffix = sfx[i];
                return f;
            }
        }
    }
    return NULL;
}

static int sample(parser_t *ps, sgt_prom_t *out, const char *line)
{
    char name[160], lab[1024], le[64], full[1200];
    const char *p = line, *suffix;
    size_t n = name_len(line, true);
    family_t *f;
    double v;

    if (n == 0 || n >= sizeof(name))
        return fail(ps, "bad metric name: %s", line);
    memcpy(name, line, n);
    name[n] = '\0';
    p += n;
    if (!(f = owner(ps, name, &suffix)))
        return fail(ps, "sample %s before its TYPE", name);
    lab[0] = le[0] = '\0';
    if (*p == '{' && labels(ps, &p, lab, sizeof(lab), le, sizeof(le)) < 0)
        return -1;
    if (*p != ' ')
        return fail(ps, "expected a space before the value: %s", line);
    if (value(ps, p + 1, &v) < 0)
        return -1;
    if (strcmp(suffix, "_bucket") == 0 && !le[0])
        return fail(ps, "%s without le", name);
    if (strcmp(suffix, "_bucket") != 0 && le[0])
        return fail(ps, "le label outside a histogram bucket: %s", name);
    if (strcmp(f->type, "counter") == 0 && v < 0)
        return fail(ps, "counter %s is negative", name);
    if (le[0])
        snprintf(full, sizeof(full), "%s%sle=\"%s\"", lab, lab[0] ? "," : "", le);
    else
        snprintf(full, sizeof(full), "%s", lab);
    for (size_t i = 0; i < out->n; i++)
        if (strcmp(out->v[i].name, name) == 0 && strcmp(out->v[i].labels, full) == 0)
            return fail(ps, "series %s{%s} appears twice", name, full);
    push(out, name, full, v);
    return 0;
}

/* Every histogram series: buckets non-decreasing, +Inf == _count. */
static int check_histograms(parser_t *ps, const sgt_prom_t *out)
{
    for (size_t i = 0; i < out->n; i++) {
        const sgt_sample_t *c = &out->v[i];
        char bucket[160], inf[1100];
        size_t n = strlen(c->name);
        double prev = -1, last = -1;
        const char *suffix;

        if (n < 7 || strcmp(c->name + n - 6, "_count") != 0)
            continue;
        snprintf(bucket, sizeof(bucket), "%.*s_bucket", (int)(n - 6), c->name);
        if (!owner(ps, bucket, &suffix))
            continue;
        for (size_t j = 0; j < out->n; j++) {
            const sgt_sample_t *b = &out->v[j];
            size_t ll = strlen(c->labels);
            if (strcmp(b->name, bucket) != 0 || strncmp(b->labels, c->labels, ll) != 0 ||
                strncmp(b->labels + ll, ll ? ",le=" : "le=", ll ? 4 : 3) != 0)
                continue;
            if (b->value < prev)
                return snprintf(ps->err, ps->err_size, "%s{%s}: buckets not cumulative", bucket,
                                b->labels),
                       -1;
            prev = last = b->value;
        }
        snprintf(inf, sizeof(inf), "%s%sle=\"+Inf\"", c->labels, c->labels[0] ? "," : "");
        if (sgt_prom_get(out, bucket, inf, -1) != c->value || last != c->value)
            return snprintf(ps->err, ps->err_size, "%s{%s}: +Inf bucket %g != count %g", bucket,
                            c->labels, sgt_prom_get(out, bucket, inf, -1), c->value),
                   -1;
    }
    return 0;
}

int sgt_prom_parse(const char *text, sgt_prom_t *out, char *err, size_t err_size)
{
    parser_t *ps = calloc(1, sizeof(*ps));
    const char *p = text;
    int rc = 0;

    if (!ps)
        abort();
    memset(out, 0, sizeof(*out));
    ps->err = err;
    ps->err_size = err_size;
    if (*text == '\0' || text[strlen(text) - 1] != '\n')
        rc = fail(ps, "the exposition must end with a newline");
    while (rc == 0 && *p) {
        const char *nl = strchr(p, '\n');
        char line[2048];
        size_t len = (size_t)(nl - p);

        ps->line++;
        if (len >= sizeof(line)) {
            rc = fail(ps, "line too long");
            break;
        }
        memcpy(line, p, len);
        line[len] = '\0';
        p = nl + 1;
        if (len == 0)
            rc = fail(ps, "empty line");
        else if (line[0] == '#')
            rc = comment(ps, line);
        else
            rc = sample(ps, out, line);
    }
    if (rc == 0)
        rc = check_histograms(ps, out);
    for (size_t i = 0; i < ps->nfam; i++)
        out->families += ps->fam[i].type[0] != '\0';
    free(ps);
    return rc;
}

void sgt_prom_free(sgt_prom_t *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].name);
        free(p->v[i].labels);
    }
    free(p->v);
    memset(p, 0, sizeof(*p));
}

double sgt_prom_get(const sgt_prom_t *p, const char *name, const char *labels, double def)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].name, name) == 0 && strcmp(p->v[i].labels, labels) == 0)
            return p->v[i].value;
    return def;
}

int sgt_http_get(int port, const char *path, char **body)
{
    struct sockaddr_in addr = {0};
    struct timeval tv = {10, 0};
    char req[256], chunk[4096], *buf = NULL, *sep;
    size_t len = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0), status = -1;
    ssize_t r;

    *body = NULL;
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
        write(fd, req, strlen(req)) != (ssize_t)strlen(req))
        goto out;
    while ((r = read(fd, chunk, sizeof(chunk))) > 0) {
        buf = realloc(buf, len + (size_t)r + 1);
        if (!buf)
            abort();
        memcpy(buf + len, chunk, (size_t)r);
        len += (size_t)r;
        buf[len] = '\0';
    }
    if (!buf || sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || !(sep = strstr(buf, "\r\n\r\n"))) {
        status = -1;
        goto out;
    }
    *body = strdup(sep + 4);
out:
    free(buf);
    close(fd);
    return status;
}
