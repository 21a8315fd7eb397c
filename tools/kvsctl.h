/* kvsctl.h - subcommands of kvsctl that live outside kvsctl.c. Each takes the
 * socket (NULL: the default) and its own argv (argv[0] is its name), and
 * returns the exit code: 0 ok, 1 failed, 2 usage. */
#ifndef KVSCTL_H
#define KVSCTL_H

int kvsctl_ls(const char *sock, int argc, char **argv);
int kvsctl_inspect(const char *sock, int argc, char **argv);
int kvsctl_evict(const char *sock, int argc, char **argv);
int kvsctl_flush(const char *sock, int argc, char **argv);
int kvsctl_pin(const char *sock, int argc, char **argv);
int kvsctl_unpin(const char *sock, int argc, char **argv);
int kvsctl_watch(const char *sock, int argc, char **argv);
int kvsctl_top(const char *sock, int argc, char **argv);
int kvsctl_verify(const char *sock, int argc, char **argv);

#endif
