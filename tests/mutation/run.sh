#!/usr/bin/env bash
# run.sh - the mutation check: put one-line bugs into a scratch copy of the
# tree, one at a time, and see whether the unit and integration tests catch
# each of them.
#
#   tests/mutation/run.sh [--check] [LIST]
#
# LIST is tests/mutation/mutations.txt by default (its header gives the
# format). The tracked and untracked-not-ignored files of this working tree
# are copied into a mktemp directory (the tree itself is never changed),
# configured once (RelWithDebInfo, warnings not fatal: a mutation may leave
# a variable unused) and built; the tests must pass there first. Then for
# each mutation: apply it, rebuild incrementally (one build dir: only what
# depends on the changed file), run every CTest test (ctest -j2,
# --stop-on-failure, each test under its CMake timeout and the whole run
# under MUTATION_TIMEOUT seconds, 300 by default), and restore the file.
#   caught:   the build is fine and a test failed (or the run timed out);
#   SURVIVED: every test passed;
#   broken:   the entry is stale (its text is not found exactly once) or the
#             mutated tree does not build: the entry needs fixing.
# A line per mutation, then "mutations: N caught, N survived, N broken"
# with the names. Exit 0 when every mutation was caught, 1 when one survived
# or an entry is broken, 2 when the check could not run (the unmutated tests
# fail, no cmake).
#
# A mutation of a Python file (client/python/...) is checked by the Python
# package's own tests instead (pytest client/python/tests, against the
# scratch copy's package and build, in the venv scripts/python_env.sh
# makes), not rebuilt; the vLLM end-to-end tests are not run per mutation.
#
# --check only validates LIST against the tree (each text found exactly
# once) without building anything.
#
# Environment: MUTATION_ONLY (an extended regex: only mutations whose name
# matches), MUTATION_TIMEOUT, MUTATION_KEEP=1 (keep the scratch directory),
# TMPDIR. CPU-heavy (a build and the whole suite per mutation): a tool to
# run before a release, not in every CI run. About 30 s a mutation on 2 cores.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
check_only=0
if [[ ${1:-} == --check ]]; then
	check_only=1
	shift
fi
list=${1:-$root/tests/mutation/mutations.txt}
only=${MUTATION_ONLY:-}
limit=${MUTATION_TIMEOUT:-300}

die() {
	echo "mutation: $*" >&2
	exit 2
}

[[ -f $list ]] || die "no list $list"
command -v python3 >/dev/null || die "python3 is required"

# apply SRC_ROOT NAME FILE ORIG REPL - replace the one occurrence of ORIG
# (with \n and \t escapes) in SRC_ROOT/FILE; with REPL empty, only check.
# Exit 0 done, 3 stale (not found exactly once).
apply() {
	python3 - "$@" <<'EOF'
import sys
root, name, path, orig, repl = sys.argv[1:6]
unesc = lambda s: s.replace('\\n', '\n').replace('\\t', '\t')
orig = unesc(orig)
try:
    text = open(root + '/' + path).read()
except OSError as e:
    print(f"mutation: {name}: {e}", file=sys.stderr)
    sys.exit(3)
n = text.count(orig)
if n != 1:
    print(f"mutation: {name}: the original text occurs {n} times in {path}",
          file=sys.stderr)
    sys.exit(3)
if repl:
    open(root + '/' + path, 'w').write(text.replace(orig, unesc(repl)))
EOF
}

