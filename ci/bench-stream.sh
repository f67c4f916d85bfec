#!/bin/sh
# rverbs' RdmaStream against rdma-core's rsockets, both against TCP, side by side in one VM run.
#
#   cargo build --release -p rverbs-stream --example rstream
#   cargo xtask vm --guest host --topo two -- sh ci/bench-stream.sh [table|callgrind|bulk|all]
#
# table:     rstream's tests as custom runs (-S SIZE -I ITERS -C COUNT; its own default table
#            takes over 5 minutes a direction under emulation): latency (count 1) and
#            bandwidth (iterations 1) at 64 B, 4 KiB, 64 KiB, 1 MiB; each by three pairs,
#            server on node A ($RVERBS_ADDR_A), client on node B (the route to A's address
#            leaves through B's veth end, so all three cross the same veth):
#              rs   rdma-core's rstream against itself (librdmacm's rsockets),
#              rv   our rstream example against itself (rverbs-stream),
#              tcp  rdma-core's rstream -T s against itself (kernel TCP over the veth).
#            ROUNDS rounds, the order of the pairs rotating (rs, rv, tcp; rv, tcp, rs; ...); prints every client line, the
#            medians and the ratios rv/rs and both against tcp.
# callgrind: the client under `valgrind --tool=callgrind` (the server natively), -S 64 -C 1
#            at CG_ITERS iterations; userspace instructions (Ir) of the whole client process
#            per round trip (one 64-byte send, one 64-byte receive) as
#            (Ir(N2) - Ir(N1)) / (N2 - N1), and per message (half of that), rs against rv.
# bulk:      userspace instructions per KiB moved (issue 33): the client under callgrind at
#            BULK (size:count1:count2, -I 1: count transfers of size each way), Ir per KiB as
#            (Ir(count2) - Ir(count1)) / (2 (count2 - count1) size / 1024), three pairs:
#              rs   rdma-core's rstream (rsockets' copy path: memcpy into and out of its rings),
#              rv   our rstream example (the send ring's and the receive ring's copies),
#              rvz  our example with -T z: writes from a registered buffer
#                   (RdmaStream::write_registered, no send copy; the receive ring's copy stays).
# Results and raw files go to $OUT (default: bench-stream/ on the run share, which is
# target/vm/runs/<run>/bench-stream/ on the host).
#
# Environment: ROUNDS (2), LAT ("64:500 4096:200 65536:50 1048576:5": size:iterations),
# BW ("64:1000 4096:500 65536:100 1048576:10": size:count), CG_ITERS ("200 600"),
# BULK ("65536:20:100 1048576:4:20"),
# RV (target/release/examples/rstream), RS (rstream), PORT (19700: first port minus one).
set -u

what=${1:-all}
ROUNDS=${ROUNDS:-2}
LAT=${LAT:-64:500 4096:200 65536:50 1048576:5}
BW=${BW:-64:1000 4096:500 65536:100 1048576:10}
CG_ITERS=${CG_ITERS:-200 600}
BULK=${BULK:-65536:20:100 1048576:4:20}
ADDR=${RVERBS_ADDR_A:-10.10.0.1}
PORT=${PORT:-19700}
RV=${RV:-target/release/examples/rstream}
RS=${RS:-$(command -v rstream)}
if [ -z "${OUT:-}" ]; then
    if [ -d /tmp/rverbs-vm ]; then OUT=/tmp/rverbs-vm/bench-stream; else OUT=/tmp/bench-stream; fi
fi
mkdir -p "$OUT" || exit 1

die() { echo "bench-stream: $*" >&2; exit 1; }
[ -x "$RV" ] || die "no $RV (cargo build --release -p rverbs-stream --example rstream)"
[ -n "$RS" ] && [ -x "$RS" ] || die "no rstream (rdma-core's rdmacm-utils)"

echo "bench-stream: $(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -r); $(nproc) CPUs; topology ${RVERBS_TOPO:-one}; server on $ADDR"
echo "bench-stream: rv = $RV; rs = $RS; tcp = $RS -T s"

