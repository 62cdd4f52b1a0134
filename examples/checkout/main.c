/* checkout-svc: the example downstream service (see README.md here).
 * main() parses the command line, starts the HTTP daemon, announces the
 * address on stdout and waits for SIGTERM/SIGINT. */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "checkout.h"
#include "sagad/sg_cli.h"
#include "sagad/sg_log.h"

#define PROG     "checkout-svc"
#define DRAIN_MS 5000 /* grace for requests in flight at SIGTERM */

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: " PROG " [--listen HOST:PORT] [--delay-ms N] [--fault SPEC]... [--no-checks]\n"
        "                    [--help]\n"
        "\n"
        "An example downstream HTTP service (inventory, payment, shipping, email, SMS,\n"
        "webhooks) that dedups by Idempotency-Key like a real payment API and injects\n"
        "faults on demand.\n"
        "\n"
        "options:\n"
        "  --listen HOST:PORT  address to listen on (default 127.0.0.1:8088; PORT 0 picks\n"
        "                      a free port).  Once listening, stdout gets exactly one line:\n"
        "                      " PROG " listening on http://HOST:PORT\n"
        "  --delay-ms N        delay every business response by N ms (each request waits\n"
        "                      in its own thread; others are not held up)\n"
        "  --fault SPEC        inject a fault, repeatable:\n"
        "                      PATH=STATUS[xTIMES][,retry_after=V][,delay_ms=D][,body_bytes=B]\n"
        "                      e.g. /shipping/book=503x2  /payment/charge=429x1,retry_after=1\n"
        "                      /inventory/reserve=200,delay_ms=60000 (TIMES omitted: for ever)\n"
        "  --no-checks         accept any ids, or none, where a request refers to an\n"
        "                      earlier effect (book, refund, cancel, release): for tests\n"
        "                      that use the service as a plain HTTP endpoint\n"
        "  --help              this text\n"
        "\n"
        "endpoints (POST, JSON, Idempotency-Key header required):\n"
        "  /inventory/reserve /inventory/release /payment/charge /payment/refund\n"
        "  /shipping/book /shipping/cancel /email/send /sms/send /webhook/post\n"
        "  book needs args.reservation_id of a live reservation; refund, cancel and\n"
        "  release name what they undo (forward.result, args, or forward.idempotency_key)\n"
        "admin: POST|DELETE|GET /_admin/faults, GET /_admin/requests[?path=P],\n"
        "       GET /_admin/stats, POST /_admin/reset\n"
        "\n"
        "SIGTERM or SIGINT stops it (exit 0).  Exit 2: bad usage; 1: cannot listen.\n");
}

