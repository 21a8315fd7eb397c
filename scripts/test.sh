#!/usr/bin/env bash
# test.sh - kvshare's test command: everything CI runs, in order.
#
#   scripts/test.sh [extra ctest options, e.g. -R unit]
#
# Installs missing Debian packages (scripts/deps.sh), builds, and runs every
# step below. Stops at the first step that fails and exits with its status
# (for the ctest step, ctest's own). Timeouts per test are set in CMake.
# A valgrind, soak or fuzz step whose script exits 77 (its tool or build is
# missing; it prints why) is reported as skipped, in the closing line too:
# "steps: N passed, N failed, N skipped".
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

# A step script's exit status 77 is a skip (it printed why): the step is
# counted as skipped, not passed (SKIPPABLE lists the steps that may skip).
SKIPPABLE=" step_valgrind step_soak step_fuzz step_python step_wheel "

# The Python package's tests against a real kvshared, and the vLLM end-to-end
# test (real engines, a tiny random model): in the venv scripts/python_env.sh
# makes once outside the repository (a skip when the package index is out of
# reach and the venv is not there yet).
step_python() {
	local py

	py=$(scripts/python_env.sh)
	# --durations: where the step's time goes (most of it: the engines).
	# Two workers, a test file each at a time (pytest-xdist): an engine's
	# start is mostly one core importing torch and vLLM, so two files side
	# by side on 2 cores take 521 s where one after the other took 783.
	BUILD_DIR=$BUILD_DIR "$py" -m pytest -q -p no:cacheprovider --durations=12 \
		-n 2 --dist loadfile client/python/tests tests/vllm
	# The docs' python blocks in this venv (CTest's docs.python skips them
	# while the venv does not exist yet; 77: every block was skipped).
	KVS_DOCS_PYTHON=$py python3 tests/docs/run_docs.py --kind python --source . \
		--build "$BUILD_DIR" || (($? == 77))
}

# The wheel as a user installs it: built (scripts/wheel.sh, its own Release
# build in build-wheel/), repaired, installed into a new venv and run
# (tests/wheel/check.sh; a skip when the package index is out of reach).
step_wheel() {
	tests/wheel/check.sh
}

step_valgrind() {
	export BUILD_DIR
	tests/stress/valgrind.sh
}

# 64 clients for SOAK_SECONDS (20) with kills and eviction, then no leaked
# lease, pin, slot or fd, flat RSS and no corrupt byte (tests/stress/soak.sh).
step_soak() {
	export BUILD_DIR
	tests/stress/soak.sh "${SOAK_SECONDS:-20}"
}

step_fuzz() {
	tests/fuzz/run.sh "${FUZZ_SECONDS:-30}"
}

# The steps, in order: "function|title". Later stages add theirs here.
STEPS=(
	"step_build|build ($BUILD_DIR, -Werror)"
	"step_ctest|unit and integration tests (ctest)"
	"step_asan|the tests under ASan+UBSan ($ASAN_BUILD_DIR)"
	"step_valgrind|valgrind memcheck of kvshared (tests/stress/valgrind.sh)"
	"step_soak|soak: 64 clients for ${SOAK_SECONDS:-20}s (tests/stress/soak.sh)"
	"step_fuzz|fuzz each target ${FUZZ_SECONDS:-30}s (tests/fuzz/run.sh)"
	"step_python|Python package and vLLM end to end (pytest client/python/tests tests/vllm)"
	"step_wheel|the wheel: build, pip install into a new venv, run (tests/wheel/check.sh)"
)

n=${#STEPS[@]}
i=0
skipped=0
skipped_names=()
# The closing line CI reads: "steps: N passed, N failed", then ", N skipped"
# when a step skipped.
summary() {
	local line

	line=$(printf 'steps: %d passed, %d failed' "$1" "$2")
	((skipped > 0)) && line+=$(printf ', %d skipped' "$skipped")
	printf '%s\n' "$line"
}
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
	if ((status == 77)) && [[ $SKIPPABLE == *" $fn "* ]]; then
		skipped=$((skipped + 1))
		skipped_names+=("$title")
		printf '=== test.sh [%d/%d] %s: SKIPPED (%ds; the reason is above) ===\n' \
			"$i" "$n" "$title" $((SECONDS - start))
		continue
	fi
	if ((status != 0)); then
		printf '\n=== test.sh: FAILED at step %d/%d (%s): exit status %d ===\n' \
			"$i" "$n" "$title" "$status" >&2
		summary $((i - 1 - skipped)) 1
		exit "$status"
	fi
	printf '=== test.sh [%d/%d] %s: ok (%ds) ===\n' "$i" "$n" "$title" \
		$((SECONDS - start))
done
if ((skipped > 0)); then
	printf '\n=== test.sh: %d steps passed, %d skipped: %s ===\n' \
		$((n - skipped)) "$skipped" "$(IFS=';'; echo "${skipped_names[*]}")"
else
	printf '\n=== test.sh: all %d steps passed ===\n' "$n"
fi
# The plain closing line CI reads (CTest's own summary is printed above).
summary $((n - skipped)) 0
