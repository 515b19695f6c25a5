"""Each snapshot's lead-up: the ring's samples and Prometheus's series around the capture.

The ring covers PROFILER_LOOKBACK_S before the capture started, and the capture. Prometheus is
asked from PROFILER_LOOKBACK_S before the trigger (an alert's `startsAt`, which may be minutes
before the webhook arrived) to the capture's end, beside the analysis and within one deadline
for all its queries: a Prometheus that never answers costs the snapshot its series, not time.
"""

from __future__ import annotations

from datetime import timedelta

from profiler_service.config import LookbackSettings
from profiler_service.lookback.models import LeadUp, PendingLeadUp
from profiler_service.lookback.prometheus import lead_up_variables, query_lead_up
from profiler_service.lookback.sampler import Sampler
from profiler_service.models import Snapshot, utcnow


class LeadUpRecorder:
    """`controller.lead_up`: called once the trace is done, before analysis."""

    def __init__(self, settings: LookbackSettings, sampler: Sampler | None):
        self.settings = settings
        self.sampler = sampler

    def __call__(self, snapshot: Snapshot) -> PendingLeadUp | None:
        """The ring's samples at once, Prometheus's queries in a thread beside the analysis,
        all of them within PROFILER_PROMETHEUS_TIMEOUT_S. None when there is nothing to read:
        no sampler (PROFILER_LOOKBACK_S=0), no Prometheus."""
        if self.sampler is None and not self.settings.prometheus_url:
            return None
        s = self.settings
        lookback = timedelta(seconds=s.lookback_s)
        started = snapshot.capture_started_at or snapshot.created_at
        end = snapshot.capture_finished_at or utcnow()
        if self.sampler is not None:
            lead_up = self.sampler.lead_up(started - lookback, end)
        else:
            lead_up = LeadUp(start=started - lookback, end=end)
        if not s.prometheus_url:
            return PendingLeadUp(lead_up)
        url = s.prometheus_url
        triggered = min(snapshot.trigger.starts_at or snapshot.created_at, snapshot.created_at)
        since = triggered - timedelta(seconds=s.lookback_s or 300)
        lead_up.start = min(lead_up.start, since)
        variables = lead_up_variables(
            snapshot.target, snapshot.trigger.labels, snapshot.pod, snapshot.namespace
        )
        return PendingLeadUp(
            lead_up,
            lambda: query_lead_up(
                url, s.prometheus_queries, variables, since, end, timeout_s=s.prometheus_timeout_s
            ),
            deadline_s=s.prometheus_timeout_s,
        )
