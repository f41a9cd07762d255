# syntax=docker/dockerfile:1
# pko's image: the operator (`pko operator`) and, beside it, what workspace pods take from it: the standalone agent
# executable `/agent` and `tini` as `/tini` (their `bootstrap` init container runs `cp /agent /tini /share/`, so both
# must run in any Linux image: a static launcher carrying the PyInstaller-built agent, and the static tini). One image,
# as the reference ships.
#
#   docker build -t docker.io/pko/pko:v0.1.0 .     (the Helm chart's default image; see docs/install.md)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: the operator's virtualenv and the agent executable ------------------------------------------------------
FROM ${PYTHON_IMAGE} AS build
# binutils: PyInstaller reads shared-library headers with objdump (and strips them). gcc, libc6-dev: the agent's
# static launcher (tools/agent-bin/launcher.c). tini: Debian's tini-static (0.19.0, as upstream).
RUN apt-get update \
 && apt-get install -y --no-install-recommends binutils gcc libc6-dev tini \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY tools/agent-bin ./tools/agent-bin
# The operator's runtime: pko and its dependencies in /opt/pko (copied as is into the final stage).
RUN python -m venv /opt/pko && /opt/pko/bin/pip install --no-cache-dir /src
# The agent: tools/agent-bin/build.sh (the same build the tests run) with PyInstaller in a throw-away venv. It prints
# the executable's path last; the smoke test `agent version` fails the build if it cannot start.
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir /src 'pyinstaller==6.22.*' \
 && agent=$(PYTHON=/opt/build/bin/python PKO_BIN_DIR=/tmp/agent-cache bash tools/agent-bin/build.sh | tail -n 1) \
 && install -D -m 0755 "$agent" /out/agent \
 && install -D -m 0755 /usr/bin/tini-static /out/tini \
 && /out/agent version

# --- the image -------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
RUN groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/pko /opt/pko
COPY --from=build /out/agent /agent
COPY --from=build /out/tini /tini
ENV PATH=/opt/pko/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /home/nonroot
USER 65532:65532
# 8383 metrics, 9090 Program file server, 8081 health probes.
EXPOSE 8383 9090 8081
ENTRYPOINT ["/tini", "--"]
CMD ["pko", "operator"]
