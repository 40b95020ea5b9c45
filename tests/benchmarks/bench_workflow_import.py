"""How long importing one fuzzed workflow file takes: the speed the fuzz test used to bound.

tests/workflows/test_workflow_fuzz.py proves every case imports or is refused in one line,
alike on both databases, and that none hangs; how fast is measured here (issue 38 item 20: a
timed bound in a test fails on a loaded machine). Each case of the fuzz test's seed is
imported on a fresh SQLite board (and PostgreSQL with --pg); the slowest case and the median
are printed. Claim: every case well under 5 s (exit status 1 otherwise). Run it on an idle
machine.

    python -m tests.benchmarks.bench_workflow_import               # 300 cases, SQLite
    LANEWAY_TEST_PG_URL=postgresql://... python -m tests.benchmarks.bench_workflow_import --pg
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from core.errors import LanewayError
from tests.conftest import PG_URL, _reset_postgres, open_host
from tests.workflows.test_workflow_fuzz import make_case

CLAIM_S = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--pg", action="store_true", help="on LANEWAY_TEST_PG_URL as well")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"sqlite": f"sqlite:///{Path(tmp) / 'bench.db'}"}
        if args.pg:
            if PG_URL is None:
                parser.error("--pg needs LANEWAY_TEST_PG_URL")
            _reset_postgres(PG_URL)
            urls["postgresql"] = PG_URL
        case = Path(tmp) / "case.yml"
        worst = 0.0
        for name, url in urls.items():
            spent: list[float] = []
            with open_host(url) as host:
                for index in range(args.cases):
                    case.write_bytes(make_case(index))
                    began = time.perf_counter()
                    with contextlib.suppress(LanewayError):
                        host.workflows.import_file(case)
                    spent.append(time.perf_counter() - began)
            slowest = max(spent)
            worst = max(worst, slowest)
            print(
                f"{name:<10} {args.cases} cases  median {statistics.median(spent) * 1000:.1f} ms"
                f"  slowest {slowest * 1000:.1f} ms (case {spent.index(slowest)})"
            )
    print(f"claim: every case under {CLAIM_S:g} s: {'holds' if worst < CLAIM_S else 'MISSED'}")
    return 0 if worst < CLAIM_S else 1


if __name__ == "__main__":
    sys.exit(main())
