/* error.c - one error domain: -errno and KVS_E_* (see kvshare.h). */
#include <string.h>

#include "kvs_types.h"

static const char *const kvs_errors[] = {
	[KVS_E_BASE - (KVS_E_PROTO)] = "malformed or truncated message",
	[KVS_E_BASE - (KVS_E_VERSION)] = "protocol version not supported",
	[KVS_E_BASE - (KVS_E_OPCODE)] = "unknown opcode",
	[KVS_E_BASE - (KVS_E_TOOBIG)] = "message length over the limit",
	[KVS_E_BASE - (KVS_E_TOOMANY)] = "hash count over the limit",
	[KVS_E_BASE - (KVS_E_LAYOUT)] = "invalid layout",
	[KVS_E_BASE - (KVS_E_ATTACHED)] = "already attached with another layout",
	[KVS_E_BASE - (KVS_E_NOTATTACHED)] = "not attached to a namespace",
	[KVS_E_BASE - (KVS_E_NOLEASE)] = "no such lease",
	[KVS_E_BASE - (KVS_E_NOTOWNER)] = "lease belongs to another connection",
	[KVS_E_BASE - (KVS_E_LEASEKIND)] = "not a write lease",
	[KVS_E_BASE - (KVS_E_FULL)] = "cache full: every evictable block is pinned",
	[KVS_E_BASE - (KVS_E_LIMIT)] = "per-client limit reached",
	[KVS_E_BASE - (KVS_E_DISCONNECTED)] = "daemon connection lost",
	[KVS_E_BASE - (KVS_E_NODAEMON)] = "no daemon listening on the socket",
	[KVS_E_BASE - (KVS_E_DAEMON_RUNNING)] = "another daemon is serving this socket",
	[KVS_E_BASE - (KVS_E_CONFIG)] = "bad configuration value",
	[KVS_E_BASE - (KVS_E_INTERNAL)] = "internal error",
	[KVS_E_BASE - (KVS_E_PERM)] = "not allowed for this uid/gid (--allow-uid, --admin-uid)",
};

const char *kvs_strerror(int err)
{
	if (err == 0)
		return "success";
	if (err < KVS_E_BASE && err > KVS_E_LAST) {
		/* Ranges are negative: KVS_E_LAST < err < KVS_E_BASE. */
		const char *s = kvs_errors[KVS_E_BASE - err];
		return s ? s : "unknown kvshare error";
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}
