#!/bin/sh
# rverbs rc-pingpong against rdma-core's ibv_rc_pingpong, side by side, in one VM run.
#
#   cargo xtask vm --guest host -- sh ci/bench-pingpong.sh [latency|callgrind|syscalls|pad|all]
#
# latency:   ROUNDS rounds; in each, for 64 and 4096 bytes, polling and -e, one C<->C and one
#            Rust<->Rust ping-pong (server on $RVERBS_DEV_A, client to $RVERBS_ADDR_A); the
#            order of the two alternates between rounds. Prints usec/iter (the client's line) per
#            round, the medians and minima and the ratios Rust/C.
# callgrind: the client under `valgrind --tool=callgrind` (the server runs natively), -s 64,
#            polling and -e, at CG_ITERS iterations. Prints userspace instructions (Ir) per
#            run, the classic per-iteration figure (Ir(2000) - Ir(1000)) / 1000, and a least-
#            squares fit Ir = start-up + work * iters + cost * calls, where calls are the CQ
#            poll calls (polling) or the completion events (-e): the number of empty polls and
#            of events per iteration depends on timing, the fit separates it out (polling: only
#            when polls/iter varied between the runs). Also malloc calls per iteration.
# syscalls:  the client under `strace -f -c` (the server natively), -s 64, polling and -e, at
#            1000 and 2000 iterations: system calls per iteration, (calls(2000) - calls(1000))
#            / 1000 per syscall and in all, next to the completion events per iteration.
# pad:       what userspace instructions cost in latency: polling, -s 64, C<->C and
#            Rust<->Rust with RVERBS_PINGPONG_PAD=P (P extra polls of the empty CQ before every
#            send, on both sides; the C tool gets them from the LD_PRELOAD shim
#            ci/bench/cpad.c, built here with cc) for each P of PADS, in ROUNDS rounds (the
#            order rotates). Callgrind counts the Ir of one such poll per tool; a least-squares
#            line through (Ir added per iteration, usec/iter) gives the latency of one
#            userspace instruction of each tool's hot code on the critical path.
# Results and raw files go to $OUT (default: bench-pingpong/ on the run share, which is
# target/vm/runs/<run>/bench-pingpong/ on the host).
#
# RVERBS_BASE: a second rverbs binary (say, main's, built before a change); the callgrind
# mode then also measures it (rows "rverbs (base)"), in the same guest run, between C and
# $RVERBS, so that before and after share the machine state.
# Environment: ROUNDS (5), SIZES ("64 4096"), ITERS_POLL (1000), ITERS_EVENTS (1000),
# CG_ITERS ("1000 2000 1000 2000"), RVERBS (the rverbs on PATH), C_PINGPONG (ibv_rc_pingpong),
# GIDX (the device's RoCE v2 IPv4 GID index), PORT (19500: first TCP port minus one),
# PADS ("0 100 400 1600"), ITERS_PAD (2000).
set -u

what=${1:-all}
ROUNDS=${ROUNDS:-5}
SIZES=${SIZES:-64 4096}
ITERS_POLL=${ITERS_POLL:-1000}
ITERS_EVENTS=${ITERS_EVENTS:-1000}
CG_ITERS=${CG_ITERS:-1000 2000 1000 2000}
PADS=${PADS:-0 100 400 1600}
ITERS_PAD=${ITERS_PAD:-2000}
DEV=${RVERBS_DEV_A:-rxe0}
ADDR=${RVERBS_ADDR_A:-10.10.0.1}
PORT=${PORT:-19500}
RV=${RVERBS:-$(command -v rverbs)}
CPP=${C_PINGPONG:-$(command -v ibv_rc_pingpong)}
if [ -z "${OUT:-}" ]; then
    if [ -d /tmp/rverbs-vm ]; then OUT=/tmp/rverbs-vm/bench-pingpong; else OUT=/tmp/bench-pingpong; fi
