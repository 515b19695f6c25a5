"""Grafana annotations, counted at scrape time from the annotator's records (the webhook alerts'
counter is the alert trigger's own: trigger/alerts.py).

profiler_grafana_annotations_total{result}       annotations sent, failed, retried, dropped
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, Metric

__all__ = ["AnnotationCollector"]


class AnnotationCollector:
    """Reads its counts through the callables it is given, at each scrape: it needs neither the
    service nor the trigger's internals."""

    def __init__(self, annotation_counts: Callable[[], dict[str, int]] | None = None):
        self.annotation_counts = annotation_counts  # None: no Grafana annotations configured

    def collect(self) -> Iterator[Metric]:
        if self.annotation_counts is not None:
            annotations = CounterMetricFamily(
                "profiler_grafana_annotations",
                "Grafana annotations by result: sent, failed (after every attempt), retried "
                "(extra attempts), dropped (queue full).",
                labels=["result"],
            )
            for result, n in sorted(self.annotation_counts().items()):
                annotations.add_metric([result], n)
            yield annotations
