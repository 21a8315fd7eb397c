#!/usr/bin/env bash
# test_cluster_cli - kvs-redis-cluster (tests/support/redis_cluster_main.c), the
# cluster helper for shell tests: it starts, says where, obeys kill/restart,
# and leaves nothing behind when its stdin closes.
set -euo pipefail

BIN=${KVS_REDIS_CLUSTER:?set by CTest}
command -v redis-cli >/dev/null 2>&1 || { echo "SKIP: redis-cli not found"; exit 77; }

coproc RC { "$BIN" --masters 3; }
seeds="" dir="" ports=""
while read -r -t 120 line <&"${RC[0]}"; do
	case $line in
	SKIP*) echo "$line"; exit 77 ;;
	FAIL*) echo "$line"; exit 1 ;;
	SEEDS=*) seeds=${line#SEEDS=} ;;
	PORTS=*) ports=${line#PORTS=} ;;
	DIR=*) dir=${line#DIR=} ;;
	READY) break ;;
	esac
done
[[ -n $seeds && -d $dir ]] || { echo "FAIL: no seeds or dir"; exit 1; }
read -ra port <<<"$ports"
[[ ${#port[@]} == 3 ]] || { echo "FAIL: ports '$ports'"; exit 1; }
pid=$RC_PID

ask() {
	local reply
	echo "$1" >&"${RC[1]}"
	read -r -t 120 reply <&"${RC[0]}"
	[[ $reply == OK ]] || { echo "FAIL: '$1' answered '$reply'"; exit 1; }
}

[[ $(redis-cli -p "${port[1]}" cluster info | tr -d '\r' | grep cluster_state) == cluster_state:ok ]]
ask "kill 1"
if redis-cli -p "${port[1]}" ping >/dev/null 2>&1; then echo "FAIL: node 1 still answers"; exit 1; fi
ask "restart 1"
[[ $(redis-cli -p "${port[1]}" ping) == PONG ]]
ask "stop 2"
ask "cont 2"
[[ $(redis-cli -p "${port[2]}" ping) == PONG ]]

# stdin closed: it stops every node and removes its directory
exec {RC[1]}>&-
wait "$pid"
[[ ! -e $dir ]] || { echo "FAIL: $dir left behind"; exit 1; }
for p in "${port[@]}"; do
	if redis-cli -p "$p" ping >/dev/null 2>&1; then echo "FAIL: port $p still answers"; exit 1; fi
done
echo "test_cluster_cli: ok"
