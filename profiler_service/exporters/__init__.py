"""Exporters: what the service hands to other tools (links today; metrics and Grafana later)."""
