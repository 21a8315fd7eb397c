#!/usr/bin/env bash
# funcs.sh - no function of the daemon, the engines, the library, the tests
# or the tools is over 80 lines (a function past that does several things;
# give each step its name). Every C file under service/, storage/, proto/, client/,
# tests/ and tools/, their subfolders included.
#
# The test functions in the list below are not split yet: each is one
# test's main line (its steps in order, with their checks inline). No
# function of the tools is in it. The list may only shrink: a function in it that is no
# longer over the limit, or is gone, fails the check too, so that whoever
# splits one also takes it off.
#
# Kernel style makes a function's body easy to find: its opening brace
# alone at the start of a line, its closing brace at the start of a line.
# The lines between them are counted; the function is named by the last
# line before the brace that starts at column 0 with a name and holds "(".
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
max=80
# FILE:FUNCTION, not split yet (see above).
pending="
	tests/badinput/make_badinput.c:payloads
	tests/badinput/make_badinput.c:hellos
	tests/fuzz/make_corpus.c:admin_seeds
	tests/gpu/test_kernels_gpu.c:setup_make
	tests/integration/server/test_admin.c:api
	tests/integration/fastpath/test_fastpath.c:test_same_answers
	tests/integration/server/test_fd_limit.c:main
	tests/integration/server/test_limits.c:test_timeouts
	tests/integration/tiers/remote/test_remote_share.c:main
	tests/integration/tiers/remote/test_remote_tier_reshard.c:main
	tests/integration/tiers/remote/test_remote_tier_start.c:main
	tests/integration/tiers/remote/test_remote_tier_tls.c:main
	tests/integration/server/test_scope.c:test_tenant_domains
	tests/integration/cache/test_share.c:publish_then_share
	tests/integration/tiers/ssd/test_ssd_crash.c:main
	tests/integration/tiers/ssd/test_ssd_ns_file.c:main
	tests/integration/tiers/ssd/test_ssd_tier.c:main
	tests/kernels/test_kernels_copy.c:check_quant
	tests/kernels/test_kernels_copy.c:run_case
	tests/kernels/test_kv_edge.c:nonfinite_case
	tests/python_abi/abi_dump.c:main
	tests/remote/test_remote_basic.c:main
	tests/remote/test_remote_faults.c:main
	tests/remote/test_remote_proto.c:main
	tests/remote/test_remote_reshard.c:main
	tests/remote/test_remote_tls.c:test_data
	tests/stress/soak_client.c:main
	tests/unit/test_cache_random.c:test_random
	tests/unit/test_config.c:main
	tests/unit/test_fastidx.c:test_pins
	tests/unit/test_gpu.c:test_engine
	tests/unit/test_nsfile.c:main
	tests/unit/test_policy_2q.c:main
	tests/unit/test_policy_learn.c:learning_case
	tests/unit/test_policy_learn.c:main
	tests/unit/test_slab.c:test_fill_one
	tests/unit/test_slab.c:test_mixed
	tests/unit/test_slab.c:test_model
	tests/unit/test_ssd.c:t_roundtrip
	tests/unit/test_wire.c:test_hello
	tests/unit/test_wire.c:test_hashes
	tests/unit/test_wire_admin.c:test_list
"
mapfile -t files < <(find service storage proto client tests tools -path client/python -prune -o \
	-name '*.[ch]' -print | sort)
if ((${#files[@]} == 0)); then
	echo "funcs.sh: no C files found under service/, storage/, proto/, client/, tests/, tools/" >&2
	exit 1
fi
report=$(awk -v max=$max -v pending="$pending" '
	BEGIN {
		n = split(pending, p, /[ \t\n]+/)
		for (i = 1; i <= n; i++)
			if (p[i] != "") { allowed[p[i]] = 1; npending++ }
	}
	FNR == 1 { start = 0; sig = "" }
	/^\{/ { start = FNR; name = sig; next }
	/^\}/ && start {
		n = FNR - start - 1
		funcs++
		fn = name
		if (match(fn, /[A-Za-z_][A-Za-z_0-9]*[ \t]*\(/))
			fn = substr(fn, RSTART, RLENGTH - 1)
		sub(/[ \t]+$/, "", fn)
		key = FILENAME ":" fn
		if (n > max && (key in allowed)) {
			seen[key] = 1
		} else {
			if (n > longest) { longest = n; where = FILENAME ":" start }
			if (n > max) { printf "%s:%d: %d lines: %s\n", FILENAME, start, n, name; bad++ }
		}
		start = 0
		next
	}
	/^[A-Za-z_].*\(/ { sig = $0 }
	END {
		for (k in allowed)
			if (!(k in seen)) { printf "%s: in the list but not over %d lines (take it off)\n", k, max; bad++ }
		printf "summary %d %d %d %s %d\n", funcs, bad, longest, where, npending
	}' "${files[@]}")
summary=$(tail -n1 <<<"$report")
read -r _ funcs bad longest where npending <<<"$summary"
if ((funcs == 0)); then
	echo "funcs.sh: no function bodies found (is the code still kernel style?)" >&2
	exit 1
fi
if ((bad > 0)); then
	echo "funcs.sh: functions over $max lines:" >&2
	sed '$d' <<<"$report" >&2
	exit 1
fi
echo "funcs.sh: $funcs functions in ${#files[@]} files, none over $max lines but the $npending listed (longest otherwise $longest, $where)"
