"""MSL rules that metal-sim cannot see, checked on the kernel bundle as Apple's compiler would read it.

metal-sim compiles the kernels as C++20 with the address spaces erased (`device`, `threadgroup`, `thread`,
`constant` are empty macros there), so code that Metal's compiler rejects, or compiles with other semantics,
passes every sim test. This test preprocesses the bundled source (scripts/bundle_metal_sources.py) with
__METAL_VERSION__ defined, exactly as test_metal_bundle.py does, and scans the Apple-world token stream for
the constructs of that kind that matter most (RULES below, each with its source in the MSL specification).
Findings name the original file and line (the bundle's #line directives; a kernel stamped out by a macro is
reported at the macro's invocation).

It is a lexical check, not a compiler: it cannot see type errors (a threadgroup pointer passed where a
thread pointer is expected, say); it requires every pointer / reference parameter to spell its address
space, so such a mismatch at least has to be written out.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from .toolchain import METAL_DIR, apple_preprocess, bundle

RULES = {
    "threadgroup-scope": "a threadgroup variable outside a kernel function's body: MSL allocates threadgroup "
                         "variables only in kernel (mesh, object) functions (MSL spec 4.4) and never at program "
                         "scope; declare it in the kernel with MB_THREADGROUP and pass a `threadgroup T*`",
    "program-scope": "a program-scope variable must be in the constant address space and initialised "
                     "(MSL spec 4.2): `constant T name = ...;` or `constexpr constant T name = ...;`",
    "static-local": "a static variable in a function: program-lifetime storage outside the constant address "
                    "space (MSL spec 4.2); use a program-scope `constant` or a local",
    "address-space": "a pointer or reference parameter without an address space: MSL reads it as `thread`, "
                     "metal-sim accepts any memory; write DEVICE_PTR(T) / threadgroup / thread / constant",
    "template-kernel": "a kernel function template: MSL needs [[host_name]] and an explicit instantiation for "
                       "each; stamp out one non-template kernel per type with a macro instead",
    "cxx-feature": "a C++ feature MSL 3.1 does not have (MSL spec 1.5.4: C++14 without lambdas (3.2+), "
                   "dynamic_cast, typeid, new / delete, noexcept, goto, register, thread_local, virtual, "
                   "derived classes, exceptions and the C++ standard library; C++17 features are absent)",
    "double": "MSL has no double, long long or long double (MSL spec 2.1)",
    "float-literal": "an unsuffixed floating literal: double arithmetic in metal-sim, float in MSL, so the two "
                     "worlds round differently; write 1.0f (or half(1.0f))",
    "threadgroup-atomic-float": "atomic_float in threadgroup memory: MSL 3.x supports atomic add / sub on "
                                "atomic_float only in device memory (MSL spec 6.15.4.5)",
    "fp-contract": "FP contraction must stay off in the bundle (kernel_common.h: #pragma METAL fp "
                   "contract(off)); fast math off alone leaves a*b + c free to become one fma (MSL spec 1.6.3)",
}

ADDRESS_SPACES = {"device", "threadgroup", "thread", "constant", "threadgroup_imageblock", "ray_data", "object_data"}
BANNED_WORDS = {"goto", "virtual", "try", "catch", "throw", "dynamic_cast", "typeid", "thread_local", "register",
                "noexcept", "new", "delete"}
CONTROL = {"if", "for", "while", "switch", "else", "do", "return"}

TOKEN_RE = re.compile(r"""
    (?P<num>(?:0[xX][0-9a-fA-F.]*(?:[pP][-+]?\d+)?|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)\w*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<op>::|->|\.\.\.|==|!=|<=|>=|&&|\|\||\+\+|--|[-+*/%&|^!~<>=?:;,.(){}\[\]\#@$\\])
  | (?P<space>\s+)
""", re.X)
LINEMARKER_RE = re.compile(r'^#\s*(?:line\s+)?(\d+)\s+"([^"]*)"')
PRAGMA_RE = re.compile(r"^\s*#\s*pragma\s+(.*)$")


@dataclass
class Tok:
    text: str
    kind: str
    where: str


@dataclass(frozen=True)
class Finding:
    rule: str
    where: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where}: [{self.rule}] {self.detail}"


def tokenize(text: str) -> tuple[list[Tok], list[tuple[str, str]]]:
    """Tokens of clang -E output (with linemarkers) and its #pragma lines, each with its original file:line."""
    toks, pragmas = [], []
    file, line = "?", 0
    for raw in text.splitlines():
        m = LINEMARKER_RE.match(raw)
        if m:
            file, line = Path(m.group(2)).name, int(m.group(1))
            continue
        where = f"{file}:{line}"
        line += 1
        p = PRAGMA_RE.match(raw)
        if p:
            pragmas.append((" ".join(p.group(1).split()), where))
            continue
        if raw.lstrip().startswith("#"):
            continue
        pos = 0
        while pos < len(raw):
            m = TOKEN_RE.match(raw, pos)
            if not m:
                raise AssertionError(f"{where}: cannot tokenize {raw[pos:pos + 20]!r}")
            pos = m.end()
            if m.lastgroup != "space":
                toks.append(Tok(m.group(), m.lastgroup, where))
    return toks, pragmas


def strip_attributes(toks: list[Tok]) -> list[Tok]:
    """Drops [[...]] attribute lists (their contents are not code)."""
    out, i = [], 0
    while i < len(toks):
        if toks[i].text == "[" and i + 1 < len(toks) and toks[i + 1].text == "[":
            depth = 0
            while i < len(toks):
                depth += {"[": 1, "]": -1}.get(toks[i].text, 0)
                i += 1
                if depth == 0:
                    break
            continue
        out.append(toks[i])
        i += 1
    return out


def top_level_split(toks: list[Tok], sep: str) -> list[list[Tok]]:
    """Splits at `sep` outside (), [], {} and <> (the last only for template arguments in declarations)."""
    parts, cur, depth = [], [], 0
    for t in toks:
        if t.text in ("(", "[", "{", "<"):
            depth += 1
        elif t.text in (")", "]", "}", ">"):
            depth -= 1
        if t.text == sep and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return parts


def after_template(toks: list[Tok]) -> list[Tok]:
    """The declaration after its `template <...>` headers (the list itself when there are none)."""
    i = 0
    while i + 1 < len(toks) and toks[i].text == "template" and toks[i + 1].text == "<":
        depth, i = 0, i + 1
        while i < len(toks):
            depth += {"<": 1, ">": -1}.get(toks[i].text, 0)
            i += 1
            if depth == 0:
                break
    return toks if i == 0 else toks[i:]


def depth0_index(toks: list[Tok], text: str) -> int:
    depth = 0
    for i, t in enumerate(toks):
        if t.text == text and depth == 0:
            return i
        if t.text in ("(", "[", "{"):
            depth += 1
        elif t.text in (")", "]", "}"):
            depth -= 1
    return -1


class Scanner:
    def __init__(self, toks: list[Tok], pragmas: list[tuple[str, str]]):
        self.toks = strip_attributes(toks)
        self.pragmas = pragmas
        self.findings: list[Finding] = []
        self.kernels: list[str] = []  # every kernel function whose body the scope walk entered

    def add(self, rule: str, tok: Tok, detail: str) -> None:
        self.findings.append(Finding(rule, tok.where, detail))

    # ---- rules on single tokens and short sequences (anywhere) ----
    def scan_tokens(self) -> None:
        toks = self.toks
        for i, t in enumerate(toks):
            prev = toks[i - 1].text if i else ""
            nxt = toks[i + 1].text if i + 1 < len(toks) else ""
            if t.kind == "num":
                body = t.text.lower()
                if body.startswith("0x"):
                    if "p" in body or "." in body:
                        self.add("cxx-feature", t, f"hexadecimal floating literal {t.text} (C++17)")
                elif re.fullmatch(r"(\d+\.?\d*|\.\d+)(e[-+]?\d+)?", body) and ("." in body or "e" in body):
                    self.add("float-literal", t, f"{t.text}")
            elif t.kind == "id":
                if t.text in BANNED_WORDS and not (t.text in ("new", "delete") and prev in ("operator", "=")):
                    self.add("cxx-feature", t, f"`{t.text}`")
                elif t.text == "double":
                    self.add("double", t, "`double`")
                elif t.text == "long" and nxt in ("long", "double"):
                    self.add("double", t, f"`long {nxt}`")
                elif t.text == "if" and nxt == "constexpr":
                    self.add("cxx-feature", t, "`if constexpr` (C++17)")
                elif t.text == "std" and nxt == "::":
                    self.add("cxx-feature", t, "the C++ standard library (`std::`)")
                elif t.text == "auto" and (nxt == "[" or nxt in ("&", "&&") and i + 2 < len(toks) and
                                           toks[i + 2].text == "["):
                    self.add("cxx-feature", t, "structured binding (C++17)")
                elif t.text in ("struct", "class") and i + 2 < len(toks) and toks[i + 1].kind == "id" and \
                        toks[i + 2].text == ":" and prev not in ("<", ",", "enum"):
                    self.add("cxx-feature", t, f"derived class `{toks[i + 1].text}`")
                elif t.text == "threadgroup" and nxt == "atomic_float":
                    self.add("threadgroup-atomic-float", t, "`threadgroup atomic_float`")
            elif t.text == "[" and self.is_lambda(i):
                self.add("cxx-feature", t, "lambda expression (MSL 3.2 and later)")

    def is_lambda(self, i: int) -> bool:
        """`[captures](...)` / `[captures]{...}` where `[` cannot be a subscript or an array declarator."""
        toks = self.toks
        prev = toks[i - 1] if i else None
        if prev is not None and (prev.kind in ("id", "num", "str") or prev.text in (")", "]")):
            return False
        depth, j = 0, i
        while j < len(toks):
            depth += {"[": 1, "]": -1}.get(toks[j].text, 0)
            if depth == 0:
                break
            j += 1
        return j + 1 < len(toks) and toks[j + 1].text in ("(", "{", "mutable")

    # ---- rules that need the scope: which function (kernel or not) a declaration is in ----
    def scan_scopes(self) -> None:
        # scope: (kind, is_kernel) with kind in file / namespace / class / enum / function
        scopes: list[tuple[str, bool]] = [("file", False)]
        stmt: list[Tok] = []
        paren = 0       # ( and [ depth inside the current statement
        init = 0        # brace-initializer depth inside the current statement
        for t in self.toks:
            kind, kernel = scopes[-1]
            x = t.text
            if x in ("(", "["):
                paren += 1
            elif x in (")", "]"):
                paren -= 1
            if x == "{" and paren == 0:
                if init or self.opens_initializer(stmt, kind):
                    init += 1
                    stmt.append(t)
                    continue
                scopes.append(self.open_scope(stmt, kind, kernel))
                stmt = []
                continue
            if x == "}" and paren == 0:
                if init:
                    init -= 1
                    stmt.append(t)
                    continue
                if stmt:
                    self.statement(stmt, kind, kernel)  # a last statement without `;` (enumerators)
                scopes.pop()
                stmt = []
                continue
            if x == ";" and paren == 0 and not init:
                self.statement(stmt, kind, kernel)
                stmt = []
                continue
            stmt.append(t)

    @staticmethod
    def opens_initializer(stmt: list[Tok], kind: str) -> bool:
        if not stmt:
            return False
        prev = stmt[-1]
        if prev.text in ("=", ",", "(", "return"):
            return True
        if kind in ("file", "namespace", "class"):
            return depth0_index(after_template(stmt), "=") >= 0
        # in a function: `T name{...}` is an initializer, `else {` / `do {` / `) {` open blocks
        return prev.kind == "id" and prev.text not in CONTROL and stmt[0].text not in CONTROL

    def open_scope(self, header: list[Tok], kind: str, kernel: bool) -> tuple[str, bool]:
        if kind in ("function", "block"):
            return ("block", kernel)
        rest = after_template(header)
        words = {t.text for t in rest}
        if "namespace" in words:
            return ("namespace", False)
        paren_at = depth0_index(rest, "(")
        if paren_at > 0:
            is_kernel = any(t.text == "kernel" for t in rest[:paren_at])
            if is_kernel:
                self.kernels.append(rest[paren_at - 1].text)
                if rest is not header:
                    self.add("template-kernel", header[0], f"`{rest[paren_at - 1].text}`")
            if "operator" not in words:
                self.function_header(rest, paren_at)
            return ("function", is_kernel)
        if "enum" in words:
            return ("enum", False)
        return ("class", False)

    def function_header(self, header: list[Tok], paren_at: int) -> None:
        # the parameter list: from `(` to its matching `)`
        depth, end = 0, paren_at
        for end in range(paren_at, len(header)):
            depth += {"(": 1, ")": -1}.get(header[end].text, 0)
            if depth == 0:
                break
        params = header[paren_at + 1:end]
        if not params:
            return
        for p in top_level_split(params, ","):
            eq = depth0_index(p, "=")
            decl = p[:eq] if eq >= 0 else p
            if any(t.text in ("*", "&", "&&") for t in decl) and not any(t.text in ADDRESS_SPACES for t in decl):
                name = header[paren_at - 1].text
                self.add("address-space", decl[0], f"parameter `{' '.join(t.text for t in decl)}` of `{name}`")

    def statement(self, stmt: list[Tok], kind: str, kernel: bool) -> None:
        if not stmt:
            return
        words = [t.text for t in stmt]
        if kind in ("function", "block"):
            if "static" in words:
                self.add("static-local", stmt[0], " ".join(words[:6]))
            if words[0] == "threadgroup" or words[:2] == ["const", "threadgroup"]:
                eq_at = depth0_index(stmt, "=")
                declarator = stmt[:eq_at] if eq_at >= 0 else stmt
                if not any(t.text in ("*", "&") for t in declarator) and not kernel:
                    self.add("threadgroup-scope", stmt[0], " ".join(words[:8]))
            return
        if kind == "enum":
            return
        # file, namespace or class scope: a declaration
        rest = after_template(stmt)
        if not rest or rest[0].text in ("typedef", "using", "static_assert", "friend"):
            return
        words = [t.text for t in rest]
        paren_at = depth0_index(rest, "(")
        eq_at = depth0_index(rest, "=")
        if paren_at >= 0 and (eq_at < 0 or paren_at < eq_at):  # a function declaration
            if any(t.text == "kernel" for t in rest[:paren_at]) and rest is not stmt:
                self.add("template-kernel", stmt[0], f"`{rest[paren_at - 1].text}`")
            if "operator" not in words:
                self.function_header(rest, paren_at)
            return
        if "threadgroup" in words:
            self.add("threadgroup-scope", rest[0], "at program scope: " + " ".join(words[:8]))
            return
        if any(w in ("struct", "class", "enum", "union") for w in words[:2]) and eq_at < 0:
            return  # a forward declaration
        if kind == "class" and "static" not in words:
            return  # a data member
        if "constant" not in words or eq_at < 0:
            what = "static data member" if kind == "class" else "program-scope variable"
            self.add("program-scope", rest[0], f"{what}: " + " ".join(words[:8]))

    def scan_pragmas(self) -> None:
        state = None
        for text, where in self.pragmas:
            norm = text.replace(" ", "").lower()
            if norm.startswith("metalfpcontract(") or norm.startswith("stdcfp_contract"):
                state = (norm in ("metalfpcontract(off)", "stdcfp_contractoff"), where, text)
            elif norm.startswith("metalfpmath_mode(") and norm != "metalfpmath_mode(safe)":
                state = (False, where, text)
        if state is None:
            self.findings.append(Finding("fp-contract", "bundle", "no `#pragma METAL fp contract(off)`"))
        elif not state[0]:
            self.findings.append(Finding("fp-contract", state[1], f"`#pragma {state[2]}` is in force at the end"))

    def run(self) -> list[Finding]:
        self.scan_tokens()
        self.scan_scopes()
        self.scan_pragmas()
        return self.findings


def scan(preprocessed: str) -> list[Finding]:
    return Scanner(*tokenize(preprocessed)).run()


def report(findings: list[Finding]) -> str:
    lines = [str(f) for f in findings]
    for rule in sorted({f.rule for f in findings}):
        lines.append(f"  {rule}: {RULES[rule]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def apple_bundle(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("msl_rules")
    msl, _ = bundle(tmp)
    return apple_preprocess(msl, tmp, linemarkers=True)


def test_bundle_follows_the_msl_rules(apple_bundle):
    findings = scan(apple_bundle)
    assert not findings, "MSL rules broken in the Metal bundle (metal-sim cannot see these):\n" + report(findings)


def test_scanner_sees_every_kernel(apple_bundle):
    # The scope walk must enter every kernel body as a kernel (a mis-parsed brace would hide code).
    scanner = Scanner(*tokenize(apple_bundle))
    scanner.run()
    stamped = re.findall(r"\bkernel\s+void\s+(\w+)\s*\(", apple_bundle)
    assert len(stamped) > 100
    assert scanner.kernels == stamped


# Each snippet is compiled after kernel_common.h / kernel_args.h, as a .metal file would be.
PLANTED = {
    "threadgroup-scope": [
        # a helper template declaring threadgroup memory: legal C++ (the sim), rejected by MSL
        "template <typename T> inline float helper(T v) { MB_THREADGROUP(float, scratch, [32]); "
        "scratch[0] = float(v); return scratch[0]; }",
        "MB_THREADGROUP(float, global_scratch, [32]);",
        "struct Holder { void f() { threadgroup uint n; n = 0; } };",
    ],
    "program-scope": [
        "uint kCount = 4;",
        "device float* g_ptr = 0;",
        "static float kScale = 2.0f;",
        "constant uint kUninitialised;",
        "struct WithStatic { static uint n; };",
    ],
    "static-local": ["inline uint counter() { static uint n = 0; return ++n; }"],
    "address-space": [
        "inline float first(float* p) { return p[0]; }",
        "inline void set(uint& out, uint v) { out = v; }",
        "inline float sum_row(const float* row, uint n);",
        "struct Acc { void add(const float* v) {} };",
    ],
    "template-kernel": [
        "template <typename T> kernel void tmpl_kernel_f32(DEVICE_PTR(T) y [[buffer(0)]], MB_THREAD_POSITION) "
        "{ y[tid.x] = T(0); }",
    ],
    "cxx-feature": [
        "inline float twice(float v) { auto f = [](float x) { return 2.0f * x; }; return f(v); }",
        "inline float g(float v) { auto f = [&]{ return v; }; return f(); }",
        "inline float h(float v) { if (v > 0.0f) goto done; v = 0.0f; done: return v; }",
        "struct Base { float a; }; struct Derived : Base { float b; };",
        "struct Virt { virtual float f() { return 1.0f; } };",
        "template <bool B> inline float pick(float a, float b) { if constexpr (B) return a; else return b; }",
        "inline float hexf() { return 0x1p-24f; }",
        "inline float nolib(float v) { return std::max(v, 0.0f); }",
    ],
    "double": ["inline float widen(float v) { double d = v; return float(d); }",
               "inline long long big() { return 1; }"],
    "float-literal": ["inline float halfof(float v) { return v * 0.5; }",
                      "inline float tiny(float v) { return v + 1e-6; }"],
    "threadgroup-atomic-float": [
        "kernel void tg_atomic_f32(DEVICE_PTR(float) y [[buffer(0)]], MB_THREAD_POSITION) { "
        "MB_THREADGROUP(atomic_float, acc, ); atomic_fetch_add_explicit(&acc, 1.0f, memory_order_relaxed); }",
    ],
    "fp-contract": ["#pragma METAL fp contract(fast)\ninline float f(float a) { return a; }",
                    "#pragma METAL fp math_mode(fast)\ninline float f(float a) { return a; }"],
}

# Legal MSL that looks like the above: none of it may be reported.
CLEAN = [
    "kernel void ok_kernel_f32(DEVICE_PTR(const float) x [[buffer(0)]], DEVICE_PTR(float) y [[buffer(1)]], "
    "constant UnaryArgs& args [[buffer(2)]], MB_THREAD_POSITION) { MB_THREADGROUP(float, tile, [32][33]); "
    "MB_THREADGROUP(atomic_uint, count, ); threadgroup float* row = tile[lidx % 32]; "
    "float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}}; row[0] = acc[0][0] + x[tid.x]; "
    "if (lidx == 0) { atomic_store_explicit(&count, 0u, memory_order_relaxed); } "
    "threadgroup_barrier(mem_flags::mem_threadgroup); y[tid.x] = tile[0][lidx % 33] * args.a; }",
    "constexpr constant uint kA = 32; static constant constexpr uint kB = kA / 4; constant float kT[] = {1.0f, 2.0f};",
    "enum OkEnum : uint { kOne = 1, kTwo = 2 };",
    "struct OkStruct { float a; uint b[4]; static float f(float v, constant UnaryArgs& args) { return v * args.a; } };",
    "inline void ok_helper(threadgroup float* t, thread uint& n, DEVICE_PTR(const half) x, constant UnaryArgs& a) "
    "{ n = uint(t[0] + float(x[0]) + a.b + 1e-3f + 2.5e2f); }",
    "template <typename T, uint N> inline T ok_tmpl(T v) { T a[N]; a[0] = v; return a[0]; }",
    "namespace ok_ns { inline float f(float v) { return v > 0.0f ? v : 0.0f; } }",
    "inline uint ok_hex() { return 0x7fffffffu + 0xEu; }",
]


def preprocess_snippet(snippet: str, tmp_path: Path) -> str:
    src = tmp_path / "snippet.metal"
    src.write_text('#include "kernel_common.h"\n#include "kernel_args.h"\n' + snippet + "\n")
    return apple_preprocess(src, tmp_path, METAL_DIR, linemarkers=True)


@pytest.mark.parametrize("rule, snippet", [(r, s) for r, snippets in PLANTED.items() for s in snippets])
def test_planted_violation_is_caught(rule, snippet, tmp_path):
    findings = scan(preprocess_snippet(snippet, tmp_path))
    assert rule in {f.rule for f in findings}, f"[{rule}] not reported for:\n{snippet}\ngot:\n{report(findings)}"
    assert all(f.where.startswith("snippet.metal:") for f in findings if f.rule == rule)


@pytest.mark.parametrize("snippet", CLEAN)
def test_legal_msl_is_not_reported(snippet, tmp_path):
    findings = scan(preprocess_snippet(snippet, tmp_path))
    assert not findings, f"false positive on legal MSL:\n{snippet}\n{report(findings)}"


def test_planted_violation_in_a_real_header_fails_the_bundle(tmp_path):
    # The case the review was asked about: a helper template in a shared header declaring its own
    # threadgroup scratch compiles and runs in metal-sim, but Metal rejects the whole bundle.
    metal = tmp_path / "metal"
    metal.mkdir()
    for f in list(METAL_DIR.glob("*.metal")) + list(METAL_DIR.glob("*.h")):
        shutil.copy(f, metal / f.name)
    header = metal / "norm_reduce.h"
    header.write_text(header.read_text() + "\nnamespace norm_family {\n"
                      "template <typename T>\n"
                      "inline float scratch_sum(T v) {\n"
                      "  MB_THREADGROUP(float, scratch, [32]);\n"
                      "  scratch[0] = float(v);\n"
                      "  return scratch[0];\n"
                      "}\n}\n")
    msl, _ = bundle(tmp_path, metal_dir=metal)
    findings = scan(apple_preprocess(msl, tmp_path, linemarkers=True))
    line = len(METAL_DIR.joinpath("norm_reduce.h").read_text().splitlines()) + 5  # the MB_THREADGROUP line
    assert [(f.rule, f.where) for f in findings] == [("threadgroup-scope", f"norm_reduce.h:{line}")], report(findings)
