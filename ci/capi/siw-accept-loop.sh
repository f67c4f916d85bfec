#!/bin/sh
# The siw perftest hang, by hand: rounds of perftest over the rdma_cm (-R) on siw0, two pairs
# at once (A: server on our libraries, client on rdma-core's; B: the other way round), each
# round one tool of ib_send_lat, ib_write_lat, ib_read_lat, ib_write_bw, with siw's debug lines
# for its socket upcalls and accept turned on (dynamic debug). See docs/testing.md,
# "siw on the newest kernel", for what a hang looks like and which line proves what.
#   cargo xtask capi && cargo xtask vm --provider siw --timeout 1800 -- 'N=200 STOP=1 sh ci/capi/siw-accept-loop.sh'
# N: rounds (default 20); STOP=1: stop at the first hang; SRV_A/SRV_B: ours or rdma-core (the
# server's libraries of each pair); TOOLS: the tools, in turn; RVERBS_CAPI_LIB: our libraries
# (default target/capi/lib of the working directory).
# A hang: a TCP socket of the pair holds the same unread bytes (rx_queue of /proc/net/tcp) in
# two looks 5 s apart while the client still runs (decided by the socket, not by the time the
# tools take); the sockets, the rdma_cm ids and siw's kernel lines are printed, the pair killed.
# A client refused at connect is perftest's own race with its second listen (docs/capi.md).
N=${N:-20}; OURS=${RVERBS_CAPI_LIB:-$(pwd)/target/capi/lib}
SRV_A=${SRV_A:-ours}; SRV_B=${SRV_B:-rdma-core}
TOOLS=${TOOLS:-"ib_send_lat ib_write_lat ib_read_lat ib_write_bw"}
mount -t debugfs none /sys/kernel/debug 2>/dev/null
C=/sys/kernel/debug/dynamic_debug/control
for f in siw_cm_llp_data_ready siw_qp_llp_data_ready siw_accept siw_rtr_data_ready; do echo "func $f +p" > $C || echo "no dyndbg for $f"; done
cat /sys/kernel/debug/sched/preempt 2>/dev/null; uname -r; nproc
stuck() { # port: the rx_queue of an established socket on that port, if not 0
  hp=$(printf %04X $1)
  awk -v p=":$hp" '$4=="01" && (index($2,p) || index($3,p)) { split($5,q,":"); if (q[2]!="00000000") print $2, $3, q[2] }' /proc/net/tcp
}
side() { # name server-lib port
  name=$1; lib=$2; port=$3
  if [ $lib = ours ]; then SL="env LD_LIBRARY_PATH=$OURS"; CL=""; else SL=""; CL="env LD_LIBRARY_PATH=$OURS"; fi
  $SL $PROG -d siw0 -F -n 20 -p $port -R > /tmp/s.$name 2>&1 & sp=$!
  i=0; while ! grep -q ":$(printf %04X $port) 00000000:0000 0A" /proc/net/tcp; do sleep 0.05; i=$((i+1)); [ $i -gt 1200 ] && break; done
  $CL $PROG -d siw0 -F -n 20 -p $port -R 10.10.0.1 > /tmp/c.$name 2>&1 & cp=$!
  t=0; prev=""; hang=""
  while kill -0 $cp 2>/dev/null; do
    sleep 1; t=$((t+1))
    if [ $((t % 5)) = 0 ]; then
      now=$(stuck $port)
      if [ -n "$now" ] && [ "$now" = "$prev" ]; then hang=1; break; fi
      prev=$now
    fi
    [ $t -gt 400 ] && { hang=slow; break; }
  done
  if [ -n "$hang" ]; then
    echo "HANG($hang) $name $PROG srv=$lib port=$port after ${t}s: unread: $now"
    cat /proc/net/tcp; rdma resource show cm_id | grep ":$port"
    dmesg | grep siw | tail -40
    echo "--- client"; tail -3 /tmp/c.$name; echo "--- server"; tail -3 /tmp/s.$name
    kill $cp $sp 2>/dev/null; wait $cp; wait $sp; echo $name.$PROG >> /tmp/hang; return
  fi
  wait $cp; crc=$?
  if [ $crc != 0 ] && grep -q "Connection refused\|Unexpected CM event\|REJECTED" /tmp/c.$name; then
    kill $sp 2>/dev/null; wait $sp; echo "$name $PROG srv=$lib port=$port: perftest's own listen race"; return; fi
  i=0; while kill -0 $sp 2>/dev/null; do sleep 1; i=$((i+1)); [ $i -gt 120 ] && { echo "server of $name left running"; kill $sp; break; }; done
  wait $sp; src=$?
  echo "$name $PROG srv=$lib port=$port client=$crc server=$src ${t}s"
}
r=0
while [ $r -lt $N ]; do
  r=$((r+1)); dmesg -C
  set -- $TOOLS; k=$(( (r-1) % $# + 1 )); eval PROG=\${$k}
  p=$((20000 + r*4))
  side A $SRV_A $p & a=$!
  side B $SRV_B $((p+1)) & b=$!
  wait $a; wait $b
  [ -e /tmp/hang ] && [ -n "$STOP" ] && break
done
echo "rounds $r hangs $(cat /tmp/hang 2>/dev/null | wc -l)"
