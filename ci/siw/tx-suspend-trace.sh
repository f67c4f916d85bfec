#!/bin/sh
# A fully sent WQE that siw completes with LOC_QP_OP_ERR because the peer closed the
# connection right after it: rounds of `rverbs selftest -c rc-error-rkey` (a WRITE with a
# wrong rkey: the responder answers with TERMINATE and closes) and of ib_read_lat over the
# rdma_cm (-R) with the server on our libraries and the client on rdma-core's (perftest's
# closing exchange: the server's last SEND, then the client closes), with siw's debug lines of
# the transmit path and the socket's state change on, and optionally CPU hogs (HOGS=N busy
# loops) to take the CPU from the sender between sending and its check of tx_suspend.
# From the repository root (builds nothing; uses the rverbs binary and our libraries given):
#   cargo xtask vm --kernel newest --provider siw --timeout 600 -- "N=30 HOGS=2 PERF=0 sh ci/siw/tx-suspend-trace.sh"
#   cargo xtask vm --kernel newest --provider siw --timeout 600 -- "N=40 SELFTEST=0 sh ci/siw/tx-suspend-trace.sh"
# (perftest under busy loops mostly hits its own connect race: run it without them.)
# N: rounds of each (default 50); SELFTEST=0 or PERF=0 to leave one out; RVERBS: the rverbs
# binary; RVERBS_CAPI_LIB: our libraries. For each round where siw failed a WQE with
# -ECONNABORTED (-103), siw's lines of that round are printed (the first 3 rounds in full);
# that count is the measure: today's `rverbs selftest` accepts LOC_QP_OP_ERR in rc-error-rkey
# (a selftest built before 2026-12-08 fails the case on it).
# docs/testing.md, "siw on the newest kernel".
N=${N:-50}; OURS=${RVERBS_CAPI_LIB:-$(pwd)/target/capi/lib}
RVERBS=${RVERBS:-$(pwd)/target/x86_64-unknown-linux-musl/release/rverbs}
mount -t debugfs none /sys/kernel/debug 2>/dev/null
C=/sys/kernel/debug/dynamic_debug/control
for f in siw_qp_sq_process siw_qp_sq_proc_tx siw_cm_llp_state_change siw_sq_resume \
         siw_init_terminate siw_send_terminate siw_qp_modify; do
  echo "func $f +pt" > $C || echo "no dyndbg for $f"
done
cat /sys/kernel/debug/sched/preempt 2>/dev/null; uname -r; nproc
hogs=""
[ "${PERF:-1}" = 1 ] && [ "${HOGS:-0}" != 0 ] && echo "(perftest under CPU hogs in a TCG guest is slow: HOGS=0 for it)"
i=0; while [ $i -lt ${HOGS:-0} ]; do sh -c 'while :; do :; done' & hogs="$hogs $!"; i=$((i+1)); done
shown=0
show() { # what
  n=$(dmesg | grep -c 'processing failed: -103')
  if [ "$n" != 0 ]; then
    echo "== $1: siw failed $n WQE(s) with -ECONNABORTED"
    if [ $shown -lt 3 ]; then dmesg | grep -v 'enter for type' | tail -60; shown=$((shown+1))
    else dmesg | grep -B8 'processing failed: -103' | tail -20; fi
  fi
}
st_pass=0; st_fail=0; st_eca=0; pf_ok=0; pf_bad=0; pf_eca=0; pf_other=0
r=0
while [ $r -lt $N ]; do
  r=$((r+1))
  if [ "${SELFTEST:-1}" = 1 ]; then
    dmesg -C
    if $RVERBS selftest -d siw0 -c rc-error-rkey > /tmp/st.out 2>&1; then st_pass=$((st_pass+1)); else st_fail=$((st_fail+1)); cat /tmp/st.out; fi
    dmesg | grep -q 'processing failed: -103' && st_eca=$((st_eca+1))
    show "selftest round $r"
  fi
  if [ "${PERF:-1}" = 1 ]; then
    dmesg -C
    p=$((21000 + r))
    env LD_LIBRARY_PATH=$OURS ib_read_lat -d siw0 -F -n 20 -p $p -R > /tmp/s.out 2>&1 & sp=$!
    i=0; while ! grep -q ":$(printf %04X $p) 00000000:0000 0A" /proc/net/tcp; do sleep 0.05; i=$((i+1)); [ $i -gt 1200 ] && break; done
    timeout 120 ib_read_lat -d siw0 -F -n 20 -p $p -R 10.10.0.1 > /tmp/c.out 2>&1; crc=$?
    # A client refused at connect: perftest's own race with its second listen (docs/capi.md).
    grep -q "Connection refused\|Unexpected CM event\|REJECTED" /tmp/c.out && kill $sp 2>/dev/null
    i=0; while kill -0 $sp 2>/dev/null; do sleep 1; i=$((i+1)); [ $i -gt 60 ] && { echo "server left running"; kill $sp; break; }; done
    wait $sp; src=$?
    dmesg | grep -q 'processing failed: -103' && pf_eca=$((pf_eca+1))
    if [ $crc = 0 ] && [ $src = 0 ]; then pf_ok=$((pf_ok+1))
    elif grep -q "Connection refused\|Unexpected CM event\|REJECTED" /tmp/c.out; then pf_other=$((pf_other+1)); echo "round $r: perftest's own listen race"
    else pf_bad=$((pf_bad+1)); echo "round $r: client=$crc server=$src"; echo "--- server"; tail -5 /tmp/s.out; echo "--- client"; tail -3 /tmp/c.out; fi
    show "ib_read_lat round $r (client=$crc server=$src)"
  fi
done
for h in $hogs; do kill $h; done
echo "selftest rc-error-rkey: $st_pass passed, $st_fail failed, -ECONNABORTED in $st_eca"
echo "ib_read_lat: $pf_ok ok, $pf_bad failed, $pf_other refused at connect, -ECONNABORTED in $pf_eca"
