# bandwidth.gp - GB/s against block size: kvshare's host tier, memcpy (the
# limit) and Redis GET, from `kvsbench data --json` output; below, the
# ratios measured in the same repetitions, which are what to compare: the
# sizes run one after another, so on a shared machine the absolute GB/s of
# one size and the next may differ by the load, while the ratios do not.
#
#   build/kvsbench data --block-bytes 64K,256K,1M,2M,8M --json > bandwidth.jsonl
#   gnuplot -e "in='bandwidth.jsonl'; out='docs/bandwidth.png'" tools/kvsbench/plots/bandwidth.gp
#
# Optional: subtitle='...' for the machine. An optional tool (Debian:
# gnuplot-nox), not a build dependency; besides gnuplot only awk is needed,
# to pull the fields out of the JSON lines.
if (!exists("in")) in = 'bandwidth.jsonl'
if (!exists("out")) out = 'docs/bandwidth.png'
if (!exists("subtitle")) subtitle = ''

# Columns: block_bytes kvshare memcpy redis kvshare/memcpy kvshare/redis,
# one line per block size; a missing or null field (no redis-server) is NaN,
# a gap in its line.
rows = '< awk ''function get(k) { if (match($0, "\"" k "\":[-0-9.eE+]+")) return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3); return "NaN" } /"bench":"data"/ { print get("block_bytes"), get("kvshare_gbps"), get("memcpy_gbps"), get("redis_gbps"), get("kvshare_over_memcpy"), get("kvshare_over_redis") }'' '.in

set terminal pngcairo size 900,950 font ",11" noenhanced
set output out
set datafile missing "NaN"
set logscale x 2
set xtics ("4K" 4096, "16K" 16384, "64K" 65536, "256K" 262144, "1M" 1048576, \
           "2M" 2097152, "4M" 4194304, "8M" 8388608, "32M" 33554432, "128M" 134217728)
set grid
set multiplot layout 2,1 title "kvsbench data: copying K blocks of B bytes into private buffers".(subtitle eq '' ? '' : "\n".subtitle)

set ylabel "GB/s (1e9 B/s), median of repetitions"
set yrange [0:*]
set key top left
plot rows using 1:3 with linespoints lw 2 pt 7 title "memcpy (one process, the limit)", \
     rows using 1:2 with linespoints lw 2 pt 5 title "kvshare (lookup + memcpy from the lease + release)", \
     rows using 1:4 with linespoints lw 2 pt 9 title "Redis GET over a Unix socket"

set xlabel "block size B"
set ylabel "kvshare / other, median of per-repetition ratios"
set logscale y 2
set yrange [0.25:16]
set ytics ("0.25" 0.25, "0.5" 0.5, "1" 1, "2" 2, "4" 4, "8" 8, "16" 16)
plot rows using 1:5 with linespoints lw 2 pt 7 lc rgb "#9400d3" title "kvshare / memcpy", \
     rows using 1:6 with linespoints lw 2 pt 9 lc rgb "#56b4e9" title "kvshare / Redis", \
     1 with lines dt 2 lc rgb "gray" notitle
unset multiplot