fi
mkdir -p "$OUT" || exit 1

die() { echo "bench-pingpong: $*" >&2; exit 1; }
[ -n "$RV" ] && [ -x "$RV" ] || die "no rverbs binary (set RVERBS)"
[ -n "$CPP" ] && [ -x "$CPP" ] || die "no ibv_rc_pingpong (rdma-core's ibverbs-utils)"

# The first RoCE v2 GID of port 1 that is IPv4-mapped.
if [ -z "${GIDX:-}" ]; then
    p=/sys/class/infiniband/$DEV/ports/1
    i=0
    while [ $i -lt 64 ]; do
        case "$(cat $p/gids/$i 2> /dev/null)" in
        0000:0000:0000:0000:0000:ffff:*)
            [ "$(cat $p/gid_attrs/types/$i 2> /dev/null)" = "RoCE v2" ] && GIDX=$i && break ;;
        esac
        i=$((i + 1))
    done
    [ -n "${GIDX:-}" ] || die "no RoCE v2 IPv4 GID on $DEV"
fi

echo "bench-pingpong: $(date -u '+%Y-%m-%d %H:%M UTC'); $(uname -r); $(nproc) CPUs; device $DEV GID $GIDX -> $ADDR"
echo "bench-pingpong: rverbs = $RV ($(file -b "$RV" 2> /dev/null | cut -d, -f1-2 || true))"
echo "bench-pingpong: C      = $CPP"

cmd() {
    case $1 in
    C) echo "$CPP" ;;
    B) echo "$RVERBS_BASE rc-pingpong" ;;
    *) echo "$RV rc-pingpong" ;;
    esac
}
if [ -n "${RVERBS_BASE:-}" ]; then
    [ -x "$RVERBS_BASE" ] || die "RVERBS_BASE=$RVERBS_BASE is not an executable"
    echo "bench-pingpong: base   = $RVERBS_BASE"
fi

# Waits until something listens on TCP port $1.
wait_listen() {
    hex=$(printf '%04X' "$1")
    n=0
    until grep -q ":$hex [0-9A-F]*:[0-9A-F]* 0A " /proc/net/tcp /proc/net/tcp6 2> /dev/null; do
        n=$((n + 1))
        [ $n -gt 400 ] && return 1
        sleep 0.05
    done
}

# run_pair TOOL MODE SIZE ITERS [CLIENT-WRAPPER...]: one ping-pong of TOOL against itself on
# TCP port $PORT (callers move to a fresh port first: this runs in a subshell); prints the
# client's usec/iter.
run_pair() {
    tool=$1 mode=$2 size=$3 iters=$4
    shift 4
    e=""
    [ "$mode" = events ] && e=-e
    c=$(cmd "$tool")
    $c -d "$DEV" -g "$GIDX" -s "$size" -n "$iters" $e -p $PORT > "$OUT/server.log" 2>&1 &
    spid=$!
    if ! wait_listen $PORT; then
        kill $spid 2> /dev/null
        cat "$OUT/server.log" >&2
        die "$tool server did not listen on port $PORT"
    fi
    timeout 600 "$@" $c -d "$DEV" -g "$GIDX" -s "$size" -n "$iters" $e -p $PORT "$ADDR" > "$OUT/client.log" 2>&1
    crc=$?
    wait $spid
    src=$?
    if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
        echo "--- server (exit $src)" >&2; cat "$OUT/server.log" >&2
        echo "--- client (exit $crc)" >&2; cat "$OUT/client.log" >&2
        die "$tool $mode $size B x $iters failed"
    fi
    sed -n 's/^.* iters in .* = \([0-9.]*\) usec\/iter$/\1/p' "$OUT/client.log"
}

