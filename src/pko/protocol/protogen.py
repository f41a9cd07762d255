"""Regenerate the committed gRPC/protobuf code for the agent protocol from ``proto/agent.proto``.

Why it exists: the generated modules are committed (so the runtime needs no code generator) and a unit test
regenerates them into a temporary directory to prove they match the ``.proto``. Run
``python -m pko.protocol.protogen`` after editing the ``.proto``. Besides protoc's Python modules it writes
mypy-protobuf's typed stubs (``agent_pb2.pyi``, ``agent_pb2_grpc.pyi``), which type the messages and the client
stub the operator calls.

It must never run at import time of the agent or the operator, and never needs anything but the dev dependencies
grpcio-tools and mypy-protobuf.
"""

from __future__ import annotations

import importlib.resources
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

PROTO_PACKAGE_DIR = Path(__file__).resolve().parent / "proto"
SOURCE_ROOT = PROTO_PACKAGE_DIR.parents[2]  # .../src: the generated imports read `from pko.protocol.proto import ...`
PROTO_FILE = "pko/protocol/proto/agent.proto"
GENERATED = ("agent_pb2.py", "agent_pb2.pyi", "agent_pb2_grpc.py", "agent_pb2_grpc.pyi")


def _plugin(name: str) -> str:
    """The path of a protoc plugin installed as a console script beside this interpreter (e.g. mypy-protobuf's)."""
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        candidate = directory / name
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: pip install mypy-protobuf")
    return found


def generate(out_root: Path) -> dict[str, Path]:
    """Run protoc on the agent .proto with ``out_root`` as the output root; return the generated files."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # dev dependency, imported only here

    well_known = importlib.resources.files("grpc_tools") / "_proto"
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{SOURCE_ROOT}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        PROTO_FILE,
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    out_dir = out_root / "pko" / "protocol" / "proto"
    return {name: out_dir / name for name in GENERATED}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in generate(Path(tmp)).items():
            shutil.copyfile(path, PROTO_PACKAGE_DIR / name)
            print(f"wrote {PROTO_PACKAGE_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
