#!/bin/sh
# ibv_rc_pingpong (Debian's binary, events mode -e so that no busy polling depends on timing)
# under callgrind, on rdma-core's libraries and on ours, in one guest: the client is measured
# with N1 and N2 iterations against a server on rdma-core's libraries; per iteration =
# (I(N2) - I(N1)) / (N2 - N1), start-up = I(N1) - N1 * per iteration (userspace instructions,
# everything the process executes: loader, libraries, program). The callgrind outputs
# (callgrind.<lib>.<n>.out) are kept in the run directory (target/vm/runs/<run>/ on the host)
# for callgrind_annotate.
#   cargo xtask capi --release && cargo xtask vm --timeout 1500 -- sh ci/capi/callgrind.sh
# RVERBS_CAPI_LIB_BASE: a second copy of our libraries (say, main's, built before a change),
# measured too ("base"), in the same guest, so that before and after share the machine state.
set -u
OUT=${CALLGRIND_OUT:-/tmp/rverbs-vm}
[ -d "$OUT" ] && [ -w "$OUT" ] || OUT=/tmp
LIB=${RVERBS_CAPI_LIB:-$(pwd)/target/capi/lib}
DEV=${RVERBS_DEV_A:-rxe0}
ADDR=${RVERBS_ADDR_A:-127.0.0.1}
N1=${N1:-100}
N2=${N2:-600}
PORT=18990
measure() { # lib n -> instructions
    PORT=$((PORT + 1))
    env -u LD_LIBRARY_PATH ibv_rc_pingpong -d "$DEV" -g 1 -e -n "$2" -p $PORT > /tmp/cg-server.log 2>&1 &
    sp=$!
    sleep 2
    case $1 in
    ours) L="LD_LIBRARY_PATH=$LIB" ;;
    base) L="LD_LIBRARY_PATH=$RVERBS_CAPI_LIB_BASE" ;;
    *) L="LD_LIBRARY_PATH=" ;;
    esac
    env $L valgrind --tool=callgrind --callgrind-out-file=$OUT/callgrind.$1.$2.out \
        ibv_rc_pingpong -d "$DEV" -g 1 -e -n "$2" -p $PORT "$ADDR" > /tmp/cg-client.log 2>&1
    rc=$?
    wait $sp
    if [ $rc != 0 ] || ! grep -q "$2 iters in" /tmp/cg-client.log; then
        echo "FAILED: $1 -n $2" >&2; cat /tmp/cg-client.log /tmp/cg-server.log >&2; exit 1
    fi
    awk '/^summary:/ {print $2}' $OUT/callgrind.$1.$2.out
}
for lib in rdma-core ${RVERBS_CAPI_LIB_BASE:+base} ours; do
    a=$(measure $lib $N1) || exit 1
    b=$(measure $lib $N2) || exit 1
    per=$(( (b - a) / (N2 - N1) ))
    start=$(( a - N1 * per ))
    echo "CALLGRIND $lib: n=$N1 $a n=$N2 $b per-iteration $per start-up $start"
done
