"""The operator's layers (docs/architecture.md), checked from every module's imports: imports only go down.

Each package of rlplace_operator has a layer; a module may import its own package and the layers below, never a
package of its own layer or above. Beside the order: only kube.py (the gateway to the API server) and leadership.py
(the Lease election, the client's own) hold the Kubernetes client's API classes (others may name its exception
types), only controllers/ registers kopf handlers, and the pure layers (api, cluster, diagnosis, planning,
frameworks, builders, admission, and reconcile but for apply.py, the actuator) never import kopf or the client.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "rlplace_operator"

#: Layer of each top-level part of the operator, lowest first. Parts of one layer may not import each other.
LAYERS: dict[str, int] = {
    "api": 0,
    "kube": 1,
    "cluster": 1,
    "diagnosis": 1,
    "planning": 2,
    "frameworks": 3,
    "builders": 4,
    "admission": 5,
    "reconcile": 6,
    "server": 7,
    "controllers": 8,
    "monitoring": 8,
    "leadership": 2,
    "main": 9,
    "kubectl": 9,
}
#: The modules that talk to the API server: kube.py, and leadership.py, whose Lease election is the client's own
#: kubernetes.leaderelection (it makes its own calls).
API_GATEWAYS = ("kube.py", "leadership.py")
#: What may import kopf: the controllers (its handlers), the reconcile's actuator (kopf.adopt, Events) and kube.py
#: (an Event when even the refusal of a status cannot be written).
KOPF_ALLOWED = ("controllers/", "reconcile/apply.py", "kube.py", "main.py")
#: What of the Kubernetes client any module may import: its exception types and quantity parsing.
CLIENT_NAMES_ALLOWED = ("kubernetes.client.exceptions", "kubernetes.utils")


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def part_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py") if len(relative.parts) > 1 else relative.stem


def imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, dotted module) of every import, module-level or inside a function."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "rlplace_operator":
                for alias in node.names:
                    yield node.lineno, f"rlplace_operator.{alias.name}"
            else:
                yield node.lineno, node.module


def violations(path: Path, source: str) -> list[str]:
    """Each import of `source` (the module at `path`) that breaks the layers, as one line."""
    tree = ast.parse(source)
    part = part_of(path)
    if part == "__init__":
        return []  # the package's docstring
    layer = LAYERS[part]
    name = path.relative_to(PACKAGE).as_posix()
    found = []
    for line, module in imports(tree):
        if module.startswith("rlplace_operator."):
            target = module.split(".")[1]
            if target == part or target == "__init__":
                continue
            if LAYERS.get(target, 99) >= layer:
                found.append(f"{name}:{line} imports {module} (layer {LAYERS.get(target)} >= {layer}: {part})")
        elif module == "kopf" or module.startswith("kopf."):
            if not name.startswith(KOPF_ALLOWED):
                found.append(f"{name}:{line} imports kopf")
        elif (
            (module == "kubernetes" or module.startswith("kubernetes."))
            and name not in API_GATEWAYS
            and (not module.startswith(CLIENT_NAMES_ALLOWED) or part in ("api", "cluster", "planning", "frameworks"))
        ):
            found.append(f"{name}:{line} imports {module}: only kube.py talks to the API server")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not name.startswith("controllers/"):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if "kopf" in ast.unparse(target):
                    found.append(f"{name}:{node.lineno} registers a kopf handler outside controllers/")
    return found


@pytest.mark.parametrize("path", modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_imports_only_go_down(path: Path) -> None:
    assert violations(path, path.read_text()) == []


def test_every_part_has_a_layer() -> None:
    assert {part_of(p) for p in modules()} - {"__init__"} <= set(LAYERS)


def test_the_check_names_a_lower_layer_importing_a_higher_one() -> None:
    # Broken on purpose: a builder that reads the queue, an api type that reconciles, a pure module with kopf.
    builder = PACKAGE / "builders" / "raycluster.py"
    assert violations(builder, "from rlplace_operator.admission.queue import admit\n") == [
        "builders/raycluster.py:1 imports rlplace_operator.admission.queue (layer 5 >= 4: builders)"
    ]
    api = PACKAGE / "api" / "rljob.py"
    assert violations(api, "from rlplace_operator import reconcile\n") == [
        "api/rljob.py:1 imports rlplace_operator.reconcile (layer 6 >= 0: api)"
    ]
    assert violations(PACKAGE / "cluster" / "dra.py", "from rlplace_operator.diagnosis import causes\n") != []
    assert violations(PACKAGE / "reconcile" / "decide.py", "import kopf\n") == ["reconcile/decide.py:1 imports kopf"]
    assert violations(PACKAGE / "admission" / "queue.py", "from kubernetes import client\n") != []
    handler = "import kopf\n@kopf.on.create('x', 'v1', 'y')\ndef h(**_): pass\n"
    assert any("registers a kopf handler" in v for v in violations(PACKAGE / "reconcile" / "apply.py", handler))
