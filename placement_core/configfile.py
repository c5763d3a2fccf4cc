"""Reading a job config file: strict, bounded YAML, with OmegaConf `${...}` interpolations resolved.

Configs are written by hand (and by Hydra users), so what YAML would silently accept but the user did not
mean is refused: a key given twice (`cluster:` twice, a component twice), a null key, a key that is not a
plain scalar. Any input costs bounded work: the file size, the nesting depth and the number of nodes after
alias expansion are capped before anything is built (an alias "billion laughs" document is refused while
still a small node graph), and interpolation is resolved under a time limit. Every problem is a one-line
`PlacementError` that quotes at most `MAX_QUOTE` characters of the offending text.
"""

from __future__ import annotations

import contextlib
import math
import re
import signal
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from placement_core.errors import PlacementError

#: A job config is a few KB; reading far more than this is a mistake (a log, a dataset) and costs memory.
MAX_CONFIG_BYTES = 4 * 1024 * 1024
#: Deeper nesting than this is no job config, and deep structures make recursive readers slow or crash.
MAX_DEPTH = 64
#: YAML nodes after alias expansion: a config has hundreds; 20,000 components are about 60,000.
MAX_NODES = 1_000_000
#: Seconds that resolving `${...}` interpolations may take: the last guard, after the static bounds below.
MAX_RESOLVE_SECONDS = 2.0
#: Bounds on what resolving interpolations would produce and do, estimated before OmegaConf runs: a chain
#: `x1: ${x0}${x0}`, `x2: ${x1}${x1}`, ... doubles at every step, in size and in OmegaConf's work alike.
MAX_RESOLVED_CHARS = 10_000_000
MAX_RESOLVE_STEPS = 200_000
MAX_REFERENCE_DEPTH = 100
#: Characters of an offending value quoted in an error message.
MAX_QUOTE = 200

