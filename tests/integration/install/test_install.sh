#!/usr/bin/env bash
# test_install - `cmake --install` into a prefix the loader does not search,
# then every installed program runs from there with no LD_LIBRARY_PATH: the
# tools find libkvshare through their install RPATH ($ORIGIN/../<libdir>).
# kvsctl and kvsbench then talk to a kvshared started from the install.
#
# Env: KVSHARED, KVSCTL, KVSBENCH (paths of the built binaries; the build
# folder is KVSHARED's; unset: skip). Exit: 0 pass, 1 fail, 77 skip.
set -u

name=test_install
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL KVSBENCH
need_cmd cmake

build=$(dirname "$KVSHARED")
[ -f "$build/cmake_install.cmake" ] || skip "$build is not a CMake build folder"
make_tmp kvsinst
prefix=$tmp/prefix

if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log" >&2
	bad "cmake --install $build --prefix $prefix"
	exit 1
fi
ok

# Whatever the caller's environment says, the installed programs must not
# need it (nor find the build tree's library through it).
unset LD_LIBRARY_PATH

progs=()
for p in "$prefix"/bin/*; do
	[ -x "$p" ] && progs+=("$p")
done
check "three programs installed (got: ${progs[*]##*/})" [ "${#progs[@]}" -eq 3 ]
for p in "$prefix"/bin/{kvshared,kvsctl,kvsbench}; do
	check "${p##*/} is installed" [ -x "$p" ]
done

# the public headers are installed and compile from the prefix alone
# (kvshare.h includes kvs_types.h, the vocabulary)
for h in kvs_types.h kvshare.h kvshare_admin.h; do
	check "include/$h is installed" [ -f "$prefix/include/$h" ]
done
printf '#include <kvshare.h>\n#include <kvshare_admin.h>\nint f(void);\nint f(void) { kvs_hash h = { 0, 0 }; return (int)h.lo + KVS_E_PROTO; }\n' \
	>"$tmp/api.c"
if command -v cc >/dev/null; then
	check "the installed headers compile" cc -std=c11 -Wall -Werror -fsyntax-only \
		-I"$prefix/include" "$tmp/api.c"
fi

# every installed program starts: --help exits 0 and prints a usage
for p in "${progs[@]}"; do
	out=$("$p" --help 2>&1)
	rc=$?
	check "${p##*/} --help exits 0 (rc $rc: $out)" [ "$rc" -eq 0 ]
	check "${p##*/} --help prints a usage" grep -qi usage <<<"$out"
done

# the library the tools load is the installed one, not the build tree's
lib=$(ldd "$prefix/bin/kvsctl" | awk '/libkvshare/ {print $3}')
case $lib in
"$prefix"/*) ok ;;
*) bad "kvsctl's libkvshare is $lib, not under $prefix" ;;
esac

# the installed daemon serves the installed tools
sock=$tmp/kvshared.sock
KVSHARED=$prefix/bin/kvshared
KVSCTL=$prefix/bin/kvsctl
if start_ready "$sock" "$tmp/kvshared.log" --host-size 16M --gpu off; then
	ok
	out=$("$KVSCTL" --socket "$sock" stats 2>&1)
	check "installed kvsctl stats (rc $?: $out)" grep -q '^server' <<<"$out"
	out=$("$prefix/bin/kvsbench" --socket "$sock" share --workers 2 \
		--prefix-tokens 256 --suffix-tokens 32 --layers 2 --json-only 2>&1)
	check "installed kvsbench share (rc $?: $out)" \
		grep -q '"failed_workers":0' <<<"$out"
	check "installed kvsbench share verified the hits" \
		grep -q '"corrupt_blocks":0' <<<"$out"
else
	bad "installed kvshared did not become ready"
	cat "$tmp/kvshared.log" >&2
fi

echo "$name: $pass checks passed, $fail failed"
((fail == 0))
