#!/bin/sh
# cli/rping's test binary in a loop in a siw guest, with siw's connection-manager lines and its
# error lines on (dynamic debug); on a failure the binary's output and all of dmesg. HOG=n: n
# busy loops in the guest beside it; STOP=1: stop at the first failure. From the repository
# root, after the stage's build:
#   cargo xtask vm --kernel newest --provider siw --timeout 900 -- "N=15 STOP=1 sh ci/siw/rping-trace.sh"
# docs/testing.md, "siw on the newest kernel" (what the lines of the DISCONNECT looked like).
N=${N:-10}; T=${T:-$(pwd)/target/x86_64-unknown-linux-musl/debug/deps}
B=$(ls -t $T/rping-* | grep -v '\.d$' | head -1)
mount -t debugfs none /sys/kernel/debug 2>/dev/null
C=/sys/kernel/debug/dynamic_debug/control
echo "file siw_cm.c +pt" > $C
for f in siw_qp_llp_close siw_init_terminate siw_send_terminate siw_qp_modify siw_destroy_qp siw_qp_cm_drop siw_qp_event siw_verbs_modify_qp; do echo "func $f +pt" > $C; done
for m in "rx error" "processing failed" "SQ task failed" "sq paused" "unable to process" "Immediate error"; do echo "format \"$m\" +pt" > $C; done
dmesg -n 1; uname -r
for i in $(seq 1 ${HOG:-0}); do (while :; do :; done) & done
r=0; fails=0
while [ $r -lt $N ]; do
  r=$((r+1)); dmesg -C
  timeout 200 $B --include-ignored > /tmp/t.out 2>&1; rc=$?
  echo "round $r rc=$rc $(grep 'test result' /tmp/t.out | tail -1) $(cat /proc/loadavg)"
  if [ $rc != 0 ]; then fails=$((fails+1)); grep -v "^test .* ok$\|ping data: rdma-ping" /tmp/t.out; echo "--- dmesg"; dmesg; [ -n "$STOP" ] && break; fi
done
echo "rounds $r fails $fails"
