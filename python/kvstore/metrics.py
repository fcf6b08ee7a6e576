"""Prometheus metrics of a TieredPromptCache, for prometheus_client.

    from prometheus_client import REGISTRY, start_http_server
    from kvstore.metrics import PromptCacheCollector

    REGISTRY.register(PromptCacheCollector(cache))   # cache: a TieredPromptCache
    start_http_server(9100)

The families are the ones kvstore's C++ servers export (``PrometheusText`` in
kvstore/prompt_cache_metrics.h, docs/python.md lists them): the collector reads the
coordinator's own text, so both languages report the same names, labels and buckets.
prometheus_client (Debian's python3-prometheus-client) is imported only when a scrape
collects; kvstore imports without it.
"""

__all__ = ["PromptCacheCollector"]


class PromptCacheCollector:
    """A prometheus_client collector of one TieredPromptCache's counters."""

    def __init__(self, cache):
        """Collect the counters of ``cache`` (a TieredPromptCache) at every scrape."""
        self._cache = cache

    def collect(self):
        """The metric families of the cache's ``metrics_text()`` (prometheus_client calls it)."""
        from prometheus_client.parser import text_string_to_metric_families

        return list(text_string_to_metric_families(self._cache.metrics_text()))

    def describe(self):
        """No families: they are known only when collected, so registering collects nothing."""
        return []  # families are known at collection only; registering does not collect
