#!/usr/bin/env bash
# build.sh - install missing dependencies, then configure and build kvshare.
#
#   scripts/build.sh [extra cmake -D options]
#
# Builds into ${BUILD_DIR:-build} (relative to the repository root) with
# warnings as errors. Extra arguments go to the configure step, e.g.
#   BUILD_DIR=build-asan scripts/build.sh -DKVS_SANITIZE=ON
# Running it again only rebuilds what changed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build}

scripts/deps.sh

# A build folder made for another tree (copied with it, or another
# checkout's): configuring it here fails and its Makefiles build the other
# tree. Start it again for this one.
. scripts/build_dir.sh
if why=$(kvs_build_dir_foreign "$BUILD_DIR" .); then
	echo "build.sh: $BUILD_DIR belongs to another tree ($why):" \
		"removing its CMake files and configuring it for this tree" >&2
	kvs_build_dir_reset "$BUILD_DIR"
fi

# Configure when the folder is new or was configured with other arguments;
# otherwise the build step alone reruns CMake if a CMakeLists.txt changed.
# Configure's chatter is shown only when it fails.
args=(-DKVS_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@")
stamp=$BUILD_DIR/.kvs-configure-args
if [[ ! -f $BUILD_DIR/CMakeCache.txt || ! -f $stamp ||
	"$(<"$stamp")" != "${args[*]}" ]]; then
	rm -f "$stamp"
	mkdir -p "$BUILD_DIR"
	log=$BUILD_DIR/configure.log
	if ! cmake -S . -B "$BUILD_DIR" "${args[@]}" >"$log" 2>&1; then
		cat "$log" >&2
		echo "build.sh: cmake configure failed (log: $log)" >&2
		exit 1
	fi
	# Warnings (a deprecated call, a missing optional package) are worth
	# seeing even when configure succeeds.
	grep -A8 -E '^CMake (Warning|Deprecation Warning)' "$log" >&2 || true
	printf '%s' "${args[*]}" >"$stamp"
fi

cmake --build "$BUILD_DIR" -j"$(nproc)"
