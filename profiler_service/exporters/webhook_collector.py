"""Alert webhooks and Grafana annotations, counted at scrape time from the service's records.

profiler_webhook_alerts_total{source, outcome}   every webhook alert and what was done with it
profiler_grafana_annotations_total{result}       annotations sent, failed, retried, dropped
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from profiler_service.trigger.alert_log import TRUNCATED, Outcome
from profiler_service.trigger.webhook_payload import Source

__all__ = ["WebhookCollector"]


class WebhookCollector:
    """Reads its counts through the callables it is given, at each scrape: it needs neither the
    service nor the trigger's internals."""

    def __init__(
        self,
        alert_counts: Callable[[], dict[tuple[str, str], int]],
        annotation_counts: Callable[[], dict[str, int]] | None = None,
    ):
        self.alert_counts = alert_counts
        self.annotation_counts = annotation_counts  # None: no Grafana annotations configured

    def collect(self) -> Iterator[Metric]:
        alerts = CounterMetricFamily(
            "profiler_webhook_alerts",
            "Webhook alerts by source (grafana, alertmanager) and outcome (captured, "
            "deduplicated, skipped_busy, throttled, rejected, resolved; truncated: left out of "
            "a payload by its sender).",
            labels=["source", "outcome"],
        )
        counts = self.alert_counts()
        # Every series from 0, so increase() sees the first alert of each kind.
        for source in Source:
            for outcome in [*Outcome, TRUNCATED]:
                alerts.add_metric([source, outcome], counts.get((source, outcome), 0))
        yield alerts
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
