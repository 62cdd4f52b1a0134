#include "sagad/sg_run.h"

#include <string.h>
#include <time.h>

volatile sig_atomic_t sg_run_running = 1;
volatile sig_atomic_t sg_run_stop_now = 0;
volatile sig_atomic_t sg_run_reload_requested = 0;

static void on_hup(int sig)
{
    (void)sig;
    sg_run_reload_requested = 1;
}

static void on_stop_signal(int sig)
{
    (void)sig;
    if (!sg_run_running)
        sg_run_stop_now = 1;
    sg_run_running = 0;
}

void sg_run_trap_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

uint64_t sg_run_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

uint64_t sg_run_now_ms(void)
{
    return sg_run_now_us() / 1000;
}

int64_t sg_run_wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
