#!/bin/sh
# rverbs against rdma-core (librdmacm + libsiw) on a soft-iWARP device: userspace instructions
# (callgrind) of rping and of the rdma_client/rdma_server exchange, side by side, in one VM run.
#
#   cargo xtask vm --guest host --provider siw -- sh ci/bench-siw.sh
#
# rping:  server natively, client under `valgrind --tool=callgrind` (all its threads in one
#         count), -S 64, at each iteration count of ITERS (-C); the same for rdma-core's rping
#         (/usr/bin/rping on librdmacm and libsiw) and `rverbs rping`, one after the other.
#         Per iteration: (Ir(big) - Ir(small)) / (big - small) over the means of the runs of
#         each count; start-up: Ir(small) - small * per iteration (connection set-up and
#         teardown included).
# client: librdmacm's rdma_server / rdma_client (one SEND/RECV exchange, no iteration count)
#         against `rverbs rdma-server` / `rverbs rdma-client`, the client under callgrind,
#         CLIENT_RUNS times each: the client's whole run.
# Prints one line per run and the tables with the ratios rverbs / rdma-core. Raw files go to
# $OUT (default: bench-siw/ on the run share, target/vm/runs/<run>/bench-siw/ on the host).
#
# Environment: ITERS ("100 200 100 200"), CLIENT_RUNS (2; 0 skips the client runs), TOOLS
# ("C R": rdma-core's and rverbs'; "R" alone measures rverbs only, for quick checks of a
# change, and prints no ratio), RVERBS (the rverbs on PATH), PORT (19700: first TCP port
# minus one).
set -u

ITERS=${ITERS:-100 200 100 200}
CLIENT_RUNS=${CLIENT_RUNS:-2}
TOOLS=${TOOLS:-C R}
DEV=${RVERBS_DEV_A:-siw0}
ADDR=${RVERBS_ADDR_A:-10.10.0.1}
PORT=${PORT:-19700}
RV=${RVERBS:-$(command -v rverbs)}
if [ -z "${OUT:-}" ]; then
    if [ -d /tmp/rverbs-vm ]; then OUT=/tmp/rverbs-vm/bench-siw; else OUT=/tmp/bench-siw; fi
fi
mkdir -p "$OUT" || exit 1

die() { echo "bench-siw: $*" >&2; exit 1; }
[ -n "$RV" ] && [ -x "$RV" ] || die "no rverbs binary (set RVERBS)"
for t in /usr/bin/rping /usr/bin/rdma_client /usr/bin/rdma_server valgrind; do
    command -v $t > /dev/null || die "$t is missing (rdma-core's rdmacm-utils, valgrind)"
done
[ "${RVERBS_PROVIDER:-}" = siw ] || die "needs a guest with siw devices (--provider siw)"

echo "bench-siw: $(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -r); $(nproc) CPUs; device $DEV, $ADDR"
echo "bench-siw: rverbs = $RV"

# Waits until something listens on TCP port $1 (siw's listeners are kernel TCP sockets).
wait_listen() {
    hex=$(printf '%04X' "$1")
    n=0
    until grep -q ":$hex [0-9A-F]*:[0-9A-F]* 0A " /proc/net/tcp /proc/net/tcp6 2> /dev/null; do
        n=$((n + 1))
        [ $n -gt 600 ] && return 1
        sleep 0.05
    done
}

# ir FILE: the Ir total of a callgrind output file.
ir() {
    v=$(sed -n 's/^totals: *//p' "$1" | tr -d ' ')
    [ -n "$v" ] || v=$(sed -n 's/^summary: *//p' "$1" | tr -d ' ')
    echo "${v:-0}"
}

# pair NAME SERVER-CMD CLIENT-CMD: the server in the background, waits for its port, the client
# under callgrind into $OUT/cg.NAME; prints the client's Ir.
pair() {
    name=$1 scmd=$2 ccmd=$3
    f=$OUT/cg.$name
    sh -c "exec $scmd" > "$OUT/server.$name.log" 2>&1 &
    spid=$!
    if ! wait_listen "$PORT"; then
        kill $spid 2> /dev/null
        cat "$OUT/server.$name.log" >&2
        die "server of $name did not listen on port $PORT"
    fi
    timeout 900 valgrind --tool=callgrind --callgrind-out-file="$f" $ccmd > "$OUT/client.$name.log" 2>&1
    crc=$?
    # The servers end with the client's disconnect; give them a moment, then stop them.
    n=0
    while kill -0 $spid 2> /dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
    kill $spid 2> /dev/null
    wait $spid 2> /dev/null
    if [ $crc -ne 0 ]; then
        echo "--- server"; cat "$OUT/server.$name.log"
        echo "--- client (exit $crc)"; cat "$OUT/client.$name.log"
        die "$name failed"
    fi >&2
    ir "$f"
}

