"""Triggers: what starts a capture besides the API and the CLI (webhooks, schedules, the memory
watch), each a module with its `PLUGIN` (plugin.py)."""
