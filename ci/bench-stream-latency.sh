#!/bin/sh
# Debian's own rstream (rdma-core's rdmacm-utils) on rdma-core's librdmacm.so.1 ("rs") and on
# ours ("rv": the C drop-in's rsockets, a shim over rverbs-stream), the four pairs, side by
# side in one guest run (issue 37).
#
#   cargo xtask capi --release
#   cargo xtask vm --guest host -- sh ci/bench-stream-latency.sh [table|syscalls|callgrind|all]
#
# table:     rstream custom tests (TESTS: size:count:iterations), for each server-client pair
#            rs-rs, rv-rs, rs-rv, rv-rv, ROUNDS rounds, the order of the pairs rotating each
#            round; the client's usec/xfer (rstream's own timing) and MB/s; prints every run,
#            then the medians and the ratios against rs-rs.
#            `-S 64 -C 2000` is the issue's test: the client sends 2000 messages, then
#            receives 2000 (usec/xfer = time / 4000). `-S 64 -I 200 -C 1` is a ping-pong:
#            usec/xfer is half a round trip.
# syscalls:  the client under `strace -f -c` (server natively, the same library), -S 64 at
#            two counts (SC_COUNTS); per message = (calls(C2) - calls(C1)) / (2 (C2 - C1)),
#            per system call and in total; context switches (voluntary, involuntary) of the
#            client without strace by /usr/bin/time, per message the same way. Each library
#            of SC_LIBS ("rs rv", with LIB_BASE "rs rb rv") against itself. SC_PINGPONG=1:
#            the counts are ping-pong iterations (-S 64 -C 1 -I count, one message each way
#            per iteration) instead of -C count; with OPTS="-T b" a sleep is one blocking
#            `read` of the completion channel for rsockets, one `epoll_pwait` for ours, so
#            those per message are the sleeps per message (the rest caught while polling).
# callgrind: the client under callgrind, -S 64 at CG_COUNTS: userspace instructions (Ir, the
#            whole process) per message the same way.
# Results and raw files go to $OUT (default bench-stream-latency/ on the run share,
# target/vm/runs/<run>/bench-stream-latency/ on the host).
#
# Environment: ROUNDS (5), TESTS ("64:2000:1 4096:1000:1 64:1:200 65536:50:1 1048576:5:1"),
# SC_COUNTS ("500 2500"), SC_PINGPONG (unset), CG_COUNTS ("200 1000"), OPTS (extra rstream options for every run,
# e.g. "-T b" for blocking calls; rstream's default is non-blocking calls in a loop),
# LIB (target/capi/lib), RS (rstream), PORT (19800: first port minus one), PAIRS (the
# server-client pairs of the table, "rs-rs rv-rs rs-rv rv-rv"; their order rotates by one
# each round), LIB_BASE (a second build of our libraries, "rb": e.g. the one before a change,
# so that a table can hold rb-rb beside rv-rv, both against rs-rs of the same run).
set -u

what=${1:-all}
ROUNDS=${ROUNDS:-5}
TESTS=${TESTS:-64:2000:1 4096:1000:1 64:1:200 65536:50:1 1048576:5:1}
SC_COUNTS=${SC_COUNTS:-500 2500}
CG_COUNTS=${CG_COUNTS:-200 1000}
OPTS=${OPTS:-}
ADDR=${RVERBS_ADDR_A:-10.10.0.1}
PORT=${PORT:-19800}
LIB=${LIB:-$(pwd)/target/capi/lib}
LIB_BASE=${LIB_BASE:-}
PAIRS=${PAIRS:-rs-rs rv-rs rs-rv rv-rv}
if [ -n "$LIB_BASE" ]; then SC_LIBS=${SC_LIBS:-rs rb rv}; else SC_LIBS=${SC_LIBS:-rs rv}; fi
RS=${RS:-$(command -v rstream)}
if [ -z "${OUT:-}" ]; then
    if [ -d /tmp/rverbs-vm ]; then OUT=/tmp/rverbs-vm/bench-stream-latency; else OUT=/tmp/bench-stream-latency; fi
fi
mkdir -p "$OUT" || exit 1

die() { echo "bench-stream-latency: $*" >&2; exit 1; }
[ -e "$LIB/librdmacm.so.1" ] || die "no $LIB/librdmacm.so.1 (cargo xtask capi --release)"
[ -n "$RS" ] && [ -x "$RS" ] || die "no rstream (rdma-core's rdmacm-utils)"

echo "bench-stream-latency: $(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -r); $(nproc) CPUs; server and client on $ADDR"
echo "bench-stream-latency: $RS; rs = rdma-core's libraries, rv = LD_LIBRARY_PATH=$LIB; OPTS='$OPTS'"
echo "bench-stream-latency: guest load average $(cut -d' ' -f1-3 /proc/loadavg); env: $(env | grep '^RVERBS_STREAM' | tr '\n' ' ')"

