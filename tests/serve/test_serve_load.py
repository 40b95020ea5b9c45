"""A short, bounded version of tests/benchmarks/bench_serve_load.py for CI (issue 13 Load):
event-stream clients and a steady request rate on a real `serve` over loopback; no request
fails, no client loses or repeats an event, and `serve` still stops with exit 0. Latency is
reported, not asserted: performance is judged by the benchmark, not by a timed unit test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.bench_serve_load import run_load

pytestmark = pytest.mark.slow


def test_streams_and_requests_under_load_lose_nothing(tmp_path: Path) -> None:
    report = run_load(clients=10, rate=60, seconds=4.0, tasks=20, workdir=tmp_path)
    print("\n".join(report.lines()))
    assert report.errors == 0, report.error_samples
    assert report.moves > 0
    assert report.events_stored > 0
    assert report.lost == 0
    assert report.duplicated_or_out_of_order == 0
    assert report.serve_exit == 0
