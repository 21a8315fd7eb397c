/* remote_tls.c - the remote engine's TLS: the client context from the
 * settings (kvs_remote_set_tls), one SSL per connection with the name it
 * must prove, the non-blocking handshake, reads and writes that return
 * -errno like the plain socket calls, and a connection's TLS side of the
 * wire: handshake steps, the queue's writes, reads past a read budget
 * (see kvs_remote.h, remote_int.h; the plain wire is remote_conn.c). */
#include "remote_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* ---- the socket BIO ----------------------------------------------------- */

/*
 * OpenSSL's own socket BIO writes with write(): a node that went away would
 * raise SIGPIPE in the caller's process. This one sends with MSG_NOSIGNAL,
 * as the plain path does (send_iov), and gathers what OpenSSL writes, a
 * record at a time, into SOCK_WBUF bytes before it sends them: a 1 MiB
 * value is 64 records, and a send each cost more than their encryption.
 * The bytes gathered go out when the buffer is full, when OpenSSL flushes
 * (the handshake, alerts) and when the engine has written what it had
 * (kvs_rmt_tls_flush; a socket that cannot take them all keeps EPOLLOUT).
 */
#define SOCK_WBUF (128u << 10)

struct sock_bio {
	int fd;
	size_t off, len; /* buf[off, len) waits to be sent */
	uint8_t buf[SOCK_WBUF];
};

static BIO_METHOD *sock_meth;

/* Send what @w gathered: 0 when it all went, else -errno (-EAGAIN: the
 * socket is full). */
static int sock_send(struct sock_bio *w)
{
	while (w->off < w->len) {
		ssize_t k = send(w->fd, w->buf + w->off, w->len - w->off, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
		w->off += (size_t)k;
	}
	w->off = w->len = 0;
	return 0;
}

static int sock_write(BIO *b, const char *buf, size_t len, size_t *done)
{
	struct sock_bio *w = BIO_get_data(b);
	int rc;

	BIO_clear_retry_flags(b);
	if (w->len + len > SOCK_WBUF && (rc = sock_send(w)) < 0) {
		if (rc == -EAGAIN)
			BIO_set_retry_write(b);
		errno = -rc;
		return 0;
	}
	if (len > SOCK_WBUF) { /* never from OpenSSL's records; kept right */
		ssize_t k = send(w->fd, buf, len, MSG_NOSIGNAL);

		if (k < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				BIO_set_retry_write(b);
			return 0;
		}
		*done = (size_t)k;
		return 1;
	}
	memcpy(w->buf + w->len, buf, len);
	w->len += len;
	*done = len;
	return 1;
}

static int sock_read(BIO *b, char *buf, size_t len, size_t *done)
{
	struct sock_bio *w = BIO_get_data(b);
	ssize_t k = recv(w->fd, buf, len, 0);

	BIO_clear_retry_flags(b);
	if (k > 0) {
		*done = (size_t)k;
		return 1;
	}
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		BIO_set_retry_read(b);
	if (k == 0)
		errno = 0; /* EOF: SSL_ERROR_SYSCALL with errno 0 */
	return 0;
}

static long sock_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	struct sock_bio *w = BIO_get_data(b);
	int rc;

	(void)num;
	(void)ptr;
	if (cmd == BIO_CTRL_WPENDING)
		return w ? (long)(w->len - w->off) : 0;
	if (cmd != BIO_CTRL_FLUSH)
		return 0;
	BIO_clear_retry_flags(b);
	if (!w || (rc = sock_send(w)) == 0)
		return 1;
	if (rc == -EAGAIN)
		BIO_set_retry_write(b);
	errno = -rc;
	return 0;
}

static int sock_create(BIO *b)
{
	BIO_set_init(b, 1);
	return 1;
}

static int sock_destroy(BIO *b)
{
	free(BIO_get_data(b));
	BIO_set_data(b, NULL);
	return 1;
}

