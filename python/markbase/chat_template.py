"""Chat templates rendered the way transformers' `apply_chat_template` renders them.

Same jinja2 environment (sandboxed, trim_blocks, lstrip_blocks, loopcontrols), same helpers
(`raise_exception`, `strftime_now`, a `tojson` that does not HTML-escape) and the same variables
(`messages`, `tools`, `documents`, `add_generation_prompt`, `bos_token`, `eos_token`, … plus any extra
keyword such as `enable_thinking`).
"""

from __future__ import annotations

import functools
import json
import threading
from datetime import datetime
from typing import Any

from ._core import CheckpointError, InputError

ROLES = ("system", "developer", "user", "assistant", "model", "tool")
CONTENT_TYPES = ("text", "image", "audio", "video")


def _environment():
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    def bounded_range(*args):
        # The sandbox caps one range at 10^5 items; this caps every range of a render together, so nested
        # loops in a hostile template end with an error instead of running for hours.
        for x in range(*args):
            _render_budget.steps -= 1
            if _render_budget.steps < 0:
                raise jinja2.exceptions.TemplateError(f"more than {MAX_RANGE_STEPS} range() loop steps in one render")
            yield x

    class Sandbox(ImmutableSandboxedEnvironment):
        # `[1] * 10**9` or `2 ** 10**9` would take gigabytes or hours: sizes are checked before computing.
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context, operator, left, right):
            from jinja2.exceptions import SecurityError

            if operator == "**" and isinstance(right, (int, float)) and not isinstance(right, bool) and abs(right) > 4096:
                raise SecurityError(f"chat template: exponent {right} is too large")
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * max(n, 0) > MAX_PRODUCT:
                        raise SecurityError(f"chat template: a sequence repeated {n} times is too long")
            return super().call_binop(context, operator, left, right)

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["range"] = bounded_range
    return env


MAX_RANGE_STEPS = 10**6  # range() items one render may walk (real templates use a handful)
MAX_PRODUCT = 10**7      # items (or characters) a `seq * n` in a template may produce
_render_budget = threading.local()


@functools.lru_cache(maxsize=16)
def compile_template(source: str):
    import jinja2

    try:
        return _environment().from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise CheckpointError(f"chat template does not parse: {e.message} (line {e.lineno})") from None
    except (RecursionError, MemoryError, ValueError, TypeError) as e:  # pathological nesting and the like
        raise CheckpointError(f"chat template does not compile: {type(e).__name__}: {e}") from None


def check_messages(messages: Any, allowed_media: set[str] | None = None) -> list[dict]:
    """Validates messages in the transformers chat format; InputError names the message and field."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InputError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InputError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise InputError(f"messages[{i}]: unknown role {role!r} (expected one of {', '.join(ROLES)})")
        content = m.get("content")
        if content is None and role == "assistant" and m.get("tool_calls"):
            continue
        if isinstance(content, str):
            continue
        if not isinstance(content, (list, tuple)):
            raise InputError(f"messages[{i}]: content must be a string or a list of parts")
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in CONTENT_TYPES:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise InputError(f"messages[{i}].content[{j}]: unknown content type {kind!r} "
                                 f"(expected one of {', '.join(CONTENT_TYPES)})")
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise InputError(f"messages[{i}].content[{j}]: a text part needs a string 'text'")
            if part["type"] != "text" and allowed_media is not None and part["type"] not in allowed_media:
                raise InputError(f"messages[{i}].content[{j}]: this checkpoint has no {part['type']} input")
    return [dict(m) for m in messages]


def render(source: str, messages: list[dict], *, add_generation_prompt: bool = True, tools: list | None = None,
           documents: list | None = None, special_tokens: dict[str, str] | None = None, **kwargs) -> str:
    import jinja2

    template = compile_template(source)
    _render_budget.steps = MAX_RANGE_STEPS
    try:
        return template.render(messages=messages, tools=tools, documents=documents,
                               add_generation_prompt=add_generation_prompt, **(special_tokens or {}), **kwargs)
    except jinja2.exceptions.TemplateError as e:
        raise InputError(f"chat template: {e}") from None
    except Exception as e:  # noqa: BLE001 - a template runs arbitrary (sandboxed) expressions: any error is its own
        raise InputError(f"chat template failed: {type(e).__name__}: {e}") from None
