/* Helpers shared by the benchmarks (tests/bench/bench_*.c). */
#ifndef SAGAD_BENCH_UTIL_H
#define SAGAD_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sagad/sg_kafka.h"
#include "sagad/sg_pg.h"

extern const char *bench_name;     /* prefix of error messages */
extern const char *pg_url, *kafka; /* from SAGAD_TEST_PG_URL / SAGAD_TEST_KAFKA */

double now_s(void);
void die(const char *what, const char *why) __attribute__((noreturn));
sg_pg_t *bench_connect(const char *url);
void exec(sg_pg_t *pg, const char *sql, int n, const char *const *p);
int64_t query_int(sg_pg_t *pg, const char *sql);
/* A client of the benchmark's broker; extra: NULL-terminated k/v pairs. */
sg_kafka_t *kclient(sg_kafka_role_t role, const char *const *extra);
/* Reads the environment, creates a fresh database (name in db, DSN in
 * dsn) with the migrations applied. */
sg_pg_t *bench_setup_db(char *db, size_t db_size, char *dsn, size_t dsn_size);
void bench_drop_db(const char *db);
/* Starts bin/<prog> run with env (NULL-terminated "K=V" strings). */
pid_t bench_spawn(const char *prog, char *const *env);
/* Starts bin/<prog> with args (NULL-terminated); with out_fd, its stdout
 * is a pipe whose reading end goes there. */
pid_t bench_spawn_argv(const char *prog, char *const *args, char *const *env, int *out_fd);
/* Writes the saga.start JSON of saga_id into out; its length. */
typedef int (*bench_json_fn)(char *out, size_t size, const char *saga_id);
/* Produces sagas prefix-0..n-1 (JSON from json_of) to topic; rate per
 * second (0: as fast as possible); sent[i] gets the produce time. */
void bench_produce(const char *topic, const char *prefix, int n, double rate, double *sent,
                   bench_json_fn json_of);
void bench_stop(pid_t pid);
/* Starts bin/<prog> run on the benchmark's services: the DSN, the tool
 * registry, the commands, internal, events and dead-letter topics and the worker
 * group, at log level, then extra "K=V" strings (NULL-terminated; later
 * wins), at most 32. */
pid_t bench_start_sagad(const char *prog, const char *dsn, const char *regpath,
                        const char *const topics[4], const char *group, const char *level,
                        const char *const *extra);
/* Runs bin/<prog> args... (NULL-terminated) with env, stdout discarded;
 * its exit code. */
int bench_run(const char *prog, char *const *args, char *const *env);
int cmp_double(const void *a, const void *b);
/* The relay's WAL source on the benchmark's database dsn: makes the
 * relay's login there (user and password of SAGAD_TEST_PG_URL_RELAY,
 * deploy/local/pg.sh url-relay; it has REPLICATION) and a slot name of
 * this process, returned, and drops that slot at exit, also after die(): a
 * slot left behind keeps the WAL for ever and blocks DROP DATABASE. */
const char *bench_wal_prepare(const char *dsn);
const char *bench_wal_dsn(void); /* the relay's login, after bench_wal_prepare */
void bench_wal_drop(void);       /* drops the slot now (idempotent) */
/* A process's memory in kB from /proc/PID/status: field "VmRSS" (now) or
 * "VmHWM" (its peak); -1 when gone. */
long bench_rss_kb(pid_t pid, const char *field);

/* The host's CPU time (all cores) from /proc/stat, in ticks, and the part
 * of it the processes visible here used.  On a shared machine the
 * hypervisor gives some of it to other guests (steal), and other
 * containers on the same kernel show up as busy time no process here
 * accounts for: a phase run beside busy neighbours measures them too, so
 * the benchmarks print both beside their figures. */
typedef struct bench_cpu_s {
    long long busy, steal, total, ours;
} bench_cpu_t;
void bench_cpu(bench_cpu_t *c);
/* Percent of the host's CPU time between a and b that was busy, that the
 * processes visible here used (PostgreSQL, Kafka, the services, the
 * benchmark), and that was stolen. */
double bench_busy_pct(const bench_cpu_t *a, const bench_cpu_t *b);
double bench_ours_pct(const bench_cpu_t *a, const bench_cpu_t *b);
double bench_steal_pct(const bench_cpu_t *a, const bench_cpu_t *b);
/* Prints the three lines (busy, ours, stolen) for two phases, a0..a1 and
 * b0..b1, named by phases ("backlog / latency"), labels width wide. */
void bench_print_cpu(int width, const char *phases, const bench_cpu_t *a0, const bench_cpu_t *a1,
                     const bench_cpu_t *b0, const bench_cpu_t *b1);

#endif
