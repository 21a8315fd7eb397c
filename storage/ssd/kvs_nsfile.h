/*
 * kvs_nsfile.h - the SSD tier's namespaces file: the layouts of the
 * namespaces whose blocks are on SSD, each with its id, so that a
 * restarted daemon gives the same layouts the same ids (its index names
 * blocks by namespace id).
 *
 * The file is a sequence of namespace records (proto/kvs_ns.h), each
 * appended and fdatasync'ed one at a time. A record of the old form (no
 * id) has the id after the record before it (1 for the first), as ids were
 * positional then; a file may mix both. A later record of an id replaces
 * the earlier one (the id was given to another layout). Files written
 * before the record had its id (the HELLO payload of protocol version 1,
 * byte for byte) load as they are. A torn last record (a crash mid
 * append) ends the list and is trimmed at the next load. The daemon's SSD
 * tier and the SSD filling tool are the only writers.
 *
 * Thread: reentrant (no state but the file).
 */
#ifndef KVS_NSFILE_H
#define KVS_NSFILE_H

#include "kvs_ns.h"

#define KVS_NSFILE_NAME "namespaces"

/* kvs_nsfile_append - append @ns to the file @dir/namespaces (created
 * 0600) and fdatasync it. Errors: -errno, -EINVAL. */
int kvs_nsfile_append(const char *dir, const kvs_ns_layout *ns);

/*
 * kvs_nsfile_load - call @fn(@arg, ns) for each entry of @dir/namespaces in
 * order (ns->id set: the entry's, or for an old one the id after the last),
 * until @fn returns nonzero or an entry is torn or bad; what follows
 * that entry is trimmed from the file. No file: 0 entries.
 * Returns the entries passed to @fn. Errors: -errno (reading), -ENOMEM.
 */
int kvs_nsfile_load(const char *dir,
		    int (*fn)(void *arg, const kvs_ns_layout *ns), void *arg);

#endif /* KVS_NSFILE_H */
