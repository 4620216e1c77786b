"""Which host a run's worker executes on. A process id means something on its own host only, so
the liveness check of a run (`hltm_dagster.instance.worker_health`) needs it once build hosts
share one instance. The worker tags its run as its resources start."""

from __future__ import annotations

import socket

import dagster as dg

WORKER_HOST_TAG = "hltm/worker_host"


def this_host() -> str:
    return socket.gethostname()


def tag_worker_host(context: dg.InitResourceContext) -> None:
    run, instance = context.run, context.instance
    if run is not None and instance is not None and WORKER_HOST_TAG not in run.tags:
        instance.add_run_tags(run.run_id, {WORKER_HOST_TAG: this_host()})
