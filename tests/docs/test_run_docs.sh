#!/usr/bin/env bash
# test_run_docs - the doc test's runner (run_docs.py) on a made-up tree: a
# block that passes (kvsctl with no --socket reaches the runner's daemon, as
# the docs' commands do), one that fails (reported with its file:line and
# output), an excerpt (not run), a console block (its $ lines run, its
# output lines not), one past its deadline, one that runs pip (refused),
# and an option kvsctl does not have (--kind flags).
#
#   test_run_docs.sh BUILD_DIR
# Exit: 0 pass, 1 fail.
set -u

name=test_run_docs
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/../integration/lib.sh"
build=$(cd "${1:?usage: test_run_docs.sh BUILD_DIR}" && pwd)
make_tmp kvsrundocs
src=$tmp/src
mkdir -p "$src/docs"
ln -s "$build" "$src/build"
f='```'
cat >"$src/README.md" <<END
# made up

${f}sh
kvsctl stats | grep -q '^server'
build/kvsctl stats >/dev/null
test -z "\$(ls -A "\$HOME")"
${f}

${f}sh excerpt
exit 3
${f}
END
cat >"$src/docs/a.md" <<END
# a

${f}console
\$ echo one \\
  two
this is output, not a command
\$ true
${f}

text

${f}bash
echo before the failure
false
echo never
${f}

${f}sh
sleep 30
${f}

${f}sh
pip install nothing-at-all
${f}

Run \`kvsctl stats --no-such-flag\`.
END

out=$(python3 "$here/run_docs.py" --kind shell --source "$src" --build "$build" \
	--timeout 2 2>&1)
rc=$?
check "a failing block fails the run (rc $rc)" [ "$rc" -eq 1 ]
check "the passing block passed: $out" grep -q '^docs: README.md:3 sh: ok' <<<"$out"
check "the excerpt is not run" grep -q '^docs: README.md:9 sh: excerpt' <<<"$out"
check "the console block's commands ran, not its output" \
	grep -q '^docs: docs/a.md:3 console: ok' <<<"$out"
check "the failure names its file:line" \
	grep -q '^FAIL docs/a.md:12 (bash, exit status 1)' <<<"$out"
check "the failure shows the block's output" grep -q '^  > before the failure' <<<"$out"
check "bash -e stopped the block at the failure" eval '! grep -q "^  > never" <<<"$out"'
check "the block past its deadline failed" \
	grep -q '^docs: docs/a.md:18 sh: FAILED (timed out after 2' <<<"$out"
check "pip is refused" grep -q 'the block runs pip, which changes the machine' <<<"$out"
check "the summary line" \
	grep -q '^docs (shell): 5 blocks ran, 2 passed, 3 failed; 1 excerpts; 0 skipped' <<<"$out"

out=$(python3 "$here/run_docs.py" --kind flags --source "$src" --build "$build" 2>&1)
rc=$?
check "an unknown option fails --kind flags (rc $rc)" [ "$rc" -eq 1 ]
check "it is named with its file:line ($out)" \
	grep -q '^FAIL docs/a.md:26: kvsctl stats: --no-such-flag' <<<"$out"

echo "$name: $pass checks passed, $fail failed"
((fail == 0))