static BIO_METHOD *sock_method(void)
{
	BIO_METHOD *m = __atomic_load_n(&sock_meth, __ATOMIC_ACQUIRE), *had = NULL;

	if (m)
		return m;
	m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kvs_remote_sock");
	if (!m || !BIO_meth_set_write_ex(m, sock_write) ||
	    !BIO_meth_set_read_ex(m, sock_read) || !BIO_meth_set_ctrl(m, sock_ctrl) ||
	    !BIO_meth_set_create(m, sock_create) || !BIO_meth_set_destroy(m, sock_destroy)) {
		BIO_meth_free(m);
		return NULL;
	}
	/* One per process, never freed (a table of function pointers that
	 * every engine shares); engines of other threads may race to make
	 * it: the loser frees its own. */
	if (!__atomic_compare_exchange_n(&sock_meth, &had, m, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		BIO_meth_free(m);
		return had;
	}
	return m;
}

/* ---- errors -------------------------------------------------------------- */

/* r->last_err = "@what: " + the first OpenSSL error queued (and why a
 * certificate did not verify), then clear the queue. */
static void tls_why(kvs_remote *r, const SSL *s, const char *what)
{
	unsigned long e = ERR_get_error();
	long v = s ? SSL_get_verify_result(s) : X509_V_OK;
	char lib[200] = "";

	if (e)
		ERR_error_string_n(e, lib, sizeof(lib));
	if (v != X509_V_OK)
		snprintf(r->last_err, sizeof(r->last_err),
			 "%s: certificate verify failed: %s", what,
			 X509_verify_cert_error_string(v));
	else
		snprintf(r->last_err, sizeof(r->last_err), "%s: %s", what,
			 *lib ? lib : "TLS protocol error");
	ERR_clear_error();
}

/* The result of an SSL call that returned @ret <= 0: -EAGAIN (wants to
 * read), -EINPROGRESS (wants to write), or the error. */
static int tls_err(kvs_remote *r, SSL *s, int ret, const char *what)
{
	int e = SSL_get_error(s, ret), err = errno;

	switch (e) {
	case SSL_ERROR_WANT_READ:
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		return -EINPROGRESS;
	case SSL_ERROR_ZERO_RETURN: /* close_notify */
		return -ECONNRESET;
	case SSL_ERROR_SSL:
		/* The peer closed without close_notify (a node killed): lost
		 * like a reset TCP connection, so its requests are resent; a
		 * truncated reply cannot pass for a whole one (RESP lengths). */
		if (ERR_GET_REASON(ERR_peek_error()) != SSL_R_UNEXPECTED_EOF_WHILE_READING)
			break;
		snprintf(r->last_err, sizeof(r->last_err), "%s: connection closed", what);
		ERR_clear_error();
		return -ECONNRESET;
	case SSL_ERROR_SYSCALL:
		if (!ERR_peek_error()) {
			snprintf(r->last_err, sizeof(r->last_err), "%s: %s", what,
				 err ? strerror(err) : "connection closed");
			return err ? -err : -ECONNRESET;
		}
		break;
	}
	tls_why(r, s, what);
	return SSL_get_verify_result(s) != X509_V_OK ? -EKEYREJECTED : -EPROTO;
}

/* ---- the context ---------------------------------------------------------- */

void kvs_rmt_tls_free(kvs_remote *r)
{
	SSL_CTX_free(r->tls);
	r->tls = NULL;
	free(r->tls_name);
	r->tls_name = NULL;
}

static int readable(kvs_remote *r, const char *what, const char *path)
{
	if (access(path, R_OK) == 0)
		return 0;
	snprintf(r->last_err, sizeof(r->last_err), "TLS %s %s: %s", what, path,
		 strerror(errno));
	return -errno;
}

int kvs_remote_set_tls(kvs_remote *r, const struct kvs_remote_tls *t)
{
	SSL_CTX *ctx;
	const char *bad = NULL;
	int rc;

	if (r->open)
		return -EBUSY;
	kvs_rmt_tls_free(r);
	if (!t)
		return 0;
	if (!t->cert_file != !t->key_file || (t->server_name && !*t->server_name) ||
	    (t->server_name && strlen(t->server_name) >= KVS_SLOT_HOST_MAX)) {
		snprintf(r->last_err, sizeof(r->last_err), "TLS: %s",
			 t->server_name ? "a server name is 1..255 bytes"
					: "a certificate needs its key and a key its certificate");
		return -EINVAL;
	}
	if ((t->ca_file && (rc = readable(r, "CA file", t->ca_file)) < 0) ||
	    (t->cert_file && (rc = readable(r, "certificate", t->cert_file)) < 0) ||
	    (t->key_file && (rc = readable(r, "key", t->key_file)) < 0))
		return rc;
	if (!sock_method())
		return -ENOMEM;
	ctx = SSL_CTX_new(TLS_client_method());
	if (!ctx)
		return -ENOMEM;
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	/* A write repeated after WANT_WRITE is rebuilt from the queue: the
	 * same bytes, maybe in the staging buffer, maybe longer. */
	SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* Read ahead: one recv takes several records (without it, two recvs
	 * per 16 KiB record: its header, then its body). What SSL holds then
	 * is read before the socket is waited on again (conn_read loops to
	 * -EAGAIN; past its budget, kvs_rmt_conn_more). */
	SSL_CTX_set_read_ahead(ctx, 1);
	SSL_CTX_set_default_read_buffer_len(ctx, TLS_READ_AHEAD);
	if (t->ca_file ? SSL_CTX_load_verify_locations(ctx, t->ca_file, NULL) != 1
		       : SSL_CTX_set_default_verify_paths(ctx) != 1)
		bad = t->ca_file ? t->ca_file : "the system's CA store";
	else if (t->cert_file &&
		 SSL_CTX_use_certificate_chain_file(ctx, t->cert_file) != 1)
		bad = t->cert_file;
	else if (t->key_file &&
		 (SSL_CTX_use_PrivateKey_file(ctx, t->key_file, SSL_FILETYPE_PEM) != 1 ||
		  SSL_CTX_check_private_key(ctx) != 1))
		bad = t->key_file;
	if (bad) {
		char what[300];

		snprintf(what, sizeof(what), "TLS: %s", bad);
		tls_why(r, NULL, what);
		SSL_CTX_free(ctx);
		return -EINVAL;
	}
	if (t->server_name && !(r->tls_name = strdup(t->server_name))) {
		SSL_CTX_free(ctx);
		return -ENOMEM;
	}
	r->tls = ctx;
	r->tls_client_cert = t->cert_file != NULL;
	return 0;
}

const char *kvs_remote_last_error(const kvs_remote *r)
{
	return r->last_err;
}

/* ---- connections ---------------------------------------------------------- */

/*
 * A client SSL on connected (or connecting) socket @fd to node @n: the name
 * it must prove is the server name setting, else the node's host: an IP
 * address is checked against the certificate's IP SANs (and sends no SNI),
 * a host name against its DNS names.
 */
int kvs_rmt_tls_new(kvs_remote *r, const struct node *n, int fd, SSL **out)
{
	const char *name = r->tls_name ? r->tls_name : n->host;
	struct in6_addr a;
	int ip = inet_pton(AF_INET, name, &a) == 1 || inet_pton(AF_INET6, name, &a) == 1;
	SSL *s = SSL_new(r->tls);
	struct sock_bio *w = malloc(sizeof(*w));
	BIO *b;

	if (!s || !w) {
		SSL_free(s);
		free(w);
		return -ENOMEM;
	}
	b = BIO_new(sock_method());
	if (!b) {
		SSL_free(s);
		free(w);
		return -ENOMEM;
	}
	w->fd = fd;
	w->off = w->len = 0;
	BIO_set_data(b, w);
	SSL_set_bio(s, b, b);
	if (ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), name) != 1
	       : SSL_set1_host(s, name) != 1 ||
			 SSL_set_tlsext_host_name(s, name) != 1) {
		SSL_free(s);
		return -EINVAL;
	}
	*out = s;
	return 0;
}

