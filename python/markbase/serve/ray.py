"""Replicas of `markbase serve` under Ray Serve (pip install "markbase[ray]"): the same routes (serve/app.py),
one model per replica (each replica a process that loads the checkpoint and runs its own continuous-
batching worker), Ray's HTTP proxy spreading requests over them and its autoscaler adding or removing
replicas.

    from ray import serve
    from markbase.serve.ray import deployment
    serve.run(deployment("path/to/gemma-4-E2B-it", num_replicas=2), route_prefix="/")
    # or autoscaling: deployment(..., autoscaling_config={"min_replicas": 1, "max_replicas": 4,
    #                                                   "target_ongoing_requests": 8})

The checkpoint path must be readable on every node that runs a replica. Each replica needs the model's
memory (weights are memory-mapped, so replicas on one machine share their pages) plus its KV caches.
"""

from __future__ import annotations

import os


def _build_app(model_dir: str, model_id: str, load_kwargs: dict, app_kwargs: dict):
    """Runs on each replica: the ASGI app over this replica's own model."""
    from ..api import load
    from .app import create_app

    return create_app(lambda: load(model_dir, **load_kwargs), model_id, **app_kwargs)


def deployment(model_dir: str, *, model_id: str | None = None, num_replicas: int | str | None = None,
               autoscaling_config: dict | None = None, ray_actor_options: dict | None = None,
               device: str = "auto", max_context: int | None = None, quantize: str | None = None,
               api_key: str | None = None, max_batch: int = 8, max_queue: int = 64, prompt_cache: int = 4,
               allow_media_dir: str | None = None, max_body_bytes: int | None = None,
               max_ongoing_requests: int | None = None):
    """A bound Ray Serve application serving `model_dir` over the OpenAI API (pass it to `serve.run`).

    num_replicas: a fixed count (default 1), or leave it None and give autoscaling_config (Ray's keys:
    min_replicas, max_replicas, target_ongoing_requests, ...). ray_actor_options: per replica, e.g.
    {"num_cpus": 2}. max_ongoing_requests: what Ray sends one replica at once (default max_batch +
    max_queue, so Ray queues the rest rather than the replica answering 429)."""
    from ray import serve

    model_dir = os.path.abspath(model_dir)
    model_id = model_id or os.path.basename(os.path.normpath(model_dir))
    load_kwargs = dict(device=device, max_context=max_context, quantize=quantize)
    app_kwargs = dict(api_key=api_key, allow_media_dir=allow_media_dir, max_queue=max_queue, max_batch=max_batch,
                      prompt_cache=prompt_cache, max_body_bytes=max_body_bytes)

    def builder():  # Ray calls a zero-argument builder on each replica (a partial would pass for an ASGI app)
        return _build_app(model_dir, model_id, load_kwargs, app_kwargs)

    @serve.deployment(name=f"markbase-{model_id}")
    @serve.ingress(builder)
    class MarkbaseReplica:
        pass

    options: dict = {"max_ongoing_requests": max_ongoing_requests or (max_batch + max_queue)}
    if autoscaling_config is not None:
        if num_replicas is not None:
            from .._core import InputError

            raise InputError("deployment: give num_replicas or autoscaling_config, not both")
        options["autoscaling_config"] = autoscaling_config
    else:
        options["num_replicas"] = num_replicas or 1
    if ray_actor_options is not None:
        options["ray_actor_options"] = ray_actor_options
    return MarkbaseReplica.options(**options).bind()
