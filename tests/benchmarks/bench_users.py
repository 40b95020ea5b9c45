"""What a person's token costs a request (issue 44 item 6), on SQLite and PostgreSQL.

    python tests/benchmarks/bench_users.py [--requests N] [--rounds R] [--pg-url URL]

Not a pytest module. The whole app in-process (Starlette's TestClient, so no sockets), on a
board with 100 people, `GET /api/me` (a route that reads nothing: the guard is most of it):

(a) the board's admin token: one constant-time compare, as every request paid before issue 44
    (plus the role table's lookup, which (a) and (b) share);
(b) a person's token: its sha256 and one indexed read of `users` by that hash, on every
    request (what makes `user remove` take effect at once on every `serve`).

Each round times N requests of (a) then N of (b); prints the time per request of each and the
ratio (b)/(a), min / median / max over the rounds. Also the guard's own work without HTTP:
`users.authenticate` against `hmac.compare_digest`.
"""

from __future__ import annotations

import argparse
import hmac
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from starlette.testclient import TestClient  # noqa: E402

from core import Host  # noqa: E402
from core.plugin.selection import PluginSelection  # noqa: E402
from core.serve.app import build_app  # noqa: E402
from core.services import users  # noqa: E402

ADMIN = "bench-admin-token-0123456789"


def _per_request(client: TestClient, token: str, n: int) -> float:
    headers = {"Authorization": f"Bearer {token}"}
    start = time.perf_counter()
    for _ in range(n):
        answer = client.get("/api/me", headers=headers)
        assert answer.status_code == 200, answer.text
    return (time.perf_counter() - start) / n


def _summary(values: list[float]) -> str:
    return (
        f"min {min(values):6.3f}  median {statistics.median(values):6.3f}  max {max(values):6.3f}"
    )


def bench(url: str, label: str, requests: int, rounds: int) -> None:
    with Host.open(url, plugins=PluginSelection(allow=frozenset({"kanban", "office"}))) as host:
        tokens = [users.add(host.store, f"person-{n}", "operator")[1] for n in range(100)]
        person = tokens[57]
        with TestClient(build_app(host, token=ADMIN)) as client:
            _per_request(client, ADMIN, 50)  # warm up
            _per_request(client, person, 50)
            admin_t, person_t = [], []
            for _ in range(rounds):
                admin_t.append(_per_request(client, ADMIN, requests))
                person_t.append(_per_request(client, person, requests))
        # the guard's own work, without HTTP
        expected = f"Bearer {ADMIN}".encode()
        presented = expected
        start = time.perf_counter()
        for _ in range(requests * 10):
            hmac.compare_digest(presented, expected)
        compare_us = (time.perf_counter() - start) / (requests * 10) * 1e6
        start = time.perf_counter()
        for _ in range(requests):
            assert users.authenticate(host.store, person) is not None
        lookup_us = (time.perf_counter() - start) / requests * 1e6
        for name in [f"person-{n}" for n in range(100)]:
            users.remove(host.store, name)
    ratios = [p / a for a, p in zip(admin_t, person_t, strict=True)]
    print(f"{label}: GET /api/me, {rounds} rounds of {requests} requests each")
    print(f"  (a) admin token   ms/request: {_summary([t * 1e3 for t in admin_t])}")
    print(f"  (b) person token  ms/request: {_summary([t * 1e3 for t in person_t])}")
    print(f"  (b)/(a) ratio:                {_summary(ratios)}")
    print(f"  guard alone: compare_digest {compare_us:.2f} us, token lookup {lookup_us:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pg-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        url = f"sqlite:///{Path(scratch) / 'bench.db'}"
        bench(url, "SQLite", args.requests, args.rounds)
    if args.pg_url:
        bench(args.pg_url, "PostgreSQL", args.requests, args.rounds)


if __name__ == "__main__":
    main()
