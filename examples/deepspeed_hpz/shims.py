"""Import shims that let DeepSpeed 0.13.x import on torch 2.11 / numpy 2.x (test harness only, not the product).

DeepSpeed 0.13 imports two names that newer releases removed: `log` and `_get_socket_with_port` from
torch.distributed.elastic.agent.server.api (deepspeed/elasticity/elastic_agent.py) and `numpy.BUFSIZE`
(deepspeed/autotuning/scheduler.py). Call `apply()` before `import deepspeed`.
"""

from __future__ import annotations

import logging
import socket


def _get_socket_with_port() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("localhost", 0))
    return sock


def apply() -> None:
    import numpy
    import torch.distributed.elastic.agent.server.api as agent_api

    if not hasattr(agent_api, "log"):
        agent_api.log = logging.getLogger("torch.distributed.elastic.agent.server.api")
    if not hasattr(agent_api, "_get_socket_with_port"):
        agent_api._get_socket_with_port = _get_socket_with_port
    if not hasattr(numpy, "BUFSIZE"):
        numpy.BUFSIZE = 8192
