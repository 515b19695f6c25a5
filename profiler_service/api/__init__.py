"""HTTP API: routes translate requests into calls of the pipeline stages. The sidecar's app:
`api.app.create_app`; the parts the hub shares: `core`, `deps` and the read routes."""