void kvs_rmt_tls_close(SSL *s)
{
	/* No close_notify: the socket is closed right after, and a node
	 * that is gone would only make it fail. */
	SSL_free(s);
}

int kvs_rmt_tls_handshake(kvs_remote *r, SSL *s, const struct node *n)
{
	char what[KVS_SLOT_HOST_MAX + 40];
	int ret;

	ERR_clear_error();
	ret = SSL_connect(s);
	if (ret == 1)
		return 0;
	snprintf(what, sizeof(what), "TLS handshake with %s:%u", n->host, n->port);
	return tls_err(r, s, ret, what);
}

ssize_t kvs_rmt_tls_read(kvs_remote *r, SSL *s, void *buf, size_t len)
{
	size_t got = 0;

	ERR_clear_error();
	if (SSL_read_ex(s, buf, len, &got) == 1)
		return (ssize_t)got;
	return tls_err(r, s, 0, "TLS read");
}

ssize_t kvs_rmt_tls_write(kvs_remote *r, SSL *s, const void *buf, size_t len)
{
	size_t done = 0;

	ERR_clear_error();
	if (SSL_write_ex(s, buf, len, &done) == 1)
		return (ssize_t)done;
	return tls_err(r, s, 0, "TLS write");
}

int kvs_rmt_tls_pending(const SSL *s)
{
	return SSL_has_pending(s);
}

