#!/usr/bin/env bash
# deps.sh - install the Debian packages kvshare needs to build, test and run.
#
# Silent and quick when everything is already installed (it only asks dpkg).
# Otherwise it runs apt-get update + apt-get install as root, through sudo
# when not root. Set KVS_SKIP_DEPS=1 to skip it (a non-Debian system that
# provides the same libraries some other way).
set -euo pipefail

PACKAGES=(
	build-essential # gcc, make, libc headers
	cmake
	pkg-config
	libevent-dev  # the daemon's event loop
	liburing-dev  # SSD tier (found now, used in a later stage)
	liblmdb-dev   # SSD index (found now, used in a later stage)
	libxxhash-dev # block hashes
	python3       # tests parse JSON with it
	python3-venv  # scripts/python_env.sh: the venv of the Python and vLLM tests
	procps        # ps, pgrep: tests and scripts inspect processes
	redis-server  # runtime only: kvsbench ops/data compare against it (not built against)
	fio           # benchmark only: kvsbench ssd runs it beside the SSD tier (n/a without it)
	clang         # tests/fuzz/run.sh: libFuzzer targets
	libclang-rt-14-dev # libFuzzer and the sanitizer runtimes for clang
	valgrind      # tests/valgrind.sh: memcheck of the daemon
	tmux          # tests/integration/test_top.sh: kvsctl top in a pseudo-terminal
)

die() {
	echo "deps.sh: $*" >&2
	exit 1
}

[[ ${KVS_SKIP_DEPS:-0} == 1 ]] && exit 0

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

echo "deps.sh: installing Debian packages: ${missing[*]}" >&2
log=$(mktemp -t kvshare-deps.XXXXXX)
# env, so that DEBIAN_FRONTEND survives sudo's environment reset.
apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y)
if ! { "${apt[@]}" update && "${apt[@]}" install --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
	tail -n 30 "$log" >&2
	die "apt-get failed (full log: $log)"
fi
rm -f "$log"

mapfile -t still < <(missing_packages "${missing[@]}")
((${#still[@]} == 0)) || die "still not installed after apt-get install: ${still[*]}"
echo "deps.sh: done" >&2
