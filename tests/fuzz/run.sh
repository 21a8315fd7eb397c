#!/usr/bin/env bash
# run.sh - build the fuzz targets with clang + libFuzzer and run each one.
#
#   tests/fuzz/run.sh [SECONDS]     (default 30; 0 replays the corpus only)
#
# Each target (tests/fuzz/fuzz_*.c) is built with ASan and UBSan into
# ${FUZZ_DIR:-build/fuzz} and run for SECONDS, the targets side by side on up
# to $(nproc) cores, starting from its seed corpus tests/fuzz/corpus/<target>/
# (read only) plus the inputs earlier runs found (FUZZ_DIR/corpus/<target>/).
# Prints each target's total executions. Crash inputs are kept as
# FUZZ_DIR/crashes/<target>-crash-<sha1> (or -timeout-, -oom-, -leak-): replay
# one with FUZZ_DIR/<target> FILE.
#
# Exit 0 when no target found anything, 1 on a crash (or a build failure),
# 77 when clang or its libFuzzer runtime is missing (with the reason).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
SECS=${1:-30}
FUZZ_DIR=${FUZZ_DIR:-build/fuzz}
CLANG=${CLANG:-clang}
SAN=-fsanitize=fuzzer,address,undefined
CFLAGS=(-g -O1 "$SAN" -fno-sanitize-recover=undefined
	-Wall -Wextra -Wno-unused-parameter -Iproto -Iservice/server -Iservice/cache -Iservice/tiers -Iservice/config
	-Iservice/base -Istorage/host -Istorage/ssd -Istorage/remote -Istorage/gpu)

# Each target and the sources it needs besides its own file.
TARGETS=(fuzz_wire fuzz_admin fuzz_config fuzz_ssd fuzz_remote)
declare -A SOURCES=(
	[fuzz_wire]="proto/wire.c proto/wire_desc.c"
	[fuzz_admin]="proto/wire.c proto/wire_admin.c"
	[fuzz_ssd]="$(echo storage/ssd/ssd*.c) storage/ssd/index.c -luring -lxxhash -llmdb"
	[fuzz_remote]="storage/remote/resp.c storage/remote/remote_cluster_slots.c storage/remote/remote_value.c proto/ns.c -lxxhash -lcrypto"
	# Every eviction policy: config.c checks --eviction-policy names
	# against the registry, which links them all.
	[fuzz_config]="$(echo service/config/config*.c service/cache/policy*.c)
		service/cache/table.c service/base/log.c proto/socket_path.c"
)
# The parsers print a line for each bad input: keep libFuzzer's output only.
declare -A EXTRA=([fuzz_config]="-close_fd_mask=3")

skip() {
	echo "fuzz/run.sh: SKIP: $*"
	exit 77
}

[[ $SECS =~ ^[0-9]+$ ]] || { echo "usage: tests/fuzz/run.sh [SECONDS]" >&2; exit 2; }
command -v "$CLANG" >/dev/null 2>&1 ||
	skip "$CLANG not found (Debian: apt-get install clang libclang-rt-14-dev)"
mkdir -p "$FUZZ_DIR/crashes"
probe=$(mktemp -d -t kvs-fuzz-probe.XXXXXX)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' \
	>"$probe/probe.c"
"$CLANG" -fsanitize=fuzzer,address,undefined "$probe/probe.c" -o "$probe/probe" \
	>"$probe/log" 2>&1 ||
	skip "$CLANG cannot link -fsanitize=fuzzer (libFuzzer runtime missing?" \
		"Debian: apt-get install libclang-rt-14-dev): $(head -c 300 "$probe/log")"

for t in "${TARGETS[@]}"; do
	# shellcheck disable=SC2086 # SOURCES are word lists
	if ! "$CLANG" "${CFLAGS[@]}" "tests/fuzz/$t.c" ${SOURCES[$t]} -o "$FUZZ_DIR/$t" \
		>"$FUZZ_DIR/$t.build.log" 2>&1; then
		cat "$FUZZ_DIR/$t.build.log" >&2
		echo "fuzz/run.sh: FAIL: $t does not build" >&2
		exit 1
	fi
	# Warnings are shown, not fatal: clang warns about things gcc does not.
	[[ -s $FUZZ_DIR/$t.build.log ]] && cat "$FUZZ_DIR/$t.build.log" >&2
done

# Run every target at once when there are cores for it, else one by one.
run_target() {
	local t=$1 len=()

	if ((SECS == 0)); then
		len=(-runs=0)
	else
		len=(-max_total_time="$SECS")
	fi
	mkdir -p "$FUZZ_DIR/corpus/$t"
	# shellcheck disable=SC2086 # EXTRA is a word list
	"$FUZZ_DIR/$t" "${len[@]}" -timeout=5 -error_exitcode=1 -timeout_exitcode=1 \
		-print_final_stats=1 -artifact_prefix="$FUZZ_DIR/crashes/$t-" \
		${EXTRA[$t]:-} "$FUZZ_DIR/corpus/$t" "tests/fuzz/corpus/$t" \
		</dev/null >"$FUZZ_DIR/$t.log" 2>&1
}

declare -A PIDS STATUS
parallel=$(nproc 2>/dev/null || echo 1)
for t in "${TARGETS[@]}"; do
	rm -f "$FUZZ_DIR/$t.log"
	if ((parallel > 1)); then
		run_target "$t" &
		PIDS[$t]=$!
	else
		set +e
		run_target "$t"
		STATUS[$t]=$?
		set -e
	fi
done
for t in "${!PIDS[@]}"; do
	set +e
	wait "${PIDS[$t]}"
	STATUS[$t]=$?
	set -e
done

failed=0
for t in "${TARGETS[@]}"; do
	log=$FUZZ_DIR/$t.log
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	added=$(sed -n 's/^stat::new_units_added: *//p' "$log" | tail -n 1)
	if ((STATUS[$t] == 0)); then
		printf 'fuzz/run.sh: %s: %s executions in %s s, %s new inputs, no crash\n' \
			"$t" "${execs:-?}" "$SECS" "${added:-0}"
		continue
	fi
	failed=1
	printf '\nfuzz/run.sh: FAIL: %s: exit status %d after %s executions\n' \
		"$t" "${STATUS[$t]}" "${execs:-?}" >&2
	# The report: from the target's, the sanitizer's or libFuzzer's first
	# line on (the lines before it are libFuzzer's progress).
	first=$(grep -n -m1 -E '^==[0-9]+==|runtime error|^fuzz_' "$log" | cut -d: -f1)
	if [[ -n $first ]]; then
		sed -n "$first,\$p" "$log" | head -n 80 >&2
	else
		tail -n 60 "$log" >&2
	fi
	sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | while read -r f; do
		echo "fuzz/run.sh: $t input kept as $f (replay: $FUZZ_DIR/$t $f); hex:" >&2
		od -An -tx1 -v "$f" | head -n 32 >&2
	done
done
exit "$failed"
