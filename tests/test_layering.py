"""The house's layers, enforced over the whole package (read from the source with ``ast``, so an import
inside a function counts as much as one at the top).

Layers, bottom to top (``LAYERS``): foundation < model < formats < representations < engine < tasks <
recipes < evaluation < apps. The rules:

1. an import points down the layers or stays within its layer; the recipes' folders (training,
   pretraining, transfer) never import each other (``ISOLATED``);
2. an import placed inside a function is only for an optional or heavy third-party package (``LATE_OK``),
   never an elmokit module and never to dodge a cycle. The apps layer is the one exception: a command's body
   imports what it runs, so the parser of every command is built without the optional extras of the others
   (fastapi for serve, ray for bulk), and a Ray task imports inside its worker. Nothing imports the apps,
   so this cannot hide a cycle across layers, and rule 3 still applies to them;
3. no two modules import each other, directly or around a loop (imports inside functions included).
4. no module imports another's ``_private`` names: what two modules share has a public name in one home.

``ALLOWED`` and ``PRIVATE_ALLOWED`` list what breaks a rule today, each with why; they only shrink.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import elmokit

SRC = Path(elmokit.__file__).resolve().parent

# layer -> the folders and top-level modules in it (dotted, relative to elmokit; "" is elmokit/__init__.py).
# A module belongs to the longest unit that prefixes it ("training.lm" before "training").
LAYERS: dict[str, tuple[str, ...]] = {
    "foundation": ("errors", "io", "configs", "data_paths", "progress", "text", "nn"),
    # the biLM, its config, its LM head beside it, and the LM's perplexity: a measure the trainer validates
    # with, reading only the model and text (the rest of evaluation/ sits high)
    "model": ("bilm_config", "bilm", "evaluation.perplexity"),
    # native/original weight files, embedding HDF5, word2vec text, and a model folder's warm state
    "formats": ("formats", "warm_state"),
    # the Representation protocol and its registry, what users hold (Embedder and Elmo, both of which read
    # files through formats), the public API, feature caches, static tables
    "representations": ("", "lm", "representation", "elmo", "features", "static"),
    "engine": ("engine",),
    "tasks": ("tasks",),
    "recipes": ("training", "pretraining", "transfer"),
    "evaluation": ("evaluation",),
    "apps": ("serve", "bulk", "cli"),
}
ISOLATED = {"recipes"}  # the units of these layers never import each other
LATE_IMPORT_LAYERS = {"apps"}  # rule 2's exception (see the docstring)
# Third-party packages a function may import late: the optional extras (pyproject's [project.optional-dependencies])
# and h5py (the HDF5 C library, ~35 ms, only for the original weights and embedding files). torch and safetensors
# are not here: `import elmokit` already imports torch, after which both cost about a millisecond.
LATE_OK = {
    "h5py",
    "transformers", "tokenizers",
    "gensim", "sklearn", "scipy", "seqeval",
    "fastapi", "uvicorn", "prometheus_client",
    "ray", "pyarrow",
    "jieba", "rjieba", "pkuseg",
    "sacrebleu", "playwright",
    "pykeen",
}

# (importing module, imported module) -> why it is still allowed. Shrinks to empty.
ALLOWED: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------- the checker


def module_name(path: Path, root: Path = SRC) -> str:
    parts = ["elmokit", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_sources(root: Path = SRC) -> dict[str, tuple[str, bool]]:
    """module name -> (source text, is a package's __init__)."""
    return {module_name(p, root): (p.read_text(encoding="utf-8"), p.name == "__init__.py") for p in sorted(root.rglob("*.py"))}


def imports_of(module: str, text: str, is_package: bool, known: set[str]) -> list[tuple[str, int, bool]]:
    """(imported module, line, inside a function) for every import statement in ``text``. Relative imports
    are resolved; ``from package import name`` names the submodule when ``name`` is one of ``known``."""
    package = module if is_package else module.rpartition(".")[0]
    found = []

    def visit(node, late: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, late) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parent = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    found.append((sub if sub in known else base, child.lineno, late))
            visit(child, late or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(text), False)
    return found


def unit_of(module: str) -> tuple[int, str] | None:
    """(layer index, unit) of an elmokit module, None when no unit claims it."""
    relative = module.removeprefix("elmokit").removeprefix(".")
    best = None
    for index, units in enumerate(LAYERS.values()):
        for unit in units:
            if unit == relative or (unit and relative.startswith(unit + ".")) or (not unit and not relative):
                if best is None or len(unit) > len(best[1]):
                    best = (index, unit)
    return best


def _known_module(name: str, known: set[str]) -> str:
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


def violations(sources: dict[str, tuple[str, bool]], allowed=None) -> list[str]:
    """Every import that breaks rule 1 or 2, one line each (``module:line importer -> imported: why``),
    except those ``allowed`` lists; then every import cycle (rule 3)."""
    allowed = ALLOWED if allowed is None else allowed
    known = set(sources)
    layer_names = list(LAYERS)
    found, graph = {}, {m: set() for m in sources}  # a dict keeps the order and drops repeats (one per name imported)
    for module, (text, is_package) in sources.items():
        own = unit_of(module)
        if own is None:
            found[f"{module}: in no layer; add it to LAYERS"] = None
            continue
        for imported, line, late in imports_of(module, text, is_package, known):
            where = f"{module}:{line} {module} -> {imported}"
            top = imported.partition(".")[0]
            if top == "elmokit":
                target = _known_module(imported, known)
                if target != module:
                    graph[module].add(target)
                theirs = unit_of(target)
                if theirs is None:
                    continue  # reported for that module itself
                if (module, imported) in allowed or (module, target) in allowed:
                    continue
                if theirs[0] > own[0]:
                    found[f"{where}: points up ({layer_names[own[0]]} -> {layer_names[theirs[0]]})"] = None
                elif theirs[0] == own[0] and theirs[1] != own[1] and layer_names[own[0]] in ISOLATED:
                    found[f"{where}: {layer_names[own[0]]} never import each other ({own[1]} -> {theirs[1]})"] = None
                elif late and layer_names[own[0]] not in LATE_IMPORT_LAYERS:
                    found[f"{where}: an elmokit import inside a function (move it to the top)"] = None
            elif late and top not in LATE_OK and layer_names[own[0]] not in LATE_IMPORT_LAYERS:
                if (module, top) not in allowed and (module, imported) not in allowed:
                    what = "a standard-library" if top in sys.stdlib_module_names else "a light third-party"
                    found[f"{where}: {what} import inside a function (move it to the top, or list a heavy "
                          "optional package in LATE_OK)"] = None
    return [*found, *(f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph))]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One loop through each strongly connected group of more than one module (Tarjan), sorted."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    loops = []
    for group in groups:  # walk from the smallest name inside the group until a module repeats
        path, seen = [min(group)], set()
        while path[-1] not in seen:
            seen.add(path[-1])
            path.append(min(w for w in graph[path[-1]] if w in group))
        loops.append(path[path.index(path[-1]):])
    return sorted(loops)


