# The profiler-service sidecar: the service and XProf's capture client, no TensorFlow.
#
#   docker build -f deploy/docker/sidecar.Dockerfile -t profiler-service:0.2.0 .
#
# The `sidecar` extra installs XProf (capture client and converters), grpcio and fsspec, and
# no TensorFlow (pyproject.toml keeps it in the `tf` extra, for the example job);
# tests/deploy/test_images.py checks this file and the dependency closure. The same image serves the central XProf UI (`xprof --logdir ... --port ...`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp

COPY pyproject.toml README.md /src/
COPY profiler_service /src/profiler_service
RUN pip install --no-cache-dir "/src[sidecar]" \
    && rm -rf /src
# py-spy (the chart's sidecar.pySpy.enabled) reads the job's memory as a non-root user: the file
# capability gives it CAP_SYS_PTRACE where the container may have it (the chart then adds
# SYS_PTRACE and allows privilege escalation); elsewhere the sidecar never runs it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libcap2-bin \
    && setcap cap_sys_ptrace+ep "$(command -v py-spy)" \
    && apt-get purge -y libcap2-bin && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*

# The chart runs it as this user with a read-only root filesystem; /tmp and the store are volumes.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["profiler-service"]
CMD ["serve", "--host", "0.0.0.0"]