: > "$OUT/rping.txt"
for n in $ITERS; do
    for tool in $TOOLS; do
        PORT=$((PORT + 1))
        if [ $tool = C ]; then r="/usr/bin/rping"; else r="$RV rping"; fi
        v=$(pair "rping.$tool.$n.$PORT" "$r -s -a $ADDR -p $PORT -S 64 -C $n" \
            "$r -c -a $ADDR -p $PORT -S 64 -C $n") || exit 1
        echo "$tool $n $v" >> "$OUT/rping.txt"
        echo "rping: $tool -C $n: client Ir $v"
    done
done

: > "$OUT/client.txt"
i=1
while [ $i -le "$CLIENT_RUNS" ]; do
    for tool in $TOOLS; do
        PORT=$((PORT + 1))
        if [ $tool = C ]; then
            s="/usr/bin/rdma_server -p $PORT"; c="/usr/bin/rdma_client -s $ADDR -p $PORT"
        else
            s="$RV rdma-server -p $PORT"; c="$RV rdma-client -s $ADDR -p $PORT"
        fi
        v=$(pair "client.$tool.$i.$PORT" "$s" "$c") || exit 1
        echo "$tool $i $v" >> "$OUT/client.txt"
        echo "rdma-client: $tool run $i: client Ir $v"
    done
    i=$((i + 1))
done

echo
echo "| program | rdma-core (libsiw) | rverbs | rverbs / rdma-core |"
echo "|---|---|---|---|"
awk '
    {
        v[$1, $2, ++c[$1, $2]] = $3; s[$1, $2] += $3
        if (!($2 in seen)) { seen[$2] = 1; ns[++k] = $2 }
    }
    END {
        lo = ns[1]; hi = ns[1]
        for (i = 1; i <= k; i++) { if (ns[i] + 0 < lo + 0) lo = ns[i]; if (ns[i] + 0 > hi + 0) hi = ns[i] }
        if (lo == hi) { print "| rping | (needs two iteration counts) | | |"; exit }
        for (t = 0; t < 2; t++) {
            tool = t ? "R" : "C"
            if (!c[tool, lo] || !c[tool, hi]) { per[tool] = st[tool] = rng[tool] = "-"; continue }
            a = s[tool, lo] / c[tool, lo]; b = s[tool, hi] / c[tool, hi]
            per[tool] = (b - a) / (hi - lo); st[tool] = a - lo * per[tool]
            # The spread: the i-th run of each count paired, one figure per pair.
            m = c[tool, lo] < c[tool, hi] ? c[tool, lo] : c[tool, hi]
            for (i = 1; i <= m; i++) {
                p = (v[tool, hi, i] - v[tool, lo, i]) / (hi - lo)
                if (i == 1 || p < pmin) pmin = p
                if (i == 1 || p > pmax) pmax = p
            }
            per[tool] = sprintf("%.0f", per[tool]); st[tool] = sprintf("%.0f", st[tool])
            rng[tool] = sprintf("%.0f-%.0f (%d pairs)", pmin, pmax, m)
        }
        both = per["C"] != "-" && per["R"] != "-"
        printf "| rping, Ir per iteration ((Ir(%d) - Ir(%d)) / %d) | %s | %s | %s |\n", hi, lo, hi - lo, per["C"], per["R"], both ? sprintf("%.2f", per["R"] / per["C"]) : "-"
        printf "| rping, per iteration of each pair of runs, min-max | %s | %s | |\n", rng["C"], rng["R"]
        printf "| rping, start-up and teardown Ir | %s | %s | %s |\n", st["C"], st["R"], both ? sprintf("%.2f", st["R"] / st["C"]) : "-"
    }' "$OUT/rping.txt"
[ -s "$OUT/client.txt" ] && awk '
    { s[$1] += $3; c[$1]++ }
    END {
        a = c["C"] ? sprintf("%.0f", s["C"] / c["C"]) : "-"; b = c["R"] ? sprintf("%.0f", s["R"] / c["R"]) : "-"
        printf "| rdma_client / rverbs rdma-client, whole run Ir (one exchange) | %s | %s | %s |\n", a, b, (c["C"] && c["R"]) ? sprintf("%.2f", b / a) : "-"
    }' "$OUT/client.txt"
exit 0
