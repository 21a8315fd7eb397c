#!/usr/bin/env bash
# deps.sh - install the Debian packages kvshare needs to build, test and run.
#
# Silent and quick when everything is already installed (it only asks dpkg).
# Otherwise it runs apt-get update + apt-get install as root, through sudo
# when not root. Set KVS_SKIP_DEPS=1 to skip it (a non-Debian system that
# provides the same libraries some other way).
#
# When another apt or dpkg holds its locks (unattended-upgrades on a fresh
# machine, a second build), it waits for them, up to KVS_APT_LOCK_TIMEOUT
# seconds (default 300) in all, then fails saying which lock is held.
#
# For tests only (tests/integration/install/test_deps_lock.sh): KVS_DEPS_PACKAGES
# replaces the package list (space-separated).
set -euo pipefail

PACKAGES=(
	build-essential # gcc, make, libc headers
	cmake
	pkg-config
	libevent-dev  # the daemon's event loop
	liburing-dev  # SSD tier (found now, used in a later stage)
	liblmdb-dev   # SSD index (found now, used in a later stage)
	libxxhash-dev # block hashes
	libjansson-dev # the daemon's POST /v1/prefix (JSON bodies)
	libzmq3-dev   # the daemon's vLLM KV events (--kv-events: ZMQ PUB and ROUTER sockets)
	libmsgpack-dev # the daemon's vLLM KV events (msgpack, as vLLM's msgspec decodes it)
	libssl-dev    # OpenSSL 3: TLS to the remote tier's cluster, the value MAC (HMAC-SHA-256)
	python3       # tests parse JSON with it
	python3-venv  # scripts/python_env.sh: the venv of the Python and vLLM tests
	python3-dev   # Python.h: torch compiles C++ in vLLM's TP=2 workers (tests/vllm/test_vllm_tp.py)
	procps        # ps, pgrep: tests and scripts inspect processes
	openssl       # tests: the TLS cluster's certificates (tests/support/redis_cluster.c)
	redis-server  # runtime only: kvsbench ops/data compare against it (not built against)
	fio           # benchmark only: kvsbench ssd runs it beside the SSD tier (n/a without it)
	clang         # tests/fuzz/run.sh: libFuzzer targets
	libclang-rt-14-dev # libFuzzer and the sanitizer runtimes for clang
	valgrind      # tests/stress/valgrind.sh: memcheck of the daemon
	tmux          # tests/integration/tools/test_top.sh: kvsctl top in a pseudo-terminal
)

die() {
	echo "deps.sh: $*" >&2
	exit 1
}

[[ ${KVS_SKIP_DEPS:-0} == 1 ]] && exit 0
if [[ -n ${KVS_DEPS_PACKAGES:-} ]]; then
	read -ra PACKAGES <<<"$KVS_DEPS_PACKAGES"
fi
lock_timeout=${KVS_APT_LOCK_TIMEOUT:-300}
[[ $lock_timeout =~ ^[0-9]+$ ]] || die "KVS_APT_LOCK_TIMEOUT='$lock_timeout' is not a number of seconds"

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
	die "dpkg-query/apt-get not found: this script installs Debian packages" \
		"(Debian 12). Install the equivalents of: ${PACKAGES[*]}," \
		"then rerun with KVS_SKIP_DEPS=1."
fi

# missing_packages PKG... - print those of PKG that are not installed, in one
# dpkg-query (it names the installed ones; unknown ones only go to stderr).
missing_packages() {
	local -A installed=()
	local pkg status

	while read -r pkg status; do
		[[ $status == installed ]] && installed[${pkg%%:*}]=1
	done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "$@" 2>/dev/null || true)
	for pkg in "$@"; do
		[[ -n ${installed[$pkg]:-} ]] || echo "$pkg"
	done
}

