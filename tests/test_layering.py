"""The model never imports its file formats (torchtitan's state_dict_adapter pattern): formats/,
warm_state and the loaders import the model, never the reverse. Read from the source with ``ast``,
so an import inside a function counts as much as one at the top."""

import ast
from pathlib import Path

import pytest

import elmokit

SRC = Path(elmokit.__file__).resolve().parent
MODEL_FILES = ["bilm.py", "bilm_config.py", "configs.py", *(f"nn/{p.name}" for p in sorted((SRC / "nn").glob("*.py")))]
FORBIDDEN = ("elmokit.formats", "elmokit.warm_state", "elmokit.io", "elmokit.elmo", "elmokit.training", "elmokit.cli")


def imported_modules(text: str, package: str) -> set[str]:
    """Every module an ``import`` / ``from ... import`` anywhere in ``text`` names, relative
    imports resolved against ``package`` (``from x import y`` counts as x and x.y)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}" if module else base
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return found


def forbidden_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


@pytest.mark.parametrize("name", MODEL_FILES)
def test_model_files_import_no_file_format(name):
    path = SRC / name
    package = ".".join(["elmokit", *path.relative_to(SRC).parent.parts])
    assert forbidden_in(imported_modules(path.read_text(encoding="utf-8"), package)) == []


def test_the_checker_sees_function_level_and_relative_imports():
    """The check above must not pass vacuously."""
    text = (
        "def f():\n    from elmokit.formats import load_bilm\n"
        "def g():\n    import elmokit.warm_state as w\n"
        "class C:\n    def h(self):\n        from ..io import atomic_path\n"
    )
    assert forbidden_in(imported_modules(text, "elmokit.nn")) == [
        "elmokit.formats", "elmokit.formats.load_bilm", "elmokit.io", "elmokit.io.atomic_path", "elmokit.warm_state"]
    assert forbidden_in(imported_modules("from elmokit.bilm_config import BiLMConfig\n", "elmokit")) == []


def test_the_hdf5_adapter_needs_only_the_config():
    modules = imported_modules((SRC / "formats" / "bilm_hdf5.py").read_text(encoding="utf-8"), "elmokit.formats")
    assert "elmokit.bilm_config" in modules and "elmokit.bilm" not in modules
