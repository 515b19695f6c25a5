"""Exporters: what the service hands to people and other tools (links, the report as HTML and
as text, Prometheus metrics, Grafana)."""
