/* kvsctl.h - subcommands of kvsctl that live outside kvsctl.c. Each takes the
 * socket (NULL: the default) and its own argv (argv[0] is its name), and
 * returns the exit code: 0 ok, 1 failed, 2 usage. */
#ifndef KVSCTL_H
#define KVSCTL_H

#include <stdint.h>

int kvsctl_ls(const char *sock, int argc, char **argv);
int kvsctl_inspect(const char *sock, int argc, char **argv);
int kvsctl_evict(const char *sock, int argc, char **argv);
int kvsctl_flush(const char *sock, int argc, char **argv);
int kvsctl_pin(const char *sock, int argc, char **argv);
int kvsctl_unpin(const char *sock, int argc, char **argv);
int kvsctl_prefix(const char *sock, int argc, char **argv);
int kvsctl_watch(const char *sock, int argc, char **argv);
int kvsctl_top(const char *sock, int argc, char **argv);
int kvsctl_verify(const char *sock, int argc, char **argv);

/* Helpers of kvsctl.c that the command files share. */

/* kvsctl_fail - "kvsctl: WHAT failed: ERROR" on stderr; returns 1. */
int kvsctl_fail(const char *what, int rc);

/* kvsctl_json_str - @s on stdout as a JSON string, quotes included. */
void kvsctl_json_str(const char *s);

/* kvsctl_parse_u32 - @s as a decimal uint32_t into *@out; -EINVAL if not. */
int kvsctl_parse_u32(const char *s, uint32_t *out);

#endif
