#!/usr/bin/env bash
# test_build_dir - scripts/build.sh and a build folder made for another tree.
#
# scripts/build_dir.sh on fake CMakeCache.txt files: another source folder,
# another build folder (a copied checkout), this tree's own, no cache; the
# reset removes what CMake generated and keeps the rest. Then the real
# build.sh on a tree of one C file: configured and built in tree a, copied
# with cp -a to b, b's source changed; b's build.sh must configure b and
# build b's source (before, it printed CMake's error and rebuilt a).
#
# Exit: 0 pass, 1 fail, 77 skip (no cmake or cc).
set -u

name=test_build_dir
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../lib.sh"
src=$(cd "$here/../../.." && pwd)
. "$src/scripts/build_dir.sh"

make_tmp kvsbuilddir
tmp=$(cd "$tmp" && pwd -P)

# fake_cache DIR HOME CACHEFILE_DIR: a CMakeCache.txt with those two entries.
fake_cache() {
	mkdir -p "$1"
	printf '# This is the CMakeCache file.\nCMAKE_CACHEFILE_DIR:INTERNAL=%s\nCMAKE_HOME_DIRECTORY:INTERNAL=%s\n' \
		"$3" "$2" >"$1/CMakeCache.txt"
}

mkdir -p "$tmp/t/src" "$tmp/t/other"
check "no cache: not foreign" eval '! kvs_build_dir_foreign "$tmp/t/src/none" "$tmp/t/src"'
mkdir -p "$tmp/t/src/empty"
check "a folder without a cache: not foreign" \
	eval '! kvs_build_dir_foreign "$tmp/t/src/empty" "$tmp/t/src"'
fake_cache "$tmp/t/src/b1" "$tmp/t/src" "$tmp/t/src/b1"
check "this tree's cache: not foreign" eval '! kvs_build_dir_foreign "$tmp/t/src/b1" "$tmp/t/src"'
# a relative build folder and source folder, as build.sh passes them
check "this tree's cache, relative paths: not foreign" \
	eval '! (cd "$tmp/t/src" && kvs_build_dir_foreign b1 .)'
# paths through symbolic links, as CMake may record them, lead here
ln -s "$tmp/t/src" "$tmp/t/srclink"
fake_cache "$tmp/t/src/b4" "$tmp/t/srclink" "$tmp/t/srclink/b4"
check "this tree's cache through a link: not foreign" \
	eval '! kvs_build_dir_foreign "$tmp/t/src/b4" "$tmp/t/src"'
check "a build folder given through a link: not foreign" \
	eval '! kvs_build_dir_foreign "$tmp/t/srclink/b4" "$tmp/t/srclink"'
fake_cache "$tmp/t/src/b2" "$tmp/t/other" "$tmp/t/src/b2"
why=$(kvs_build_dir_foreign "$tmp/t/src/b2" "$tmp/t/src")
check "another source folder: foreign" [ $? -eq 0 ]
check "it says which source folder ($why)" grep -qF "$tmp/t/other" <<<"$why"
fake_cache "$tmp/t/src/b3" "$tmp/t/src" "$tmp/t/other/b3"
why=$(kvs_build_dir_foreign "$tmp/t/src/b3" "$tmp/t/src")
check "another build folder: foreign" [ $? -eq 0 ]
check "it says which build folder ($why)" grep -qF "$tmp/t/other/b3" <<<"$why"
printf 'garbage\n' >"$tmp/t/src/empty/CMakeCache.txt"
check "a cache with no paths: foreign" \
	eval 'kvs_build_dir_foreign "$tmp/t/src/empty" "$tmp/t/src" >/dev/null'

# the reset: CMake's files go, the rest stays
r=$tmp/t/reset
mkdir -p "$r/CMakeFiles/x.dir" "$r/sub/CMakeFiles/y.dir" "$r/sub/keep"
touch "$r/CMakeCache.txt" "$r/Makefile" "$r/cmake_install.cmake" "$r/CTestTestfile.cmake" \
	"$r/.kvs-configure-args" "$r/CMakeFiles/x.dir/x.c.o" "$r/sub/CMakeFiles/y.dir/y.c.o" \
	"$r/sub/Makefile" "$r/kvshared" "$r/sub/keep/notes.txt"
kvs_build_dir_reset "$r"
left=$(cd "$r" && find . -mindepth 1 | sort | tr '\n' ' ')
check "reset leaves only the non-CMake files (left: $left)" \
	[ "$left" = "./kvshared ./sub ./sub/keep ./sub/keep/notes.txt " ]

# The real build.sh on a tree of one C file, copied with cp -a.
command -v cmake >/dev/null && command -v cc >/dev/null ||
	skip "cmake or cc is not installed (the fake-cache checks passed: $pass)"
a=$tmp/a
mkdir -p "$a/scripts"
cp "$src/scripts/build.sh" "$src/scripts/build_dir.sh" "$src/scripts/deps.sh" "$a/scripts/"
cat >"$a/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(tiny LANGUAGES C)
add_executable(tiny tiny.c)
EOF
printf '#include <stdio.h>\nint main(void) { puts("tree a"); return 0; }\n' >"$a/tiny.c"
export KVS_SKIP_DEPS=1
unset BUILD_DIR
if ! "$a/scripts/build.sh" >"$tmp/a.log" 2>&1; then
	cat "$tmp/a.log" >&2
	bad "build.sh in tree a"
fi
check "tree a builds tree a" grep -qx 'tree a' <<<"$("$a/build/tiny")"

cp -a "$a" "$tmp/b"
b=$tmp/b
sed -i 's/tree a/tree b/' "$b/tiny.c"
"$b/scripts/build.sh" >"$tmp/b.log" 2>&1
rc=$?
check "build.sh in the copy exits 0 (rc $rc: $(cat "$tmp/b.log"))" [ "$rc" -eq 0 ]
check "it says the folder belonged to another tree" grep -q 'belongs to another tree' "$tmp/b.log"
check "the copy's build is configured for the copy" \
	grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$b" "$b/build/CMakeCache.txt"
check "the copy builds the copy's source" grep -qx 'tree b' <<<"$("$b/build/tiny")"
check "tree a's program is untouched" grep -qx 'tree a' <<<"$("$a/build/tiny")"
"$b/scripts/build.sh" >"$tmp/b2.log" 2>&1
check "a second build.sh in the copy is quiet about other trees" \
	eval '! grep -q "another tree" "$tmp/b2.log"'

# A CMake error stops build.sh with a nonzero status: in the build step
# (CMakeLists.txt changed, the same arguments) and in configure (new ones).
printf 'this is not cmake(\n' >>"$b/CMakeLists.txt"
"$b/scripts/build.sh" >"$tmp/b3.log" 2>&1
rc=$?
check "a broken CMakeLists.txt fails the build step (rc $rc)" [ "$rc" -ne 0 ]
"$b/scripts/build.sh" -DX=1 >"$tmp/b4.log" 2>&1
rc=$?
check "a broken CMakeLists.txt fails configure (rc $rc)" [ "$rc" -ne 0 ]

echo "$name: $pass checks passed, $fail failed"
((fail == 0))