# lib rs|rv|rb: the environment that makes rstream use that library.
libenv() {
    case $1 in
    rv) echo "LD_LIBRARY_PATH=$LIB" ;;
    rb) [ -n "$LIB_BASE" ] || die "pair with rb but no LIB_BASE"; echo "LD_LIBRARY_PATH=$LIB_BASE" ;;
    *) echo "LD_LIBRARY_PATH=" ;;
    esac
}

# run_pair SERVER CLIENT SIZE COUNT ITERS [CLIENT-WRAPPER...]: one custom test; the client's
# output in $OUT/client.log.
run_pair() {
    srv=$1 cli=$2 size=$3 count=$4 iters=$5
    shift 5
    PORT=$((PORT + 1))
    args="-p $PORT -S $size -C $count -I $iters $OPTS"
    env "$(libenv "$srv")" timeout 600 "$RS" -b "$ADDR" $args > "$OUT/server.log" 2>&1 &
    spid=$!
    sleep 1
    # rdma-core's rstream client does not retry a refused connect (the server may take
    # seconds to listen under emulation), and in its default non-blocking mode it gives up
    # when the connection is not made at its first rpoll (timeout 0: "rpoll: Operation now
    # in progress" under load): while the server still waits, try again, up to 30 times.
    tries=0
    while :; do
        env "$(libenv "$cli")" timeout 600 "$@" "$RS" -s "$ADDR" $args > "$OUT/client.log" 2>&1
        crc=$?
        [ $crc -eq 0 ] && break
        grep -q '^custom' "$OUT/client.log" && break
        kill -0 $spid 2> /dev/null || break
        tries=$((tries + 1))
        [ $tries -ge 30 ] && break
        cat "$OUT/client.log" >> "$OUT/retries.log"
        sleep 1
    done
    [ $crc -eq 0 ] || kill $spid 2> /dev/null
    wait $spid
    src=$?
    if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
        echo "--- server (exit $src)" >&2; cat "$OUT/server.log" >&2
        echo "--- client (exit $crc)" >&2; cat "$OUT/client.log" >&2
        die "$srv-$cli -S $size -C $count -I $iters failed"
    fi
}

result() { awk '$1 == "custom" { print $(NF-1), $NF }' "$OUT/client.log"; }

