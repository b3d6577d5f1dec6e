#!/usr/bin/env bash
# Regenerate the committed gRPC stubs under dra_driver/api/ from protos/.
# The .proto files live under protos/dra_driver/api/<pkg>/<version>/ so that the
# generated code imports `from dra_driver.api... import api_pb2` (package imports,
# distinct descriptor file names). Needs grpcio-tools==1.85.1 (the `dev` extra).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python}"
cd "$root"
protos=$(cd protos && find dra_driver -name '*.proto' | sort)
for proto in $protos; do
  "$python" -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. --grpc_python_out=. "protos/$proto"
done
# Every generated directory must be an importable package.
for dir in $(cd protos && find dra_driver/api -type d); do
  [ -f "$dir/__init__.py" ] || : > "$dir/__init__.py"
done
echo "generated stubs for: $protos"
