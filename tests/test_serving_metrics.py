"""serving/metrics.py: the per-request statistics the request-serving loops report."""
import pytest

from pimdsl.serving.metrics import request_latencies


def test_mean_median_and_99th_percentile_of_each_latency():
    out = request_latencies(ttft=[1.0, 2.0, 3.0, 10.0], tpot=[0.1, 0.3], end_to_end=[5.0] * 3)
    assert out["ttft_s"] == 4.0 and out["ttft_p50_s"] == 2.5
    assert out["ttft_p99_s"] == pytest.approx(3.0 + 0.97 * 7.0)         # linear between the two largest
    assert out["tpot_s"] == pytest.approx(0.2) and out["tpot_p50_s"] == pytest.approx(0.2)
    assert out["end_to_end_s"] == out["end_to_end_p50_s"] == out["end_to_end_p99_s"] == 5.0
    assert list(out) == [f"{n}{s}" for n in ("ttft", "tpot", "end_to_end") for s in ("_s", "_p50_s", "_p99_s")]


def test_no_request_gives_zeros_not_nan():
    assert set(request_latencies([], [], []).values()) == {0.0}
