#!/usr/bin/env bash
# Regenerates the checked-in protobuf modules in src/bkeeper/wire/_pb from
# src/bkeeper/wire/proto/*.proto. Needs the test extras (grpcio-tools, mypy-protobuf):
#   python -m grpc_tools.protoc -I src/bkeeper/wire/proto \
#       --python_out=OUT --mypy_out=OUT src/bkeeper/wire/proto/*.proto
# Usage: scripts/gen_proto.sh [OUT_DIR]   (default src/bkeeper/wire/_pb)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-src/bkeeper/wire/_pb}"
mkdir -p "$out"
python -m grpc_tools.protoc -I src/bkeeper/wire/proto \
    --python_out="$out" --mypy_out="$out" src/bkeeper/wire/proto/*.proto
[ -f "$out/__init__.py" ] || printf '"""Generated protobuf modules (scripts/gen_proto.sh); do not edit."""\n' > "$out/__init__.py"
