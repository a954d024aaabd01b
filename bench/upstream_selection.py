#!/usr/bin/env python3
"""A deterministic, time-boxed selection of upstream flash-attn's own tests, and its verdict.

Collecting upstream's tests/test_flash_attn.py yields ~508k parametrized cases and imports
flash_attn and a GPU; this script needs neither. It reads the test file's
`@pytest.mark.parametrize` grids with `ast`, builds the node ids the way pytest names them
(the decorator nearest the function first, "-" between parameters, `argname<index>` for values
such as torch.float16), drops the cases the test body skips for its parameters alone (its leading
`if <condition>: pytest.skip()` statements), and draws a seeded sample per test function,
stratified by dtype and causal. The same seed gives the same ids on every machine.

    select --plan full      a sample of every test function (forward and backward, fp16 and
                            bf16, causal and not, varlen, kvcache, several head dims): all must
                            pass (or skip).
    select --plan set --head-dims 32 --dtypes bf16
                            a sample of every test function's cases that a forward + backward
                            set of these head dims and dtypes serves (--per-function each): all
                            must pass (or skip).
    select --plan tailored  for a wheel built with head-dims=128, dtypes=bf16, forward-only:
                            "included" cases, which the kernel set serves and which must pass,
                            and "excluded" cases, which need a left-out kernel and must fail with
                            fa-shim's error (naming the backward pass, the dtype or the head dim).
                            Upstream's only forward-only test, test_flash_attn_kvcache, is
                            fp16-only upstream; the included cases run it from a copy of the test
                            file whose kvcache dtype grid is [torch.bfloat16] (nothing else is
                            changed; its rotary cases are left out: their k-cache check uses
                            rtol=1e-3, an fp16 tolerance).
    judge                   reads pytest's JUnit XML and the plan: a table of outcomes and exit
                            status 1 if any case broke its expectation.

Usage:
    upstream_selection.py select TEST_FILE --plan full --out DIR [--seed 0] [--per-function 30]
    upstream_selection.py judge --plan-file DIR/plan.json --junit X.xml [--junit Y.xml]
    upstream_selection.py count TEST_FILE        (the size of each grid, nothing sampled)
"""

from __future__ import annotations

import argparse
import ast
import collections
import dataclasses
import itertools
import json
import math
import random
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HEAD_DIM_KERNELS = (32, 64, 96, 128, 192, 256)  # HEADDIM_SWITCH: a head dim runs the next one up
FA_SHIM_ERROR = "flash-attn was built by fa-shim without"


class Unknown(Exception):
    """An expression this reader does not evaluate (a call into torch, a global it lacks...)."""


@dataclasses.dataclass(frozen=True)
class Dtype:
    name: str  # "float16", "bfloat16", "float32"

    @property
    def short(self) -> str:
        return {"float16": "fp16", "bfloat16": "bf16"}.get(self.name, self.name)


class _Props:
    """torch.cuda.get_device_properties(...) as upstream's skip conditions read it."""

    def __init__(self, total_memory: int) -> None:
        self.total_memory = total_memory


@dataclasses.dataclass
class Env:
    capability: tuple[int, int] = (9, 0)
    total_memory: int = 80 * 2**30
    globals: dict = dataclasses.field(default_factory=dict)


