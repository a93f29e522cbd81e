"""The house's import rules, read from the source (ast), so that a new import that breaks them fails here.

* ``elmokit.tasks`` (task models) never imports ``elmokit.evaluation`` (which evaluates with them);
* no CLI subcommand module imports another (shared flags live in cli/common.py and cli/arguments.py);
* what has one home is defined once: InMemoryFeatures, the fingerprint, the shared-data helper.
"""

from __future__ import annotations

import ast
from pathlib import Path

from elmokit.cli.main import SUBCOMMAND_MODULES

SRC = Path(__file__).resolve().parents[1] / "src" / "elmokit"


def _imports(path: Path, root: Path | None = None) -> set[str]:
    """Every module a file imports (absolute names; relative imports resolved against its package)."""
    package = ".".join(path.relative_to(root or SRC.parent).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_the_helper_reads_imports_of_every_form(tmp_path):
    probe = tmp_path / "elmokit" / "tasks" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("import elmokit.evaluation.sst\nfrom elmokit import evaluation\nfrom ..evaluation import probe\n"
                     "def f():\n    from elmokit.evaluation.wsd import score\n", encoding="utf-8")
    found = _imports(probe, tmp_path)
    assert {"elmokit.evaluation.sst", "elmokit.evaluation", "elmokit.evaluation.probe",
            "elmokit.evaluation.wsd"} <= found


def test_task_models_never_import_evaluation():
    offenders = {str(p.relative_to(SRC)): sorted(n for n in _imports(p) if n.startswith("elmokit.evaluation"))
                 for p in sorted((SRC / "tasks").rglob("*.py"))}
    assert len(offenders) >= 6, "the tasks package was not found"
    assert {p: n for p, n in offenders.items() if n} == {}


def test_no_cli_subcommand_imports_another():
    subcommands = {f"elmokit.cli.{name}" for name in SUBCOMMAND_MODULES}
    checked = {}
    for path in sorted((SRC / "cli").glob("*.py")):
        if path.stem == "main":  # it registers them all
            continue
        own = f"elmokit.cli.{path.stem}"
        checked[path.name] = sorted(n for n in _imports(path)
                                    if any(n == s or n.startswith(s + ".") for s in subcommands - {own}))
    assert {"tag.py", "eval.py", "classify.py", "neighbors.py"} <= set(checked)
    assert {name: found for name, found in checked.items() if found} == {}


def test_one_definition_of_what_has_one_home():
    definitions: dict[str, list[str]] = {"InMemoryFeatures": [], "FeatureCache": [], "embed_in_chunks": [],
                                         "fingerprint": [], "representation_fingerprint": [], "shared_dir": [],
                                         "load_representation": [], "pad_features": []}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in definitions:
                if isinstance(node, ast.FunctionDef) and any(isinstance(d, ast.Name) and d.id == "property"
                                                             for d in node.decorator_list):
                    continue  # a representation's own fingerprint attribute, which fingerprint() reads
                definitions[node.name].append(str(path.relative_to(SRC)))
    assert definitions == {
        "InMemoryFeatures": ["features.py"], "FeatureCache": ["features.py"], "embed_in_chunks": ["features.py"],
        "fingerprint": ["representation.py"], "representation_fingerprint": [], "shared_dir": ["data_paths.py"],
        # the library's loader of a spec, and the CLI's loader from flags that calls it
        "load_representation": ["cli/common.py", "representation.py"], "pad_features": ["features.py"],
    }
