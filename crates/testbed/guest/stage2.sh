# Stage 2 of the rverbs test-bed guest, run by /bin/sh of the final root (busybox in the
# minimal guest, this machine's sh in the host guest). Brings up the netdevs and RDMA devices
# of the topology, exports the RVERBS_* variables, runs cmd.sh and records its exit status.
R=/tmp/rverbs-vm
. "$R/guest.env"
export PATH="$R/bin:$PATH:/usr/sbin:/sbin:/usr/bin:/bin"
export HOME=/tmp RUST_BACKTRACE=1 RVERBS_VM=1 RVERBS_GUEST RVERBS_TOPO RVERBS_KERNEL
export RVERBS_PROVIDER="${RVERBS_PROVIDER:-rxe}"
# Variables the caller passed for the command (guest.env sets them).
[ -n "$RVERBS_EXPORT" ] && export $RVERBS_EXPORT
# The console is a tty, but what reads it is the host's log or terminal: colours only when the
# host's own output is a terminal (vm.rs sets RVERBS_TERM to the host's TERM then).
export TERM="${RVERBS_TERM:-dumb}"
[ "$TERM" = dumb ] && export NO_COLOR=1

say() { echo "RVERBS-VM: $*"; }
status() {
    echo "$1 $2" > "$R/status.new" && mv "$R/status.new" "$R/status"
    echo "RVERBS-VM-STATUS: $1 $2"
}
fail() {
    echo "RVERBS-VM-ERROR: $*"
    status setup 1
    exit 1
}
ipc() { ip "$@" || fail "\`ip $*\` failed"; }
sysctl_set() { echo "$2" > "/proc/sys/net/ipv4/conf/$1/$3" || fail "cannot set $3 on $1"; }

# The GID that rxe derives from an IPv4 address (IPv4-mapped IPv6, as sysfs prints it).
gid_of() {
    oldifs=$IFS
    IFS=.
    set -- $1
    IFS=$oldifs
    printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4"
}

# mkdev NAME NETDEV ADDR: create an RDMA device of type $RVERBS_PROVIDER (rxe or siw) with our
# own binary (iproute2's rdma as a loudly reported fallback in the host guest only; or
# iproute2's rdma when the run was given no rverbs binary, RVERBS_RXE_TOOL=rdma), then wait
# until its port is ACTIVE and, for rxe, GID index 1 holds the IPv4-mapped GID of ADDR
# (ib_core fills the GID table asynchronously; siw's one GID is its netdev's MAC address).
P=${RVERBS_PROVIDER:-rxe}
mkdev() {
    if [ "$RVERBS_RXE_TOOL" = rdma ]; then
        rdma link add "$1" type "$P" netdev "$2" > "$R/dev-$1.log" 2>&1 ||
            fail "\`rdma link add $1 type $P netdev $2\` failed: $(cat "$R/dev-$1.log")"
        say "created $1 on $2 with iproute2's \`rdma link add\`"
    elif command -v rverbs > /dev/null 2>&1 &&
        rverbs link add "$1" type "$P" netdev "$2" > "$R/dev-$1.log" 2>&1 &&
        [ -e "/sys/class/infiniband/$1" ]; then
        say "created $1 on $2 with \`rverbs link add\`"
    else
        echo "RVERBS-VM: \`rverbs link add $1 type $P netdev $2\` did not create $1:"
        cat "$R/dev-$1.log" 2> /dev/null
        if [ "$RVERBS_GUEST" = host ] && command -v rdma > /dev/null 2>&1; then
            echo "RVERBS-VM: ##########################################################"
            echo "RVERBS-VM: FALLBACK: creating $1 with iproute2's \`rdma link add\`"
            echo "RVERBS-VM: ##########################################################"
            echo "$1" >> "$R/fallback"
            rdma link add "$1" type "$P" netdev "$2" || fail "\`rdma link add $1 type $P netdev $2\` failed"
        else
            fail "cannot create $1: \`rverbs link add\` failed and the $RVERBS_GUEST guest has no fallback"
        fi
    fi
    want=$(gid_of "$3")
    i=0
    while :; do
        state=$(cat "/sys/class/infiniband/$1/ports/1/state" 2> /dev/null)
        gid=$(cat "/sys/class/infiniband/$1/ports/1/gids/1" 2> /dev/null)
        case "$state" in *ACTIVE*) [ "$P" = siw ] || [ "$gid" = "$want" ] && break ;; esac
        i=$((i + 1))
        [ $i -gt 200 ] && fail "$1 not ready after 20 s: port state '$state', GID 1 '$gid' (want $want)"
        sleep 0.1
    done
}