def evaluate(node: ast.AST, env: Env, local: dict | None = None):
    """A tiny evaluator for parametrize values and skip conditions; Unknown for the rest."""
    local = local or {}
    ev = lambda n: evaluate(n, env, local)  # noqa: E731
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        values = [ev(e) for e in node.elts]
        return values if isinstance(node, ast.List) else tuple(values)
    if isinstance(node, ast.Name):
        if node.id in local:
            return local[node.id]
        if node.id in env.globals:
            return env.globals[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise Unknown(node.id)
    if isinstance(node, ast.Attribute):
        torch_dtype = node.attr in ("float16", "bfloat16", "float32", "half")
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and torch_dtype:
            return Dtype("float16" if node.attr == "half" else node.attr)
        value = ev(node.value)
        if isinstance(value, _Props):
            return getattr(value, node.attr)
        raise Unknown(ast.unparse(node))
    if isinstance(node, ast.IfExp):
        return ev(node.body) if ev(node.test) else ev(node.orelse)
    if isinstance(node, ast.UnaryOp):
        value = ev(node.operand)
        ops = {ast.Not: lambda v: not v, ast.USub: lambda v: -v, ast.UAdd: lambda v: +v}
        return ops[type(node.op)](value)
    if isinstance(node, ast.BoolOp):  # short-circuit, so an unknown right side may not matter
        if isinstance(node.op, ast.And):
            result = True
            for value in node.values:
                result = ev(value)
                if not result:
                    return result
            return result
        result = False
        for value in node.values:
            result = ev(value)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = ev(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = ev(right_node)
            ok = {
                ast.Eq: lambda a, b: a == b,
                ast.NotEq: lambda a, b: a != b,
                ast.Lt: lambda a, b: a < b,
                ast.LtE: lambda a, b: a <= b,
                ast.Gt: lambda a, b: a > b,
                ast.GtE: lambda a, b: a >= b,
                ast.Is: lambda a, b: a is b,
                ast.IsNot: lambda a, b: a is not b,
                ast.In: lambda a, b: a in b,
                ast.NotIn: lambda a, b: a not in b,
            }[type(op)](left, right)
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.BinOp):
        a, b = ev(node.left), ev(node.right)
        ops = {
            ast.Add: lambda: a + b,
            ast.Sub: lambda: a - b,
            ast.Mult: lambda: a * b,
            ast.Pow: lambda: a**b,
            ast.FloorDiv: lambda: a // b,
            ast.Div: lambda: a / b,
            ast.Mod: lambda: a % b,
        }
        if type(node.op) not in ops:
            raise Unknown(ast.unparse(node))
        return ops[type(node.op)]()
    if isinstance(node, ast.Subscript):
        return ev(node.value)[ev(node.slice)]
    if isinstance(node, ast.Call):
        name = ast.unparse(node.func)
        if name in ("max", "min", "abs", "len"):
            return {"max": max, "min": min, "abs": abs, "len": len}[name](
                *[ev(a) for a in node.args]
            )
        if name == "torch.cuda.get_device_properties":
            return _Props(env.total_memory)
        if name == "torch.cuda.get_device_capability":
            return env.capability
        raise Unknown(name)
    raise Unknown(type(node).__name__)


# ------------------------------------------------------------------------- grids and node ids


@dataclasses.dataclass
class Param:
    """One @pytest.mark.parametrize: its argument names and the value tuples, in order."""

    names: tuple[str, ...]
    values: list[tuple]


@dataclasses.dataclass
class TestFunction:
    name: str
    params: list[Param]  # in the order pytest applies them: the nearest decorator first
    runs_backward: bool  # calls torch.autograd.grad or .backward() anywhere in its body
    skips: list[ast.expr]  # conditions of leading `if ...: pytest.skip()` statements
    dtype_decorator_line: int | None  # where its dtype grid is written (1-based), if any

    def size(self) -> int:
        return math.prod(len(p.values) for p in self.params)


def _is_parametrize(dec: ast.expr) -> bool:
    return isinstance(dec, ast.Call) and ast.unparse(dec.func) == "pytest.mark.parametrize"


def _module_globals(tree: ast.Module, env: Env) -> dict:
    """Module-level NAME = <evaluable expression> (is_sm80, MAX_HEADDIM_SM8x...)."""
    out: dict = {}
    env.globals = out
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                try:
                    out[target.id] = evaluate(stmt.value, env)
                except (Unknown, KeyError, TypeError):
                    pass
    return out


def _runs_backward(func: ast.FunctionDef) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name.endswith("autograd.grad") or name.endswith(".backward"):
                return True
    return False


def _leading_skips(func: ast.FunctionDef) -> list[ast.expr]:
    conditions = []
    for stmt in func.body:
        if (
            isinstance(stmt, ast.If)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], ast.Expr)
            and isinstance(stmt.body[0].value, ast.Call)
            and ast.unparse(stmt.body[0].value.func) == "pytest.skip"
            and not stmt.orelse
        ):
            conditions.append(stmt.test)
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        else:
            break
    return conditions


