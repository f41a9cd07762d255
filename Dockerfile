# syntax=docker/dockerfile:1
# pko's image: the operator (`pko operator`) and, beside it, what workspace pods take from it: the standalone agent
# executable `/agent` and `tini` as `/tini` (their `bootstrap` init container runs `cp /agent /tini /share/`, so both
# must run in any Linux image: a static launcher carrying the PyInstaller-built agent, and the static tini). One image,
# as the reference ships.
#
#   docker build -t docker.io/pko/pko:v0.1.0 .     (the Helm chart's default image; see docs/install.md)
#
# Layered so that an edit under src/ redoes only what that source goes into, with a layer cache (`docker build`, or
# `buildah bud --layers` on a kept store as `make images` runs it): the Debian packages and the pinned dependencies
# sit in layers of their own, keyed by the dependency list rather than by the whole pyproject.toml; pko itself is
# installed on top without dependencies; the agent executable is built from its own import closure only
# (tools/agent-bin/sources.py), so an edit to the controllers or the operator's command line leaves it cached. The
# README is not in the build context: the package's long description is a stub, and editing the README rebuilds
# nothing.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build tools: Debian packages, and the static tini --------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS tools
# binutils: PyInstaller reads shared-library headers with objdump (and strips them). gcc, libc6-dev: the agent's
# static launcher (tools/agent-bin/launcher.c). tini: Debian's tini-static (0.19.0, as upstream).
RUN apt-get update \
 && apt-get install -y --no-install-recommends binutils gcc libc6-dev tini \
 && rm -rf /var/lib/apt/lists/* \
 && install -D -m 0755 /usr/bin/tini-static /out/tini

# --- the dependency list: only what pyproject.toml pins, so other edits to it keep the dependency layers -----------
FROM ${PYTHON_IMAGE} AS requirements
COPY pyproject.toml /src/
RUN python -c 'import tomllib; p = tomllib.load(open("/src/pyproject.toml", "rb")); \
print("\n".join(p["project"]["dependencies"]), file=open("/requirements.txt", "w")); \
print("\n".join(p["build-system"]["requires"]), file=open("/build-requirements.txt", "w"))' \
 && mkdir /out && mv /requirements.txt /build-requirements.txt /out/ && touch -d @0 /out/* /out

# --- the dependencies: the operator's virtualenv (/opt/pko) and the build venv (/opt/build, with PyInstaller) -------
FROM tools AS deps
COPY --from=requirements /out/ /requirements/
RUN python -m venv /opt/pko \
 && /opt/pko/bin/pip install --no-cache-dir -r /requirements/requirements.txt
RUN python -m venv /opt/build \
 && /opt/build/bin/pip install --no-cache-dir -r /requirements/requirements.txt \
      -r /requirements/build-requirements.txt 'pyinstaller==6.22.*'

# --- pko itself, without its dependencies: the files it adds to the venv, collected under /overlay ----------------
FROM deps AS operator
WORKDIR /src
COPY pyproject.toml ./
COPY src ./src
# setuptools reads the readme named in pyproject.toml; the image's metadata carries this stub instead.
RUN echo 'pko: the Pulumi Kubernetes Operator in Python.' > README.md \
 && /opt/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --no-index -w /tmp/wheel /src \
 && /opt/pko/bin/pip install --no-cache-dir --no-deps --no-index /tmp/wheel/pko-*.whl \
 && /opt/pko/bin/python -c 'import importlib.metadata as m; \
print("\n".join(str(f.locate().resolve()).lstrip("/") for f in m.files("pko")))' > /tmp/pko-files \
 && tar -C / -cf /tmp/pko.tar --verbatim-files-from -T /tmp/pko-files \
 && mkdir /overlay \
 && tar -C /overlay -xpf /tmp/pko.tar

# --- the agent: tools/agent-bin/build.sh (the same build the tests run) from the agent's own sources ----------------
FROM tools AS agent-sources
COPY src /src/src
COPY tools/agent-bin /src/tools/agent-bin
RUN python /src/tools/agent-bin/sources.py copy /src /out

FROM deps AS agent
# Taken by content: while the agent's sources are unchanged, this layer and the build below come from the cache.
COPY --from=agent-sources /out/ /src/
WORKDIR /src
# build.sh prints the executable's path last; the smoke test `agent version` fails the build if it cannot start, and
# unpacks the agent's tree beside it (/agent-root/.pko-agent-<id>), which the image keeps: wherever /agent runs from
# this image (the `fetch` container, or a pod that mounts the image: --workspace-agent-image-volume) it unpacks
# nothing. /agent-root holds those two and nothing else (this stage's /out has the tools stage's tini).
RUN agent=$(PYTHON=/opt/build/bin/python PKO_BIN_DIR=/tmp/agent-cache bash tools/agent-bin/build.sh | tail -n 1) \
 && install -D -m 0755 "$agent" /agent-root/agent \
 && rm -rf /tmp/agent-cache \
 && /agent-root/agent version

# --- the image -------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
RUN groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home --shell /usr/sbin/nologin nonroot
# Least often changed first: tini, the dependencies, the agent; pko's own files last, so an edit under src/ adds one
# small layer.
COPY --from=tools /out/tini /tini
COPY --from=deps /opt/pko /opt/pko
COPY --from=agent /agent-root/ /
ENV PATH=/opt/pko/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /home/nonroot
USER 65532:65532
# 8383 metrics, 9090 Program file server, 8081 health probes.
EXPOSE 8383 9090 8081
ENTRYPOINT ["/tini", "--"]
CMD ["pko", "operator"]
COPY --from=operator /overlay/ /
