"""Chat template sandbox bypasses (issue 38, item 7): a checkpoint's template, rendering user content, must
not take unbounded memory or time. Each hostile template ends in an InputError naming the template's output
(or work) budget within DEADLINE_S, with a Python heap peak under PEAK_LIMIT; real templates render as before;
Hypothesis composes random growth expressions (a result or an InputError, quickly).

Hostile templates render in a worker process (TemplateWorker): one that runs away is killed at its deadline
instead of holding this process's GIL, and an address-space cap turns a runaway allocation into an error."""

import json
import os
import select
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from markbase.chat_template import render
from markbase.template_sandbox import tojson
from markbase.testing.tokenizer_build import chat_template

# A quarter of the other targets' count: many examples run a render to its budget's end (~0.1 s each);
# --fuzz-long runs 2,500.
EXAMPLES = int(os.environ.get("MARKBASE_FUZZ_EXAMPLES", "2000")) // 4
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=timedelta(seconds=10),
                suppress_health_check=list(HealthCheck))
DEADLINE_S = 10                 # a hostile render must end this soon (on a loaded 2-core CI machine)
PEAK_LIMIT = 300 * 2**20        # and grow the heap (or the worker's peak RSS) by less than this
ADDRESS_HEADROOM = 3 * 2**30    # past this a runaway allocation fails instead of swapping the machine
OUTPUT_BUDGET = "chat template exceeded its output budget"
WORK_BUDGET = "chat template exceeded its work budget"

WORKER = textwrap.dedent("""
    import json, os, resource, sys, time, tracemalloc, warnings
    import markbase as mb
    from markbase.chat_template import render

    if os.path.exists("/proc/self/statm"):
        with open("/proc/self/statm") as fh:
            size = int(fh.read().split()[0]) * resource.getpagesize()
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        cap = size + int(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))
    warnings.simplefilter("ignore", SyntaxWarning)  # jinja2 compiling `3[::-1]` and the like
    rss_unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for line in sys.stdin:
        request = json.loads(line)
        if request["trace_heap"]:  # tracemalloc slows calls tenfold: only where memory is at stake
            tracemalloc.start()
        start = time.monotonic()
        try:
            reply = {"kind": "result", "length": len(render(request["template"], [{"role": "user", "content": "hi"}]))}
        except mb.InputError as e:
            reply = {"kind": "InputError", "message": str(e)}
        except BaseException as e:
            reply = {"kind": type(e).__name__, "message": str(e)}
        reply["seconds"] = time.monotonic() - start
        reply["heap_peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        reply["rss_growth"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline) * rss_unit
        print(json.dumps(reply), flush=True)
""")


