/*
 * kvsctl_top.c - kvsctl top: a live view of a running daemon, refreshed
 * every --interval seconds: operations per second (from the deltas of the
 * ops.* counters), hit ratio (this interval and since start), tier
 * occupancy bars, clients, and the namespaces holding the most blocks.
 *
 * Plain ANSI (alternate screen, cursor home, clear to end of line): it works
 * over ssh and in tmux without curses. Keys are read with the terminal in
 * non-canonical, no-echo mode; the settings are put back on every way out:
 * q, Ctrl-C (SIGINT), SIGTERM, SIGHUP, the daemon going away. Signal
 * handlers only set a flag; the loop sees it (poll() returns EINTR) and
 * leaves through the one exit path. Not a tty (or --batch): frames are
 * printed one after another, without escapes, for logs and scripts.
 *
 * On the public API only (kvshare.h, kvshare_admin.h).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "kvs_clock.h"
#include "kvsctl.h"
#include "kvshare.h"
#include "kvshare_admin.h"

#define TOP_NS_MAX 64 /* namespaces shown at most */

static volatile sig_atomic_t top_stop, top_resized;

static void on_stop(int sig)
{
	top_stop = sig;
}

static void on_winch(int sig)
{
	top_resized = 1;
}

/* One sample of the counters top shows. */
struct sample {
	double t;      /* monotonic seconds */
	int64_t ops;   /* sum of ops.* */
	int64_t lookup, fast_lookup, reserve, commit;
	int64_t hit, miss;
	int64_t connected, attached, leases, pins;
	int64_t host_total, host_used, host_blocks;
	int64_t ssd_on, ssd_total, ssd_used, ssd_blocks, ssd_only;
	int64_t evicted, demoted, promoted, dropped;
	int64_t uptime;
};

static int64_t val(const char *text, const char *name)
{
	int64_t v;

	return kvs_stats_value(text, name, &v) == 0 ? v : 0;
}

/* Sum of every "ops.NAME value" line: new operations count without a
 * change here. */
static int64_t ops_sum(const char *text)
{
	int64_t sum = 0;

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, "ops.", 4)) {
			const char *sp = strpbrk(p, " \t");

			if (sp)
				sum += strtoll(sp, NULL, 10);
		}
	return sum;
}

static int take_sample(kvs_client *c, struct sample *s)
{
	char *text;
	int rc = kvs_stats(c, &text);

	if (rc < 0)
		return rc;
	*s = (struct sample){
		.t = now_s(),
		.ops = ops_sum(text),
		.lookup = val(text, "ops.lookup"),
		.fast_lookup = val(text, "fast.lookups"),
		.reserve = val(text, "ops.reserve"),
		.commit = val(text, "ops.commit"),
		.hit = val(text, "blocks.lookup_hit"),
		.miss = val(text, "blocks.lookup_miss"),
		.connected = val(text, "clients.connected"),
		.attached = val(text, "clients.attached"),
		.leases = val(text, "leases.active"),
		.pins = val(text, "pins.blocks"),
		.host_total = val(text, "tier_host.bytes_total"),
		.host_used = val(text, "tier_host.bytes_used"),
		.host_blocks = val(text, "tier_host.blocks"),
		.ssd_on = val(text, "tier_ssd.enabled"),
		.ssd_total = val(text, "tier_ssd.bytes_total"),
		.ssd_used = val(text, "tier_ssd.bytes_used"),
		.ssd_blocks = val(text, "tier_ssd.blocks"),
		.ssd_only = val(text, "tier_ssd.blocks_ssd_only"),
		.evicted = val(text, "blocks.evicted"),
		.demoted = val(text, "tier_ssd.demotions"),
		.promoted = val(text, "tier_ssd.promotions"),
		.dropped = val(text, "events.dropped"),
		.uptime = val(text, "server.uptime_seconds"),
	};
	free(text);
	return 0;
}

static void human_bytes(char *out, size_t n, double b)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(out, n, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
}

