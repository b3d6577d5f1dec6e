"""The part of bench_prepare's concurrency-1 latency no prepare code can remove: the transports.

1. gRPC: the kubelet-side NodePrepareResources round trip to a server in another process whose handler
   does nothing but answer one device (the DRA v1 protos, a sync grpc.server with a thread pool over a
   unix socket, as the daemon serves). bench_prepare's p50 minus the daemon's handler time is this.
2. The claim GET against the simulated API server in another process: ClaimReader.get (the kubernetes
   client's urllib3 pool, then the pydantic claim model) next to a bare http.client GET of the same
   object on a kept-alive connection, i.e. what the client library adds on top of the wire.

Both are medians of wall time per call after a warm-up; run it beside bench_prepare's figures on the same
machine state.

usage: python bench/bench_transport_floor.py [--calls N]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

UID = "0b4f3c2e-5d6a-4b7c-8d9e-0f1a2b3c4d5e"
CLAIM_PATH = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1"


def serve_empty_dra(socket_path: str) -> None:
    """The server side of (1): answers every prepare with one device, does nothing else."""
    import grpc

    from dra_driver.api.dra.v1 import api_pb2, api_pb2_grpc

    class Servicer(api_pb2_grpc.DRAPluginServicer):
        def NodePrepareResources(self, request, context):  # noqa: N802 (gRPC naming)
            response = api_pb2.NodePrepareResourcesResponse()
            for claim in request.claims:
                response.claims[claim.uid].devices.add(
                    request_names=["gpu"], pool_name="node", device_name="gpu-0", cdi_device_ids=[f"k8s.gpu.nvidia.com/device={claim.uid}-node-gpu-0"]
                )
            return response

    server = grpc.server(ThreadPoolExecutor(max_workers=8))
    api_pb2_grpc.add_DRAPluginServicer_to_server(Servicer(), server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    server.wait_for_termination()


def serve_claim(port_file: str) -> None:
    """The server side of (2): the simulated API server holding one allocated claim."""
    from dra_driver.simulation import api_server as sim_apiserver
    from dra_driver.simulation.claims import allocated_claim_object

    server = sim_apiserver.SimApiServer().start()
    server.store.put(allocated_claim_object("c1", "default", "gpu.nvidia.com", "node", {"gpu": ["gpu-0"]}))
    Path(port_file).write_text(str(server.port))
    while True:
        time.sleep(3600)


def median_ms(call: Callable[[], object], calls: int) -> float:
    for _ in range(calls // 10):
        call()
    walls = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls) * 1000


def wait_for(path: Path) -> None:
    """Until the helper created `path` (a socket) or wrote to it (the port file)."""
    deadline = time.monotonic() + 30
    while not (path.is_socket() or (path.exists() and path.stat().st_size > 0)):
        if time.monotonic() > deadline:
            raise SystemExit(f"helper process did not start ({path})")
        time.sleep(0.05)


def grpc_floor(work: Path, calls: int) -> float:
    import grpc

    from dra_driver.api.dra.v1 import api_pb2, api_pb2_grpc

    socket_path = work / "dra.sock"
    helper = subprocess.Popen([sys.executable, __file__, "--serve-dra", str(socket_path)])
    try:
        wait_for(socket_path)
        with grpc.insecure_channel(f"unix://{socket_path}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            stub = api_pb2_grpc.DRAPluginStub(channel)
            request = api_pb2.NodePrepareResourcesRequest(claims=[api_pb2.Claim(namespace="default", name="c1", uid=UID)])
            return median_ms(lambda: stub.NodePrepareResources(request, timeout=10), calls)
    finally:
        helper.kill()
        helper.wait()


def get_floor(work: Path, calls: int) -> tuple[float, float]:
    from dra_driver.kube.claims import ClaimReader
    from dra_driver.kube.client import make_json_api

    port_file = work / "port"
    helper = subprocess.Popen([sys.executable, __file__, "--serve-claim", str(port_file)])
    try:
        wait_for(port_file)
        port = int(port_file.read_text())
        reader = ClaimReader(make_json_api(f"http://127.0.0.1:{port}"))
        client_ms = median_ms(lambda: reader.get("default", "c1"), calls)
        connection = http.client.HTTPConnection("127.0.0.1", port)

        def bare() -> bytes:
            connection.request("GET", CLAIM_PATH, headers={"Accept": "application/json"})
            return connection.getresponse().read()

        return client_ms, median_ms(bare, calls)
    finally:
        helper.kill()
        helper.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--serve-dra", help=argparse.SUPPRESS)
    parser.add_argument("--serve-claim", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_dra:
        serve_empty_dra(args.serve_dra)
        return 0
    if args.serve_claim:
        serve_claim(args.serve_claim)
        return 0
    with tempfile.TemporaryDirectory(prefix="dra-floor-") as work:
        grpc_ms = grpc_floor(Path(work), args.calls)
        client_ms, bare_ms = get_floor(Path(work), args.calls)
    print(f"{'gRPC NodePrepareResources round trip, empty handler':<56} {grpc_ms:6.3f} ms p50")
    print(f"{'claim GET, ClaimReader (urllib3 pool + claim model)':<56} {client_ms:6.3f} ms p50")
    print(f"{'claim GET, bare http.client on a kept-alive connection':<56} {bare_ms:6.3f} ms p50")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
