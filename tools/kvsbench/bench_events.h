/*
 * bench_events.h - kvsbench events: the vLLM KV events (kvshared
 * --kv-events) the daemon sustains.
 *
 *   kvsbench events [--blocks K] [--rounds R] [--json]
 *
 * Two private daemons one after the other, the same workload on each: R
 * rounds of one worker committing a chain of K new blocks and an operator
 * evicting its namespace (2K block changes a round); the first without
 * events, the second with --kv-events on an abstract ipc socket that no one
 * subscribes to. Reports the events published per second of the rounds'
 * wall time, the daemon's CPU time (/proc/PID/stat) per event, and what the
 * events add to the CPU time of a block change. A figure, not a test.
 */
#ifndef KVSB_EVENTS_H
#define KVSB_EVENTS_H

/*
 * kvsb_cmd_events - the `events` subcommand; @sock is ignored (it starts
 * its own daemons). Returns the exit status: 0 ran, 1 failed, 2 usage.
 * Thread: the main thread.
 */
int kvsb_cmd_events(const char *sock, int argc, char **argv);

#endif /* KVSB_EVENTS_H */