/* "LABEL [####......]  45.1%  used / total  EXTRA" in @width columns. */
static void bar(FILE *f, int width, const char *label, int64_t used,
		int64_t total, const char *extra)
{
	char u[32], t[32];
	int w = width - 48 - (int)strlen(extra), fill;
	double frac = total > 0 ? (double)used / (double)total : 0;

	if (w < 10)
		w = 10;
	if (w > 60)
		w = 60;
	if (frac > 1)
		frac = 1;
	fill = (int)(frac * w + 0.5);
	human_bytes(u, sizeof(u), (double)used);
	human_bytes(t, sizeof(t), (double)total);
	fprintf(f, "%-5s [", label);
	for (int i = 0; i < w; i++)
		fputc(i < fill ? '#' : '.', f);
	fprintf(f, "] %5.1f%%  %s / %s  %s", frac * 100, u, t, extra);
}

static double rate(int64_t now, int64_t before, double dt)
{
	return dt > 0 && now >= before ? (double)(now - before) / dt : 0;
}

static int ns_cmp(const void *a, const void *b)
{
	const kvs_ns_summary *x = a, *y = b;

	if (x->blocks != y->blocks)
		return x->blocks > y->blocks ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* End a line: in a terminal, clear what an earlier, longer frame left. */
#define EOL(f, tty) fputs((tty) ? "\033[K\n" : "\n", (f))

static void frame(FILE *f, int tty, int cols, int rows, const char *sock,
		  double interval, const struct sample *s,
		  const struct sample *prev, kvs_ns_summary *nss, int nns)
{
	double dt = prev ? s->t - prev->t : 0;
	int64_t dh = prev ? s->hit - prev->hit : 0, dm = prev ? s->miss - prev->miss : 0;
	char extra[96], up[32], b[32];
	int line = 0, shown;

	snprintf(up, sizeof(up), "%" PRId64 "d %02" PRId64 ":%02" PRId64 ":%02" PRId64,
		 s->uptime / 86400, s->uptime / 3600 % 24, s->uptime / 60 % 60,
		 s->uptime % 60);
	fprintf(f, "kvsctl top - %s   up %s   every %.1fs%s", sock, up, interval,
		tty ? "   q: quit" : "");
	EOL(f, tty), line++;
	EOL(f, tty), line++;
	/* Each refresh is one STATS and one LIST of ours: not counted. */
	if (prev)
		fprintf(f, "ops/s      %10.1f   lookup %.1f  fast lookup %.1f  reserve %.1f  commit %.1f",
			rate(s->ops - 2, prev->ops, dt), rate(s->lookup, prev->lookup, dt),
			rate(s->fast_lookup, prev->fast_lookup, dt),
			rate(s->reserve, prev->reserve, dt),
			rate(s->commit, prev->commit, dt));
	else
		fprintf(f, "ops/s      %10s   (after the next refresh)", "-");
	EOL(f, tty), line++;
	fprintf(f, "hit ratio  %9.1f%% total", s->hit + s->miss > 0 ?
		100.0 * (double)s->hit / (double)(s->hit + s->miss) : 0.0);
	if (dh + dm > 0)
		fprintf(f, "   %.1f%% now", 100.0 * (double)dh / (double)(dh + dm));
	else
		fputs("   - now", f);
	fprintf(f, "   (blocks: %" PRId64 " hit, %" PRId64 " missed)", s->hit, s->miss);
	EOL(f, tty), line++;
	fprintf(f, "clients    %10" PRId64 " connected, %" PRId64 " attached   leases %"
		PRId64 "   pinned blocks %" PRId64, s->connected, s->attached,
		s->leases, s->pins);
	EOL(f, tty), line++;
	EOL(f, tty), line++;
	snprintf(extra, sizeof(extra), "%" PRId64 " blocks", s->host_blocks);
	bar(f, cols, "host", s->host_used, s->host_total, extra);
	EOL(f, tty), line++;
	if (s->ssd_total > 0) {
		snprintf(extra, sizeof(extra), "%" PRId64 " blocks, %" PRId64 " only there%s",
			 s->ssd_blocks, s->ssd_only, s->ssd_on ? "" : " (demotion off)");
		bar(f, cols, "ssd", s->ssd_used, s->ssd_total, extra);
	} else {
		fputs("ssd   off (kvshared --ssd-dir)", f);
	}
	EOL(f, tty), line++;
	fprintf(f, "evicted/s %.1f   demoted/s %.1f   promoted/s %.1f   events dropped %"
		PRId64, rate(s->evicted, prev ? prev->evicted : s->evicted, dt),
		rate(s->demoted, prev ? prev->demoted : s->demoted, dt),
		rate(s->promoted, prev ? prev->promoted : s->promoted, dt), s->dropped);
	EOL(f, tty), line++;
	EOL(f, tty), line++;
	fprintf(f, "%-4s %-28s %10s %10s %10s %7s", "NS", "MODEL", "BLOCKS", "BYTES",
		"HITS", "CLIENTS");
	EOL(f, tty), line++;
	qsort(nss, (size_t)nns, sizeof(*nss), ns_cmp);
	shown = nns;
	if (tty && shown > rows - line - 1)
		shown = rows - line - 1 > 0 ? rows - line - 1 : 0;
	for (int i = 0; i < shown; i++) {
		char model[29];

		snprintf(model, sizeof(model), "%s", nss[i].model);
		human_bytes(b, sizeof(b), (double)(nss[i].blocks * nss[i].block_bytes));
		fprintf(f, "%-4u %-28s %10" PRIu64 " %10s %10" PRIu64 " %7u", nss[i].id,
			model, nss[i].blocks, b, nss[i].hits, nss[i].clients);
		EOL(f, tty);
	}
	if (nns == 0)
		fputs("(no namespaces yet)", f), EOL(f, tty);
	else if (shown < nns)
		fprintf(f, "(%d more)", nns - shown), EOL(f, tty);
	if (tty)
		fputs("\033[J", f); /* clear below */
	else
		fputc('\n', f);
}

static void term_size(int *cols, int *rows)
{
	struct winsize ws;

	*cols = 80;
	*rows = 24;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
		*cols = ws.ws_col;
		*rows = ws.ws_row;
	}
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void top_usage(void)
{
	fprintf(stderr,
		"usage: kvsctl [--socket PATH] top [--interval SECONDS] [--count N] [--batch]\n"
		"  a live view, refreshed every SECONDS (default 1, at least 0.1):\n"
		"  operations per second, hit ratio (this interval and since start),\n"
		"  host and SSD tier occupancy, clients, and the namespaces with the\n"
		"  most blocks. Keys: q quits (so does Ctrl-C); the terminal is restored.\n"
		"  -i, --interval SECONDS  time between refreshes\n"
		"  -n, --count N           exit after N refreshes\n"
		"  -b, --batch             no terminal control: frames one after\n"
		"                          another (the default when stdout is not a tty)\n");
}

/* The command line. 0: run; 1: --help (usage printed); 2: a usage error
 * (said). */
static int top_parse(int argc, char **argv, double *interval, unsigned long *count,
		     int *batch)
{
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "batch", no_argument, NULL, 'b' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int o;

	while ((o = getopt_long(argc, argv, "i:n:bh", opts, NULL)) != -1) {
		switch (o) {
		case 'i':
			errno = 0;
			*interval = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(*interval >= 0.1) ||
			    *interval > 3600) {
				fprintf(stderr, "kvsctl: top: --interval must be 0.1..3600 "
						"seconds, not '%s'\n", optarg);
				return 2;
			}
			break;
		case 'n':
			errno = 0;
			*count = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || *optarg == '-' || !*count) {
				fprintf(stderr, "kvsctl: top: bad count '%s'\n", optarg);
				return 2;
			}
			break;
		case 'b': *batch = 1; break;
		case 'h': top_usage(); return 1;
		default: top_usage(); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvsctl: top: unexpected argument '%s'\n", argv[optind]);
		top_usage();
		return 2;
	}
	return 0;
}

