"""Each snapshot's lead-up: the ring's samples and Prometheus's series around the capture.

The ring covers PROFILER_LOOKBACK_S before the capture started, and the capture. Prometheus is
asked from PROFILER_LOOKBACK_S before the trigger (an alert's `startsAt`, which may be minutes
before the webhook arrived) to the capture's end, beside the analysis and within one deadline
for all its queries: a Prometheus that never answers costs the snapshot its series, not time.
"""

from __future__ import annotations

from datetime import timedelta

from profiler_service.config import LookbackSettings
from profiler_service.lookback.models import CaptureWindow, LeadUp, PendingLeadUp
from profiler_service.lookback.prometheus import lead_up_variables, query_lead_up
from profiler_service.lookback.sampler import Sampler


class LeadUpRecorder:
    """`controller.lead_up`: called once the trace is done, before analysis."""

    def __init__(self, settings: LookbackSettings, sampler: Sampler | None):
        self.settings = settings
        self.sampler = sampler

    def __call__(self, window: CaptureWindow) -> PendingLeadUp | None:
        """The ring's samples at once, Prometheus's queries in a thread beside the analysis,
        all of them within PROFILER_PROMETHEUS_TIMEOUT_S. None when there is nothing to read:
        no sampler (PROFILER_LOOKBACK_S=0), no Prometheus."""
        if self.sampler is None and not self.settings.prometheus_url:
            return None
        s = self.settings
        lookback = timedelta(seconds=s.lookback_s)
        started, end = window.started, window.end
        if self.sampler is not None:
            lead_up = self.sampler.lead_up(started - lookback, end)
        else:
            lead_up = LeadUp(start=started - lookback, end=end)
        if not s.prometheus_url:
            return PendingLeadUp(lead_up)
        url = s.prometheus_url
        since = window.triggered - timedelta(seconds=s.lookback_s or 300)
        lead_up.start = min(lead_up.start, since)
        variables = lead_up_variables(window.target, window.labels, window.pod, window.namespace)
        return PendingLeadUp(
            lead_up,
            lambda: query_lead_up(
                url, s.prometheus_queries, variables, since, end, timeout_s=s.prometheus_timeout_s
            ),
            deadline_s=s.prometheus_timeout_s,
        )