# Waits until something listens on TCP port $1 (the TCP pair only: rsockets listen on rdma_cm).
wait_listen() {
    hex=$(printf '%04X' "$1")
    n=0
    until grep -q ":$hex [0-9A-F]*:[0-9A-F]* 0A " /proc/net/tcp 2> /dev/null; do
        n=$((n + 1))
        [ $n -gt 400 ] && return 1
        sleep 0.05
    done
}

# run_pair PAIR SIZE ITERS COUNT [CLIENT-WRAPPER...]: one custom test of PAIR on port $PORT;
# prints the client's "Gb/sec usec/xfer".
run_pair() {
    pair=$1 size=$2 iters=$3 count=$4
    shift 4
    case $pair in
    rs) bin=$RS; t="" ;;
    rv) bin=$RV; t="" ;;
    rvz) bin=$RV; t="-T z" ;;
    tcp) bin=$RS; t="-T s" ;;
    esac
    args="-p $PORT -S $size -I $iters -C $count $t"
    timeout 600 $bin -b "$ADDR" $args > "$OUT/server.log" 2>&1 &
    spid=$!
    if [ $pair = tcp ]; then
        wait_listen $PORT || die "the TCP server did not listen on $PORT"
    else
        sleep 1
    fi
    # rdma-core's rstream client does not retry a refused connect (ours does), and its
    # server may take seconds to listen under emulation: retry for up to 30 s.
    tries=0
    while :; do
        timeout 600 "$@" $bin -s "$ADDR" $args > "$OUT/client.log" 2>&1
        crc=$?
        grep -q "Connection refused" "$OUT/client.log" || break
        tries=$((tries + 1))
        [ $tries -ge 30 ] && break
        sleep 1
    done
    wait $spid
    src=$?
    if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
        echo "--- server (exit $src)" >&2; cat "$OUT/server.log" >&2
        echo "--- client (exit $crc)" >&2; cat "$OUT/client.log" >&2
        die "$pair -S $size -I $iters -C $count failed"
    fi
    awk '$1 == "custom" { print $(NF-1), $NF }' "$OUT/client.log"
}

table() {
    : > "$OUT/table.txt"
    r=1
    while [ $r -le "$ROUNDS" ]; do
        case $((r % 3)) in
        1) order="rs rv tcp" ;;
        2) order="rv tcp rs" ;;
        0) order="tcp rs rv" ;;
        esac
        for kind in lat bw; do
            if [ $kind = lat ]; then list=$LAT; else list=$BW; fi
            for e in $list; do
                size=${e%%:*} n=${e#*:}
                if [ $kind = lat ]; then iters=$n count=1; else iters=1 count=$n; fi
                for pair in $order; do
                    PORT=$((PORT + 1))
                    res=$(run_pair $pair $size $iters $count) || exit 1
                    [ -n "$res" ] || die "no result line from $pair ($OUT/client.log)"
                    echo "$kind $size $pair $r $res" >> "$OUT/table.txt"
                    echo "round $r: $kind $size B $pair: $res (Gb/sec usec/xfer)"
                done
            done
        done
        r=$((r + 1))
    done
    echo
    summary
}