int kvs_rmt_tls_send(SSL *s)
{
	struct sock_bio *w = BIO_get_data(SSL_get_wbio(s));

	return w ? sock_send(w) : 0;
}

int kvs_rmt_tls_unsent(const SSL *s)
{
	const struct sock_bio *w = BIO_get_data(SSL_get_wbio(s));

	return w && w->off < w->len;
}

/* ---- the wire ------------------------------------------------------------ */

/*
 * TLS: SSL_write takes one buffer. A value's large pieces go from the
 * caller's buffers (SSL encrypts from them: no copy of ours); small ones
 * (headers, trailers, small values) and the head of the value behind them
 * are copied into the staging buffer, so that they share one record and
 * one send. The choice depends only on the queue from the write offset,
 * so a write repeated after WANT_WRITE presents the same bytes, at least
 * as many (what OpenSSL requires).
 */
void kvs_rmt_tls_flush(kvs_remote *r, struct conn *c)
{
	bool want_out = false;

	while (c->wcur && !c->dead && c->state == C_UP) {
		struct iovec iov[WRITE_IOV];
		int n = kvs_rmt_queue_iov(c, iov);
		const void *buf = iov[0].iov_base;
		size_t len = iov[0].iov_len;
		ssize_t w;

		if (len >= TLS_STAGE) {
			if (len > TLS_CHUNK)
				len = TLS_CHUNK;
		} else {
			len = 0;
			for (int i = 0; i < n && len < TLS_STAGE; i++) {
				size_t k = iov[i].iov_len < TLS_STAGE - len
						   ? iov[i].iov_len : TLS_STAGE - len;

				memcpy(c->wstage + len, iov[i].iov_base, k);
				len += k;
			}
			buf = c->wstage;
		}
		w = kvs_rmt_tls_write(r, c->ssl, buf, len);
		if (w == -EAGAIN || w == -EINPROGRESS) {
			/* EAGAIN: TLS must read first; the read event
			 * flushes again (kvs_rmt_conn_event). Either way
			 * what the BIO gathered before still goes below:
			 * the node may wait for exactly those requests. */
			want_out = w == -EINPROGRESS;
			break;
		}
		if (w < 0) {
			kvs_rmt_conn_fail(r, c, (int)w);
			return;
		}
		kvs_rmt_conn_wrote(c, (size_t)w);
	}
	if (!c->dead && c->state == C_UP) {
		/* what the socket BIO gathered goes now, or on EPOLLOUT */
		int rc = kvs_rmt_tls_send(c->ssl);

		if (rc < 0 && rc != -EAGAIN)
			kvs_rmt_conn_fail(r, c, rc);
		else
			kvs_rmt_epoll_out(r, c, want_out || rc == -EAGAIN);
	}
}

/* TLS: a step of the handshake; the queue goes once it verified (AUTH is
 * its head: the password is never sent before). */
void kvs_rmt_tls_step(kvs_remote *r, struct conn *c)
{
	int rc = kvs_rmt_tls_handshake(r, c->ssl, c->node);

	if (rc == -EAGAIN || rc == -EINPROGRESS) {
		kvs_rmt_epoll_out(r, c, rc == -EINPROGRESS);
		return;
	}
	if (rc < 0) {
		kvs_rmt_conn_fail(r, c, rc);
		return;
	}
	c->state = C_UP;
	kvs_rmt_conn_flush(r, c);
}

/* Connections whose reads stopped at the budget with bytes inside SSL. */
void kvs_rmt_conn_more(kvs_remote *r)
{
	for (int i = 0; i < r->nnodes && r->tls_more; i++) {
		struct node *n = r->nodes[i];

		for (int j = 0; n && j < n->nconns && r->tls_more; j++) {
			struct conn *c = n->conns[j];

			if (!c->tls_more)
				continue;
			c->tls_more = 0;
			r->tls_more--;
			kvs_rmt_conn_read(r, c);
		}
	}
}