# The entries: name, file, original, replacement, what.
names=() files=() origs=() repls=() whats=()
while IFS= read -r line || [[ -n $line ]]; do
	[[ -z ${line// /} || $line == \#* ]] && continue
	rest=$line
	fields=()
	while [[ $rest == *" @@ "* ]]; do
		fields+=("${rest%% @@ *}")
		rest=${rest#* @@ }
	done
	fields+=("$rest")
	if ((${#fields[@]} != 5)); then
		echo "mutation: bad line (want 5 fields split by ' @@ '): $line" >&2
		exit 2
	fi
	[[ -n $only && ! ${fields[0]} =~ $only ]] && continue
	names+=("${fields[0]}")
	files+=("${fields[1]}")
	origs+=("${fields[2]}")
	repls+=("${fields[3]}")
	whats+=("${fields[4]}")
done <"$list"
((${#names[@]} > 0)) || die "no mutation selected"

if ((check_only)); then
	stale=0
	for i in "${!names[@]}"; do
		apply "$root" "${names[i]}" "${files[i]}" "${origs[i]}" "" || stale=$((stale + 1))
	done
	echo "mutation: ${#names[@]} entries, $stale stale"
	((stale == 0))
	exit
fi

command -v cmake >/dev/null || die "cmake is required"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvsmut.XXXXXX") || die "mktemp failed"
# mktemp's 0700 would keep the tests that run the build's binaries as
# another uid (test_scope, test_handover) out of it.
chmod 755 "$scratch"
cleanup() {
	if [[ ${MUTATION_KEEP:-0} == 1 ]]; then
		echo "mutation: kept $scratch" >&2
	else
		rm -rf "$scratch"
	fi
}
trap cleanup EXIT
src=$scratch/src
bld=$src/build # where the docs' examples (docs.shell) expect it: build/ of the checkout
mkdir -p "$src" "$scratch/orig"
# The working tree as it is (uncommitted edits included); a tracked file
# deleted from it is left out.
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do
		[[ -f $f ]] && cp -p --parents -- "$f" "$src"
	done) || die "cannot copy the tree"

start=$SECONDS
echo "mutation: scratch copy $src; configure and build"
if ! cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DKVS_WERROR=OFF >"$scratch/configure.log" 2>&1; then
	cat "$scratch/configure.log" >&2
	die "configure failed"
fi
cmake --build "$bld" -j2 >"$scratch/build.log" 2>&1 || {
	tail -n 30 "$scratch/build.log" >&2
	die "the unmutated tree does not build"
}
ctest_run() {
	timeout "$limit" ctest --test-dir "$bld" -j2 --stop-on-failure \
		--no-tests=error >"$1" 2>&1
}
if ! ctest_run "$scratch/baseline.log"; then
	grep -E 'Failed|Timeout|\*\*\*' "$scratch/baseline.log" >&2
	die "the unmutated tests fail: fix them first"
fi
echo "mutation: baseline built and passed in $((SECONDS - start)) s;" \
	"${#names[@]} mutations, each under ${limit} s of tests"

# The Python package's tests on the scratch copy (its package first on the
# path, its build's library and daemon), for mutations of .py files.
py=
py_run() {
	if [[ -z $py ]] && ! py=$("$root/scripts/python_env.sh" 2>"$1"); then
		py=
		return 99
	fi
	(cd "$src" && PYTHONPATH="$src/client/python" BUILD_DIR="$bld" \
		KVSHARE_LIB="$bld/libkvshare.so" timeout "$limit" "$py" -m pytest -x -q \
		-p no:cacheprovider client/python/tests) >"$1" 2>&1
}

caught=() survived=() broken=()
for i in "${!names[@]}"; do
	name=${names[i]} file=${files[i]}
	t0=$SECONDS
	cp -p "$src/$file" "$scratch/orig/cur"
	if ! apply "$src" "$name" "$file" "${origs[i]}" "${repls[i]}"; then
		broken+=("$name")
		printf '%-24s broken   (stale entry)\n' "$name"
		continue
	fi
	log=$scratch/$name.log
	if [[ $file == *.py ]]; then
		py_run "$log"
		case $? in
		0)
			survived+=("$name")
			printf '%-24s SURVIVED (%ds): %s\n' "$name" $((SECONDS - t0)) "${whats[i]}" ;;
		99)
			broken+=("$name")
			printf '%-24s broken   (no Python environment: %s)\n' "$name" "$(tail -n1 "$log")" ;;
		*)
			caught+=("$name")
			printf '%-24s caught   (%ds) by %s\n' "$name" $((SECONDS - t0)) \
				"$(grep -m1 -oE '^FAILED [^ ]+|[0-9]+ failed' "$log" || echo pytest)" ;;
		esac
	elif ! cmake --build "$bld" -j2 >"$log" 2>&1; then
		broken+=("$name")
		printf '%-24s broken   (does not build: %s)\n' "$name" \
			"$(grep -m1 'error' "$log")"
	elif ctest_run "$log"; then
		survived+=("$name")
		printf '%-24s SURVIVED (%ds): %s\n' "$name" $((SECONDS - t0)) "${whats[i]}"
	else
		caught+=("$name")
		by=$(grep -oE '(integration|unit|fuzz|remote|layering|badinput)\.[a-z0-9_]+' \
			<(grep -E '\*\*\*|Failed|Timeout|Exception' "$log") | sort -u |
			tr '\n' ' ')
		[[ -z $by ]] && by="(the run timed out or stopped: see the log)"
		printf '%-24s caught   (%ds) by %s\n' "$name" $((SECONDS - t0)) "$by"
	fi
	# Restore (a fresh mtime, so the next build recompiles it).
	cp "$scratch/orig/cur" "$src/$file"
	touch "$src/$file"
done

echo "mutation: ${#caught[@]} caught, ${#survived[@]} survived, ${#broken[@]} broken" \
	"in $((SECONDS - start)) s"
((${#survived[@]})) && echo "mutation: survived: ${survived[*]}"
((${#broken[@]})) && echo "mutation: broken: ${broken[*]}"
((${#survived[@]} == 0 && ${#broken[@]} == 0))
