# The in-process example: a small real Keras job (profiler_service.demo.job) with TensorFlow.
# It starts TensorFlow's profiler server on $TF_PROFILER_PORT, for the sidecar to capture, or
# embeds the agent with --agent (then no sidecar is needed).
#
#   docker build -f deploy/docker/job.Dockerfile -t profiler-example-job:0.2.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TF_CPP_MIN_LOG_LEVEL=1 \
    HOME=/tmp

COPY pyproject.toml README.md /src/
COPY profiler_service /src/profiler_service
RUN pip install --no-cache-dir "/src[tf]" \
    && rm -rf /src

USER 65532:65532
ENV TF_PROFILER_PORT=6009 WORKLOAD=input-bound
ENTRYPOINT ["sh", "-c", "exec python -m profiler_service.demo.job --workload \"$WORKLOAD\" --profiler-port \"$TF_PROFILER_PORT\" --seconds 86400 \"$@\"", "--"]
