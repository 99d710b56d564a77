"""Tool calls in Gemma 4's output, parsed into OpenAI `tool_calls` (spec §8.2).

The model writes `<|tool_call>call:NAME{ARGS}<tool_call|>`, ARGS in Gemma's own object syntax: unquoted
keys, strings between `<|"|>` delimiters, numbers, true / false / null, nested {…} and […]
(`{location:<|"|>Paris<|"|>,days:3}`); some templates write plain JSON, which parses too. After its calls
the model emits `<|tool_response>` (an eos id) to hand control back to the caller.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

CALL_OPEN, CALL_CLOSE = "<|tool_call>", "<tool_call|>"
STRING_DELIM = '<|"|>'
MAX_DEPTH = 64  # how deeply JSON markbase reads may nest: call arguments, and any request body (serve/protocol.py)
_NAME_CHARS = r"A-Za-z0-9_.\-"
# A tool's name: OpenAI's (letters, digits, _ and -, at most 64) or with dots, all of which the parser reads back.
TOOL_NAME = re.compile(rf"[{_NAME_CHARS}]{{1,64}}")
_NAME = re.compile(rf"call:([{_NAME_CHARS}]+)")
_KEY = re.compile(r"[A-Za-z_][\w\-]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")


@dataclass
class ToolCall:
    name: str
    arguments: dict  # JSON-serialisable


class _Syntax(ValueError):
    pass


class _Parser:
    def __init__(self, text: str):
        self.s, self.i = text, 0
        self.depth = 0  # objects and arrays open at self.i

    def error(self, what: str) -> _Syntax:
        return _Syntax(f"{what} at offset {self.i}")

    def skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self):
        self.skip_ws()
        s, i = self.s, self.i
        if s.startswith(STRING_DELIM, i):
            end = s.find(STRING_DELIM, i + len(STRING_DELIM))
            if end < 0:
                raise self.error("unterminated string")
            self.i = end + len(STRING_DELIM)
            return s[i + len(STRING_DELIM):end]
        if i < len(s) and s[i] == '"':
            try:
                value, end = json.JSONDecoder().raw_decode(s, i)
            except ValueError:
                raise self.error("bad JSON string") from None
            self.i = end
            return value
        if i < len(s) and s[i] in "{[":
            if self.depth >= MAX_DEPTH:
                raise self.error(f"arguments nested more than {MAX_DEPTH} deep")
            self.depth += 1
            value = self.obj() if s[i] == "{" else self.array()
            self.depth -= 1
            return value
        for word, value in (("true", True), ("false", False), ("null", None)):
            if s.startswith(word, i):
                self.i += len(word)
                return value
        m = _NUMBER.match(s, i)
        if m:
            self.i = m.end()
            text = m.group(0)
            if not any(c in text for c in ".eE"):
                return int(text)  # (ValueError past Python's 4300 digits: a malformed call)
            if not math.isfinite(float(text)):
                raise self.error("a number too large for JSON")
            return float(text)
        raise self.error("expected a value")

    def expect(self, ch: str) -> None:
        self.skip_ws()
        if not self.s.startswith(ch, self.i):
            raise self.error(f"expected {ch!r}")
        self.i += 1

    def obj(self) -> dict:
        self.expect("{")
        out: dict = {}
        self.skip_ws()
        if self.s.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            self.skip_ws()
            if self.s.startswith('"', self.i) or self.s.startswith(STRING_DELIM, self.i):
                key = self.value()
            else:
                m = _KEY.match(self.s, self.i)
                if not m:
                    raise self.error("expected a key")
                key, self.i = m.group(0), m.end()
            self.expect(":")
            out[str(key)] = self.value()
            self.skip_ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            self.expect("}")
            return out

    def array(self) -> list:
        self.expect("[")
        out: list = []
        self.skip_ws()
        if self.s.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.skip_ws()
            if self.s.startswith(",", self.i):
                self.i += 1
                continue
            self.expect("]")
            return out


def parse_call(body: str) -> ToolCall:
    """One call's text between the delimiters, `call:NAME{ARGS}`. ValueError when malformed."""
    body = body.strip()
    m = _NAME.match(body)
    if not m:
        raise ValueError(f"tool call does not start with call:NAME: {body[:80]!r}")
    p = _Parser(body)
    p.i = m.end()
    p.skip_ws()
    args = p.obj() if p.i < len(body) else {}
    p.skip_ws()
    if p.i != len(body):
        raise ValueError(f"tool call {m.group(1)!r}: unexpected text after the arguments at offset {p.i}")
    return ToolCall(m.group(1), args)


def split_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """(the text with every well-formed call removed, the calls in order). A malformed or unterminated
    call is left in the text as written: the caller sees what the model wrote rather than a guess."""
    calls: list[ToolCall] = []
    out, pos = [], 0
    while True:
        start = text.find(CALL_OPEN, pos)
        if start < 0:
            break
        end = text.find(CALL_CLOSE, start)
        if end < 0:
            break
        try:
            calls.append(parse_call(text[start + len(CALL_OPEN):end]))
        except ValueError:
            out.append(text[pos:end + len(CALL_CLOSE)])
        else:
            out.append(text[pos:start])
        pos = end + len(CALL_CLOSE)
    out.append(text[pos:])
    return "".join(out).strip() if calls else "".join(out), calls
