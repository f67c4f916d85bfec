#!/bin/sh
# siw's CONNECT_ERROR -22 behind the MPA reply, by hand: N pairs of rdma-core's ucmatose on
# siw0 with the client on rdma-core's libraries ("theirs"), then N with the client on ours
# ("ours"; the server is rdma-core's both times), counting the clients that fail and those
# that fail with RDMA_CM_EVENT_CONNECT_ERROR -22. With kprobes: the return values of siw's
# siw_recv_mpa_rr (-71 = -EPROTO), what the connection manager's kworkers ask
# kernel_recvmsg for and get (the MPA reply's 20-byte header, then private data + 4 bytes
# unpatched: 8 asked and 8 got is the reply's 4 bytes of MPA v2 IRD/ORD plus 4 bytes of the
# responder's first FPDU), and the QP's data-ready upcalls run by those kworkers. See
# docs/testing.md, "The bed's patches to siw" (siw-mpa-reply-fpdu-1), and docs/measurements.md.
#   cargo xtask capi && cargo xtask vm --provider siw --kernel 6.12 --timeout 1400 -- 'N=40 sh ci/capi/siw-mpa-reply-loop.sh'
# N: pairs per side (default 20); RVERBS_CAPI_LIB: our libraries (default target/capi/lib of
# the working directory). A client refused at connect (the server not listening yet after
# 1.5 s) counts as a failure but not as a CONNECT_ERROR.
mount -t debugfs none /sys/kernel/debug 2>/dev/null
mount -t tracefs none /sys/kernel/tracing 2>/dev/null
echo 'file siw_cm.c +p' > /sys/kernel/debug/dynamic_debug/control
grep -w 'siw_recv_mpa_rr\|siw_proc_mpareply' /proc/kallsyms
T=/sys/kernel/tracing
if grep -qw siw_recv_mpa_rr /proc/kallsyms; then
  echo 'r:siwmparr siw:siw_recv_mpa_rr ret=$retval:s32' >> $T/kprobe_events && echo 1 > $T/events/kprobes/siwmparr/enable && echo kretprobe on
fi
# What the connection manager's kworkers ask kernel_recvmsg for and get (siw's ksock_recv).
if echo 'p:krm kernel_recvmsg size=$arg5:u32 flags=$arg6:x32' >> $T/kprobe_events && echo 'r:krmr kernel_recvmsg ret=$retval:s32' >> $T/kprobe_events; then
  echo 'comm ~ "kworker*"' > $T/events/kprobes/krm/filter; echo 'comm ~ "kworker*"' > $T/events/kprobes/krmr/filter
  echo 1 > $T/events/kprobes/krm/enable; echo 1 > $T/events/kprobes/krmr/enable; echo recvmsg probes on
fi
# The QP's data-ready upcall run by a connection-manager kworker (the patched kick after the
# hand-over, or siw's own in RDMA_MODE).
if echo 'p:qpdr siw:siw_qp_llp_data_ready' >> $T/kprobe_events; then
  echo 'comm ~ "kworker*"' > $T/events/kprobes/qpdr/filter; echo 1 > $T/events/kprobes/qpdr/enable; echo qp data-ready probe on
fi
N=${N:-20}
OURS=${RVERBS_CAPI_LIB:-$(pwd)/target/capi/lib}
for side in theirs ours; do
  fails=0; ce=0
  i=0
  while [ $i -lt $N ]; do
    p=$((7600 + i)); [ $side = ours ] && p=$((7700 + i))
    ucmatose -b 10.10.0.1 -p $p > /tmp/s.$side.$i 2>&1 &
    sp=$!
    sleep 1.5
    if [ $side = ours ]; then
      LD_LIBRARY_PATH=$OURS timeout 60 ucmatose -s 10.10.0.1 -p $p > /tmp/c.$side.$i 2>&1
    else
      timeout 60 ucmatose -s 10.10.0.1 -p $p > /tmp/c.$side.$i 2>&1
    fi
    rc=$?
    kill $sp 2>/dev/null
    wait $sp
    if [ $rc != 0 ] || ! grep -q "test complete" /tmp/c.$side.$i; then
      fails=$((fails+1)); grep -q 'CONNECT_ERROR, error: -22' /tmp/c.$side.$i && ce=$((ce+1)); echo "== $side run $i rc $rc"; cat /tmp/c.$side.$i; echo "-- server:"; cat /tmp/s.$side.$i
    fi
    i=$((i+1))
  done
  echo "RESULT $side: $fails of $N failed, $ce of them CONNECT_ERROR -22"
done
echo "extra data: $(dmesg | grep -c 'peer sent extra data')"
echo "recv_mpa_rr returns: $(grep siwmparr $T/trace | sed 's/.*ret=//' | sort | uniq -c | tr '\n' ' ')"
grep siwmparr $T/trace | grep -v 'ret=0$\|ret=-11$' | head
echo "QP data-ready upcalls from kworkers: $(grep -c 'qpdr:' $T/trace)"
echo "-- kernel_recvmsg calls (size asked, got) of each kworker before an EPROTO:"
grep -B4 'siwmparr.*ret=-71' $T/trace | grep 'krm\|siwmparr' | head -40
dmesg | grep -i 'extra data\|peer EOF\|mpa reply\|error: -\|release:\|rverbs-patch' | tail -30