_GZIP_MAGIC = b"\x1f\x8b"
# A reference to another key (`${actor.model.tp}`, `${..tp}`, `${a[0]}`); resolver calls (`${oc.env:X}`) hold
# a colon and are not matched, but the plain references nested in their arguments are.
_REFERENCE = re.compile(r"\$\{([\w.\-\[\]]*)\}")
_NULL_TAG = "tag:yaml.org,2002:null"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
#: Digits an integer in a config may have.
MAX_INT_DIGITS = 100
# The C loader where PyYAML was built with libyaml (about 10x faster on large files), else the Python one.
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def quote(value: object, limit: int = MAX_QUOTE) -> str:
    """`value` in single quotes for an error message: at most `limit` characters, on one line."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text)} characters)"
    return "'" + text.encode("unicode_escape").decode("ascii").replace("\\\\", "\\") + "'"


def not_a_number_hint(value: object) -> str:
    """For text YAML read as a string but a person meant as a number (`1e2`, `1_000`): how to write it."""
    if not isinstance(value, str):
        return ""
    try:
        number = float(value.replace("_", ""))
    except ValueError:
        return ""
    if not math.isfinite(number):
        return ""
    written = str(int(number)) if number.is_integer() else repr(number)
    return f" ({quote(value)} is text to YAML, not a number; write {written})"


def read_config_bytes(data: bytes, where: str) -> dict[str, Any]:
    """The config mapping in `data` (the bytes of the file named by `where`, for messages)."""
    if len(data) > MAX_CONFIG_BYTES:
        raise PlacementError(
            f"{where} is {len(data):,} bytes; a job config may be at most {MAX_CONFIG_BYTES // (1024 * 1024)} MiB"
        )
    if data.startswith(_GZIP_MAGIC):
        raise PlacementError(f"{where} is gzip-compressed; give the YAML config itself")
    if not data.strip():
        raise PlacementError(f"{where} is empty; a job config is a YAML mapping with a cluster: section")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise PlacementError(f"{where} is not UTF-8 text (byte {err.start} is {data[err.start]:#04x})") from None
    if "\x00" in text:
        raise PlacementError(f"{where} is a binary file (it holds NUL bytes), not a YAML config")
    config = load_yaml(text, where)
    if not isinstance(config, dict):
        raise PlacementError(f"{where} must hold a YAML mapping, got {type(config).__name__}")
    if _has_interpolation(config):
        config = _resolve_interpolations(config, where)
    return config


def load_yaml(text: str, where: str, max_nodes: int = MAX_NODES) -> object:
    """One YAML document, strictly and boundedly read (see the module docstring); `where` names it."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, where, max_nodes)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = err.problem or err.context or "invalid YAML"
        raise PlacementError(f"{where} is not valid YAML{at}: {problem}") from None
    except yaml.YAMLError as err:
        raise PlacementError(f"{where} is not valid YAML: {quote(str(err).splitlines()[0])}") from None
    except RecursionError:
        raise PlacementError(f"{where} nests too deeply (at most {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()


def _line(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}"


def _check_nodes(root: yaml.Node, where: str, max_nodes: int) -> None:
    """Depth, expanded size, and the keys of every mapping, before any Python object is built.

    Walks the node graph as aliases expand it (a shared node counts every time it is reached), iteratively,
    so neither an alias bomb nor deep nesting costs more than the bounds allow.
    """
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    visited = 0
    checked: set[int] = set()
    while stack:
        node, depth = stack.pop()
        visited += 1
        if visited > max_nodes:
            raise PlacementError(
                f"{where} expands to more than {max_nodes:,} values (YAML aliases repeat what they point to); "
                "a job config is far smaller"
            )
        if depth > MAX_DEPTH:
            raise PlacementError(f"{where} nests more than {MAX_DEPTH} levels deep at {_line(node)}")
        if isinstance(node, yaml.MappingNode):
            if id(node) not in checked:
                checked.add(id(node))
                _check_keys(node, where)
            stack.extend((child, depth + 1) for pair in node.value for child in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif node.tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS:
            # Python refuses to convert integers over 4,300 digits (and no setting needs one this long).
            raise PlacementError(f"{where}, {_line(node)}: the number {quote(node.value, 40)} has too many digits")


def _check_keys(node: yaml.MappingNode, where: str) -> None:
    seen: dict[object, yaml.Node] = {}
    for key, _ in node.value:
        if key.tag == _MERGE_TAG:
            continue
        if not isinstance(key, yaml.ScalarNode):
            raise PlacementError(f"{where}, {_line(key)}: a key must be a plain name, not a list or mapping")
        if key.tag == _NULL_TAG:
            raise PlacementError(
                f"{where}, {_line(key)}: a key is empty or null ({quote(key.value)}); name it, or quote it"
            )
        # Keys compare as YAML reads them: `1` and `0x1` are the same int key, `"1"` is another.
        identity = (key.tag, key.value if key.tag == _STR_TAG else yaml.safe_load(key.value))
        first = seen.get(identity)
        if first is not None:
            raise PlacementError(
                f"{where}, {_line(key)}: key {quote(key.value)} is given twice (first at {_line(first)}); "
                "YAML would silently keep only the last"
            )
        seen[identity] = key


def _has_interpolation(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "${" in item:
                return True
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class _ResolveTimeout(Exception):
    """Raised inside OmegaConf by the alarm when resolving takes longer than MAX_RESOLVE_SECONDS."""


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after `seconds` (main thread only: signals reach no other thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise _ResolveTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _resolve_interpolations(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The config with every `${...}` resolved by OmegaConf, as plain dicts and lists again."""
    # Imported here: only configs that use interpolation pay for OmegaConf's import.
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _check_interpolation_cost(config, where)
    try:
        with _time_limit(MAX_RESOLVE_SECONDS):
            resolved = OmegaConf.to_container(OmegaConf.create(config), resolve=True)
    except _ResolveTimeout:
        raise PlacementError(
            f"{where}: resolving its ${{...}} interpolations took over {MAX_RESOLVE_SECONDS:g} s "
            "(does a value repeat another many times over?)"
        ) from None
    except MemoryError:
        raise PlacementError(f"{where}: its ${{...}} interpolations expand to more than fits in memory") from None
    except OmegaConfBaseException as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        key = getattr(err, "full_key", None)
        at = f" at {quote(key)}" if key else ""
        raise PlacementError(f"{where}: cannot resolve an interpolation{at}: {quote(first)}") from None
    except RecursionError:
        raise PlacementError(f"{where}: its ${{...}} interpolations refer to each other in a loop") from None
    assert isinstance(resolved, dict)  # OmegaConf.create of a dict is a DictConfig
    return resolved


class _InterpolationCost:
    """Characters and resolution steps each value's interpolations would expand to, memoised per key path,
    so the estimate itself is linear in the config while what it estimates may be exponential."""

    def __init__(self, config: dict[str, Any], where: str) -> None:
        self.config = config
        self.where = where
        self.memo: dict[tuple[str, ...], tuple[int, int]] = {}

    def of_path(self, path: tuple[str, ...], depth: int) -> tuple[int, int]:
        known = self.memo.get(path)
        if known is not None:
            return known
        if depth > MAX_REFERENCE_DEPTH:
            raise PlacementError(
                f"{self.where}: ${{...}} interpolations refer through more than {MAX_REFERENCE_DEPTH} keys at "
                f"{quote('.'.join(path))}"
            )
        self.memo[path] = (0, 1)  # a loop: OmegaConf reports it when it resolves
        value = _lookup(self.config, path)
        cost = self.of_value(value, path, depth) if value is not _ABSENT else (0, 1)
        self.memo[path] = cost
        return cost

    def of_value(self, value: object, path: tuple[str, ...], depth: int) -> tuple[int, int]:
        if isinstance(value, Mapping):
            keys = [str(k) for k in value]
        elif isinstance(value, list):
            keys = [str(i) for i in range(len(value))]
        elif isinstance(value, str):
            chars, steps = len(value), 1
            for reference in _REFERENCE.findall(value):
                target = _reference_path(reference, path)
                more_chars, more_steps = self.of_path(target, depth + 1)
                chars, steps = chars + more_chars, steps + more_steps
            return chars, steps
        else:
            return len(str(value)), 1
        chars, steps = 0, 1
        for key in keys:
            more_chars, more_steps = self.of_path((*path, key), depth + 1)
            chars, steps = chars + more_chars + len(key), steps + more_steps
        return chars, steps


_ABSENT = object()


def _reference_path(reference: str, here: tuple[str, ...]) -> tuple[str, ...]:
    """The key path `${reference}` names, seen from the value at `here` (OmegaConf's relative `..` rules)."""
    parts = reference.replace("[", ".").replace("]", "").split(".")
    if not reference.startswith("."):
        return tuple(p for p in parts if p)
    dots = len(reference) - len(reference.lstrip("."))
    base = here[: max(len(here) - dots, 0)]
    return (*base, *(p for p in parts if p))


def _lookup(config: object, path: tuple[str, ...]) -> object:
    node = config
    for key in path:
        if isinstance(node, Mapping):
            if key in node:
                node = node[key]
            elif key.lstrip("-").isdigit() and int(key) in node:
                node = node[int(key)]
            else:
                return _ABSENT
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _ABSENT
    return node


def _check_interpolation_cost(config: dict[str, Any], where: str) -> None:
    chars, steps = _InterpolationCost(config, where).of_path((), 0)
    if chars > MAX_RESOLVED_CHARS or steps > MAX_RESOLVE_STEPS:
        raise PlacementError(
            f"{where}: its ${{...}} interpolations would expand to about {chars:,} characters in {steps:,} steps "
            f"(at most {MAX_RESOLVED_CHARS:,} and {MAX_RESOLVE_STEPS:,}); does a value repeat another many times over?"
        )
