"""Chat templates rendered the way transformers' `apply_chat_template` renders them.

Same jinja2 environment (sandboxed, trim_blocks, lstrip_blocks, loopcontrols), same helpers
(`raise_exception`, `strftime_now`, a `tojson` that does not HTML-escape) and the same variables
(`messages`, `tools`, `documents`, `add_generation_prompt`, `bos_token`, `eos_token`, … plus any extra
keyword such as `enable_thinking`). Each render runs on a budget of output and work (template_sandbox).
"""

from __future__ import annotations

import functools
from typing import Any

from ._core import CheckpointError, InputError

ROLES = ("system", "developer", "user", "assistant", "model", "tool")
CONTENT_TYPES = ("text", "image", "audio", "video")


@functools.lru_cache(maxsize=16)
def compile_template(source: str):
    import jinja2

    from .template_sandbox import make_environment, start_budget  # jinja2 is imported on first use

    start_budget()  # compiling folds constant expressions
    try:
        return make_environment().from_string(source)
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

    from .template_sandbox import BudgetExceeded, start_budget

    template = compile_template(source)
    start_budget()
    try:
        return template.render(messages=messages, tools=tools, documents=documents,
                               add_generation_prompt=add_generation_prompt, **(special_tokens or {}), **kwargs)
    except BudgetExceeded as e:
        raise InputError(str(e)) from None
    except jinja2.exceptions.TemplateError as e:
        raise InputError(f"chat template: {e}") from None
    except Exception as e:  # noqa: BLE001 - a template runs arbitrary (sandboxed) expressions: any error is its own
        raise InputError(f"chat template failed: {type(e).__name__}: {e}") from None
