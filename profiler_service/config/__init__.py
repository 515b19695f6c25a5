"""Service settings: one group per stage (`PROFILER_*` variables, named by field), composed in
a root per process (`Settings` for a sidecar or the agent, `HubSettings` for the hub) that
checks what spans groups; CLI flags override the environment.

A component takes its own group (`CaptureScheduler(settings.schedule, ...)`); a new setting is
a field, with its description, of the group of the stage that reads it (config/pipeline.py,
config/serving.py); docs/reference/configuration.md has a section per group (`scripts/gen-docs`).
"""

from __future__ import annotations

from pydantic import model_validator

from profiler_service.config.base import Group, Root
from profiler_service.config.hub import (
    ExplainSettings,
    FleetSettings,
    LedgerSettings,
    RegistrationSettings,
)
from profiler_service.config.pipeline import (
    DEFAULT_PROM_QUERIES,
    AnalysisSettings,
    BoundsSettings,
    CaptureSettings,
    LookbackSettings,
    PromQuery,
    Schedule,
    ScheduleSettings,
    WatchSettings,
)
from profiler_service.config.serving import (
    GrafanaSettings,
    ReportSettings,
    ServerSettings,
    SidecarStorageSettings,
    SidecarWebhookSettings,
    StorageSettings,
    WebhookSettings,
)

__all__ = [
    "DEFAULT_PROM_QUERIES",
    "AnalysisSettings",
    "AppSettings",
    "BoundsSettings",
    "CaptureSettings",
    "ExplainSettings",
    "FleetSettings",
    "GrafanaSettings",
    "Group",
    "HubSettings",
    "LedgerSettings",
    "LookbackSettings",
    "PromQuery",
    "RegistrationSettings",
    "ReportSettings",
    "Schedule",
    "ScheduleSettings",
    "ServerSettings",
    "Settings",
    "SidecarStorageSettings",
    "SidecarWebhookSettings",
    "StorageSettings",
    "WatchSettings",
    "WebhookSettings",
]


class AppSettings(Root):
    """What a sidecar and the hub both serve by: the HTTP API, the store, links and reports,
    the webhook receiver, the capture bounds (`api/core.py`)."""

    server: ServerSettings
    storage: StorageSettings
    bounds: BoundsSettings
    report: ReportSettings
    webhook: WebhookSettings


class Settings(AppSettings):
    """A sidecar's (or the agent's): every stage of the pipeline; its store and webhooks with
    what only a sidecar reads (retention, the bucket copy's pace, the alerts' cooldown and
    throttle)."""

    storage: SidecarStorageSettings
    webhook: SidecarWebhookSettings
    capture: CaptureSettings
    analysis: AnalysisSettings
    schedule: ScheduleSettings
    lookback: LookbackSettings
    watch: WatchSettings
    grafana: GrafanaSettings
    registration: RegistrationSettings

    @model_validator(mode="after")
    def _check(self) -> Settings:
        """What spans groups: every configured duration keeps the bounds, every named target
        is configured, captures in flight are not listed as runs of the bucket."""
        bounds, names = self.bounds, self.capture.target_names
        watch = self.watch.duration_s
        if watch is not None and not bounds.within(watch):
            raise ValueError(
                f"memory_watch_duration_s={watch} must lie within [{bounds.duration_min_s}, "
                f"{bounds.duration_max_s}]: every capture keeps the bounds, the watch's too"
            )
        capture_url, store_url = self.capture.url, self.storage.store_url
        if capture_url and store_url and f"{capture_url}/".startswith(f"{store_url}/"):
            raise ValueError(
                "capture_url must lie outside store_url: XProf would list the captures in "
                "flight there as runs"
            )
        for where, target in self.webhook.named_targets():
            if target not in names:
                raise ValueError(
                    f"{where} names target {target!r}, which is not configured "
                    f"(configured: {', '.join(names) or 'none'})"
                )
        for schedule in self.schedule.schedules:
            if schedule.target not in names:
                raise ValueError(
                    f"a schedule names target {schedule.target!r}, which is not configured "
                    f"(configured: {', '.join(names) or 'none'})"
                )
            if schedule.duration_s is not None and not bounds.within(schedule.duration_s):
                raise ValueError(f"schedule of {schedule.target!r}: duration_s out of bounds")
        return self


class HubSettings(AppSettings):
    """The hub's: what it serves, plus its own; its alert rules name the targets sidecars
    register, which no setting lists, so they are not checked against targets here."""

    fleet: FleetSettings
    ledger: LedgerSettings
    explain: ExplainSettings
