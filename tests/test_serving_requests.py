"""Requests (CSV, synthetic, from a workload block) and the iteration-level scheduler over a paged KV cache."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pimdsl.serving import (IterationScheduler, PagedKVCache, Request, load_requests_csv, requests_for,
                            synthetic_requests)
from pimdsl.serving.scheduler import BatchEntry


# ---- requests ---------------------------------------------------------------------------------

def test_csv_rows_become_requests(tmp_path):
    path = tmp_path / "reqs.csv"
    path.write_text("input_len,output_len,arrival\n80,296,0\n\n12,56,0.5\n")
    assert load_requests_csv(path) == [Request(0, 80, 296, 0.0), Request(1, 12, 56, 0.5)]


def test_csv_without_arrival_starts_everything_at_zero(tmp_path):
    path = tmp_path / "reqs.csv"
    path.write_text("input_len,output_len\n3,4\n")
    assert load_requests_csv(path) == [Request(0, 3, 4, 0.0)]


def test_csv_reports_every_bad_row_with_file_and_line(tmp_path):
    path = tmp_path / "reqs.csv"
    path.write_text("input_len,output_len,arrival\n80,296,0\nabc,3,0\n4,0,0\n5,6\n7,8,-1\n")
    with pytest.raises(ValueError) as e:
        load_requests_csv(path)
    assert str(e.value).splitlines() == [
        f"{path}:3: input_len 'abc' is not a whole number of tokens",
        f"{path}:4: output_len must be a whole number >= 1, got 0",
        f"{path}:5: expected 3 values (input_len,output_len,arrival), got 2",
        f"{path}:6: arrival must be a finite time >= 0 s, got -1.0",
    ]


def test_csv_header_and_empty_file(tmp_path):
    path = tmp_path / "reqs.csv"
    path.write_text("in,out\n1,2\n")
    with pytest.raises(ValueError, match=r"reqs.csv:1: this is not a requests CSV: its first line must be the header 'input_len,output_len'"):
        load_requests_csv(path)
    path.write_text("input_len,output_len\n")
    with pytest.raises(ValueError, match=r"reqs.csv:2: the file has no requests"):
        load_requests_csv(path)


def test_fixed_distribution_gives_every_request_the_same_lengths():
    assert synthetic_requests("fixed", 3, seed=0, mean_input=80, mean_output=296) == [
        Request(0, 80, 296), Request(1, 80, 296), Request(2, 80, 296)]


def test_unknown_names_and_missing_means_are_explained():
    with pytest.raises(ValueError, match="choose one of sharegpt, alpaca, fixed, normal, uniform, exponential"):
        synthetic_requests("sharegtp", 3, seed=0)
    with pytest.raises(ValueError, match="needs mean_input and mean_output"):
        synthetic_requests("normal", 3, seed=0)


@pytest.mark.parametrize("name,mean_in,mean_out", [
    ("sharegpt", 80, 296), ("alpaca", 12, 56),           # NeuPIMs section 8.1 "Datasets"
    ("normal", 50, 200), ("uniform", 50, 200), ("exponential", 50, 200)])
def test_synthetic_means_and_bounds(name, mean_in, mean_out):
    kwargs = {} if name in ("sharegpt", "alpaca") else {"mean_input": mean_in, "mean_output": mean_out}
    reqs = synthetic_requests(name, 20000, seed=11, **kwargs)
    assert [r.id for r in reqs] == list(range(20000))
    ins = [r.input_len for r in reqs]
    outs = [r.output_len for r in reqs]
    assert min(ins) >= 1 and min(outs) >= 1
    assert sum(ins) / len(ins) == pytest.approx(mean_in, rel=0.03)
    assert sum(outs) / len(outs) == pytest.approx(mean_out, rel=0.03)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["sharegpt", "alpaca", "normal", "uniform", "exponential"]),
       n=st.integers(0, 50), seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_requests(name, n, seed):
    kwargs = {} if name in ("sharegpt", "alpaca") else {"mean_input": 20, "mean_output": 30}
    first = synthetic_requests(name, n, seed, **kwargs)
    assert first == synthetic_requests(name, n, seed, **kwargs)
    assert all(isinstance(r.input_len, int) and r.input_len >= 1 for r in first)


def test_requests_for_a_workload_block(elaborate, tmp_path):
    (tmp_path / "reqs.csv").write_text("input_len,output_len\n5,6\n7,8\n")
    spec, diags = elaborate("""
        workload from_file { requests_csv = "reqs.csv"; }
        workload fixed_lengths { input_len = 80; output_len = 296; requests = 2; }
        workload alpaca_like { dataset = alpaca; distribution = exponential; requests = 3; seed = 5; }
        workload own_means { dataset = alpaca; distribution = uniform; mean_input_len = 40;
                             mean_output_len = 10; requests = 3; seed = 5; }
    """)
    assert not diags.errors
    w = spec.workloads
    assert requests_for(w["from_file"]) == [Request(0, 5, 6), Request(1, 7, 8)]
    assert requests_for(w["fixed_lengths"]) == [Request(0, 80, 296), Request(1, 80, 296)]
    # the dataset gives the means when the block does not
    assert requests_for(w["alpaca_like"]) == synthetic_requests("alpaca", 3, 5)
    assert requests_for(w["alpaca_like"]) == synthetic_requests("exponential", 3, 5, 12, 56)
    assert requests_for(w["own_means"]) == synthetic_requests("uniform", 3, 5, 40, 10)


# ---- paged KV cache ---------------------------------------------------------------------------

def test_paged_kv_cache_takes_whole_pages():
    kv = PagedKVCache(capacity_bytes=100, page_tokens=4, bytes_per_token=8)   # 32 B pages: 3 of them
    assert kv.total_pages == 3
    kv.allocate(7, 5)
    assert (kv.tokens_of(7), kv.pages_of(7), kv.used_pages) == (5, 2, 2)
    kv.extend(7, 3)                       # 8 tokens still fit in 2 pages
    assert kv.used_pages == 2
    kv.extend(7)                          # the 9th opens a third page
    assert (kv.used_pages, kv.free_pages) == (3, 0)
    with pytest.raises(MemoryError, match="request 8 needs 1 more KV pages, 0 are free"):
        kv.allocate(8, 1)
    assert kv.free(7) == 3 and kv.used_pages == 0


# ---- iteration-level scheduler ----------------------------------------------------------------

def _trace(scheduler):
    return [(it.index, [(e.request_id, e.phase, e.past_len, e.new_tokens) for e in it.entries],
             it.finished, it.kv_used_pages) for it in scheduler.run_to_completion()]


def test_scheduler_by_hand():
    # 2-token pages, 4 pages. Lifetimes: r0 2+2 = 4 tokens (2 pages), r1 3+1 (2), r2 1+1 (1).
    reqs = [Request(0, 2, 2), Request(1, 3, 1), Request(2, 1, 1)]
    kv = PagedKVCache(capacity_bytes=8, page_tokens=2, bytes_per_token=1)
    assert _trace(IterationScheduler(reqs, max_batch=2, kv_cache=kv)) == [
        # r0, r1 admitted and prefilled (1 + 2 pages); the batch is full, r2 waits
        (0, [(0, "prefill", 0, 2), (1, "prefill", 0, 3)], (), 3),
        # both decode; r1's only output token is done, it leaves at the boundary
        (1, [(0, "decode", 2, 1), (1, "decode", 3, 1)], (1,), 4),
        # r2 takes r1's slot and prefills beside r0's last decode step
        (2, [(0, "decode", 3, 1), (2, "prefill", 0, 1)], (0,), 3),
        (3, [(2, "decode", 1, 1)], (2,), 1),
    ]
    assert kv.used_pages == 0


def test_full_cache_makes_requests_wait_in_order():
    # 3 pages: r0 promises 2, r1 needs 2 and waits; r2 (1 page) would fit but may not overtake r1
    reqs = [Request(0, 2, 2), Request(1, 3, 1), Request(2, 1, 1)]
    kv = PagedKVCache(capacity_bytes=6, page_tokens=2, bytes_per_token=1)
    trace = _trace(IterationScheduler(reqs, max_batch=8, kv_cache=kv))
    assert [[e[0] for e in entries] for _, entries, _, _ in trace] == [[0], [0], [0], [1, 2], [1, 2]]


def test_arrivals_wait_for_the_clock():
    reqs = [Request(0, 4, 2, arrival=0.0), Request(1, 4, 1, arrival=2.5)]
    kv = PagedKVCache(capacity_bytes=1000, page_tokens=16, bytes_per_token=1)
    s = IterationScheduler(reqs, max_batch=4, kv_cache=kv)
    starts = [(it.start_s, it.admitted) for it in s.run_to_completion(lambda it: 1.0)]
    # 0 s: r0 prefill; 1 s, 2 s: r0 decodes; r1, there at 2.5 s, joins at the next boundary (3 s)
    assert starts == [(0.0, (0,)), (1.0, ()), (2.0, ()), (3.0, (1,)), (4.0, ())]
    s = IterationScheduler([Request(0, 1, 1, arrival=7.0)], max_batch=1, kv_cache=PagedKVCache(16, 4, 1))
    assert s.step().start_s == 7.0


def test_a_request_that_can_never_fit_is_refused():
    with pytest.raises(ValueError, match=r"requests \[1\] need more KV pages than the cache's 2"):
        IterationScheduler([Request(0, 1, 1), Request(1, 4, 2)], 4, PagedKVCache(4, 2, 1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 12), st.sampled_from([0.0, 0.0, 1.0, 3.0])),
                        min_size=1, max_size=25),
       max_batch=st.integers(1, 8), page_tokens=st.integers(1, 16), spare_pages=st.integers(0, 20))
def test_scheduler_invariants(lengths, max_batch, page_tokens, spare_pages):
    reqs = [Request(i, a, b, t) for i, (a, b, t) in enumerate(lengths)]
    largest = max(-(-(r.input_len + r.output_len) // page_tokens) for r in reqs)
    kv = PagedKVCache((largest + spare_pages) * page_tokens * 2, page_tokens, bytes_per_token=2)
    s = IterationScheduler(reqs, max_batch, kv)
    prefills, decodes, finished = {}, {}, []
    for it in s.run_to_completion(lambda it: 0.5):
        assert 1 <= len(it.entries) <= max_batch
        assert it.kv_used_pages <= kv.total_pages
        assert all(reqs[i].arrival <= it.start_s for i in it.admitted)
        for e in it.entries:
            r = reqs[e.request_id]
            if e.phase == "prefill":
                assert (e.past_len, e.new_tokens, e.decode_step) == (0, r.input_len, 0)
                prefills[r.id] = prefills.get(r.id, 0) + 1
            else:
                assert e.request_id in prefills
                decodes[r.id] = decodes.get(r.id, 0) + 1
                assert e == BatchEntry(r.id, "decode", r.input_len + decodes[r.id] - 1, 1, decodes[r.id])
        finished.extend(it.finished)
    assert prefills == {r.id: 1 for r in reqs}
    assert decodes == {r.id: r.output_len for r in reqs}
    assert sorted(finished) == [r.id for r in reqs]
    assert kv.used_pages == 0 and s.done and s.step() is None
