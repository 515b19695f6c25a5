"""Exporters: what the service hands to other tools (links, Prometheus metrics, Grafana)."""