/* HOST:PORT or [V6HOST]:PORT into a socket address. */
static int parse_listen(const char *arg, struct sockaddr_storage *ss, char *errstr,
                        size_t errstr_size)
{
    const char *colon = strrchr(arg, ':');
    struct addrinfo hints, *ai = NULL;
    char host[256], *end;
    long port;
    int rc;

    if (!colon || colon == arg || (size_t)(colon - arg) >= sizeof(host)) {
        snprintf(errstr, errstr_size, "--listen %s: expected HOST:PORT", arg);
        return -1;
    }
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < 0 || port > 65535) {
        snprintf(errstr, errstr_size, "--listen %s: PORT must be 0..65535", arg);
        return -1;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(colon - arg), arg);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if ((rc = getaddrinfo(host, colon + 1, &hints, &ai)) != 0) {
        snprintf(errstr, errstr_size, "--listen %s: HOST: %s", arg, gai_strerror(rc));
        return -1;
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

static int parse_args(int argc, char **argv, struct sockaddr_storage *ss, const char **listen_arg,
                      checkout_server_t *srv)
{
    char errstr[512];
    int i;

    *listen_arg = "127.0.0.1:8088";
    if (parse_listen(*listen_arg, ss, errstr, sizeof(errstr)) < 0)
        return -1;
    for (i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        if (strcmp(opt, "--no-checks") == 0) {
            checkout_state_set_checks(srv->st, false);
            continue;
        }
        if (strcmp(opt, "--listen") != 0 && strcmp(opt, "--delay-ms") != 0 &&
            strcmp(opt, "--fault") != 0) {
            fprintf(stderr, PROG ": unknown option %s (try --help)\n", opt);
            return -1;
        }
        if (!val) {
            fprintf(stderr, PROG ": %s needs a value (try --help)\n", opt);
            return -1;
        }
        i++;
        if (strcmp(opt, "--listen") == 0) {
            if (parse_listen(val, ss, errstr, sizeof(errstr)) < 0)
                goto bad;
            *listen_arg = val;
        } else if (strcmp(opt, "--delay-ms") == 0) {
            char *end;

            errno = 0;
            srv->delay_ms = strtoll(val, &end, 10);
            if (errno || end == val || *end || srv->delay_ms < 0 || srv->delay_ms > 3600000) {
                snprintf(errstr, sizeof(errstr), "--delay-ms %s: must be 0..3600000", val);
                goto bad;
            }
        } else {
            checkout_fault_t fault;
            int idx;

            if (checkout_fault_parse(val, &idx, &fault, errstr, sizeof(errstr)) < 0) {
                fprintf(stderr, PROG ": --fault %s: %s\n", val, errstr);
                return -1;
            }
            checkout_state_set_fault(srv->st, idx, &fault);
        }
    }
    return 0;
bad:
    fprintf(stderr, PROG ": %s\n", errstr);
    return -1;
}

/* The address actually bound (PORT 0 resolved), as http://HOST:PORT. */
static void announce(struct MHD_Daemon *d)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char host[NI_MAXHOST], port[NI_MAXSERV];

    if (!info || getsockname(info->listen_fd, (struct sockaddr *)&ss, &len) < 0 ||
        getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(host, sizeof(host), "?");
        snprintf(port, sizeof(port), "?");
    }
    if (ss.ss_family == AF_INET6)
        printf(PROG " listening on http://[%s]:%s\n", host, port);
    else
        printf(PROG " listening on http://%s:%s\n", host, port);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    checkout_server_t srv = {NULL, 0};
    const char *listen_arg = NULL;
    struct sockaddr_storage ss;
    struct MHD_Daemon *d;
    MHD_socket listen_fd;
    sigset_t stop;
    int rc, sig;

    sg_log_init(PROG, SG_LOG_INFO);
    if (!(srv.st = checkout_state_new())) {
        fprintf(stderr, PROG ": out of memory\n");
        return SG_EXIT_FAIL;
    }
    memset(&ss, 0, sizeof(ss));
    if ((rc = parse_args(argc, argv, &ss, &listen_arg, &srv)) != 0) {
        checkout_state_destroy(srv.st);
        return rc > 0 ? SG_EXIT_OK : SG_EXIT_USAGE;
    }
    /* The stop signals are blocked in every thread (the daemon's threads
     * inherit this mask) and taken synchronously by sigwait() below, so no
     * handler runs in the middle of a request. */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!(d = checkout_http_start(&srv, (struct sockaddr *)&ss))) {
        fprintf(stderr, PROG ": cannot listen on %s (in use, or not an address of this host?)\n",
                listen_arg);
        checkout_state_destroy(srv.st);
        return SG_EXIT_FAIL;
    }
    announce(d);
    sg_log_info("ready: delay_ms=%lld", (long long)srv.delay_ms);
    while (sigwait(&stop, &sig) != 0)
        ;
    sg_log_info("signal %d: stopping", sig);
    /* Stop accepting, wake the requests sleeping on a delay (they answer
     * 503 shutting_down) and give every request in flight a moment to get
     * its answer out; then the daemon closes what is left. */
    listen_fd = MHD_quiesce_daemon(d);
    checkout_state_stop(srv.st);
    if (!checkout_state_drain(srv.st, DRAIN_MS))
        sg_log_warn("requests still in flight after %d ms: closing them", DRAIN_MS);
    MHD_stop_daemon(d);
    if (listen_fd != MHD_INVALID_SOCKET)
        close(listen_fd);
    checkout_state_destroy(srv.st);
    sg_log_info("stopped");
    return SG_EXIT_OK;
}
