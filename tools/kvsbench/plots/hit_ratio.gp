# hit_ratio.gp - trace replay hit ratio against cache capacity, one line per
# eviction policy, from `kvsbench replay --json` output (one JSON line per
# run); the points of shared/traces/SOURCES.md's reference LRU row on top,
# which the `lru` line must go through.
#
#   T=../shared/traces/synthetic_trace.jsonl
#   for p in lru leaf-lru leaf-2q leaf-learn; do for c in 1e4 1e5 1e6 3e6 1e7 5e7; do
#     build/kvsbench replay --trace $T --block-tokens 512 --capacity-tokens $c \
#       --policy $p --json | grep '^{'
#   done; done > replay.jsonl
#   gnuplot -e "in='replay.jsonl'; out='docs/hit_ratio.png'" tools/kvsbench/plots/hit_ratio.gp
#
# Optional: policies='lru leaf-lru leaf-2q leaf-learn' (the daemon's lines,
# in order), models='belady s3fifo arc' (kvsbench's offline models of the
# same runs, dashed: read from the lru runs' "models" object) and
# subtitle='...'. An optional tool (Debian: gnuplot-nox), not a build
# dependency; besides gnuplot only awk is needed, to pull the fields out of
# the JSON lines.
if (!exists("in")) in = 'replay.jsonl'
if (!exists("out")) out = 'docs/hit_ratio.png'
if (!exists("policies")) policies = 'lru leaf-lru leaf-2q leaf-learn'
if (!exists("models")) models = 'belady s3fifo arc'
# The bound (1.8-2.7x lru from 1M) would flatten the ratio panel.
if (!exists("relmodels")) relmodels = 's3fifo arc'
if (!exists("subtitle")) subtitle = 'synthetic_trace.jsonl (Mooncake FAST''25), 512-token blocks'

# Columns: capacity_tokens hit_ratio, for the runs of policy p, by capacity.
rows(p) = '< awk ''function get(k) { if (match($0, "\"" k "\":\"?[-0-9.eEa-z+]*")) { v = substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); gsub(/"/, "", v); return v } return "NaN" } /"bench":"replay"/ && get("policy") == "'.p.'" { print get("capacity_tokens"), get("hit_ratio") }'' '.in.' | sort -g'

# Columns: capacity_tokens hit_ratio, of offline model m (its entry in the
# "models" object of the lru runs).
model(m) = '< awk ''/"bench":"replay"/ && /"policy":"lru"/ && match($0, /"capacity_tokens":[0-9]+/) { c = substr($0, RSTART + 18, RLENGTH - 18); if (match($0, /"'.m.'":\{"hit_tokens":[0-9]+,"hit_ratio":[0-9.]+/)) { v = substr($0, RSTART, RLENGTH); sub(/.*"hit_ratio":/, "", v); print c, v } }'' '.in.' | sort -g'

# Columns: capacity_tokens (1M and up), hit_ratio of policy p over that of
# lru at the same capacity.
rel(p) = '< awk ''function get(k) { if (match($0, "\"" k "\":\"?[-0-9.eEa-z+]*")) { v = substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); gsub(/"/, "", v); return v } return "NaN" } !/"bench":"replay"/ { next } NR == FNR { if (get("policy") == "lru") base[get("capacity_tokens")] = get("hit_ratio"); next } get("policy") == "'.p.'" && get("capacity_tokens") + 0 >= 1000000 && base[get("capacity_tokens")] > 0 { print get("capacity_tokens"), get("hit_ratio") / base[get("capacity_tokens")] }'' '.in.' '.in.' | sort -g'

# The same over lru, for offline model m.
relm(m) = '< awk ''/"bench":"replay"/ && /"policy":"lru"/ && match($0, /"capacity_tokens":[0-9]+/) { c = substr($0, RSTART + 18, RLENGTH - 18); if (c + 0 < 1000000) next; match($0, /"hit_ratio":[0-9.]+/); b = substr($0, RSTART + 12, RLENGTH - 12); if (match($0, /"'.m.'":\{"hit_tokens":[0-9]+,"hit_ratio":[0-9.]+/) && b > 0) { v = substr($0, RSTART, RLENGTH); sub(/.*"hit_ratio":/, "", v); print c, v / b } }'' '.in.' | sort -g'

$reference << EOD
1e4 0.0003
1e5 0.0116
1e6 0.1421
3e6 0.3151
1e7 0.5768
5e7 0.6512
EOD

set terminal pngcairo size 900,950 font ",11" noenhanced
set output out
set logscale x 10
set xrange [5e3:1e8]
set xtics ("10k" 1e4, "100k" 1e5, "1M" 1e6, "3M" 3e6, "10M" 1e7, "50M" 5e7)
set grid
set multiplot layout 2,1 title "kvsbench replay: hit ratio against capacity".(subtitle eq '' ? '' : "\n".subtitle)

set ylabel "hit ratio (hit tokens / input tokens)"
set yrange [0:0.7]
set ytics 0.1
set key top left
plot for [p in policies] rows(p) using 1:2 with linespoints lw 2 pt 7 title p, \
     for [m in models] model(m) using 1:2 with linespoints dt 2 lw 1.5 pt 4 title m." (offline)", \
     $reference using 1:2 with points pt 6 ps 2.2 lc rgb "black" title "SOURCES.md reference LRU"

# Below 1M tokens every policy hits under 2%, where ratios say little.
set xlabel "cache capacity (tokens), from 1M"
set ylabel "hit ratio / lru's at the same capacity"
set xrange [7e5:7e7]
set yrange [0.9:1.2]
set ytics 0.05
set key top right
plot for [p in policies] rel(p) using 1:2 with linespoints lw 2 pt 7 title p, \
     for [m in relmodels] relm(m) using 1:2 with linespoints dt 2 lw 1.5 pt 4 title m." (offline)", \
     1 with lines dt 2 lc rgb "gray" notitle
unset multiplot
