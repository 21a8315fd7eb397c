/*
 * bench_redis.h - what kvsbench needs of Redis to compare against it: a
 * minimal RESP2 client over a Unix socket, and a private redis-server started
 * in its own temp directory.
 *
 * Not a general Redis client: one command at a time (no pipelining, no
 * pub/sub), Unix sockets only, RESP2 replies only (simple strings, errors,
 * integers, bulk strings, arrays, and their nil forms). hiredis is not used
 * so that the benchmarks build with no dependency beyond the C library; the
 * reply parser does what hiredis does for these types (one allocation per
 * reply node) so that the comparison charges Redis for no extra work, and
 * kvsb_resp_get_into() reads a bulk value straight into the caller's buffer,
 * which is the best a Redis client can do.
 *
 *   kvsb_redis *srv;
 *   kvsb_resp *r;
 *   kvsb_reply *rep;
 *
 *   kvsb_redis_start(10.0, &srv);                 // -ENOENT: not installed
 *   kvsb_resp_connect(kvsb_redis_socket(srv), &r);
 *   kvsb_resp_command(r, 2, (const char *[]){ "GET", "k" }, NULL, &rep);
 *   kvsb_reply_free(rep);
 *   kvsb_resp_close(r);
 *   kvsb_redis_stop(srv);                         // SHUTDOWN NOSAVE, reap
 *
 * Errors: 0 (or a count) on success, -errno on failure; nothing here sets
 * errno, prints (except kvsb_redis_start's log tail on a failed start),
 * exits or aborts.
 * Thread: a kvsb_resp or kvsb_redis belongs to one thread. After fork() a
 * child may use a kvsb_resp it opened itself; it must not stop the parent's
 * server.
 */
#ifndef KVSB_REDIS_H
#define KVSB_REDIS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvsb_resp kvsb_resp;
typedef struct kvsb_redis kvsb_redis;

typedef enum kvsb_reply_type {
	KVSB_REPLY_STATUS = 1,  /* +OK */
	KVSB_REPLY_ERROR = 2,   /* -ERR ... */
	KVSB_REPLY_INTEGER = 3, /* :42 */
	KVSB_REPLY_BULK = 4,    /* $3 foo */
	KVSB_REPLY_NIL = 5,     /* $-1 or *-1 */
	KVSB_REPLY_ARRAY = 6,   /* *2 ... */
} kvsb_reply_type;

/* One parsed reply. str is NUL-terminated (one byte past len) for STATUS,
 * ERROR and BULK; elem has nelem entries for ARRAY. */
typedef struct kvsb_reply {
	kvsb_reply_type type;
	int64_t integer;
	char *str;
	size_t len;
	struct kvsb_reply *elem;
	size_t nelem;
} kvsb_reply;

/*
 * kvsb_resp_connect - connect to a Redis server's Unix socket.
 * @path: the socket path.
 * @out: the new connection.
 * Errors: -ENAMETOOLONG, -ENOENT / -ECONNREFUSED (nothing listening), -ENOMEM,
 *         other -errno from socket/connect.
 * Ownership: *out is the caller's until kvsb_resp_close().
 * Thread: any; the connection then belongs to the calling thread.
 */
int kvsb_resp_connect(const char *path, kvsb_resp **out);

/*
 * kvsb_resp_close - close a connection and free it. @r may be NULL.
 * Thread: the connection's.
 */
void kvsb_resp_close(kvsb_resp *r);

/*
 * kvsb_resp_command - send one command as a RESP array of bulk strings and
 * read its whole reply.
 * @argc, @argv: the command and its arguments.
 * @argvlen: the byte length of each argument, or NULL to use strlen().
 * @out: the reply (an ERROR reply is a reply, not a failure: check type).
 * Errors: -ECONNRESET (the server closed the connection), -EPROTO (a reply
 *         we cannot parse), -ENOMEM, -EINVAL (argc < 1), other -errno from
 *         send/recv. After any error the connection is unusable: close it.
 * Ownership: *out is the caller's; free it with kvsb_reply_free().
 * Thread: the connection's.
 */
int kvsb_resp_command(kvsb_resp *r, int argc, const char *const *argv,
		      const size_t *argvlen, kvsb_reply **out);

/*
 * kvsb_resp_get_into - GET @key and read a bulk reply straight into @dst,
 * with no intermediate copy of the value.
 * @dst, @cap: where the value goes and how much fits.
 * Returns the value's length.
 * Errors: -ENOENT (nil: no such key), -EMSGSIZE (longer than cap; the value
 *         is read and dropped, the connection stays usable), -EIO (the server
 *         answered an error), and the errors of kvsb_resp_command().
 * Ownership: caller's buffer. Thread: the connection's.
 */
int64_t kvsb_resp_get_into(kvsb_resp *r, const char *key, void *dst,
			   size_t cap);

/*
 * kvsb_reply_free - free a reply and everything under it. @rep may be NULL.
 * Thread: any.
 */
void kvsb_reply_free(kvsb_reply *rep);

/*
 * kvsb_redis_find - where redis-server is: the first one on $PATH, else
 * /usr/bin/redis-server.
 * @buf, @len: where to write the path, NUL-terminated.
 * Errors: -ENOENT (not installed), -ENAMETOOLONG.
 * Thread: any.
 */
int kvsb_redis_find(char *buf, size_t len);

/*
 * kvsb_redis_start - start a private redis-server with no persistence and no
 * TCP port, listening on DIR/redis.sock in a new mkdtemp directory under
 * $TMPDIR (else /tmp), and wait until it answers PING.
 * @timeout_s: how long to wait for PONG.
 * @out: the running server.
 * Errors: -ENOENT (redis-server not installed), -ETIMEDOUT (no PONG in
 *         time; the server is killed), -ECHILD (it exited during start-up;
 *         the tail of its log goes to stderr), -ENOMEM, other -errno from
 *         mkdtemp/fork/exec.
 * Ownership: *out is the caller's until kvsb_redis_stop(). The server gets
 *            SIGTERM if the calling thread dies first (PR_SET_PDEATHSIG).
 * Thread: the caller's; it may fork its own clients afterwards.
 */
int kvsb_redis_start(double timeout_s, kvsb_redis **out);

/*
 * kvsb_redis_start_or_na - kvsb_redis_start() for a benchmark that runs
 * without Redis when it cannot have one: NULL when the server runs (in
 * *@out), else why not, for its table's Redis columns ("n/a (...)", in
 * @why[@len] when it is an error's text; *@out stays NULL).
 */
const char *kvsb_redis_start_or_na(double timeout_s, kvsb_redis **out, char *why,
				   size_t len);

/*
 * kvsb_redis_socket - the server's socket path.
 * kvsb_redis_version - its redis_version from INFO, or "unknown".
 * Ownership: valid until kvsb_redis_stop(). Thread: the server's.
 */
const char *kvsb_redis_socket(const kvsb_redis *s);
const char *kvsb_redis_version(const kvsb_redis *s);

/*
 * kvsb_redis_stop - SHUTDOWN NOSAVE, reap the server (SIGTERM, then SIGKILL
 * if it does not exit in a few seconds), remove its directory and free @s.
 * @s may be NULL.
 * Errors: -ECHILD if the server did not exit with status 0 (it is reaped and
 *         its directory removed all the same).
 * Thread: the thread that started it.
 */
int kvsb_redis_stop(kvsb_redis *s);

#endif /* KVSB_REDIS_H */
