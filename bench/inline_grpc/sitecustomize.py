"""Experiment for bench_kubelet_prepare.py (variant `ours-inline`, never used in production): what grpc's thread hand-off costs.

grpc's Python server reads each call on its poller thread and runs the handler on a ThreadPoolExecutor worker. With this
directory first on PYTHONPATH, NodePrepareResources and NodeUnprepareResources run on the poller thread itself (an
executor whose submit runs the call inline, returned by grpc's per-method pool selection), so the kubelet's figure
without that hand-off can be measured. It serializes every call of the socket (a slow claim GET would hold up all
others), which is why the daemon does not do it.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

import grpc._server as grpc_server

INLINE_METHODS = ("NodePrepareResources", "NodeUnprepareResources")


class _Inline(concurrent.futures.ThreadPoolExecutor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # the future carries it, as a pool's would
            future.set_exception(exc)
        return future


_INLINE = _Inline(max_workers=1)
_select = grpc_server._select_thread_pool_for_behavior


def _select_inline(behavior: Any, default: concurrent.futures.ThreadPoolExecutor) -> concurrent.futures.ThreadPoolExecutor:
    if getattr(behavior, "__name__", "") in INLINE_METHODS:
        return _INLINE
    return _select(behavior, default)


grpc_server._select_thread_pool_for_behavior = _select_inline
