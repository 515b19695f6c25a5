"""Triggers: what starts a capture (HTTP request today; webhooks and schedules build on it)."""
