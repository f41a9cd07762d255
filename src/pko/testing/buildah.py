"""Build commands run for the test images: buildah on a private storage root, and logged subprocesses.

Images built from a Dockerfile or Containerfile (pko's own, the workspace and Go-operator stand-ins) go through
Debian's buildah with chroot isolation and no registry: the base image is loaded into buildah's storage from our
own OCI archive under the exact name the Dockerfile's ``FROM`` resolves to, pulls are forbidden, and the result is
pushed to an OCI layout directory. The storage root lives in the image cache (never the system's
``/var/lib/containers``) and registry configuration is our own file (short names resolve to docker.io, nothing from
``/etc/containers/registries.conf*``).

The store is kept between builds and every build runs with ``--layers``: a step whose inputs are unchanged (the
same parent layer and instruction; for ``COPY``, the same copied content) is taken from the previous build. That is
what makes an edit under ``src/`` cheap: pko's Dockerfile keeps the Debian packages, the dependencies and the agent
executable in layers that such an edit does not touch. Working containers (a killed build's too) are removed before
and after each build; the cached images go only when there are more than `MAX_CACHED_IMAGES` of them (then the
whole store, and the next build is a cold one).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

Log = Callable[[str], None]


class CommandError(RuntimeError):
    """A build command failed; the message carries the command and the tail of its output."""


def run_logged(
    argv: Sequence[str],
    log: Log,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    tail: int = 40,
    pass_fds: Sequence[int] = (),
) -> str:
    """Run `argv`, passing every output line (stdout and stderr) to `log`; return the output.

    `pass_fds` stay open in the command (the image cache's lock: a command that outlives a killed caller keeps the
    cache locked until it ends). Raises CommandError with the last `tail` lines when the command fails.
    """
    full_env = {**os.environ, **env} if env is not None else None
    lines: collections.deque[str] = collections.deque(maxlen=tail)
    output: list[str] = []
    with subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        pass_fds=tuple(pass_fds),
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            lines.append(line)
            output.append(line)
            log(f"  | {line}")
        code = proc.wait()
    if code != 0:
        last = next((line for line in reversed(lines) if line.strip()), "no output")
        shown = "\n".join(lines)
        raise CommandError(f"`{' '.join(argv)}` exited with {code}: {last}\nits last output:\n{shown}")
    return "\n".join(output)


# Short names (the Dockerfile's `FROM python:3.11-slim-bookworm`) resolve to Docker Hub, as in Docker; with
# pulls forbidden that only ever means a name in the local store.
_REGISTRIES_CONF = """\
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
"""


# Beyond this many images in the store (each build step's layer is one), the next build starts from an empty store:
# an edit under src/ adds about ten, a rebuilt agent a hundred or so megabytes.
MAX_CACHED_IMAGES = 400


class Buildah:
    """buildah with its own storage root and registry configuration under `state`."""

    def __init__(self, state: Path, log: Log, pass_fds: Sequence[int] = (), storage_driver: str = "overlay") -> None:
        self.state = state
        self.log = log
        self.pass_fds = tuple(pass_fds)
        self.storage_driver = storage_driver
        self._registries_conf = state / "registries.conf"
        self._registries_dir = state / "registries.conf.d"
        self._aliases = state / "short-name-aliases.conf"
        self._loaded = state / "loaded.json"

    def _prepare(self) -> None:
        self._registries_dir.mkdir(parents=True, exist_ok=True)
        self._registries_conf.write_text(_REGISTRIES_CONF)

    def _argv(self, *args: str) -> list[str]:
        return [
            "buildah",
            "--root", str(self.state / "storage"),
            "--runroot", str(self.state / "run"),
            "--storage-driver", self.storage_driver,
            "--registries-conf", str(self._registries_conf),
            "--registries-conf-dir", str(self._registries_dir),
            "--short-name-alias-conf", str(self._aliases),
            *args,
        ]  # fmt: skip

    def run(self, *args: str, cwd: Path | None = None) -> str:
        self._prepare()
        return run_logged(
            self._argv(*args), self.log, cwd=cwd, env={"BUILDAH_ISOLATION": "chroot"}, pass_fds=self.pass_fds
        )

    def reset(self) -> None:
        """Remove every working container and image (a previous build's, even a killed one's), cache included."""
        self.run("rm", "--all")
        self.run("rmi", "--all", "--force")
        self._loaded.unlink(missing_ok=True)

    def remove_containers(self) -> None:
        """Remove every working container (a killed build's too); the images, the layer cache, stay."""
        self.run("rm", "--all")

    def prepare(self, max_images: int = MAX_CACHED_IMAGES) -> None:
        """Before a build: no working containers left, and a store within its bounds (else emptied)."""
        self.remove_containers()
        count = len(self.run("images", "--all", "--quiet", "--no-trunc").split())
        if count > max_images:
            self.log(f"the build cache holds {count} images (more than {max_images}): emptying it")
            self.reset()

    def _loaded_images(self) -> dict[str, str]:
        try:
            loaded = json.loads(self._loaded.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}

    def load(self, archive: Path, name: str, digest: str | None = None) -> None:
        """Load a one-image OCI archive into the store and name it `name` (e.g. a Dockerfile's base image).

        With the archive's manifest `digest`, a store that already holds that image under `name` is left as it is
        (the same image ID either way: a reload would change nothing, the layer cache included).
        """
        loaded = self._loaded_images()
        recorded = loaded.get(name, "").split()
        if digest is not None and recorded and recorded[0] == digest and recorded[1:] == [self._image_id(name)]:
            return
        out = self.run("pull", "--quiet", "--policy", "always", f"oci-archive:{archive}")
        image_id = out.strip().splitlines()[-1].strip().removeprefix("sha256:")
        self.run("tag", image_id, name)
        if digest is not None:
            loaded[name] = f"{digest} {image_id}"
            self._loaded.write_text(json.dumps(loaded, indent=2, sort_keys=True) + "\n")

    def _image_id(self, name: str) -> str | None:
        """The full ID of the image named `name` in the store, or None."""
        try:
            out = self.run("images", "--quiet", "--no-trunc", name)
        except CommandError:
            return None
        ids = out.split()
        return ids[0].removeprefix("sha256:") if ids else None

    def build(
        self,
        context: Path,
        containerfile: Path,
        tag: str,
        build_args: Mapping[str, str] | None = None,
        volumes: Sequence[str] = (),
    ) -> None:
        """``buildah bud --layers`` of `containerfile` in `context` with chroot isolation, pulls forbidden, into `tag`.

        Unchanged steps come from the layer cache of earlier builds in this store. Timestamps (the image's, and its
        files' in the new layers) are the epoch, so the same inputs give the same image where the build steps
        themselves are deterministic. `volumes` (``HOST:CONTAINER[:OPTIONS]``) are
        mounted into every ``RUN`` step only, never into the image.
        """
        args = ["bud", "--isolation", "chroot", "--pull=never", "--layers=true", "--format", "oci", "--timestamp", "0"]
        for key, value in (build_args or {}).items():
            args += ["--build-arg", f"{key}={value}"]
        for volume in volumes:
            args += ["--volume", volume]
        self.run(*args, "--file", str(containerfile), "--tag", tag, str(context), cwd=context)

    def check(self, image: str, commands: Sequence[Sequence[str]]) -> list[str]:
        """Run `commands` in a working container of `image` (as the image's user); return their outputs."""
        container = self.run("from", "--pull=never", "--quiet", image).strip().splitlines()[-1].strip()
        try:
            return [self.run("run", "--isolation", "chroot", container, "--", *command) for command in commands]
        finally:
            self.run("rm", container)

    def export(self, image: str, layout: Path) -> None:
        """Push `image` to the OCI layout directory `layout` (buildah gzips the layers for an ``oci:`` target)."""
        self.run("push", "--quiet", "--format", "oci", image, f"oci:{layout}")
