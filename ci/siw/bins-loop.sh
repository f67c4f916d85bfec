#!/bin/sh
# The siw stage's test binaries in a loop, whole (their tests run at the same time, as in the
# stage), in a siw guest; all of siw's dynamic debug lines with DYN=1; on a failure the
# binary's output and the end of dmesg. Build the binaries first (cargo xtask test --vm-only
# --stage "capi,vm newest siw host/one"), then from the repository root:
#   cargo xtask vm --kernel newest --provider siw --timeout 900 -- "N=5 DYN=1 BINS='vm_sink selftest_vm siw_vm' sh ci/siw/bins-loop.sh"
# docs/testing.md, "siw on the newest kernel".
N=${N:-10}; T=${T:-$(pwd)/target/x86_64-unknown-linux-musl/debug/deps}
BINS=${BINS:-"rping vm_sink selftest_vm"}
mount -t debugfs none /sys/kernel/debug 2>/dev/null
[ -n "$DYN" ] && echo "module siw +pt" > /sys/kernel/debug/dynamic_debug/control
uname -r
r=0; fails=0
while [ $r -lt $N ]; do
  r=$((r+1))
  for b in $BINS; do
    B=$(ls -t $T/$b-* | grep -v '\.d$' | head -1)
    dmesg -C
    timeout 200 $B --include-ignored > /tmp/t.out 2>&1; rc=$?
    echo "round $r $b rc=$rc $(grep 'test result' /tmp/t.out | tail -1) $(cat /proc/loadavg)"
    if [ $rc != 0 ]; then fails=$((fails+1)); grep -v "^test .* ok$" /tmp/t.out | tail -80; echo "--- dmesg"; dmesg | tail -300; [ -n "$STOP" ] && exit 1; fi
  done
done
echo "rounds $r fails $fails"