/* The terminal top takes over (a tty, not --batch): the alternate screen,
 * keys without echo, and its signals; all given back by term_leave. */
struct top_term {
	int tty, raw_on, restore;
	struct termios saved;
	struct sigaction old_int, old_term, old_hup, old_winch;
};

static void term_enter(struct top_term *t, int batch)
{
	struct sigaction sa = { .sa_handler = on_stop }, sw = { .sa_handler = on_winch };
	struct termios raw;

	t->tty = !batch && isatty(STDOUT_FILENO);
	sigaction(SIGINT, &sa, &t->old_int);
	sigaction(SIGTERM, &sa, &t->old_term);
	sigaction(SIGHUP, &sa, &t->old_hup);
	sigaction(SIGWINCH, &sw, &t->old_winch);
	top_stop = 0;
	if (t->tty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &t->saved) == 0) {
		raw = t->saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		raw.c_cc[VSUSP] = _POSIX_VDISABLE; /* a stopped top would leave it raw */
		if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0)
			t->raw_on = t->restore = 1;
	}
	if (t->tty)
		fputs("\033[?1049h\033[?25l\033[2J", stdout); /* alt screen, no cursor */
}

/* The one way out: put the terminal back whatever happened. */
static void term_leave(struct top_term *t)
{
	if (t->tty)
		fputs("\033[?25h\033[?1049l", stdout);
	fflush(stdout);
	if (t->restore)
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &t->saved);
	sigaction(SIGINT, &t->old_int, NULL);
	sigaction(SIGTERM, &t->old_term, NULL);
	sigaction(SIGHUP, &t->old_hup, NULL);
	sigaction(SIGWINCH, &t->old_winch, NULL);
}

