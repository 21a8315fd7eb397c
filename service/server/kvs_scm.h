/*
 * kvs_scm.h - fds on a unix-socket message (SCM_RIGHTS), for the three
 * senders: a reply carrying a mapping (conn.c), the hand-over
 * (server_handover.c) and systemd's fd store (sdnotify.c).
 */
#ifndef KVS_SCM_H
#define KVS_SCM_H

#include <string.h>
#include <sys/socket.h>

/* kvs_scm_rights - attach @fds[0..n) to @mh, its control data in @ctl
 * (aligned for a cmsghdr, at least CMSG_SPACE(n * sizeof(int)) bytes).
 * CMSG_SPACE pads past CMSG_LEN: the padding is zeroed, no stray bytes. */
static inline void kvs_scm_rights(struct msghdr *mh, void *ctl, const int *fds,
				  size_t n)
{
	struct cmsghdr *cm;

	memset(ctl, 0, CMSG_SPACE(n * sizeof(int)));
	mh->msg_control = ctl;
	mh->msg_controllen = CMSG_SPACE(n * sizeof(int));
	cm = CMSG_FIRSTHDR(mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
}

#endif