def read_tests(path: Path, env: Env) -> tuple[ast.Module, list[TestFunction]]:
    tree = ast.parse(path.read_text(), str(path))
    _module_globals(tree, env)
    tests = []
    for stmt in tree.body:
        if not (isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("test_")):
            continue
        params, dtype_line = [], None
        for dec in reversed(stmt.decorator_list):  # bottom-up: the order pytest applies them
            if not _is_parametrize(dec):
                if isinstance(dec, (ast.Call, ast.Attribute)):
                    text = ast.unparse(dec)
                    if text.startswith("pytest.mark.") and not text.startswith(
                        ("pytest.mark.parametrize",)
                    ):
                        raise SystemExit(f"{stmt.name}: unsupported decorator {text}")
                continue
            names_node, values_node = dec.args[0], dec.args[1]
            names = tuple(n.strip() for n in evaluate(names_node, env).split(","))
            values = evaluate(values_node, env)
            rows = [tuple(v) if len(names) > 1 else (v,) for v in values]
            params.append(Param(names, rows))
            if names == ("dtype",):
                dtype_line = dec.lineno
        tests.append(
            TestFunction(stmt.name, params, _runs_backward(stmt), _leading_skips(stmt), dtype_line)
        )
    return tree, tests


def _idval(value, argname: str, index: int) -> str:
    """pytest's _idval for the values upstream uses (str/number/bool/None, else argname+index)."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    return f"{argname}{index}"


def param_ids(param: Param) -> list[str]:
    ids = [
        "-".join(_idval(v, n, i) for n, v in zip(param.names, row))
        for i, row in enumerate(param.values)
    ]
    if len(set(ids)) != len(ids):  # pytest would add suffixes; upstream's grids have none
        raise SystemExit(f"duplicate ids in a grid of {param.names}: {ids}")
    return ids


@dataclasses.dataclass
class Case:
    function: str
    node: str  # the id inside the brackets
    params: dict
    digits: tuple[int, ...] = ()  # the row taken from each grid, in the order pytest applies them

    def skipped(self, test: TestFunction, env: Env) -> bool:
        for condition in test.skips:
            try:
                if evaluate(condition, env, self.params):
                    return True
            except Unknown:
                continue  # decided at run time (pytest will report a skip)
        return False


def cases(test: TestFunction) -> itertools.product:
    grids = [list(zip(param_ids(p), p.values)) for p in test.params]
    for digits in itertools.product(*[range(len(g)) for g in grids]):
        params, ids = {}, []
        for grid, param, digit in zip(grids, test.params, digits):
            pid, row = grid[digit]
            ids.append(pid)
            params.update(zip(param.names, row))
        yield Case(test.name, "-".join(ids), params, tuple(digits))


def case_at(test: TestFunction, index: int) -> Case:
    """The index-th case of the grid (mixed radix, the last grid varying fastest), without
    enumerating the grid: kvcache alone has tens of thousands of cases."""
    params, ids = {}, []
    sizes = [len(p.values) for p in test.params]
    digits = []
    for size in reversed(sizes):
        index, digit = divmod(index, size)
        digits.append(digit)
    digits.reverse()
    for param, digit in zip(test.params, digits):
        ids.append(param_ids(param)[digit])
        params.update(zip(param.names, param.values[digit]))
    return Case(test.name, "-".join(ids), params, tuple(digits))


# ---------------------------------------------------------------------------------- kernel sets


def kernel_head_dim(d: int) -> int:
    return next(k for k in HEAD_DIM_KERNELS if k >= d)


@dataclasses.dataclass(frozen=True)
class KernelSet:
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]  # "fp16", "bf16"
    backward: bool

    def missing(self, test: TestFunction, case: Case) -> list[str]:
        """What this case needs that the set left out, as fa-shim's error words it."""
        out = []
        dtype = case.params.get("dtype")
        if isinstance(dtype, Dtype) and dtype.short not in self.dtypes:
            out.append(f"dtype {dtype.short}")
        d = case.params.get("d")
        if d is not None and kernel_head_dim(d) not in self.head_dims:
            # flash_attn's Python side pads q, k, v to a multiple of 8 before calling the module
            k, seen = kernel_head_dim(d), -(-d // 8) * 8
            out.append(
                f"head dim {k}"
                if k == seen
                else f"the head dim {k} kernels, which serve head dim {seen}"
            )
        if test.runs_backward and not self.backward:
            out.append("the backward pass")
        return out


TAILORED = KernelSet((128,), ("bf16",), False)


# ------------------------------------------------------------------------------------ sampling


def _strata(test: TestFunction, case: Case) -> tuple:
    dtype = case.params.get("dtype")
    return (dtype.short if isinstance(dtype, Dtype) else None, case.params.get("causal"))


def sample(
    test: TestFunction,
    env: Env,
    count: int,
    rng: random.Random,
    keep=lambda case: True,
    tries_per_case: int = 200,
) -> list[Case]:
    """`count` distinct cases of the grid that pass `keep` and no static skip, spread evenly over
    the (dtype, causal) strata present; drawn by index, so huge grids cost nothing."""
    size = test.size()
    strata_values = collections.OrderedDict()
    for name in ("dtype", "causal"):
        for p in test.params:
            if name in p.names:
                i = p.names.index(name)
                strata_values[name] = sorted(
                    {(r[i].short if isinstance(r[i], Dtype) else r[i]) for r in p.values}, key=str
                )
    strata = list(itertools.product(*strata_values.values())) or [()]
    names = list(strata_values)

    def stratum(case: Case) -> tuple:
        full = dict(zip(("dtype", "causal"), _strata(test, case)))
        return tuple(full[n] for n in names)

    wanted = {
        s: count // len(strata) + (1 if i < count % len(strata) else 0)
        for i, s in enumerate(strata)
    }
    chosen: dict[str, Case] = {}
    seen: set[int] = set()
    budget = tries_per_case * max(count, 1)
    while any(wanted.values()) and budget and len(seen) < size:
        budget -= 1
        index = rng.randrange(size)
        if index in seen:
            continue
        seen.add(index)
        case = case_at(test, index)
        s = stratum(case)
        if wanted.get(s, 0) <= 0 or case.skipped(test, env) or not keep(case):
            continue
        wanted[s] -= 1
        chosen[case.node] = case
    return sorted(chosen.values(), key=lambda c: c.node)


def _describe(test: TestFunction, case: Case) -> dict:
    p = case.params
    dtype = p.get("dtype")
    return {
        "d": p.get("d"),
        "dtype": dtype.short if isinstance(dtype, Dtype) else None,
        "causal": p.get("causal"),
        "backward": test.runs_backward,
        "varlen": "varlen" in test.name,
        "digits": list(case.digits),
    }


def bf16_kvcache_copy(source: Path, target: Path, tests: list[TestFunction]) -> list[str]:
    """A copy of the test file whose forward-only tests' fp16-only dtype grids say bf16."""
    lines = source.read_text().splitlines(keepends=True)
    changed = []
    for test in tests:
        if test.runs_backward or test.dtype_decorator_line is None:
            continue
        i = test.dtype_decorator_line - 1
        if lines[i].strip() != '@pytest.mark.parametrize("dtype", [torch.float16])':
            raise SystemExit(f"unexpected dtype grid for {test.name}: {lines[i].strip()}")
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        lines[i] = (
            f'{indent}@pytest.mark.parametrize("dtype", [torch.bfloat16])'
            "  # fa-shim acceptance: bf16 instead of upstream's fp16-only grid\n"
        )
        changed.append(test.name)
    target.write_text("".join(lines))
    return changed


def select(args) -> int:
    env = Env(capability=tuple(int(x) for x in args.capability.split(".")))
    source = Path(args.test_file)
    _, tests = read_tests(source, env)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = {
        "seed": args.seed,
        "per_function": args.per_function,
        "capability": args.capability,
        "plan": args.plan,
        "groups": {},
    }
    rng_for = lambda key: random.Random(f"{args.seed}:{key}")  # noqa: E731
    if args.plan == "full":
        group = []
        for test in tests:
            for case in sample(test, env, args.per_function, rng_for(test.name)):
                group.append(
                    {
                        "id": f"{source.name}::{test.name}[{case.node}]",
                        "expect": "pass",
                        **_describe(test, case),
                    }
                )
        plan["groups"]["full"] = {"file": source.name, "cases": group}
    elif args.plan == "set":
        ks = KernelSet(tuple(args.head_dims), tuple(args.dtypes), True)
        group = []
        for test in tests:
            keep = lambda c, t=test: not ks.missing(t, c)  # noqa: E731
            for case in sample(test, env, args.per_function, rng_for(test.name), keep):
                group.append(
                    {
                        "id": f"{source.name}::{test.name}[{case.node}]",
                        "expect": "pass",
                        **_describe(test, case),
                    }
                )
        plan["groups"]["set"] = {"file": source.name, "cases": group}
    else:
        ks = TAILORED
        variant = out / "test_flash_attn_fa_shim_bf16.py"
        variant_tests_changed = bf16_kvcache_copy(source, variant, tests)
        _, variant_tests = read_tests(variant, env)
        included = []
        for test in variant_tests:
            if test.name not in variant_tests_changed:
                continue
            keep = lambda c, t=test: not ks.missing(t, c) and not c.params.get("rotary_fraction")  # noqa: E731
            for case in sample(test, env, args.included, rng_for("included:" + test.name), keep):
                included.append(
                    {
                        "id": f"{variant.name}::{test.name}[{case.node}]",
                        "expect": "pass",
                        **_describe(test, case),
                    }
                )
        # Upstream's unmodified cases that the set cannot serve, a few per reason and function.
        excluded = []
        reasons = {
            "the backward pass": lambda t, c: ks.missing(t, c) == ["the backward pass"],
            "dtype fp16": lambda t, c: ks.missing(t, c)[:1] == ["dtype fp16"],
            "head dim": lambda t, c: (
                bool(ks.missing(t, c))
                and ks.missing(t, c)[0].startswith(("head dim", "the head dim"))
            ),
        }
        for test in tests:
            for reason, fits in reasons.items():
                keep = lambda c, t=test, f=fits: f(t, c)  # noqa: E731
                for case in sample(
                    test, env, args.excluded, rng_for(f"{reason}:{test.name}"), keep
                ):
                    missing = ks.missing(test, case)
                    excluded.append(
                        {
                            "id": f"{source.name}::{test.name}[{case.node}]",
                            "expect": "fa-shim-error",
                            "missing": missing[0],
                            **_describe(test, case),
                        }
                    )
        plan["groups"]["included"] = {
            "file": variant.name,
            "cases": included,
            "modified": variant_tests_changed,
        }
        plan["groups"]["excluded"] = {"file": source.name, "cases": excluded}
    if source.resolve() != (out / source.name).resolve():
        shutil.copyfile(source, out / source.name)  # upstream's file, unmodified
    for name, group in plan["groups"].items():
        (out / f"ids-{name}.txt").write_text("".join(c["id"] + "\n" for c in group["cases"]))
    (out / "plan.json").write_text(json.dumps(plan, indent=1, default=str))
    (out / "conftest.py").write_text(CONFTEST)
    (out / "pytest.ini").write_text("[pytest]\n")  # the run's rootdir: no outer config applies
    print(coverage(plan))
    files = sorted({g["file"] for g in plan["groups"].values()})
    print(
        f"run: cd {out} && python -m pytest -p no:cacheprovider --junitxml=junit.xml "
        + " ".join(files)
    )
    return 0


CONFTEST = '''"""Written by fa-shim's bench/upstream_selection.py: collect only the selected cases.

Collecting all of upstream's parametrizations takes minutes (the grids multiply to ~508k cases).
For each selected test function this replaces its @pytest.mark.parametrize marks by one mark
that lists just the selected cases: the values are taken from upstream's own marks (plan.json
names the row of each grid, in the order pytest applies the marks), the ids are upstream's node
ids. Test functions without a selected case yield no items. The test code is not touched.
"""

import json
import os

import pytest

_PLAN = json.load(open(os.path.join(os.path.dirname(__file__), "plan.json")))
_SELECTED = {}  # (file, function) -> [(id, digits)]
for _group in _PLAN["groups"].values():
    for _case in _group["cases"]:
        _file, _node = _case["id"].split("::", 1)
        _function, _id = _node[:-1].split("[", 1)
        _SELECTED.setdefault((_file, _function), []).append((_id, _case["digits"]))


def _names(mark):
    names = mark.args[0] if mark.args else mark.kwargs["argnames"]
    if isinstance(names, str):
        names = names.split(",")
    return [n.strip() for n in names]


def _values(mark):
    values = mark.args[1] if len(mark.args) > 1 else mark.kwargs["argvalues"]
    return [getattr(v, "values", v) for v in values]  # pytest.param(...) -> its values


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    if not (name.startswith("test_") and callable(obj)):
        return None
    path = getattr(collector, "path", None) or collector.fspath  # pytest < 7: fspath only
    selected = _SELECTED.get((os.path.basename(str(path)), name))
    if selected is None:
        return []  # not selected: no items for this function
    marks = list(getattr(obj, "pytestmark", []))
    grids = [m for m in marks if m.name == "parametrize"]  # the order pytest applies them
    names = [n for m in grids for n in _names(m)]
    rows = []
    for case_id, digits in selected:
        if len(digits) != len(grids):
            raise pytest.UsageError(f"{name}[{case_id}]: plan.json does not fit the test file")
        row = []
        for mark, digit in zip(grids, digits):
            value = _values(mark)[digit]
            row.extend(value if len(_names(mark)) > 1 else [value])
        rows.append(pytest.param(*row, id=case_id))
    others = [m for m in marks if m.name != "parametrize"]
    obj.pytestmark = [*others, pytest.mark.parametrize(names, rows).mark]
    return None  # pytest goes on to make the items, from the one remaining mark
'''


def coverage(plan: dict) -> str:
    lines = [
        f"Upstream test selection: plan {plan['plan']}, seed {plan['seed']}, "
        f"capability {plan['capability']}",
        "",
    ]
    for name, group in plan["groups"].items():
        cs = group["cases"]
        by_fn = collections.Counter(c["id"].split("::")[1].split("[")[0] for c in cs)
        lines.append(
            f"group {name}: {len(cs)} cases from {group['file']}"
            + (f" (modified: {', '.join(group['modified'])})" if group.get("modified") else "")
        )
        for fn, n in sorted(by_fn.items()):
            lines.append(f"  {fn}: {n}")
        for key in ("dtype", "causal", "backward", "varlen", "d", "missing"):
            counts = collections.Counter(str(c.get(key)) for c in cs if key in c)
            if counts:
                lines.append(
                    f"  by {key}: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
                )
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- verdict


def _outcomes(junit_files: list[Path]) -> dict[tuple[str, str], tuple[str, str]]:
    """(module file, function[id]) -> (outcome, message) from pytest's JUnit XML."""
    out = {}
    for path in junit_files:
        for tc in ET.parse(path).getroot().iter("testcase"):
            module = tc.get("classname", "").split(".")[-1] + ".py"
            name = (module, tc.get("name", ""))
            outcome, message = "passed", ""
            for child in tc:
                if child.tag in ("failure", "error"):
                    outcome = "failed" if child.tag == "failure" else "error"
                    message = (child.get("message") or "") + "\n" + (child.text or "")
                    break
                if child.tag == "skipped":
                    outcome, message = "skipped", child.get("message") or ""
            out[name] = (outcome, message)
    return out


def judge(args) -> int:
    plan = json.loads(Path(args.plan_file).read_text())
    outcomes = _outcomes([Path(p) for p in args.junit])
    rows, broken = [], []
    for name, group in plan["groups"].items():
        tally = collections.Counter()
        for case in group["cases"]:
            file, node = case["id"].split("::", 1)
            outcome, message = outcomes.get((file, node), ("not run", ""))
            if outcome == "not run":  # pytest stopped early (time limit) or the id went missing
                ok, verdict = False, "not run"
            elif case["expect"] == "pass":
                ok = outcome in ("passed", "skipped")
                verdict = outcome
            else:
                # fa-shim's error naming the missing kind of kernel; the exact wording is counted
                # apart, so a rewording in the patch shows without failing the run
                kind = next(w for w in ("dtype", "head dim", "backward") if w in case["missing"])
                fa_shim = FA_SHIM_ERROR in message and kind in message.split(FA_SHIM_ERROR, 1)[1]
                ok = outcome == "skipped" or (outcome == "failed" and fa_shim)
                exact = f"{FA_SHIM_ERROR} {case['missing']} (kernel set" in message
                verdict = (
                    "skipped"
                    if outcome == "skipped"
                    else f"fa-shim error ({'exact' if exact else 'other'} wording)"
                    if ok
                    else f"{outcome} (not fa-shim's error)"
                )
            tally[verdict] += 1
            if not ok:
                first = next((ln for ln in message.splitlines() if ln.strip()), "")
                broken.append(f"{case['id']}: {verdict}: {first[:300]}")
        rows.append((name, group["file"], len(group["cases"]), tally))
    planned = {tuple(c["id"].split("::", 1)) for g in plan["groups"].values() for c in g["cases"]}
    for (file, node), (outcome, message) in sorted(outcomes.items()):
        if (file, node) not in planned and outcome == "error":  # e.g. a collection error
            first = next((ln for ln in reversed(message.splitlines()) if ln.strip()), "")
            broken.insert(0, f"{file}::{node}: error outside the selection: {first[:300]}")
    lines = ["| group | file | cases | outcomes |", "|---|---|---|---|"]
    for name, file, n, tally in rows:
        shown = ", ".join(f"{v} {k}" for k, v in sorted(tally.items()))
        lines.append(f"| {name} | {file} | {n} | {shown} |")
    print("\n".join(lines))
    if broken:
        print(f"\n{len(broken)} case(s) broke their expectation:")
        print("\n".join("  " + b for b in broken[:50]))
        return 1
    print("\nevery selected case met its expectation")
    return 0


def count(args) -> int:
    env = Env(capability=tuple(int(x) for x in args.capability.split(".")))
    _, tests = read_tests(Path(args.test_file), env)
    if args.ids:  # every node id of the named functions, to compare with pytest --collect-only
        for test in tests:
            if test.name in args.ids:
                for case in cases(test):
                    print(f"{Path(args.test_file).name}::{test.name}[{case.node}]")
        return 0
    total = 0
    for test in tests:
        total += test.size()
        print(f"{test.name}: {test.size()} cases, backward={test.runs_backward}")
    print(f"total: {total}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("select")
    p.add_argument("test_file")
    p.add_argument("--plan", choices=("full", "tailored", "set"), required=True)
    p.add_argument("--head-dims", type=int, nargs="+", default=[128], help="set: its head dims")
    p.add_argument("--dtypes", nargs="+", default=["bf16"], help="set: its dtypes (fp16, bf16)")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-function", type=int, default=30, help="full plan: cases per test")
    p.add_argument("--included", type=int, default=24, help="tailored: cases per forward test")
    p.add_argument("--excluded", type=int, default=2, help="tailored: per reason and test")
    p.add_argument("--capability", default="9.0", help="the GPU's, as upstream's grids read it")
    p.set_defaults(func=select)
    p = sub.add_parser("judge")
    p.add_argument("--plan-file", required=True)
    p.add_argument("--junit", action="append", required=True)
    p.set_defaults(func=judge)
    p = sub.add_parser("count")
    p.add_argument("test_file")
    p.add_argument("--capability", default="9.0")
    p.add_argument("--ids", nargs="*", metavar="FUNCTION", help="print these functions' ids")
    p.set_defaults(func=count)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