ip link set lo up || fail "cannot bring up lo"
ipc link add d0 type dummy
ipc addr add 10.10.0.1/24 dev d0
ipc link set d0 up
mkdev ${P}0 d0 10.10.0.1
if [ "$RVERBS_TOPO" = two ]; then
    # Both veth ends stay in the initial netns (rxe's UDP socket lives there). Policy routing
    # sends locally generated traffic between 10.20.0.1 and 10.20.0.2 out of the veth instead
    # of through the local table (lo); see docs/testing.md.
    ipc link add ve1 type veth peer name ve2
    if [ ! -e /sys/class/net/ve2 ]; then
        # busybox's ip ignores "peer name": rename the peer the kernel named itself.
        peer=$(cat /sys/class/net/ve1/iflink)
        for d in /sys/class/net/*; do
            [ "$(cat "$d/ifindex")" = "$peer" ] && ipc link set "${d##*/}" name ve2
        done
    fi
    ipc addr add 10.20.0.1/24 dev ve1
    ipc addr add 10.20.0.2/24 dev ve2
    for c in all default ve1 ve2; do
        sysctl_set $c 1 accept_local
        sysctl_set $c 0 rp_filter
    done
    ipc link set ve1 up
    ipc link set ve2 up
    ipc route add 10.20.0.2/32 dev ve1 src 10.20.0.1 table 101
    ipc route add 10.20.0.1/32 dev ve2 src 10.20.0.2 table 102
    ipc rule add pref 10 iif lo to 10.20.0.2 table 101
    ipc rule add pref 11 iif lo to 10.20.0.1 table 102
    ipc rule add pref 100 table local
    ipc rule del pref 0 table local
    mkdev ${P}1 ve1 10.20.0.1
    mkdev ${P}2 ve2 10.20.0.2
    export RVERBS_DEV_A=${P}1 RVERBS_ADDR_A=10.20.0.1 RVERBS_NETDEV_A=ve1
    export RVERBS_DEV_B=${P}2 RVERBS_ADDR_B=10.20.0.2 RVERBS_NETDEV_B=ve2
else
    export RVERBS_DEV_A=${P}0 RVERBS_ADDR_A=10.10.0.1 RVERBS_NETDEV_A=d0
    export RVERBS_DEV_B=${P}0 RVERBS_ADDR_B=10.10.0.1 RVERBS_NETDEV_B=d0
fi

counters() {
    for d in ve1 ve2; do
        s=/sys/class/net/$d/statistics
        printf '%s tx_bytes=%s rx_bytes=%s  ' $d "$(cat $s/tx_bytes)" "$(cat $s/rx_bytes)"
    done
}
[ "$RVERBS_TOPO" = two ] && say "link counters before: $(counters)"
say "ready $(cut -d' ' -f1 /proc/uptime) s after boot (guest $RVERBS_GUEST, topology $RVERBS_TOPO)"
cd "${RVERBS_CWD:-/}" 2> /dev/null || cd /
echo "RVERBS-VM-BEGIN"
/bin/sh "$R/cmd.sh"
rc=$?
echo "RVERBS-VM-END"
[ "$RVERBS_TOPO" = two ] && say "link counters after: $(counters)"
status cmd $rc
