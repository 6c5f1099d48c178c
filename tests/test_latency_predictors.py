"""L3's latency predictors fit only when asked, as the online refits would have, and their held-out
errors are kept on disk by content (a repeated run neither refits nor imports scikit-learn)."""
from __future__ import annotations

import numpy as np

from pimdsl.loops.sub_batch_serving.latency_predictors import Profiles


def sampled(n: int, seed: int = 1) -> Profiles:
    rng = np.random.default_rng(seed)
    p = Profiles(seed=3)
    for _ in range(n):
        a, b = rng.integers(1, 4096, 2)
        p.record("fc", (float(a), float(b)), 1e-6 * a + 3e-7 * b + 1e-5 * rng.random())
        p.record("decode_mha", (float(a), float(b), 0.0), 2e-7 * a + 1e-5 * b)
    return p


def test_a_prediction_is_the_fit_of_the_last_refit_count():
    p = sampled(137)
    assert p.ready("fc", "decode_mha") and not Profiles().ready("fc")
    got = p.predict("fc", [(100.0, 200.0), (4000.0, 10.0)])
    # the online refit at 100 samples: the same forest on the first 100
    x = np.array([f for f, _ in p.samples["fc"][:100]])
    y = np.array([t for _, t in p.samples["fc"][:100]])
    expected = p._model("fc").fit(x, y).predict(np.array([(100.0, 200.0), (4000.0, 10.0)]))
    assert np.array_equal(got, expected)
    assert p.fitted["fc"][0] == 100


def test_errors_are_kept_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path))
    first = sampled(60).errors()
    assert first["fc"]["samples"] == 60 and 0 <= first["fc"]["mean_relative_error"] < 1

    def no_fit(self, model):
        raise AssertionError("refitted although the same samples were kept")
    monkeypatch.setattr(Profiles, "_model", no_fit)
    assert sampled(60).errors() == first
    monkeypatch.undo()
    monkeypatch.setenv("PIMDSL_TIMING_CACHE", str(tmp_path))
    assert sampled(60, seed=2).errors() != first            # other samples: fitted afresh
