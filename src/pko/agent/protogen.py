"""Regenerate the committed gRPC/protobuf code for the agent protocol from ``proto/agent.proto``.

Why it exists: the generated modules are committed (so the runtime needs no code generator) and a unit test
regenerates them into a temporary directory to prove they match the ``.proto``. Run
``python -m pko.agent.protogen`` after editing the ``.proto``.

It must never run at import time of the agent, and never needs anything but the dev dependency grpcio-tools.
"""

from __future__ import annotations

import importlib.resources
import shutil
import sys
import tempfile
from pathlib import Path

PROTO_PACKAGE_DIR = Path(__file__).resolve().parent / "proto"
SOURCE_ROOT = PROTO_PACKAGE_DIR.parents[2]  # .../src: the generated imports read `from pko.agent.proto import ...`
PROTO_FILE = "pko/agent/proto/agent.proto"
GENERATED = ("agent_pb2.py", "agent_pb2.pyi", "agent_pb2_grpc.py")


def generate(out_root: Path) -> dict[str, Path]:
    """Run protoc on the agent .proto with ``out_root`` as the output root; return the generated files."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # dev dependency, imported only here

    well_known = importlib.resources.files("grpc_tools") / "_proto"
    out_root.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{SOURCE_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        PROTO_FILE,
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    out_dir = out_root / "pko" / "agent" / "proto"
    return {name: out_dir / name for name in GENERATED}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in generate(Path(tmp)).items():
            shutil.copyfile(path, PROTO_PACKAGE_DIR / name)
            print(f"wrote {PROTO_PACKAGE_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
