"""The identity-keyed caches of a long process stay bounded: the oldest entries go first."""
from pimdsl.bounded_cache import BoundedCache
from pimdsl.interpreter import timing_cache
from pimdsl.ir import pim_program
from pimdsl.loops.model_layers import layer_work


def test_the_oldest_entries_are_forgotten_past_the_limit():
    cache = BoundedCache(3)
    for i in range(5):
        cache[i] = str(i)
    assert list(cache.items()) == [(2, "2"), (3, "3"), (4, "4")]
    assert cache.get(0) is None and cache.get(4) == "4"
    cache[2] = "two"                       # an update keeps its place, nothing is dropped
    assert list(cache) == [2, 3, 4] and len(cache) == 3


def test_the_caches_that_keep_their_objects_alive_are_bounded():
    for cache in (timing_cache._MEMORY_DIGESTS, layer_work._CUTS, pim_program._COMPILED):
        assert isinstance(cache, BoundedCache) and 0 < cache.limit <= 50_000
