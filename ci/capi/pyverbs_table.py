#!/usr/bin/env python3
"""Per-module pass/fail/error/skip counts of two verbose unittest logs of rdma-core's suite
(rdma-core's libraries, ours) as a Markdown table, then the tests that pass on the first and
not on the second, with what happened to them. See ci/capi/pyverbs.sh."""
import collections
import re
import sys


def parse(path):
    res, cur = {}, None
    for line in open(path, errors="replace"):
        t = re.search(r"^(test_\w+) \(tests\.(test_\w+)\.\w+\.\w+\)", line)
        if t:
            cur = (t.group(2), t.group(1))
        r = re.search(r"\.\.\. (ok|skipped|ERROR|FAIL|expected failure|unexpected success)(.*)$", line)
        if r and cur and cur not in res:
            res[cur] = (r.group(1), r.group(2).strip())
    return res


def counts(res, mod):
    return collections.Counter(st for (m, _), (st, _) in res.items() if m == mod)


def fmt(c):
    return f"{c['ok']} / {c['FAIL']} / {c['ERROR']} / {c['skipped']}"


a, b = parse(sys.argv[1]), parse(sys.argv[2])
print("| module | rdma-core: pass / fail / error / skip | rverbs: pass / fail / error / skip |")
print("| --- | --- | --- |")
total = [collections.Counter(), collections.Counter()]
for mod in sorted({m for m, _ in list(a) + list(b)}):
    ca, cb = counts(a, mod), counts(b, mod)
    total[0].update(ca)
    total[1].update(cb)
    print(f"| {mod} | {fmt(ca)} | {fmt(cb)} |")
print(f"| **all** | {fmt(total[0])} | {fmt(total[1])} |")
print("\nPass on rdma-core, not on rverbs:")
for k, (st, _) in sorted(a.items()):
    o = b.get(k)
    if st == "ok" and (not o or o[0] != "ok"):
        print(f"  {k[0]}.{k[1]}: {o}")
