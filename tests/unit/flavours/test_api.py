"""fa_backend.flavours.api, the public flavour API: the demo plug-in (tests/packages/
demo-flavour/) needs nothing else of fa-shim, and every name the API exports is there."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re

from conftest import TESTS

from fa_backend.flavours import api

DEMO = TESTS / "packages" / "demo-flavour" / "fa_shim_demo_flavour.py"


def test_the_demo_plug_in_imports_only_the_public_api():
    imported = {}
    for node in ast.walk(ast.parse(DEMO.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fa_backend"):
            imported.setdefault(node.module, set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("fa_backend") for a in node.names)
    assert set(imported) == {"fa_backend.flavours.api"}, imported
    assert imported["fa_backend.flavours.api"] <= set(api.__all__)


def test_the_built_in_flavours_import_only_the_public_api():
    """fa2 and fa3 are written as a plug-in is: fa-shim's other modules reach them through api."""
    flavours = TESTS.parent / "fa_backend" / "flavours"
    for module in [*flavours.glob("fa2/*.py"), *flavours.glob("fa3/*.py")]:
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > 1:  # above its own package
                names = {a.name for a in node.names}
                where = f"{module.name}: from {'.' * node.level}{node.module or ''} import {names}"
                assert node.level == 2 and (node.module == "api" or names == {"api"}), where
                assert names <= {"api", *api.__all__}, where


def test_every_exported_name_is_there_and_public():
    assert len(set(api.__all__)) == len(api.__all__)  # ruff (RUF022) keeps it sorted
    for name in api.__all__:
        assert getattr(api, name) is not None and not name.startswith("_")
    assert issubclass(api.Flavour, object) and api.Flavour.__abstractmethods__


def _named_types(annotation: str) -> set[str]:
    return set(re.findall(r"\b[A-Z][A-Za-z]+\b", annotation))


def test_every_type_the_apis_signatures_name_is_exported():
    """A plug-in can name, in its own signatures, every type fa-shim hands it or wants back."""
    named = set()
    for cls in (api.Flavour,):
        for _, member in inspect.getmembers(cls, inspect.isfunction):
            named |= {t for a in member.__annotations__.values() for t in _named_types(str(a))}
    for cls in (api.Plan, api.Tools, api.Sizing, api.Costs):
        named |= {t for f in dataclasses.fields(cls) for t in _named_types(str(f.type))}
    typing_names = {"Any", "Callable", "Mapping", "Sequence", "Path", "None"}
    missing = named - typing_names - set(api.__all__)
    assert not missing, missing