class TemplateWorker:
    """A process rendering templates one at a time, restarted when a render misses its deadline."""

    def __init__(self):
        self.process = None

    def _start(self):
        self.process = subprocess.Popen([sys.executable, "-c", WORKER, str(ADDRESS_HEADROOM)], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def stop(self):
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def render(self, template: str, trace_heap: bool = False) -> dict:
        """{"kind": "result" | "InputError" | another exception's name, "message", "seconds", "heap_peak",
        "rss_growth"}; fails the test if the render has not ended within DEADLINE_S."""
        if self.process is None:
            self._start()
        self.process.stdin.write(json.dumps({"template": template, "trace_heap": trace_heap}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], DEADLINE_S + 5)  # + the worker's start
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.stop()
            pytest.fail(f"the render did not end within {DEADLINE_S} s (or its worker died): {template[:200]!r}")
        return json.loads(line)


@pytest.fixture(scope="module")
def worker():
    w = TemplateWorker()
    yield w
    w.stop()


NS_DOUBLING = ("{% set ns = namespace(s='a') %}{% for i in range(33) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
               "{{ ns.s|length }}")
# The bypasses of issue 38 item 7 and their relatives: each once grew past gigabytes or ran for hours.
HOSTILE = {
    "ljust": ("{{ 'a'.ljust(10**10)|length }}", OUTPUT_BUDGET),
    "rjust": ("{{ 'a'.rjust(10**9)|length }}", OUTPUT_BUDGET),
    "center": ("{{ 'a'.center(10**9)|length }}", OUTPUT_BUDGET),
    "zfill": ("{{ '1'.zfill(10**9)|length }}", OUTPUT_BUDGET),
    "format width": ("{{ '{:>9999999999}'.format(1)|length }}", OUTPUT_BUDGET),
    "format nested width": ("{{ '{:>{}}'.format(1, 10**9)|length }}", OUTPUT_BUDGET),
    "percent width": ("{{ ('%9999999999d' % 1)|length }}", OUTPUT_BUDGET),
    "percent star width": ("{{ ('%*d' % (10**9, 1))|length }}", OUTPUT_BUDGET),
    "percent precision": ("{{ ('%.999999999f' % 1.0)|length }}", OUTPUT_BUDGET),
    "format filter width": ("{{ '%999999999d'|format(1)|length }}", OUTPUT_BUDGET),
    "replace blow-up": ("{% set s = 'a' * 10**6 %}{{ s.replace('a', s)|length }}", OUTPUT_BUDGET),
    "replace filter blow-up": ("{% set s = 'a' * 10**6 %}{{ s|replace('a', s)|length }}", OUTPUT_BUDGET),
    "expandtabs": ("{{ ('\t' * 10**4).expandtabs(10**6)|length }}", OUTPUT_BUDGET),
    "translate": ("{{ ('a' * 10**4).translate({97: 'b' * 10**6})|length }}", OUTPUT_BUDGET),
    "namespace doubling": (NS_DOUBLING, OUTPUT_BUDGET),
    "+ doubling": ("{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                   OUTPUT_BUDGET),
    "~ doubling": ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s ~ 'x' %}"
                   "{% endfor %}", OUTPUT_BUDGET),
    "list doubling": ("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
                      OUTPUT_BUDGET),
    "join of a huge repeated list": ("{{ (['x' * 10**6] * 10**4)|join|length }}", OUTPUT_BUDGET),
    "str.join of a huge repeated list": ("{{ ''.join(['x' * 10**6] * 10**4)|length }}", OUTPUT_BUDGET),
    "join separator": ("{{ ([1] * 10**5)|join('x' * 10**4)|length }}", OUTPUT_BUDGET),
    "indent width": ("{{ ('a\n' * 10**3)|indent(10**6)|length }}", OUTPUT_BUDGET),
    "center filter": ("{{ 'a'|center(10**10)|length }}", OUTPUT_BUDGET),
    "wordwrap separator": ("{{ ('a ' * 10**5)|wordwrap(1, wrapstring='x' * 10**4)|length }}", OUTPUT_BUDGET),
    "tojson indent": ("{{ ([[[[1]]]] * 10**4)|tojson(indent=10**6)|length }}", OUTPUT_BUDGET),
    "batch fill": ("{{ [1]|batch(10**9, 0)|list|length }}", OUTPUT_BUDGET),
    "output size": ("{% for i in range(10**4) %}{{ 'x' * 10**6 }}{% endfor %}", OUTPUT_BUDGET),
    "template text in a loop": ("{% for i in range(10**6) %}" + "A" * 10_000 + "{% endfor %}", OUTPUT_BUDGET),
    "macro text in a loop": ("{% macro m() %}" + "A" * 10_000 + "{% endmacro %}"
                             "{% for i in range(10**6) %}{% set x = m() %}{% endfor %}", OUTPUT_BUDGET),
    "repeated 10^7 strings": ("{% for i in range(10**3) %}{% set x = 'x' * 10**7 %}{% endfor %}", OUTPUT_BUDGET),
    "shared structure printed": ("{% set a = ['x' * 1000] * 10 %}{% set b = [a] * 10 %}{% set c = [b] * 10 %}"
                                 "{% set d = [c] * 10 %}{% set e = [d] * 10 %}{{ [e] * 10 }}", OUTPUT_BUDGET),
    "shared structure as json": ("{% set a = ['x' * 1000] * 10 %}{% set b = [a] * 100 %}{% set c = [b] * 100 %}"
                                 "{{ c|tojson }}", OUTPUT_BUDGET),
    "shared structure ~": ("{% set a = ['x' * 1000] * 10 %}{% set b = [a] * 100 %}{% set c = [b] * 100 %}"
                           "{{ (c ~ '')|length }}", OUTPUT_BUDGET),
    "integer tower": ("{% set ns = namespace(x=2**4096) %}{% for i in range(4) %}{% set ns.x = ns.x ** 4096 %}"
                      "{% endfor %}", OUTPUT_BUDGET),
    "integer squaring": ("{% set ns = namespace(x=2**60) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
                         "{% endfor %}", OUTPUT_BUDGET),
    "to_bytes": ("{{ (1).to_bytes(10**9, 'big')|length }}", OUTPUT_BUDGET),
    "strftime expansion": ("{{ strftime_now('%c' * 10**7)|length }}", OUTPUT_BUDGET),
    "split into many strings": ("{{ ('ab ' * 9 * 10**6).split()|length }}", OUTPUT_BUDGET),
    # Time: loops, recursion and scans are bounded by the work budget.
    "nested loops over a string": ("{% set s = 'x' * 10**5 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
                                   WORK_BUDGET),
    "recursive macro": ("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
                        WORK_BUDGET),
    "search in a loop": ("{% set s = 'x' * 10**7 %}{% for i in range(10**6) %}{% if 'q' in s %}{% endif %}{% endfor %}",
                         WORK_BUDGET),
    "lipsum": ("{{ lipsum(1, false, 10**8, 10**8 + 1)|length }}", WORK_BUDGET),
    "quadratic sum": ("{% set l = [1] * 10**4 %}{{ ([l] * 10**4)|sum(start=[])|length }}", WORK_BUDGET),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_template_is_refused_quickly_in_bounded_memory(worker, case):
    template, budget = HOSTILE[case]
    reply = worker.render(template, trace_heap=budget == OUTPUT_BUDGET)
    assert reply["kind"] == "InputError", f"{case}: expected an InputError, got {reply}"[:500]
    assert budget in reply["message"]
    assert reply["seconds"] < DEADLINE_S
    assert reply["heap_peak"] < PEAK_LIMIT, f"{case}: the Python heap peaked at {reply['heap_peak'] / 2**20:.0f} MB"


def test_attribute_reads_in_a_loop_are_bounded(worker):
    template = "{% set ns = namespace(a=1) %}{% for i in range(10**6) %}" + "{{ ns.a }}" * 300 + "{% endfor %}"
    reply = worker.render(template)
    assert reply["kind"] == "InputError" and WORK_BUDGET in reply["message"]
    assert reply["seconds"] < DEADLINE_S


def test_budget_is_per_render():
    # Renders near the budget leave the next one its full budget.
    near = "{% for i in range(5) %}{% set x = 'x' * 5 * 10**6 %}{% endfor %}ok"
    for _ in range(3):
        assert render(near, [{"role": "user", "content": "hi"}]) == "ok"


def reference_render(template: str, **variables) -> str:
    """transformers' environment without the budget: what a real template must still produce."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    return env.from_string(template).render(**variables)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
CONVERSATIONS = {
    "tools": [{"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Weather?"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
              {"role": "tool", "name": "get_weather", "content": "sunny"}],
    "2000 turns": [{"role": ("user", "assistant")[i % 2], "content": f"<|channel>thought\nhm<channel|>turn {i}"}
                   for i in range(2000)],
    "a 2 MB message": [{"role": "user", "content": "word " * 400_000}],
    "a 2 MB answer with thoughts": [{"role": "user", "content": "q"}, {"role": "assistant", "content": (
        "<|channel>thought\nhm<channel|>" + "word " * 130_000) * 3}],
}


@pytest.mark.parametrize("empty_thought", [False, True])
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
def test_gemma_template_renders_as_before(conversation, empty_thought):
    template = chat_template(empty_thought)
    messages = CONVERSATIONS[conversation]
    variables = dict(messages=messages, tools=TOOLS, add_generation_prompt=True, bos_token="<bos>",
                     enable_thinking=True)
    assert render(template, messages, tools=TOOLS, special_tokens={"bos_token": "<bos>"},
                  enable_thinking=True) == reference_render(template, **variables)


# -- Hypothesis: random growth expressions -----------------------------------------------------------------

SIZES = st.one_of(st.integers(0, 64), st.sampled_from([10**3, 10**5, 10**6, 10**7, 10**9, 10**12, -5]))
SEEDS = st.sampled_from(["'ab'", "'é\\n'", "'{}'", "'%s'", "'\\t'", "[1, 'x']", "ns.s", "s", "3", "2.5", "none"])


def grow(expr: st.SearchStrategy) -> st.SearchStrategy:
    """An expression that may grow `expr` (or combine two of them) by a random amount."""
    n = SIZES.map(str)
    return st.one_of(
        st.tuples(expr, expr).map(lambda p: f"({p[0]} ~ {p[1]})"),
        st.tuples(expr, expr).map(lambda p: f"({p[0]} + {p[1]})"),
        st.tuples(expr, n).map(lambda p: f"({p[0]} * {p[1]})"),
        st.tuples(expr, n).map(lambda p: f"({p[0]} ** {p[1]})"),
        st.tuples(st.sampled_from(["ljust", "rjust", "center", "zfill", "expandtabs"]), expr, n)
          .map(lambda p: f"{p[1]}.{p[0]}({p[2]})"),
        st.tuples(expr, expr).map(lambda p: f"{p[0]}.replace('a', {p[1]})"),
        st.tuples(expr, expr).map(lambda p: f"{p[0]}.join({p[1]})"),
        st.tuples(expr, n).map(lambda p: f"('{{:>{p[1]}}}'.format({p[0]}))"),
        st.tuples(expr, n).map(lambda p: f"('%{p[1]}s' % ({p[0]},))"),
        st.tuples(expr, n).map(lambda p: f"[{p[0]}] * {p[1]}"),
        st.tuples(st.sampled_from(["center", "indent", "batch", "slice", "truncate"]), expr, n)
          .map(lambda p: f"({p[1]}|{p[0]}({p[2]}))"),
        st.tuples(st.sampled_from(["string", "tojson", "list", "upper", "trim", "e", "pprint", "wordcount",
                                   "reverse", "sort", "unique", "sum", "length"]), expr)
          .map(lambda p: f"({p[1]}|{p[0]})"),
        st.tuples(expr, expr).map(lambda p: f"({p[0]}|join({p[1]}))"),
        st.tuples(expr, expr).map(lambda p: f"({p[0]}|replace('a', {p[1]}))"),
        expr.map(lambda e: f"{e}.split()"),
        expr.map(lambda e: f"{e}[::-1]"),
    )


EXPRESSIONS = st.recursive(SEEDS, grow, max_leaves=6)
TEMPLATES = st.one_of(
    EXPRESSIONS.map(lambda e: "{% set s = 'abc' %}{% set ns = namespace(s='a') %}{{ " + e + " }}"),
    st.tuples(SIZES, EXPRESSIONS).map(lambda p: (
        "{% set s = 'abc' %}{% set ns = namespace(s='a') %}{% for i in range(" + str(p[0]) + ") %}"
        "{% set ns.s = " + p[1] + " %}{% endfor %}{{ ns.s|length }}")),
)


@FUZZ
@given(TEMPLATES)
def test_random_growth_ends_in_a_result_or_an_input_error(worker, template):
    reply = worker.render(template)
    assert reply["kind"] in ("result", "InputError"), f"{reply['kind']}: {reply['message']}"[:500]
    assert reply["seconds"] < DEADLINE_S
    assert reply["rss_growth"] < PEAK_LIMIT, f"the worker's peak RSS grew by {reply['rss_growth'] / 2**20:.0f} MB"