mapfile -t missing < <(missing_packages "${PACKAGES[@]}")
((${#missing[@]} == 0)) && exit 0

if ((EUID == 0)); then
	as_root=()
elif command -v sudo >/dev/null 2>&1; then
	as_root=(sudo)
else
	die "missing Debian packages: ${missing[*]}; installing them needs root," \
		"and sudo is not installed. As root, run:" \
		"apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
fi

# The locks apt-get and dpkg take (fcntl locks on these files): the dpkg
# frontend lock and the dpkg lock (install), the lists lock (update), the
# archives lock (downloads).
APT_LOCKS=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock
	/var/lib/apt/lists/lock /var/cache/apt/archives/lock)
deadline=$((SECONDS + lock_timeout))

# held_locks - print those of APT_LOCKS that some process holds now, from
# /proc/locks (by inode: no fuser or python on a fresh system, and flock(1)
# cannot see apt's fcntl locks).
held_locks() {
	local f ino held=()
	for f in "${APT_LOCKS[@]}"; do
		ino=$(stat -c %i "$f" 2>/dev/null) || continue
		awk -v ino="$ino" '{ n = split($(NF - 2), a, ":")
			if (a[n] == ino) found = 1 } END { exit !found }' \
			/proc/locks 2>/dev/null && held+=("$f")
	done
	echo "${held[*]}"
}

# wait_apt_locks - return once no apt/dpkg lock is held; die past the
# deadline. A poll (once a second), since apt offers nothing to wait on.
wait_apt_locks() {
	local held said=0
	while held=$(held_locks) && [[ -n $held ]]; do
		if ((SECONDS >= deadline)); then
			die "another apt-get or dpkg still holds $held after" \
				"${lock_timeout}s; gave up (KVS_APT_LOCK_TIMEOUT=N waits" \
				"longer). Missing packages: ${missing[*]}"
		fi
		if ((!said)); then
			echo "deps.sh: waiting for another apt-get or dpkg to finish" \
				"(it holds $held; up to ${lock_timeout}s)" >&2
			said=1
		fi
		sleep 1
	done
	((!said)) || echo "deps.sh: the apt locks are free" >&2
}

# apt_run ARGS... - apt-get ARGS, after waiting for the locks; run again
# while it fails on a lock taken in between and time is left. install also
# waits for the dpkg lock itself (DPkg::Lock::Timeout); update has no such
# option, hence the retry. Output appended to $log.
apt_run() {
	local left
	while :; do
		wait_apt_locks
		left=$((deadline - SECONDS))
		((left > 0)) || left=1
		if "${apt[@]}" -o "DPkg::Lock::Timeout=$left" "$@" >"$once" 2>&1; then
			cat "$once" >>"$log"
			return 0
		fi
		cat "$once" >>"$log"
		if grep -qE 'Could not get lock|Unable to (acquire|lock)' "$once" &&
			((SECONDS < deadline)); then
			echo "deps.sh: apt-get $1 found a lock taken; waiting again" >&2
			sleep 1 # a lock /proc/locks does not show must not spin
			continue
		fi
		return 1
	done
}

echo "deps.sh: installing Debian packages: ${missing[*]}" >&2
# $log: all apt-get output, kept when apt-get fails (the message names it);
# $once: one run's, to tell a lock failure from any other.
log=$(mktemp -t kvshare-deps.XXXXXX)
once=$(mktemp -t kvshare-deps-apt.XXXXXX)
keep_log=0
trap 'rm -f "$once"; ((keep_log)) || rm -f "$log"' EXIT
# env, so that DEBIAN_FRONTEND survives sudo's environment reset.
apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y)
if ! { apt_run update && apt_run install --no-install-recommends "${missing[@]}"; }; then
	tail -n 30 "$log" >&2
	# shellcheck disable=SC2034 # read by the EXIT trap
	keep_log=1
	die "apt-get failed (full log: $log)"
fi

mapfile -t still < <(missing_packages "${missing[@]}")
((${#still[@]} == 0)) || die "still not installed after apt-get install: ${still[*]}"
echo "deps.sh: done" >&2
