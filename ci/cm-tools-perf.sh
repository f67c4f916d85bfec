#!/bin/sh
# rverbs rdma-client against librdmacm's rdma_client, side by side, in one VM run.
#
#   cargo xtask vm --guest host -- sh ci/cm-tools-perf.sh
#
# wall:     ROUNDS rounds; in each, rdma-core's rdma_server is started (the same server
#           binary for both clients), then one client runs and is timed from exec to exit
#           (whole run: start-up, resolution, connect, the 16-byte exchange, disconnect,
#           teardown); the order of the two clients alternates between rounds. Prints each
#           round, the medians and the ratio rverbs/C.
# syscalls: each client once under `strace -f -c` (all threads): total system calls and the
#           busiest kinds; then each client under `strace -f` against a server whose write()s
#           strace delays by 100 ms (so its answer comes late and the client's wait blocks):
#           the client's system calls from its send doorbell to the end of its first blocking
#           completion wait (a sleeping read of the completion channel), i.e. what one
#           blocking rdma_get_send_comp / rdma_get_recv_comp costs.
# Raw files go to $OUT (default: cm-tools-perf/ on the run share, which is
# target/vm/runs/<run>/cm-tools-perf/ on the host).
#
# Environment: ROUNDS (15), RVERBS (the rverbs on PATH: the xtask's static release build),
# C_CLIENT / C_SERVER (rdma_client / rdma_server), ADDR ($RVERBS_ADDR_A or 10.10.0.1),
# PORT (7900), SETTLE (seconds to let the server start listening, 2).
set -u

ROUNDS=${ROUNDS:-15}
RVERBS=${RVERBS:-$(command -v rverbs)}
C_CLIENT=${C_CLIENT:-$(command -v rdma_client)}
C_SERVER=${C_SERVER:-$(command -v rdma_server)}
ADDR=${ADDR:-${RVERBS_ADDR_A:-10.10.0.1}}
PORT=${PORT:-7900}
SETTLE=${SETTLE:-2}
if [ -d /tmp/rverbs-vm ]; then OUT=${OUT:-/tmp/rverbs-vm/cm-tools-perf}; else OUT=${OUT:-/tmp/cm-tools-perf}; fi
mkdir -p "$OUT"

for t in "$RVERBS" "$C_CLIENT" "$C_SERVER" strace; do
    command -v "$t" >/dev/null 2>&1 || { echo "cm-tools-perf: $t not found" >&2; exit 2; }
done
# The xtask's rverbs sits on the run share (9p, uncached: every page it faults in is a 9p
# read), while the C tools and their libraries come from the host root (9p with cache=loose:
# cached after the first run). Copy rverbs to the guest's tmpfs so that neither pays for 9p.
mkdir -p /tmp/cm-tools-perf-bin
cp "$RVERBS" /tmp/cm-tools-perf-bin/rverbs && RVERBS=/tmp/cm-tools-perf-bin/rverbs
echo "rverbs: $RVERBS"
echo "C:      $C_CLIENT (server $C_SERVER)"
echo "server address $ADDR, port $PORT, $ROUNDS rounds"

now_ns() { date +%s%N; }

# run_client NAME CMD...: starts the C server, runs CMD as the client, prints elapsed µs.
run_client() {
    name=$1; shift
    "$C_SERVER" -s "$ADDR" -p "$PORT" >"$OUT/server.$name.out" 2>&1 &
    spid=$!
    sleep "$SETTLE"
    t0=$(now_ns)
    "$@" >"$OUT/client.$name.out" 2>&1
    rc=$?
    t1=$(now_ns)
    wait "$spid"
    src=$?
    if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
        echo "cm-tools-perf: $name: client exit $rc, server exit $src" >&2
        cat "$OUT/client.$name.out" "$OUT/server.$name.out" >&2
        exit 1
    fi
    echo $(( (t1 - t0) / 1000 ))
}

median() { sort -n | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print int((v[NR/2]+v[NR/2+1])/2)}'; }

echo
echo "== whole-run wall time (µs), client against rdma_server"
# One unmeasured run of each first: the C tools' libraries into the page cache.
run_client rverbs "$RVERBS" rdma-client -s "$ADDR" -p "$PORT" >/dev/null || exit 1
run_client c "$C_CLIENT" -s "$ADDR" -p "$PORT" >/dev/null || exit 1
printf '%-6s %12s %12s\n' round rverbs C
: >"$OUT/wall.rverbs"; : >"$OUT/wall.c"
i=1
while [ $i -le "$ROUNDS" ]; do
    if [ $((i % 2)) -eq 1 ]; then
        r=$(run_client rverbs "$RVERBS" rdma-client -s "$ADDR" -p "$PORT") || exit 1
        c=$(run_client c "$C_CLIENT" -s "$ADDR" -p "$PORT") || exit 1
    else
        c=$(run_client c "$C_CLIENT" -s "$ADDR" -p "$PORT") || exit 1
        r=$(run_client rverbs "$RVERBS" rdma-client -s "$ADDR" -p "$PORT") || exit 1
    fi
    echo "$r" >>"$OUT/wall.rverbs"; echo "$c" >>"$OUT/wall.c"
    printf '%-6s %12s %12s\n' "$i" "$r" "$c"
    i=$((i + 1))
