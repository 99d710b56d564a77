"""markbase.serve.ray: a local Ray Serve application with 2 replicas of a tiny checkpoint answering
concurrent OpenAI requests through Ray's HTTP proxy (each replica its own process and model)."""

import concurrent.futures as cf
import time

import openai
import ray
from ray import serve

import markbase as mb
from markbase.serve.ray import deployment

from .test_server import direct, free_port, get, user


def test_two_replicas_answer_concurrent_requests(synthetic):
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 << 20, log_to_driver=False,
             configure_logging=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(deployment(synthetic("e2b"), model_id="tiny", num_replicas=2, max_context=256,
                             ray_actor_options={"num_cpus": 0.5}), route_prefix="/", name="markbase-test")
        url = f"http://127.0.0.1:{port}"
        pids, deadline = set(), time.time() + 120
        while len(pids) < 2:  # both replicas loaded (requests land on either)
            assert time.time() < deadline, f"replicas not ready: {pids}"
            try:
                status, body = get(url + "/health")
                if status == 200:
                    pids.add(body["pid"])
            except OSError:
                pass
            time.sleep(0.1)
        model = mb.load(synthetic("e2b"), max_context=256)
        prompts = [f"Question {i}?" for i in range(4)]
        want = {p: direct(model, user(p), temperature=0, max_new_tokens=8).text for p in prompts}
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)

        def one(i):
            p = prompts[i % len(prompts)]
            r = client.chat.completions.create(model="tiny", messages=user(p), temperature=0, max_tokens=8)
            return p, r.choices[0].message.content

        with cf.ThreadPoolExecutor(8) as ex:
            for p, text in ex.map(one, range(16)):
                assert text == want[p]
        streamed = client.chat.completions.create(model="tiny", messages=user(prompts[0]), temperature=0,
                                                  max_tokens=8, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == want[prompts[0]]
        assert len(pids) == 2
    finally:
        serve.shutdown()
        ray.shutdown()
