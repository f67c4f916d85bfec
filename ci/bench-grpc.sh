#!/bin/sh
# Unary gRPC calls (tonic) over RDMA against the same calls over TCP, side by side in one VM run
# (issue 34): examples/grpc/examples/grpc_bench.rs serves the Echo service on an
# AsyncRdmaListener and on a TcpListener in one process and times sequential unary calls on a
# channel of each kind, rounds alternating the order.
#
#   cargo build --release -p rverbs-grpc-example --example grpc_bench
#   cargo xtask vm --guest host --topo two -- sh ci/bench-grpc.sh
#
# Two-node topology: the server listens on node A's address ($RVERBS_ADDR_A, rxe1 on ve1) and
# the route to it leaves through node B's veth end, so RDMA (rxe) and TCP cross the same veth.
# Output (every run's line, the medians, the ratio) goes to stdout and $OUT/grpc-bench.txt.
#
# Environment: CALLS (2000 per run), ROUNDS (4), SIZE (64: payload bytes each way),
# BIN (target/release/examples/grpc_bench).
set -u
CALLS=${CALLS:-2000}
ROUNDS=${ROUNDS:-4}
SIZE=${SIZE:-64}
ADDR=${RVERBS_ADDR_A:-10.10.0.1}
BIN=${BIN:-target/release/examples/grpc_bench}
if [ -z "${OUT:-}" ]; then
    if [ -d /tmp/rverbs-vm ]; then OUT=/tmp/rverbs-vm/bench-grpc; else OUT=/tmp/bench-grpc; fi
fi
mkdir -p "$OUT" || exit 1
[ -x "$BIN" ] || { echo "bench-grpc: no $BIN (cargo build --release -p rverbs-grpc-example --example grpc_bench)" >&2; exit 1; }
echo "bench-grpc: $(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -r); $(nproc) CPUs; topology ${RVERBS_TOPO:-one}; server on $ADDR"
timeout 600 "$BIN" "$ADDR" "$CALLS" "$ROUNDS" "$SIZE" > "$OUT/grpc-bench.txt" 2>&1
rc=$?
cat "$OUT/grpc-bench.txt"
[ $rc -eq 0 ] || echo "bench-grpc: grpc_bench failed (exit $rc)" >&2
exit $rc