done
mr=$(median <"$OUT/wall.rverbs"); mc=$(median <"$OUT/wall.c")
printf '%-6s %12s %12s\n' median "$mr" "$mc"
awk -v r="$mr" -v c="$mc" 'BEGIN {printf "ratio rverbs/C (medians): %.2f\n", r / c}'

echo
echo "== system calls of one whole run (strace -f -c, all threads)"
syscalls() {
    name=$1; shift
    "$C_SERVER" -s "$ADDR" -p "$PORT" >/dev/null 2>&1 &
    spid=$!
    sleep "$SETTLE"
    strace -f -c -o "$OUT/strace-c.$name" "$@" >/dev/null 2>&1
    wait "$spid"
    total=$(awk '$NF == "total" {print $(NF-2)}' "$OUT/strace-c.$name")
    echo "$name: $total system calls; busiest:"
    awk '$1 ~ /^[0-9.]+$/ && $NF != "total" {print $4, $NF}' "$OUT/strace-c.$name" |
        sort -n -r | head -6 | awk '{printf "    %-16s %s\n", $2, $1}'
}
syscalls rverbs "$RVERBS" rdma-client -s "$ADDR" -p "$PORT"
syscalls C "$C_CLIENT" -s "$ADDR" -p "$PORT"

echo
echo "== a blocking completion wait: the client's calls from its send doorbell to the end of"
echo "   its first sleeping read of a completion channel (the server's writes, its send doorbell"
echo "   included, are delayed by 100 ms with strace's fault injection, so the answer comes late)"
blocking() {
    name=$1; shift
    n=0
    while [ $n -lt 5 ]; do
        strace -f -o /dev/null -e trace=write -e inject=write:delay_enter=100000 \
            "$C_SERVER" -s "$ADDR" -p "$PORT" >/dev/null 2>&1 &
        spid=$!
        sleep $((SETTLE + 3))
        strace -f -o "$OUT/strace.$name" "$@" >/dev/null 2>&1
        wait "$spid"
        # The main thread is the first pid in the file. The uverbs POST_SEND doorbell is a
        # write() of command 28 ("\34\0\0\0"); the wait ends with an 8-byte read() (the
        # completion event: a CQ handle or context).
        awk '
            NR == 1 { main = $1 }
            $1 != main { next }
            !on && /write\([0-9]+, "\\34\\0\\0\\0/ { on = 1; next }
            on {
                sub(/^[0-9]+ +/, "")
                call = $0
                if (call ~ /<unfinished/) { pending = call; next }
                if (call ~ /resumed>/) { call = pending " " call }
                name = call; sub(/\(.*/, "", name)
                if (name ~ /^(ioctl|write)$/) {
                    # which command: the first byte of the written header as strace shows
                    # it (octal escape), or the ioctl
                    what = ""
                    if (match(call, /, "\\[0-9a-z]+/)) what = substr(call, RSTART + 3, RLENGTH - 3)
                    if (name == "ioctl") what = "RDMA_VERBS_IOCTL"
                    line = name "(" what ")"
                } else line = name
                seq = seq (seq == "" ? "" : ", ") line
                count++
                if (name == "read" && call ~ /= 8$/) { print count ": " seq; exit }
            }
            END { if (!count || seq !~ /read/) print "none (the completions were there before the first poll)" }
        ' "$OUT/strace.$name" >"$OUT/blocking.$name"
        if ! grep -q '^none' "$OUT/blocking.$name"; then break; fi
        n=$((n + 1))
    done
    printf '%s: %s\n' "$name" "$(cat "$OUT/blocking.$name")"
}
blocking rverbs "$RVERBS" rdma-client -s "$ADDR" -p "$PORT"
blocking C "$C_CLIENT" -s "$ADDR" -p "$PORT"
echo
echo "(write(N): the first byte of the command as strace prints it, octal: 27 = 23 REQ_NOTIFY_CQ,"
echo " 32 = 26 MODIFY_QP, 34 = 28 POST_SEND; rdma-core sends REQ_NOTIFY_CQ as an RDMA_VERBS_IOCTL"
echo " of INVOKE_WRITE.) Raw files: $OUT"
