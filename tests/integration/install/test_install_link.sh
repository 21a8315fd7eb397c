#!/usr/bin/env bash
# test_install_link - a program built against the installed libkvshare, as
# the README says (pkg-config), links and runs: with the shared library, and
# with the static one (pkg-config --static: libkvshare.a carries the
# kernels' objects, whose own archive is not installed, and kvshare.pc names
# the libraries they need). Both talk to a kvshared: connect, publish a
# block, look it up, read it back.
#
# Env: KVSHARED, KVSCTL, KVSBENCH (ctest sets them; the build folder is
# KVSHARED's). Exit: 0 pass, 1 fail, 77 skip.
set -u

name=test_install_link
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

need_env KVSHARED KVSCTL KVSBENCH
need_cmd cmake
need_cmd cc
need_cmd pkg-config

build=$(dirname "$KVSHARED")
[ -f "$build/cmake_install.cmake" ] || skip "$build is not a CMake build folder"
# A library built with the sanitizers (KVS_SANITIZE) is linked, as any
# program built against it must be, with them.
san=
grep -q '^KVS_SANITIZE:BOOL=ON$' "$build/CMakeCache.txt" 2>/dev/null &&
	san=-fsanitize=address,undefined
make_tmp kvslink
prefix=$tmp/prefix
if ! cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log" >&2
	bad "cmake --install $build --prefix $prefix"
	exit 1
fi
pc=$(find "$prefix" -name kvshare.pc -path '*/pkgconfig/*' | head -n1)
[ -n "$pc" ] || { bad "no kvshare.pc under $prefix"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
check "libkvshare.a is installed" [ -f "$libdir/libkvshare.a" ]
export PKG_CONFIG_PATH=$libdir/pkgconfig
unset LD_LIBRARY_PATH

cat >"$tmp/app.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <kvshare.h>

/* app SOCKET MODEL: publish one block of a two-block prompt, find it, read it. */
int main(int argc, char **argv)
{
	kvs_layout layout = {
		.model = "", .layers = 2, .kv_heads = 2, .head_dim = 64,
		.block_tokens = 16, .tp_rank = 0, .tp_size = 1,
		.dtype = KVS_DTYPE_FP16,
	};
	static unsigned char in[1 << 16], out[1 << 16];
	uint32_t tokens[32];
	kvs_client *c;
	kvs_hash h[2];
	kvs_block b[2];
	kvs_lease lease;
	int rc, n;

	if (argc != 3)
		return 2;
	layout.model = argv[2];
	for (int i = 0; i < 32; i++)
		tokens[i] = 1000 + i;
	rc = kvs_connect(argv[1], &layout, &c);
	if (rc < 0) {
		fprintf(stderr, "kvs_connect: %s\n", kvs_strerror(rc));
		return 1;
	}
	if (kvs_block_bytes(c) > sizeof(in)) {
		fprintf(stderr, "block of %llu bytes\n",
			(unsigned long long)kvs_block_bytes(c));
		return 1;
	}
	memset(in, 0x5a, sizeof(in));
	n = kvs_hash_tokens(c, tokens, 32, h, 2);
	rc = kvs_reserve(c, h, 1, &lease, b);
	if (n != 2 || rc != 1 ||
	    kvs_block_write(c, &b[0], in, kvs_block_bytes(c)) < 0 ||
	    kvs_commit(c, lease) < 0) {
		fprintf(stderr, "publish: n %d rc %d\n", n, rc);
		return 1;
	}
	rc = kvs_lookup(c, h, 2, &lease, b);
	if (rc != 1 || kvs_block_read(c, &b[0], out, kvs_block_bytes(c)) < 0 ||
	    memcmp(in, out, kvs_block_bytes(c)) != 0) {
		fprintf(stderr, "lookup: %d hits\n", rc);
		return 1;
	}
	printf("linked: 1 of 2 blocks hit, %llu bytes read back\n",
	       (unsigned long long)kvs_block_bytes(c));
	kvs_release(c, lease);
	kvs_close(c);
	return 0;
}
EOF

# the shared library, as the README builds an app
if cc $san "$tmp/app.c" $(pkg-config --cflags --libs kvshare) -o "$tmp/app_shared" \
	2>"$tmp/cc_shared.log"; then
	ok
else
	bad "cc against the shared library: $(cat "$tmp/cc_shared.log")"
fi
# the static one: the same flags with --static, libkvshare.a named
static_libs=$(pkg-config --static --libs kvshare | sed 's/-lkvshare\b/-l:libkvshare.a/')
if cc $san "$tmp/app.c" $(pkg-config --cflags kvshare) $static_libs -o "$tmp/app_static" \
	2>"$tmp/cc_static.log"; then
	ok
else
	bad "cc against the static library ($static_libs): $(cat "$tmp/cc_static.log")"
fi
if [ -x "$tmp/app_static" ]; then
	check "the static program does not load libkvshare.so" \
		eval '! readelf -d "$tmp/app_static" | grep -q "libkvshare\.so"'
fi

sock=$tmp/kvshared.sock
if start_ready "$sock" "$tmp/kvshared.log" --host-size 16M --gpu off; then
	ok
	for kind in shared static; do
		app=$tmp/app_$kind
		[ -x "$app" ] || continue
		if [ "$kind" = shared ]; then
			out=$(LD_LIBRARY_PATH=$libdir "$app" "$sock" "$kind" 2>&1)
		else
			out=$("$app" "$sock" "$kind" 2>&1)
		fi
		rc=$?
		check "the $kind program runs (rc $rc: $out)" [ "$rc" -eq 0 ]
		check "the $kind program hit its block ($out)" grep -q '^linked: 1 of 2' <<<"$out"
	done
else
	bad "kvshared did not become ready"
	cat "$tmp/kvshared.log" >&2
fi

echo "$name: $pass checks passed, $fail failed"
((fail == 0))
