#!/bin/sh
# rdma-core's Python suite (python3-pyverbs) on rdma-core's libraries and on ours, in one
# guest: cargo xtask capi && cargo xtask vm --timeout 1500 -- sh ci/capi/pyverbs.sh
# PYVERBS_ARGS: more arguments for run_tests.py (unittest's, e.g. `-k atomic_write`).
# (test_qp_ex_rc_atomic_write alone runs in cargo xtask test: vm_capi::pyverbs_atomic_write_interop.)
# Full logs go to the run directory (the share mounted at /tmp/rverbs-vm):
#   python3 ci/capi/pyverbs_table.py target/vm/runs/<run>/py-rdma-core.log target/vm/runs/<run>/py-ours.log
set -u
LIB=${RVERBS_CAPI_LIB:-$(pwd)/target/capi/lib}
rm -rf /tmp/pv && mkdir -p /tmp/pv && cp -r /usr/share/doc/rdma-core/tests /tmp/pv/ && cd /tmp/pv/tests && gunzip -f ./*.gz
for lib in rdma-core ours; do
    if [ $lib = ours ]; then export LD_LIBRARY_PATH=$LIB; else unset LD_LIBRARY_PATH; fi
    # shellcheck disable=SC2086 # PYVERBS_ARGS is split into arguments on purpose
    timeout 900 python3 run_tests.py --dev "${RVERBS_DEV_A:-rxe0}" --gid 1 -v ${PYVERBS_ARGS:-} > /tmp/pv/$lib.log 2>&1
    echo "$lib: exit $?: $(tail -1 /tmp/pv/$lib.log)"
    cp /tmp/pv/$lib.log /tmp/rverbs-vm/py-$lib.log
done
