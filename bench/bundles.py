"""Benchmark of reading an installed extension's method table (rekall.adapters.extension.bundles).

    python bench/bundles.py [--json] [--mb 40]

Writes a synthetic minified bundle of ``--mb`` MB (the table near its end, as in a real
``out/extension.js`` or ``app.asar``), then measures in this process:

* ``scan_s``: ``bundles.scan_file`` on it (cold in Python, warm in the page cache), median of 3;
* ``peak_mb``: the peak Python allocation during one scan (``tracemalloc``); the reader holds
  one 4 MiB chunk plus a small overlap, so this stays near 8 MB whatever the file's size;
* ``cached_s``: ``bundles.find_installs`` once the cache by file identity exists.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from rekall.adapters.extension import bundles
from rekall.sim import protocol as p
from tests.support.bundles import install_extension, minified


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--mb", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        extension = install_extension(home, "26.901.1", None)
        script = extension / "out" / "extension.js"
        filler = b'function f(a){return a+1};var s="' + b"x" * 1000 + b'";\n'
        with open(script, "wb") as out:
            for _ in range(args.mb * 1024 * 1024 // len(filler)):
                out.write(filler)
            out.write(minified(p.TABLES[p.DEFAULT_GENERATION]).encode())
        times = []
        for _ in range(3):
            started = time.perf_counter()
            found = bundles.scan_file(script)
            times.append(time.perf_counter() - started)
        assert found == [p.TABLES[p.DEFAULT_GENERATION]], found
        tracemalloc.start()
        bundles.scan_file(script)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
        bundles.find_installs(env, write_cache=True)
        started = time.perf_counter()
        bundles.find_installs(env, write_cache=False)
        cached = time.perf_counter() - started
    result = {"bundle_mb": args.mb, "scan_s": round(statistics.median(times), 3), "peak_mb": round(peak / 2**20, 1),
              "cached_s": round(cached, 4)}
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