# Medians per (kind, size, pair) and the ratios: latency as usec/xfer (lower is better),
# bandwidth as MB/s = bytes / usec/xfer (higher is better; rstream's Gb/sec column has two
# decimals only).
summary() {
    awk '
    function median(k,   n, i, j, t, a) {
        n = split(vals[k], a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    {
        k = $1 " " $2 " " $3
        v = ($1 == "lat") ? $6 : $2 / $6
        vals[k] = vals[k] " " v
        if (!($1 " " $2 in seen)) { seen[$1 " " $2] = 1; order[++m] = $1 " " $2 }
    }
    END {
        printf "%-4s %8s %12s %12s %12s %8s %8s %8s\n", "test", "bytes", "rs", "rv", "tcp", "rv/rs", "rv/tcp", "rs/tcp"
        for (i = 1; i <= m; i++) {
            split(order[i], p, " ")
            rs = median(order[i] " rs"); rv = median(order[i] " rv"); tcp = median(order[i] " tcp")
            printf "%-4s %8d %12.2f %12.2f %12.2f %8.2f %8.2f %8.2f\n", p[1], p[2], rs, rv, tcp, rs ? rv / rs : 0, tcp ? rv / tcp : 0, tcp ? rs / tcp : 0
        }
        print "(lat: usec/xfer, lower is better; bw: MB/s, higher is better; medians of the rounds)"
    }' "$OUT/table.txt" | tee "$OUT/summary.txt"
}

# Ir of a callgrind output file: its "totals:" (or "summary:") line.
ir_of() {
    sed -n 's/^\(totals\|summary\): \([0-9]*\).*/\2/p' "$1" | head -1
}

callgrind() {
    : > "$OUT/callgrind.txt"
    for pair in rs rv; do
        for n in $CG_ITERS; do
            PORT=$((PORT + 1))
            f="$OUT/callgrind.$pair.$n.out"
            run_pair $pair 64 "$n" 1 valgrind --tool=callgrind --callgrind-out-file="$f" > /dev/null || exit 1
            ir=$(ir_of "$f")
            echo "$pair $n $ir" >> "$OUT/callgrind.txt"
            echo "callgrind: $pair -S 64 -I $n -C 1: Ir $ir"
        done
    done
    awk '
    { ir[$1, ++k[$1]] = $3; it[$1, k[$1]] = $2 }
    END {
        for (p = 0; p < 2; p++) {
            t = p ? "rv" : "rs"
            per[t] = (ir[t, 2] - ir[t, 1]) / (it[t, 2] - it[t, 1])
            printf "%s: %.0f Ir per round trip, %.0f per 64-byte message\n", t, per[t], per[t] / 2
        }
        printf "rv/rs: %.2f\n", per["rv"] / per["rs"]
    }' "$OUT/callgrind.txt" | tee "$OUT/callgrind-summary.txt"
}

bulk() {
    : > "$OUT/bulk.txt"
    for b in $BULK; do
        size=${b%%:*} rest=${b#*:}
        c1=${rest%%:*} c2=${rest#*:}
        for pair in rs rv rvz; do
            for c in $c1 $c2; do
                PORT=$((PORT + 1))
                f="$OUT/bulk.$pair.$size.$c.out"
                run_pair $pair "$size" 1 "$c" valgrind --tool=callgrind --callgrind-out-file="$f" > /dev/null || exit 1
                ir=$(ir_of "$f")
                echo "$size $pair $c $ir" >> "$OUT/bulk.txt"
                echo "bulk: $pair -S $size -I 1 -C $c: Ir $ir"
            done
        done
    done
    awk '
    { k = $1 " " $2; n[k]++; c[k, n[k]] = $3; ir[k, n[k]] = $4; if (!($1 in seen)) { seen[$1] = 1; sizes[++m] = $1 } }
    END {
        printf "%-9s %12s %12s %12s %8s %8s\n", "bytes", "rs Ir/KiB", "rv Ir/KiB", "rvz Ir/KiB", "rv/rs", "rvz/rs"
        for (i = 1; i <= m; i++) {
            s = sizes[i]
            for (p = 0; p < 3; p++) {
                t = p == 0 ? "rs" : p == 1 ? "rv" : "rvz"; k = s " " t
                per[t] = (ir[k, 2] - ir[k, 1]) / (2 * (c[k, 2] - c[k, 1]) * s / 1024)
            }
            printf "%-9d %12.1f %12.1f %12.1f %8.2f %8.2f\n", s, per["rs"], per["rv"], per["rvz"], per["rs"] ? per["rv"] / per["rs"] : 0, per["rs"] ? per["rvz"] / per["rs"] : 0
        }
        print "(client, callgrind, whole process; KiB moved: sent plus received)"
    }' "$OUT/bulk.txt" | tee "$OUT/bulk-summary.txt"
}

case $what in
table) table ;;
bulk) bulk ;;
summary) summary ;;
callgrind) callgrind ;;
all) table && echo && callgrind ;;
*) die "unknown mode $what (table, callgrind, bulk, all)" ;;
esac
