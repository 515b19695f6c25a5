"""Alert webhooks and Grafana annotations, counted at scrape time from the service's records.

profiler_webhook_alerts_total{source, outcome}   every webhook alert and what was done with it
profiler_grafana_annotations_total{result}       annotations sent, failed, retried, dropped
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import CounterMetricFamily, Metric

from profiler_service.trigger.alert_log import TRUNCATED, Outcome
from profiler_service.trigger.alerts import Source

if TYPE_CHECKING:
    from profiler_service.service import Service

__all__ = ["WebhookCollector"]


class WebhookCollector:
    def __init__(self, service: Service):
        self.service = service  # read at each scrape: the alert trigger may be built later

    def collect(self) -> Iterator[Metric]:
        alerts = CounterMetricFamily(
            "profiler_webhook_alerts",
            "Webhook alerts by source (grafana, alertmanager) and outcome (captured, "
            "deduplicated, skipped_busy, throttled, rejected, resolved; truncated: left out of "
            "a payload by its sender).",
            labels=["source", "outcome"],
        )
        counts = self.service.alerts.log.counts() if self.service.alerts is not None else {}
        # Every series from 0, so increase() sees the first alert of each kind.
        for source in Source:
            for outcome in [*Outcome, TRUNCATED]:
                alerts.add_metric([source, outcome], counts.get((source, outcome), 0))
        yield alerts
        if self.service.annotator is not None:
            annotations = CounterMetricFamily(
                "profiler_grafana_annotations",
                "Grafana annotations by result: sent, failed (after every attempt), retried "
                "(extra attempts), dropped (queue full).",
                labels=["result"],
            )
            for result, n in sorted(self.service.annotator.counts().items()):
                annotations.add_metric([result], n)
            yield annotations
