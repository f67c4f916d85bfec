#!/bin/sh
# rdma-core's Python suite (python3-pyverbs) on rdma-core's libraries and on ours, in one
# guest: cargo xtask capi && cargo xtask vm --timeout 1500 -- sh ci/capi/pyverbs.sh
# PYVERBS_ARGS: more arguments for run_tests.py (unittest's, e.g. `-k atomic_write`).
# PYVERBS_GID: the GID index (default 1, the IPv4 GID of rxe; 0 on siw, whose one GID is its MAC).
# (test_qp_ex_rc_atomic_write alone runs in cargo xtask test: vm_capi::pyverbs_atomic_write_interop.)
# Full logs go to the run directory (the share mounted at /tmp/rverbs-vm):
#   python3 ci/capi/pyverbs_table.py target/vm/runs/<run>/py-rdma-core.log target/vm/runs/<run>/py-ours.log
set -u
if [ "${RVERBS_PROVIDER:-rxe}" = siw ]; then GID=${PYVERBS_GID:-0}; else GID=${PYVERBS_GID:-1}; fi
LIB=${RVERBS_CAPI_LIB:-$(pwd)/target/capi/lib}
rm -rf /tmp/pv && mkdir -p /tmp/pv && cp -r /usr/share/doc/rdma-core/tests /tmp/pv/ && cd /tmp/pv/tests && gunzip -f ./*.gz
for lib in rdma-core ours; do
    if [ $lib = ours ]; then export LD_LIBRARY_PATH=$LIB; else unset LD_LIBRARY_PATH; fi
    # shellcheck disable=SC2086 # PYVERBS_ARGS is split into arguments on purpose
    timeout 900 python3 run_tests.py --dev "${RVERBS_DEV_A:-rxe0}" --gid "$GID" -v ${PYVERBS_ARGS:-} > /tmp/pv/$lib.log 2>&1
    echo "$lib: exit $?: $(tail -1 /tmp/pv/$lib.log)"
    cp /tmp/pv/$lib.log /tmp/rverbs-vm/py-$lib.log
done
