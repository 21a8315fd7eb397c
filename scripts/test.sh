#!/usr/bin/env bash
# test.sh - kvshare's test command: everything CI runs, in order.
#
#   scripts/test.sh [extra ctest options, e.g. -R unit]
#
# Installs missing Debian packages (scripts/deps.sh), builds, and runs every
# step below. Stops at the first step that fails and exits with its status
# (for the ctest step, ctest's own). Timeouts per test are set in CMake.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUILD_DIR=${BUILD_DIR:-build}
CTEST_ARGS=("$@")

step_build() {
	BUILD_DIR=$BUILD_DIR scripts/build.sh
}

step_ctest() {
	# --no-tests=error: an empty test list is a broken build, not a pass.
	ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 --no-tests=error \
		"${CTEST_ARGS[@]}"
}

# The same tests on a build with AddressSanitizer and UBSan (KVS_SANITIZE):
# a sanitizer report fails the process it is in, and with it the test.
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
step_asan() {
	BUILD_DIR=$ASAN_BUILD_DIR scripts/build.sh -DKVS_SANITIZE=ON
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
		ctest --test-dir "$ASAN_BUILD_DIR" --output-on-failure -j2 \
		--no-tests=error "${CTEST_ARGS[@]}"
}

# A step script's exit status 77 is a skip (it printed why): a pass here.
skip_ok() {
	local status=0

	"$@" || status=$?
	((status == 77)) && return 0
	return "$status"
}

step_valgrind() {
	export BUILD_DIR
	skip_ok tests/valgrind.sh
}

# 64 clients for SOAK_SECONDS (20) with kills and eviction, then no leaked
# lease, pin, slot or fd, flat RSS and no corrupt byte (tests/soak.sh).
step_soak() {
	export BUILD_DIR
	skip_ok tests/soak.sh "${SOAK_SECONDS:-20}"
}

step_fuzz() {
	skip_ok tests/fuzz/run.sh "${FUZZ_SECONDS:-30}"
}

# The steps, in order: "function|title". Later stages add theirs here.
STEPS=(
	"step_build|build ($BUILD_DIR, -Werror)"
	"step_ctest|unit and integration tests (ctest)"
	"step_asan|the tests under ASan+UBSan ($ASAN_BUILD_DIR)"
	"step_valgrind|valgrind memcheck of kvshared (tests/valgrind.sh)"
	"step_soak|soak: 64 clients for ${SOAK_SECONDS:-20}s (tests/soak.sh)"
	"step_fuzz|fuzz each target ${FUZZ_SECONDS:-30}s (tests/fuzz/run.sh)"
)

n=${#STEPS[@]}
i=0
for entry in "${STEPS[@]}"; do
	i=$((i + 1))
	fn=${entry%%|*}
	title=${entry#*|}
	printf '\n=== test.sh [%d/%d] %s ===\n' "$i" "$n" "$title"
	start=$SECONDS
	# A subshell with errexit on, run outside any || list so that errexit
	# holds inside the step's function too.
	set +e
	(
		set -e
		"$fn"
	)
	status=$?
	set -e
	if ((status != 0)); then
		printf '\n=== test.sh: FAILED at step %d/%d (%s): exit status %d ===\n' \
			"$i" "$n" "$title" "$status" >&2
		printf 'steps: %d passed, 1 failed\n' $((i - 1))
		exit "$status"
	fi
	printf '=== test.sh [%d/%d] %s: ok (%ds) ===\n' "$i" "$n" "$title" \
		$((SECONDS - start))
done
printf '\n=== test.sh: all %d steps passed ===\n' "$n"
# The plain closing line CI reads (CTest's own summary is printed above).
printf 'steps: %d passed, 0 failed\n' "$n"