table() {
    : > "$OUT/table.txt"
    r=1
    while [ $r -le "$ROUNDS" ]; do
        # PAIRS rotated right by r - 1 (for the four default pairs: rs-rs rv-rs rs-rv rv-rv,
        # then rv-rv rs-rs rv-rs rs-rv, ...).
        order=$(echo $PAIRS | awk -v r=$r '{ n = NF; k = (r - 1) % n; s = ""
            for (i = 0; i < n; i++) { j = ((i - k) % n + n) % n + 1; s = s (i ? " " : "") $j }
            print s }')
        for t in $TESTS; do
            size=${t%%:*} rest=${t#*:}
            count=${rest%%:*} iters=${rest#*:}
            for pair in $order; do
                run_pair "${pair%-*}" "${pair#*-}" "$size" "$count" "$iters" || exit 1
                res=$(result)
                [ -n "$res" ] || die "no result line from $pair ($OUT/client.log)"
                echo "$size:$count:$iters $pair $r $res" >> "$OUT/table.txt"
                echo "round $r: -S $size -C $count -I $iters $pair: $res (Gb/sec usec/xfer)"
            done
        done
        r=$((r + 1))
    done
    echo
    summary
}

# Medians per (test, pair), the pairs in PAIRS' order; ratios against rs-rs.
summary() {
    awk -v pairs="$PAIRS" -v loadavg="$(cut -d' ' -f1-3 /proc/loadavg)" '
    function median(k,   n, i, j, t, a) {
        n = split(vals[k], a, " ")
        if (n == 0) return 0
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    {
        vals[$1 " " $2] = vals[$1 " " $2] " " $5
        if (!($1 in seen)) { seen[$1] = 1; order[++m] = $1 }
    }
    END {
        np = split(pairs, p, " ")
        printf "%-16s", "test (S:C:I)"
        for (j = 1; j <= np; j++) printf " %10s", p[j]
        for (j = 1; j <= np; j++) if (p[j] != "rs-rs") printf " %8s", p[j] "/"
        printf "\n"
        for (i = 1; i <= m; i++) {
            t = order[i]; a = median(t " rs-rs")
            printf "%-16s", t
            for (j = 1; j <= np; j++) printf " %10.2f", median(t " " p[j])
            for (j = 1; j <= np; j++) if (p[j] != "rs-rs") printf " %8.2f", a ? median(t " " p[j]) / a : 0
            printf "\n"
        }
        print "(usec/xfer, medians of the rounds, server-client; ratios against rs-rs, lower is better)"
        print "(guest load average at the end: " loadavg ")"
    }' "$OUT/table.txt" | tee "$OUT/summary.txt"
}

# System calls and context switches per message, client side, each library against itself.
syscalls() {
    : > "$OUT/syscalls.txt"
    c1=${SC_COUNTS%% *} c2=${SC_COUNTS#* }
    for lib in $SC_LIBS; do
        for c in $c1 $c2; do
            # count iterations: -S 64 -C count -I 1, or -C 1 -I count (SC_PINGPONG).
            if [ -n "${SC_PINGPONG:-}" ]; then ci="1 $c"; else ci="$c 1"; fi
            run_pair $lib $lib 64 $ci strace -f -c -o "$OUT/strace.$lib.$c.txt" || exit 1
            # "% time seconds usecs/call calls [errors] syscall"; the total line last.
            awk -v lib=$lib -v c=$c 'NF >= 5 && $1 ~ /^[0-9.]+$/ { print lib, c, $NF, $4 }' \
                "$OUT/strace.$lib.$c.txt" >> "$OUT/syscalls.txt"
            run_pair $lib $lib 64 $ci /usr/bin/time -f "ctxsw %w %c" -o "$OUT/time.$lib.$c.txt" || exit 1
            awk -v lib=$lib -v c=$c '$1 == "ctxsw" { print lib, c, "ctxsw-voluntary", $2; print lib, c, "ctxsw-involuntary", $3 }' \
                "$OUT/time.$lib.$c.txt" >> "$OUT/syscalls.txt"
        done
    done
    awk -v c1=$c1 -v c2=$c2 -v libs="$SC_LIBS" -v loadavg="$(cut -d' ' -f1-3 /proc/loadavg)" '
    { v[$1, $2, $3] = $4; if (!($3 in seen)) { seen[$3] = 1; names[++m] = $3 } }
    END {
        nl = split(libs, l, " ")
        printf "%-24s", "per 64-byte message"
        for (j = 1; j <= nl; j++) printf " %12s", l[j]
        printf "\n"
        for (i = 1; i <= m; i++) {
            n = names[i]
            printf "%-24s", n
            for (j = 1; j <= nl; j++) printf " %12.3f", (v[l[j], c2, n] - v[l[j], c1, n]) / (2 * (c2 - c1))
            printf "\n"
        }
        print "(client: strace -f -c calls, /usr/bin/time context switches; (X(C2) - X(C1)) / (2 (C2 - C1)))"
        print "(guest load average at the end: " loadavg ")"
    }' "$OUT/syscalls.txt" | tee "$OUT/syscalls-summary.txt"
}

# Ir of a callgrind output file: its "totals:" (or "summary:") line.
ir_of() {
    sed -n 's/^\(totals\|summary\): \([0-9]*\).*/\2/p' "$1" | head -1
}

callgrind() {
    : > "$OUT/callgrind.txt"
    c1=${CG_COUNTS%% *} c2=${CG_COUNTS#* }
    for lib in $SC_LIBS; do
        for c in $c1 $c2; do
            f="$OUT/callgrind.$lib.$c.out"
            run_pair $lib $lib 64 "$c" 1 valgrind --tool=callgrind --callgrind-out-file="$f" || exit 1
            echo "$lib $c $(ir_of "$f")" >> "$OUT/callgrind.txt"
        done
    done
    awk -v c1=$c1 -v c2=$c2 -v libs="$SC_LIBS" '
    { ir[$1, $2] = $3 }
    END {
        nl = split(libs, l, " ")
        rs = (ir["rs", c2] - ir["rs", c1]) / (2 * (c2 - c1))
        printf "Ir per 64-byte message (client, callgrind):"
        for (j = 1; j <= nl; j++) {
            x = (ir[l[j], c2] - ir[l[j], c1]) / (2 * (c2 - c1))
            printf " %s %.0f", l[j], x
            if (l[j] != "rs") printf " (%s/rs %.2f)", l[j], rs ? x / rs : 0
            printf j < nl ? "," : "\n"
        }
    }' "$OUT/callgrind.txt" | tee "$OUT/callgrind-summary.txt"
}

case $what in
table) table ;;
summary) summary ;;
syscalls) syscalls ;;
callgrind) callgrind ;;
all) table && echo && syscalls && echo && callgrind ;;
*) die "unknown mode $what (table, syscalls, callgrind, all)" ;;
esac