latency() {
    : > "$OUT/latency.txt"
    r=1
    while [ $r -le "$ROUNDS" ]; do
        for size in $SIZES; do
            for mode in poll events; do
                if [ $((r % 2)) -eq 1 ]; then order="C R"; else order="R C"; fi
                iters=$ITERS_POLL
                [ $mode = events ] && iters=$ITERS_EVENTS
                for tool in $order; do
                    PORT=$((PORT + 1))
                    us=$(run_pair $tool $mode $size $iters) || exit 1
                    echo "$mode $size $tool $r $us" >> "$OUT/latency.txt"
                    echo "round $r: $tool<->$tool $mode $size B: $us usec/iter"
                done
            done
        done
        r=$((r + 1))
    done
    echo
    lat_summary
}

# The table of $OUT/latency.txt (also: sh ci/bench-pingpong.sh lat-summary).
lat_summary() {
    echo "| mode | size | ibv_rc_pingpong usec/iter per round | median | min | rverbs usec/iter per round | median | min | rverbs/C (medians) | rverbs/C (minima) |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    awk '
        { k = $1 " " $2; v[k, $3] = v[k, $3] " " $5; keys[k] = 1 }
        function median(s,   a, n, i, j, t) {
            n = split(s, a, " ")
            for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        function minimum(s,   a, n, i, m) {
            n = split(s, a, " "); m = a[1] + 0
            for (i = 2; i <= n; i++) if (a[i] + 0 < m) m = a[i] + 0
            return m
        }
        END {
            for (k in keys) {
                split(k, m, " ")
                mc = median(v[k, "C"]); mr = median(v[k, "R"]); nc = minimum(v[k, "C"]); nr = minimum(v[k, "R"])
                printf "| %s | %s |%s | %.1f | %.1f |%s | %.1f | %.1f | %.2f | %.2f |\n", m[1] == "poll" ? "polling" : "-e", m[2], v[k, "C"], mc, nc, v[k, "R"], mr, nr, mr / mc, nr / nc
            }
        }' "$OUT/latency.txt" | sort
}

# Calls per function of a callgrind file: "<calls>\t<file:function> [<object>]".
calls_of() {
    callgrind_annotate --tree=caller --threshold=100 "$1" 2> /dev/null | awk '
        /^ *[0-9,]+ +\( *[0-9.]+%\) +< / {
            if (match($0, /\(([0-9,]+)x\)/)) { s = substr($0, RSTART + 1, RLENGTH - 3); gsub(",", "", s); pend += s }
            next
        }
        /^ *[0-9,]+ +\( *[0-9.]+%\) +\* / {
            name = $0; sub(/^.*\*  */, "", name)
            if (pend > calls[name]) calls[name] = pend
            pend = 0; next
        }
        { pend = 0 }
        END { for (k in calls) print calls[k] "\t" k }' > "$1.calls"
}

# Largest call count among the functions matching the extended regex $2 in file $1.calls.
max_calls() { grep -E "$2" "$1.calls" | sort -rn | head -n 1 | cut -f1; }

callgrind() {
    command -v valgrind > /dev/null || die "no valgrind in this guest"
    : > "$OUT/callgrind.txt"
    export RVERBS_PINGPONG_STATS=1
    poll_fn_c=""
    for mode in events poll; do
        for tool in C ${RVERBS_BASE:+B} R; do
            for n in $CG_ITERS; do
                PORT=$((PORT + 1))
                f=$OUT/cg.$tool.$mode.$n.$PORT
                us=$(run_pair $tool $mode 64 $n valgrind --tool=callgrind --callgrind-out-file="$f") || exit 1
                ir=$(sed -n 's/^totals: *//p' "$f" | tr -d ' ')
                [ -n "$ir" ] || ir=$(sed -n 's/^summary: *//p' "$f" | tr -d ' ')
                calls_of "$f"
                if [ $tool = C ]; then
                    ev=$(max_calls "$f" ':ibv_get_cq_event ')
                    if [ $mode = events ]; then
                        # The provider's poll function is the librxe function called once per
                        # event (ibv_rc_pingpong polls once after each event).
                        poll_fn_c=$(grep -E 'librxe' "$f.calls" | awk -F '\t' -v e="$ev" '$1 == e { print $2; exit }')
                        polls=$ev
                    else
                        [ -n "$poll_fn_c" ] || die "did not find librxe's poll function in the -e runs"
                        polls=$(awk -F '\t' -v fn="$poll_fn_c" '$2 == fn { print $1 }' "$f.calls")
                    fi
                else
                    # rc-pingpong counts them itself (RVERBS_PINGPONG_STATS): its poll and
                    # event calls are inlined, so callgrind sees no call to count.
                    st=$(sed -n 's/^rc-pingpong stats: \([0-9]*\) CQ polls, \([0-9]*\) completion events$/\1 \2/p' "$OUT/client.log")
                    polls=${st% *}
                    ev=${st#* }
                fi
                mallocs=$(max_calls "$f" ':malloc \[')
                # Inclusive Ir of the CQ poll function (librxe's for C, Cq::poll_raw for Rust, the path rc-pingpong takes).
                if [ $tool = C ]; then pfn=$poll_fn_c; else pfn='cq::Cq::poll_raw \['; fi
                pir=$(callgrind_annotate --inclusive=yes --threshold=100 "$f" 2> /dev/null | awk -v fn="$pfn" -v exact=$([ $tool = C ] && echo 1 || echo 0) '
                    /^ *[0-9,]+ +\( *[0-9.]+%\) +[^ ]/ {
                        v = $1; gsub(",", "", v); name = $0; sub(/^ *[0-9,]+ +\( *[0-9.]+%\) +/, "", name)
                        if ((exact && name == fn) || (!exact && name ~ fn)) { if (v + 0 > best) best = v + 0 }
                    }
                    END { print best + 0 }')
                echo "$tool $mode $n ${ir:-0} ${polls:-0} ${ev:-0} ${mallocs:-0} ${pir:-0} $us" >> "$OUT/callgrind.txt"
                echo "callgrind: $tool $mode 64 B x $n: Ir $ir (in CQ poll calls: $pir), CQ polls ${polls:-?}, events ${ev:-0}, malloc calls ${mallocs:-?} ($us usec/iter under valgrind)"
            done
        done
    done
    echo
    cg_summary
}

# The table of $OUT/callgrind.txt (also: sh ci/bench-pingpong.sh cg-summary, to re-read it).
cg_summary() {
    echo "| tool | mode | Ir/iter: (Ir(2000)-Ir(1000))/1000 | Ir/iter outside CQ poll calls | Ir per CQ poll call | CQ polls/iter | events/iter | fit: Ir/iter + Ir/event (-e) or + Ir/poll call (polling) | start-up Ir | malloc calls/iter |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    awk '
        {
            # tool mode n Ir polls events mallocs Ir_in_poll usec
            k = $1 " " $2; keys[k] = 1
            # normal equations of the fit Ir = a + b*n + c*calls: calls are the events (-e)
            # or the CQ poll calls (polling)
            x[1] = 1; x[2] = $3; x[3] = $2 == "poll" ? $5 : $6
            for (i = 1; i <= 3; i++) { r[k, i] += x[i] * $4; for (j = 1; j <= 3; j++) A[k, i, j] += x[i] * x[j] }
            if ($3 == 1000) { s1[k] += $4; o1[k] += $4 - $8; c1[k]++; m1[k] += $7 }
            if ($3 == 2000) { s2[k] += $4; o2[k] += $4 - $8; c2[k]++; m2[k] += $7 }
            pir[k] += $8; polls[k] += $5; ppi[k] += $5 / $3; epi[k] += $6 / $3; runs[k]++
            # Ir in poll calls = alpha * n + beta * polls: beta is the cost of an empty poll,
            # alpha what the polls that return completions add per iteration.
            Snn[k] += $3 * $3; Snp[k] += $3 * $5; Spp[k] += $5 * $5; Sni[k] += $3 * $8; Spi[k] += $5 * $8
            q = $5 / $3; if (!(k in qmin) || q < qmin[k]) qmin[k] = q; if (!(k in qmax) || q > qmax[k]) qmax[k] = q
            e = $6 / $3; if (!(k in emin) || e < emin[k]) emin[k] = e; if (!(k in emax) || e > emax[k]) emax[k] = e
        }
        END {
            for (k in keys) {
                split(k, kk, " ")
                tool = kk[1] == "C" ? "ibv_rc_pingpong" : kk[1] == "B" ? "rverbs (base)" : "rverbs"; mode = kk[2] == "poll" ? "polling" : "-e"
                if (!(c1[k] && c2[k])) { printf "| %s | %s | (needs runs of 1000 and 2000 iterations) |\n", tool, mode; continue }
                d = (s2[k] / c2[k] - s1[k] / c1[k]) / 1000
                out = (o2[k] / c2[k] - o1[k] / c1[k]) / 1000
                det = Snn[k] * Spp[k] - Snp[k] * Snp[k]
                if (qmax[k] - qmin[k] >= 1 && det != 0)
                    per_poll = sprintf("%.1f (empty; polls returning completions add %.0f/iter)", (Snn[k] * Spi[k] - Snp[k] * Sni[k]) / det, (Spp[k] * Sni[k] - Snp[k] * Spi[k]) / det)
                else
                    per_poll = sprintf("%.1f (average: polls/iter did not vary enough to separate empty polls)", polls[k] ? pir[k] / polls[k] : 0)
                start = o1[k] / c1[k] - 1000 * out
                mal = (m2[k] / c2[k] - m1[k] / c1[k]) / 1000
                fit = "n/a"
                if ((kk[2] == "events" && emax[k] - emin[k] >= 0.1) || (kk[2] == "poll" && qmax[k] - qmin[k] >= 1)) {
                    for (i = 1; i <= 3; i++) { for (j = 1; j <= 3; j++) M[i, j] = A[k, i, j]; M[i, 4] = r[k, i] }
                    ok = 1
                    for (p = 1; p <= 3 && ok; p++) {
                        best = p
                        for (i = p + 1; i <= 3; i++) if ((M[i, p] < 0 ? -M[i, p] : M[i, p]) > (M[best, p] < 0 ? -M[best, p] : M[best, p])) best = i
                        for (j = 1; j <= 4; j++) { t = M[p, j]; M[p, j] = M[best, j]; M[best, j] = t }
                        if (M[p, p] == 0) { ok = 0; break }
                        for (i = 1; i <= 3; i++) if (i != p) { f = M[i, p] / M[p, p]; for (j = p; j <= 4; j++) M[i, j] -= f * M[p, j] }
                    }
                    if (ok) fit = sprintf("%.0f + %.0f", M[2, 4] / M[2, 2], M[3, 4] / M[3, 3])
                } else fit = kk[2] == "events" ? "n/a (events/iter did not vary)" : "n/a (polls/iter did not vary)"
                printf "| %s | %s | %.0f | %.0f | %s | %.2f | %.2f | %s | %.0f | %.3f |\n", tool, mode, d, out, per_poll, ppi[k] / runs[k], epi[k] / runs[k], fit, start, mal
            }
        }' "$OUT/callgrind.txt" | sort
}

pad() {
    command -v valgrind > /dev/null || die "no valgrind in this guest"
    command -v cc > /dev/null || die "pad needs a C compiler for the C side's shim (ci/bench/cpad.c)"
    here=$(dirname "$0")
    so=$OUT/cpad.so
    cc -O2 -g -shared -fPIC -o "$so" "$here/bench/cpad.c" -ldl || die "could not build $so"
    : > "$OUT/pad.txt"
    big=0
    for p in $PADS; do [ "$p" -gt "$big" ] && big=$p; done
    [ "$big" -gt 0 ] || die "PADS needs a padding above 0"
    # Ir of one padding poll, per tool: the client under callgrind with the largest padding;
    # the padding function (rc_pingpong::pad, the shim's rverbs_cpad) is never inlined, so
    # its inclusive cost over its calls and polls is the figure.
    for tool in R C; do
        PORT=$((PORT + 1))
        f=$OUT/cg.pad.$tool.$big.$PORT
        (export RVERBS_PINGPONG_PAD=$big; [ $tool = C ] && export LD_PRELOAD=$so
         run_pair $tool poll 64 200 valgrind --tool=callgrind --callgrind-out-file="$f") > /dev/null || exit 1
        calls_of "$f"
        if [ $tool = R ]; then fn='rc_pingpong::pad \['; re=':rverbs::rc_pingpong::pad( \[|$)'
        else fn=':rverbs_cpad \['; re=':rverbs_cpad( \[|$)'; fi
        pcalls=$(max_calls "$f" "$fn")
        # Summed: callgrind_annotate splits a function by the source file of its inlined code.
        pir=$(callgrind_annotate --inclusive=yes --threshold=100 "$f" 2> /dev/null | awk -v re="$re" '
            /^ *[0-9,]+ +\( *[0-9.]+%\) +[^ ]/ && $0 ~ re { v = $1; gsub(",", "", v); s += v }
            END { if (s) print s }')
        [ -n "$pcalls" ] && [ -n "$pir" ] || die "callgrind did not see the padding function of $tool"
        per=$(awk -v i="$pir" -v c="$pcalls" -v p="$big" 'BEGIN { printf "%.3f", i / c / p }')
        echo "pad: $tool: $pcalls sends padded with $big polls: $pir Ir, $per Ir per poll"
        echo "irpoll $tool $per" >> "$OUT/pad.txt"
    done
    r=1
    while [ $r -le "$ROUNDS" ]; do
        # Every padding of both tools once a round, the order rotated by one each round.
        list=""
        for p in $PADS; do list="$list C:$p R:$p"; done
        list=${list# }
        i=1
        while [ $i -lt $r ]; do list="${list#* } ${list%% *}"; i=$((i + 1)); done
        for tp in $list; do
            tool=${tp%%:*} p=${tp#*:}
            PORT=$((PORT + 1))
            us=$(export RVERBS_PINGPONG_PAD=$p; [ $tool = C ] && export LD_PRELOAD=$so
                 run_pair $tool poll 64 "$ITERS_PAD") || exit 1
            echo "$tool $p $r $us" >> "$OUT/pad.txt"
            echo "round $r: $tool pad $p: $us usec/iter"
        done
        r=$((r + 1))
    done
    echo
    pad_summary
}

# The tables of $OUT/pad.txt (also: sh ci/bench-pingpong.sh pad-summary).
pad_summary() {
    echo "| tool | padding (CQ polls per send) | userspace Ir added per iteration (both sides) | usec/iter, rounds in order | median | min |"
    echo "|---|---|---|---|---|---|"
    # One line per tool and padding: tool, polls, Ir added, median, minimum, the rounds.
    awk '
        $1 == "irpoll" { t[$2] = $3; next }
        { k = $1 " " $2; v[k] = v[k] " " $4; keys[k] = 1 }
        END {
            for (k in keys) {
                split(k, kk, " ")
                n = split(v[k], a, " ")
                for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
                med = n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
                print kk[1], kk[2], 2 * kk[2] * t[kk[1]], med, a[1], v[k]
            }
        }' "$OUT/pad.txt" | sort -k1,1 -k2,2n > "$OUT/pad.rows"
    awk '{
        r = ""; for (i = 6; i <= NF; i++) r = r " " $i
        printf "| %s | %s | %.0f |%s | %.2f | %.2f |\n", $1 == "C" ? "ibv_rc_pingpong" : "rverbs", $2, $3, r, $4, $5
    }' "$OUT/pad.rows"
    # Least squares through (Ir added, usec/iter), per tool, medians and minima.
    awk '
        { k = $1; N[k]++; Sx[k] += $3; Sxx[k] += $3 * $3; Sm[k] += $4; Sn[k] += $5; Sxm[k] += $3 * $4; Sxn[k] += $3 * $5 }
        END {
            print ""
            for (k in N) {
                d = N[k] * Sxx[k] - Sx[k] * Sx[k]
                if (N[k] < 2 || d == 0) { printf "%s: the fit needs two paddings\n", k; continue }
                bm = (N[k] * Sxm[k] - Sx[k] * Sm[k]) / d; am = (Sm[k] - bm * Sx[k]) / N[k]
                bn = (N[k] * Sxn[k] - Sx[k] * Sn[k]) / d; an = (Sn[k] - bn * Sx[k]) / N[k]
                printf "%s: fit of the medians: usec/iter = %.2f + %.3f per 1000 Ir added (%.2f ns per Ir); of the minima: %.2f + %.3f (%.2f ns per Ir)\n", k == "C" ? "ibv_rc_pingpong" : "rverbs", am, bm * 1000, bm * 1000, an, bn * 1000, bn * 1000
            }
        }' "$OUT/pad.rows" | sort
}

syscalls() {
    command -v strace > /dev/null || die "no strace in this guest"
    : > "$OUT/syscalls.txt"
    export RVERBS_PINGPONG_STATS=1
    for mode in events poll; do
        for tool in C R; do
            for n in 1000 2000; do
                PORT=$((PORT + 1))
                f=$OUT/strace.$tool.$mode.$n.$PORT
                # In a subshell, as in callgrind(): run_pair and wait_listen set n and PORT.
                (run_pair $tool $mode 64 $n strace -f -c -o "$f") > /dev/null || exit 1
                # "% time seconds usecs/call calls [errors] syscall" rows; the total row last.
                awk -v t=$tool -v m=$mode -v n=$n '
                    $1 ~ /^[0-9.]+$/ && NF >= 5 { print t, m, n, $NF, $4 }' "$f" >> "$OUT/syscalls.txt"
                echo "syscalls: $tool $mode 64 B x $n: $(awk '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { s += $4 } END { print s }' "$f") calls, $(sed -n 's/^rc-pingpong stats: //p' "$OUT/client.log")"
            done
        done
    done
    echo
    echo "| tool | mode | syscalls/iter | per syscall (calls/iter) |"
    echo "|---|---|---|---|"
    awk '
        { k = $1 " " $2; keys[k] = 1; c[k, $4, $3] = $5; names[k, $4] = 1 }
        END {
            for (k in keys) {
                split(k, kk, " "); d = ""; tot = 0
                for (kn in names) {
                    split(kn, p, SUBSEP); if (p[1] != k || p[2] == "total") continue
                    v = (c[k, p[2], 2000] - c[k, p[2], 1000]) / 1000
                    tot += v
                    if (v >= 0.005 || v <= -0.005) d = d sprintf(" %s %.2f", p[2], v)
                }
                printf "| %s | %s | %.2f |%s |\n", kk[1] == "C" ? "ibv_rc_pingpong" : "rverbs", kk[2] == "poll" ? "polling" : "-e", tot, d
            }
        }' "$OUT/syscalls.txt" | sort
}

case "$what" in
latency) latency ;;
callgrind) callgrind ;;
syscalls) syscalls ;;
pad) pad ;;
pad-summary) pad_summary ;;
cg-summary) cg_summary ;;
lat-summary) lat_summary ;;
all) latency && echo && callgrind ;;
*) die "usage: sh ci/bench-pingpong.sh [latency|callgrind|syscalls|pad|all|lat-summary|cg-summary|pad-summary]" ;;
esac
