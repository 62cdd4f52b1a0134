/* sg_run: the process's clock and its run flags, a leaf every module may
 * use (it calls nothing of sagad's).
 *
 * The long-running `run` commands call sg_run_trap_signals() once: the
 * first SIGTERM/SIGINT clears sg_run_running (stop taking work, drain,
 * exit 0), the second also sets sg_run_stop_now (abandon what is in
 * flight, exit now); SIGHUP sets sg_run_reload_requested (sg_cli_reload
 * acts on it); SIGPIPE is ignored.  The handlers only set these flags. */
#ifndef SAGAD_RUN_H
#define SAGAD_RUN_H

#include <signal.h>
#include <stdint.h>

extern volatile sig_atomic_t sg_run_running;
extern volatile sig_atomic_t sg_run_stop_now;
extern volatile sig_atomic_t sg_run_reload_requested;

void sg_run_trap_signals(void);

/* Milliseconds and microseconds on a monotonic clock, for deadlines and
 * latencies. */
uint64_t sg_run_now_ms(void);
uint64_t sg_run_now_us(void);

/* Nanoseconds since the Unix epoch on the wall clock (CLOCK_REALTIME): what
 * other processes read too, for a span's start and end, a log line's time,
 * a replication status's send time.  Not for deadlines: it can jump. */
int64_t sg_run_wall_ns(void);

#endif
