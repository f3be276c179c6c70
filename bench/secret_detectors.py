"""rekall's credential rules against ``detect-secrets`` on the secret corpus.

    pip install -e '.[bench]' && python bench/secret_detectors.py [--json]

Runs both corpora of ``tests/store/secret_corpus.py`` through
``rekall.kernel.credentials.credential_kind`` and through every ``detect-secrets`` plugin, with and
without its entropy plugins, line by line as it scans files: the first (``REFUSED`` and
``LEGITIMATE``: credentials that must be refused, legitimate handoff text that must pass) and the
second (``DOCUMENTED`` and ``ABOUT_AUTH``: the forms in each tool's public documentation, and prose
about authentication work that holds no value). Prints, for each corpus, how many credentials each
detector catches, how many legitimate texts each flags, and what ``detect-secrets`` would add to
rekall's rules; then the cost of importing it (in a fresh process), and rekall's slowest scan of
the corpus's full-size adversarial texts (built to make a careless pattern backtrack). This run is
how rekall chose to keep its own rules and not depend on the detector.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rekall.kernel.credentials import credential_kind  # noqa: E402
from tests.store.secret_corpus import ABOUT_AUTH, ADVERSARIAL, DOCUMENTED, LEGITIMATE, REFUSED  # noqa: E402

#: Each corpus: its credentials and its legitimate texts.
CORPORA = {"first": (REFUSED, LEGITIMATE), "documented": (DOCUMENTED, ABOUT_AUTH)}

_IMPORT_COST = """
import re, time
def rss_kb():
    return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read())[1])
before = rss_kb()
start = time.perf_counter()
from detect_secrets.core.scan import scan_line
from detect_secrets.settings import transient_settings
print(time.perf_counter() - start, (rss_kb() - before) / 1024)
"""


def _detector(plugins: list[str]):
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import transient_settings

    def flags(text: str) -> bool:
        with transient_settings({"plugins_used": [{"name": name} for name in plugins]}):
            return any(True for line in text.splitlines() for _ in scan_line(line))

    return flags


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    every = sorted(cls.__name__ for cls in get_mapping_from_secret_type_to_class().values())
    detectors = {
        "rekall": lambda text: credential_kind(text) is not None,
        "detect-secrets (all plugins)": _detector(every),
        "detect-secrets (no entropy plugins)": _detector([p for p in every if "Entropy" not in p]),
    }
    corpora = {}
    for corpus, (refused, legitimate) in CORPORA.items():
        rows = {}
        for name, flags in detectors.items():
            caught = [text for _, text in refused if flags(text)]
            rows[name] = {"caught": len(caught), "falsePositives": sum(flags(text) for text in legitimate),
                          "addsToRekall": sum(1 for t in caught if credential_kind(t) is None)}
        corpora[corpus] = {"credentials": len(refused), "legitimate": len(legitimate), "detectors": rows}
    slowest = 0.0
    for text in ADVERSARIAL:
        start = time.perf_counter()
        credential_kind(text)
        slowest = max(slowest, time.perf_counter() - start)
    seconds, mb = (float(x) for x in subprocess.run([sys.executable, "-c", _IMPORT_COST], check=True,
                                                    capture_output=True, text=True).stdout.split())
    result = {"corpora": corpora, "rekallSlowestAdversarialScanSeconds": round(slowest, 4),
              "detectSecretsImportSeconds": round(seconds, 3), "detectSecretsImportMb": round(mb, 1)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for corpus, found in corpora.items():
        credentials, legitimate = found["credentials"], found["legitimate"]
        print(f"{corpus} corpus: {credentials} credentials, {legitimate} legitimate texts")
        for name, row in found["detectors"].items():
            print(f"  {name:38} caught {row['caught']:3}/{credentials}  false positives {row['falsePositives']:3}/"
                  f"{legitimate}  caught that rekall misses {row['addsToRekall']}")
    print(f"rekall's slowest scan of a {len(ADVERSARIAL[0])}-character adversarial text: {slowest * 1000:.1f} ms")
    print(f"importing detect-secrets: {seconds:.3f} s, {mb:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
