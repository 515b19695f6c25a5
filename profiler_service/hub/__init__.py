"""The fleet hub: one contact point and one view over many sidecars and their shared bucket.

registry.py      who the sidecars are (registration, heartbeat, TTL); what each one says of
                 itself is the neutral `profiler_service.sidecar_record`, and its heartbeat
                 is the sidecar's own (`profiler_service.registration`)
peers.py         replicas share their registries through the bucket
routing.py       alerts and operator captures to the sidecar they name
fleet.py         the hub's parts wired together; the bucket's sync into the fleet index
views.py         the fleet page: latest verdicts, step time, regressions, findings by rule
ledger.py        GPU-hours by job: held, busy, idle by cause, recoverable, cost
explain.py       the captures the hub asks for to explain the ledger's no_capture hours
metrics.py       `profiler_fleet_*` for Prometheus
routes.py, app.py  the HTTP API (the sidecar's read routes, reused)
"""
