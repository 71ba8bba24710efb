# One image for every Filegate service (agent worker, tools workers, approval UI);
# docker-compose.yml picks the role with the command. bwrap (sandbox backend)
# and rg (fast grep) come as wheels with the package: no system packages.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md __init__.py __main__.py _lazy.py py.typed worker.py plugin.py operations.py ./
COPY kernel ./kernel
COPY backends ./backends
COPY processes ./processes
COPY devstack ./devstack
COPY activities ./activities
COPY workflows ./workflows
COPY wiring ./wiring
COPY cli ./cli
COPY integrations ./integrations
RUN pip install '.[openai,anthropic,video,ui,otel,mcp]' \
    && rm -rf /src/build /src/*.egg-info

# Unprivileged runtime user. /workspace and /data exist in the image with this
# owner so fresh named volumes mounted there start out writable by it.
RUN useradd --create-home --uid 10001 --user-group filegate \
    && mkdir -p /workspace /data \
    && chown filegate:filegate /workspace /data

USER filegate
WORKDIR /workspace
ENV FILEGATE_STATE_DIR=/data

CMD ["filegate", "--help"]
