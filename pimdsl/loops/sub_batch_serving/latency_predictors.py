"""Latency predictors of the interleaving scheduler, trained from the loop's own measurements.

[L3] Sec. 5.3, Eqs. 5-6: decode MHA on the DIMM-PIM by a linear model of (sum of decoding context
tokens, number of decoding requests, prefill tokens of the other sub-batch whose KV lands meanwhile);
GPU time by random-forest regressors, one for the prefill MHA of (chunk tokens, cached prefix) and
one for the batched FC of (tokens in the batch, decoding requests). The loop records one sample per
scheduled phase; `errors()` fits each model on 80% of the samples and reports the mean relative error
on the other 20%, as Fig. 10b does ("80/20 split of 1,000 profiled batches"). With
`predictor = learned` the scheduler sizes sub-batches and chunks by the models once they are fitted
(`ready`), refitting online at REFIT_AT samples; the loop's cost model stays the measured time.

A fit is a pure function of its samples, so it is made only when asked: a prediction fits the model
on the samples up to the last REFIT_AT count reached (what an online refit at that count gave), and
`errors()` is kept on disk by content (timing_cache.content_key: the samples, the seed, pimdsl's and
scikit-learn's versions), so a run that repeats an earlier one neither imports scikit-learn (about a
second) nor refits its forests.
"""
from __future__ import annotations

import bisect
from importlib import metadata

import numpy as np

from ...interpreter import timing_cache

MODELS = ("decode_mha", "prefill_mha", "fc")


class Profiles:
    REFIT_AT = (50, 100, 200, 400, 700, 1000)     # online: refit as the samples double

    def __init__(self, limit: int = 1000, seed: int = 0):
        self.limit, self.seed = limit, seed
        self.samples: dict[str, list[tuple[tuple[float, ...], float]]] = {m: [] for m in MODELS}
        self.fitted: dict[str, tuple[int, object]] = {}        # model -> (samples fitted on, fit)

    def record(self, model: str, features: tuple[float, ...], seconds: float) -> None:
        rows = self.samples[model]
        if len(rows) < self.limit and seconds > 0:
            rows.append((features, seconds))

    def ready(self, *models: str) -> bool:
        return all(len(self.samples[m]) >= self.REFIT_AT[0] for m in models)

    def predict(self, model: str, features) -> np.ndarray:
        return self._fit(model).predict(np.asarray(features, float).reshape(-1, len(features[0])))

    def _fit(self, model: str):
        """The model as the online refits left it: fitted on the samples up to the last REFIT_AT count."""
        rows = self.samples[model]
        upto = self.REFIT_AT[bisect.bisect_right(self.REFIT_AT, len(rows)) - 1]
        if self.fitted.get(model, (None,))[0] != upto:
            x = np.array([f for f, _ in rows[:upto]], float)
            self.fitted[model] = (upto, self._model(model).fit(x, np.array([t for _, t in rows[:upto]], float)))
        return self.fitted[model][1]

    def _model(self, model: str):
        if model == "decode_mha":
            from sklearn.linear_model import LinearRegression
            return LinearRegression()
        from sklearn.ensemble import RandomForestRegressor
        return RandomForestRegressor(n_estimators=50, random_state=self.seed)

    def errors(self) -> dict[str, dict]:
        """Per model: samples, mean relative error on the held-out 20% (None under 10 samples)."""
        name = timing_cache.content_key("latency_predictors.errors", self.seed, self.samples,
                                        metadata.version("scikit-learn"))
        kept = timing_cache.load(name)
        if kept is None:
            kept = self._errors()
            timing_cache.store(name, kept)
        return kept

    def _errors(self) -> dict[str, dict]:
        out = {}
        for name, rows in self.samples.items():
            if len(rows) < 10:
                out[name] = {"samples": len(rows), "mean_relative_error": None}
                continue
            x = np.array([f for f, _ in rows], float)
            y = np.array([s for _, s in rows], float)
            order = np.random.default_rng(self.seed).permutation(len(rows))
            cut = int(0.8 * len(rows))
            train, test = order[:cut], order[cut:]
            fit = self._model(name).fit(x[train], y[train])
            err = np.abs(fit.predict(x[test]) - y[test]) / y[test]
            out[name] = {"samples": len(rows), "mean_relative_error": float(err.mean())}
        return out