# --------------------------------------------------------------------------- the package obeys


def test_every_import_in_the_package_keeps_the_layers():
    sources = package_sources()
    assert len(sources) > 100, "the package was not found"
    assert violations(sources) == []


def test_the_allow_lists_are_empty():
    """Every exception the layering started with has been fixed; a new one is a violation, not an entry."""
    assert ALLOWED == {}
    assert PRIVATE_ALLOWED == {}


def test_every_unit_in_the_table_exists_or_is_expected():
    """A typo in LAYERS would silently exempt nothing; each unit names a module or folder."""
    sources = package_sources()
    missing = [u for units in LAYERS.values() for u in units
               if u and not any(m == f"elmokit.{u}" or m.startswith(f"elmokit.{u}.") for m in sources)]
    assert missing == []


# (importing module, private name) -> why a module still imports another module's private name. Shrinks to empty.
PRIVATE_ALLOWED = {
}


def private_imports(module: str, text: str) -> list[str]:
    """The ``_private`` names ``text`` takes from another elmokit module (``from elmokit.x import _name``)."""
    return [alias.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ImportFrom)
            and (node.level or (node.module or "").startswith("elmokit")) and (node.module or "") != module
            for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_no_module_imports_another_s_private_names():
    """What two modules share gets a public name in one home (pretraining/batching.py for the objectives)."""
    found = {(m, name) for m, (text, _) in package_sources().items() for name in private_imports(m, text)}
    assert found - set(PRIVATE_ALLOWED) == set()
    assert set(PRIVATE_ALLOWED) <= found, "an allowed private import is gone: delete its entry"
    assert private_imports("elmokit.pretraining.unilm", "from elmokit.pretraining.objectives import ObjectiveLoss, _chunks\n"
                           "from .masking import _corrupt, __all__\n") == ["_chunks", "_corrupt"]


# --------------------------------------------------------------------------- the checker sees what it must


def _fake(**modules: str) -> dict[str, tuple[str, bool]]:
    """A fake package: keyword ``elmokit__nn__x`` is module ``elmokit.nn.x``; a trailing ``__init__`` marks a package."""
    out = {}
    for key, text in modules.items():
        name = key.replace("__", ".")
        is_package = name.endswith(".init")
        out[name.removesuffix(".init")] = (text, is_package)
    return out


def test_the_checker_catches_an_upward_import_at_top_and_inside_a_function():
    sources = _fake(
        elmokit__nn__init="",
        elmokit__nn__lstm="from elmokit.formats.native import save\n",
        elmokit__nn__highway="def f():\n    from ..tasks import crf\n",
        elmokit__formats__init="",
        elmokit__formats__native="from elmokit.nn.lstm import LSTM\n",
        elmokit__tasks__init="",
        elmokit__tasks__crf="import numpy\n",
    )
    assert violations(sources, allowed={}) == [
        "elmokit.nn.lstm:1 elmokit.nn.lstm -> elmokit.formats.native: points up (foundation -> formats)",
        "elmokit.nn.highway:2 elmokit.nn.highway -> elmokit.tasks.crf: points up (foundation -> tasks)",
        "import cycle: elmokit.formats.native -> elmokit.nn.lstm -> elmokit.formats.native",
    ]
    # the allow-list exempts exactly the entry it names from rules 1 and 2 (never from the cycle rule)
    allowed = {("elmokit.nn.lstm", "elmokit.formats.native"): "test"}
    assert violations(sources, allowed=allowed)[0].startswith("elmokit.nn.highway:2")