/* What a frame shows besides the sample. */
struct top_view {
	const char *sock;
	double interval;
	int cols, rows;
};

/* One frame: a sample into @cur, drawn against @prev (NULL: the first),
 * written to stdout in one write. */
static int top_frame(kvs_client *c, const struct top_term *t, struct top_view *v,
		     struct sample *cur, const struct sample *prev)
{
	kvs_ns_summary *nss = NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int rc, nns;

	if ((rc = take_sample(c, cur)) < 0)
		return rc;
	nns = kvs_list(c, 0, 0, &nss);
	if (nns < 0)
		return nns;
	if (top_resized) {
		top_resized = 0;
		term_size(&v->cols, &v->rows);
		if (t->tty)
			fputs("\033[2J", stdout);
	}
	f = open_memstream(&buf, &len);
	if (!f) {
		free(nss);
		return -ENOMEM;
	}
	if (t->tty)
		fputs("\033[H", f);
	frame(f, t->tty, v->cols, v->rows, v->sock, v->interval, cur, prev, nss, nns);
	free(nss);
	fclose(f);
	fflush(stdout);
	rc = write_all(STDOUT_FILENO, buf, len) < 0 ? -errno : 0;
	free(buf);
	return rc;
}

/* Wait until @next (monotonic seconds), a key, or a signal; q, Q or ^C
 * stop top. */
static void top_wait(struct top_term *t, double next)
{
	while (!top_stop && !top_resized) {
		double left = next - now_s();
		struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
		char keys[64];
		ssize_t n;

		if (left <= 0)
			break;
		if (poll(&pfd, t->raw_on ? 1 : 0, (int)(left * 1000) + 1) <= 0)
			continue; /* timeout, or EINTR: top_stop decides */
		n = read(STDIN_FILENO, keys, sizeof(keys));
		if (n == 0) {
			t->raw_on = 0; /* stdin closed: only signals stop us now */
			continue;
		}
		for (ssize_t i = 0; i < n; i++)
			if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == 3)
				top_stop = -1;
	}
}

int kvsctl_top(const char *sock, int argc, char **argv)
{
	struct top_term t = { 0 };
	struct top_view v = { .sock = sock, .interval = 1.0 };
	struct sample cur, prev;
	unsigned long count = 0, frames = 0;
	int batch = 0, rc, have_prev = 0;
	char def[128];
	kvs_client *c;

	rc = top_parse(argc, argv, &v.interval, &count, &batch);
	if (rc)
		return rc == 1 ? 0 : 2;
	if (!v.sock)
		v.sock = kvs_default_socket_path(def, sizeof(def)) < 0 ? "(default)" : def;
	if ((rc = kvs_connect(sock, NULL, &c)) < 0) {
		fprintf(stderr, "kvsctl: connect failed: %s\n", kvs_strerror(rc));
		return 1;
	}
	term_enter(&t, batch);
	term_size(&v.cols, &v.rows);
	rc = 0;
	while (!top_stop) {
		if ((rc = top_frame(c, &t, &v, &cur, have_prev ? &prev : NULL)) < 0)
			break;
		prev = cur;
		have_prev = 1;
		if (count && ++frames >= count)
			break;
		top_wait(&t, cur.t + v.interval);
	}
	term_leave(&t);
	kvs_close(c);
	if (rc < 0) {
		fprintf(stderr, "kvsctl: top failed: %s\n", kvs_strerror(rc));
		return 1;
	}
	return 0;
}