def test_the_checker_catches_recipes_importing_each_other_and_late_imports():
    sources = _fake(
        elmokit__training__init="",
        elmokit__training__data="import json\n",
        elmokit__pretraining__init="",
        elmokit__pretraining__run=("from elmokit.pretraining import corpus\nimport elmokit.io\n"
                                   "def f():\n    import itertools\n    import transformers\n    from . import corpus\n"),
        elmokit__pretraining__corpus="from elmokit.training.data import Position\n",
        elmokit__io="def g():\n    import tqdm\n",
        elmokit__cli__init="",
        elmokit__cli__tag="def run(args):\n    import signal\n    from elmokit.pretraining.run import f\n",
    )
    assert violations(sources, allowed={}) == [
        "elmokit.pretraining.run:4 elmokit.pretraining.run -> itertools: a standard-library import inside a function "
        "(move it to the top, or list a heavy optional package in LATE_OK)",
        "elmokit.pretraining.run:6 elmokit.pretraining.run -> elmokit.pretraining.corpus: an elmokit import inside a "
        "function (move it to the top)",
        "elmokit.pretraining.corpus:1 elmokit.pretraining.corpus -> elmokit.training.data: recipes never import each "
        "other (pretraining -> training)",
        "elmokit.io:2 elmokit.io -> tqdm: a light third-party import inside a function (move it to the top, or list a "
        "heavy optional package in LATE_OK)",
    ]


def test_the_checker_reports_unassigned_modules_and_relative_imports():
    sources = _fake(elmokit__newthing="from .nn import x\n", elmokit__nn__init="")
    assert violations(sources, allowed={}) == ["elmokit.newthing: in no layer; add it to LAYERS"]
    found = imports_of("elmokit.tasks.tagger.saved", "from ...formats import native\nfrom .. import crf\n", False,
                       {"elmokit.formats.native", "elmokit.tasks.crf"})
    assert found == [("elmokit.formats.native", 1, False), ("elmokit.tasks.crf", 2, False)]


def test_a_violation_planted_in_the_real_package_is_reported_alone():
    sources = package_sources()
    text, is_package = sources["elmokit.nn.highway"]
    sources["elmokit.nn.highway"] = (text + "\n\ndef _planted():\n    from elmokit.formats import native\n", is_package)
    found = violations(sources)
    line = len(text.splitlines()) + 4
    assert found[0] == (f"elmokit.nn.highway:{line} elmokit.nn.highway -> elmokit.formats.native: points up "
                        "(foundation -> formats)")
    assert len(found) == 2 and found[1].startswith("import cycle: ") and "elmokit.nn.highway" in found[1]


def test_the_cycle_finder_against_hand_drawn_graphs():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []
    assert cycles({"a": {"b"}, "b": {"a"}, "x": {"y"}, "y": {"x", "a"}}) == [["a", "b", "a"], ["x", "y", "x"]]


@pytest.mark.parametrize("module", ["elmokit.bilm", "elmokit.lm", "elmokit.formats.native", "elmokit.cli.tag",
                                    "elmokit.pretraining.representation", "elmokit"])
def test_the_layer_table_places_known_modules(module):
    expected = {"elmokit.bilm": "model", "elmokit.lm": "representations", "elmokit.formats.native": "formats",
                "elmokit.cli.tag": "apps", "elmokit.pretraining.representation": "recipes", "elmokit": "representations"}
    assert list(LAYERS)[unit_of(module)[0]] == expected[module]


# --------------------------------------------------------------------------- the model never reads its files


MODEL_FILES = ["bilm.py", "bilm_config.py", "configs.py", *(f"nn/{p.name}" for p in sorted((SRC / "nn").glob("*.py")))]


@pytest.mark.parametrize("name", MODEL_FILES)
def test_model_files_import_no_file_format(name):
    """torchtitan's state_dict_adapter pattern: formats/, warm_state and the loaders import the model, never the reverse."""
    path = SRC / name
    module = module_name(path)
    found = {i for i, _, _ in imports_of(module, path.read_text(encoding="utf-8"), path.name == "__init__.py",
                                         set(package_sources()))}
    forbidden = ("elmokit.formats", "elmokit.warm_state", "elmokit.io", "elmokit.elmo", "elmokit.training", "elmokit.cli")
    assert sorted(m for m in found if any(m == f or m.startswith(f + ".") for f in forbidden)) == []


def test_the_hdf5_adapter_needs_only_the_config():
    path = SRC / "formats" / "bilm_hdf5.py"
    modules = {i for i, _, _ in imports_of("elmokit.formats.bilm_hdf5", path.read_text(encoding="utf-8"), False,
                                           set(package_sources()))}
    assert "elmokit.bilm_config" in modules and "elmokit.bilm" not in modules
