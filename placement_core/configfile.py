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
import datetime
import json
import math
import re
import signal
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

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
_FLOAT_TAG = "tag:yaml.org,2002:float"
# The C loader where PyYAML was built with libyaml (about 10x faster on large files), else the Python one.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: YAML 1.1 octal: an integer written with a leading zero (`010` is 8 to PyYAML, 10 to a person).
_OCTAL = re.compile(r"[-+]?0[0-7_]+")


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """The safe loader without YAML 1.1's base-60 numbers: `1:0` is the text `1:0` (as in YAML 1.2 and as a
    person reads it, a placement `resource:process`), never the number 60. Octal (`010`) is refused in
    `_check_nodes` with the way to write it."""

    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, re.Pattern[str]]]]] = {
        first: [
            (tag, re.compile(r"(?=[^:]*$)" + regexp.pattern, regexp.flags) if tag in (_INT_TAG, _FLOAT_TAG) else regexp)
            for tag, regexp in resolvers
        ]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }


def quote(value: object, limit: int = MAX_QUOTE) -> str:
    """`value` in single quotes for an error message: at most `limit` characters, on one line."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text)} characters)"
    return "'" + text.encode("unicode_escape").decode("ascii").replace("\\\\", "\\") + "'"


def shown(value: object) -> str:
    """`value` for an error message as the user wrote it in YAML, not as Python's repr: `null`, `true`,
    `'text'`, `2024-01-01 (a date to YAML; quote it for text)`, `[...]`."""
    if isinstance(value, str):
        return quote(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return quote(str(value))[1:-1]
    if isinstance(value, datetime.date):
        return f"{value.isoformat()} (a date to YAML; quote it for text)"
    if isinstance(value, Unresolved):
        return repr(value)
    if isinstance(value, Mapping | list):
        try:  # YAML flow style, as the user would write it: {A: 1, B: 2}, ['0-1']
            text = yaml.safe_dump(value, default_flow_style=True, width=2**31 - 1, allow_unicode=True).strip()
        except yaml.YAMLError:
            text = json.dumps(value, default=str, ensure_ascii=False)
        return text.removesuffix("\n...").strip() if len(text) <= MAX_QUOTE else quote(text)
    return quote(str(value))


def yaml_kind(value: object) -> str:
    """What YAML made of a document or value, in YAML's words (`a list`, `text`, `null`)."""
    if value is None:
        return "null (nothing)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return shown(value)


def _yaml_float(number: float) -> str:
    """`number` as YAML 1.1 reads a float: with a dot in the mantissa and a sign in the exponent (`1.0e+308`;
    `1e308` and `1e+308` are text to it)."""
    text = repr(number)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent}"


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
    written = str(int(number)) if number.is_integer() and abs(number) < 1e18 else _yaml_float(number)
    return (
        f" ({quote(value)} is text, not a number: write {written} without quotes; a value from "
        "${oc.env:NAME} is always text, ${oc.decode:${oc.env:NAME}} makes it a number)"
    )


def read_config_bytes(data: bytes, where: str, path: Path | None = None, compose: bool = True) -> dict[str, Any]:
    """The config mapping in `data` (the bytes of the file named by `where`, for messages).

    A config with a Hydra `defaults:` list is composed as its training script would compose it (`compose`
    with the file at `path`); `compose=False` reads the file alone."""
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
        raise PlacementError(f"{where} must hold a YAML mapping, got {yaml_kind(config)}")
    if compose and config.get("defaults") is not None:
        if path is None:
            raise PlacementError(
                f"{where} has a Hydra defaults: list, which is composed from the files next to it; give the "
                "file's path rather than stdin, or --no-compose to read it alone"
            )
        return resolve_lazily(_compose(path, config, where), where)
    if _has_interpolation(config):
        config = _resolve_interpolations(config, where)
    return config


def _compose(path: Path, config: Mapping[str, Any], where: str) -> Any:
    """The config at `path` composed by hydra-core from its `defaults:` list, searching the file's directory
    and its `hydra.searchpath` (entries whose `${...}` cannot be resolved, such as an unset
    `${oc.env:EMBODIED_PATH}`, are left out and named if a defaults file is then missing). Not resolved."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    if path.suffix != ".yaml":
        raise PlacementError(
            f"{where}: Hydra composes only files named *.yaml (its defaults: list needs it); rename it, or give "
            "--no-compose to read it alone"
        )
    searchpath, skipped = _search_path(config, where)
    override = "hydra.searchpath=[" + ",".join(f"'{entry}'" for entry in searchpath) + "]"
    try:
        with (
            warnings.catch_warnings(),  # Hydra's upgrade notes (a defaults list without _self_) are not the user's error
            initialize_config_dir(config_dir=str(path.resolve().parent), version_base=None, job_name="rlplace"),
        ):
            warnings.simplefilter("ignore")
            return compose(config_name=path.stem, overrides=[override])
    except MissingConfigException as err:
        unset = (
            f"; left out of the search path because they cannot be resolved: {', '.join(skipped)}" if skipped else ""
        )
        looked = ", ".join([str(path.resolve().parent), *searchpath])
        raise PlacementError(
            f"{where}: a defaults file cannot be found: {quote(_first_line(err))} (searched {looked}{unset})"
        ) from None
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        raise PlacementError(f"{where}: Hydra cannot compose its defaults: list: {quote(_first_line(err))}") from None


def _search_path(config: Mapping[str, Any], where: str) -> tuple[list[str], list[str]]:
    """`hydra.searchpath` resolved: (the entries to search, the ones that cannot be resolved)."""
    from omegaconf import OmegaConf

    hydra_section = config.get("hydra")
    entries = hydra_section.get("searchpath") if isinstance(hydra_section, Mapping) else None
    if entries is None:
        return [], []
    if not isinstance(entries, list):
        raise PlacementError(f"{where}: hydra.searchpath must be a list of paths, got {quote(entries)}")
    resolved = resolve_lazily(OmegaConf.create({"searchpath": entries}), where)["searchpath"]
    usable, skipped = [], []
    for raw, entry in zip(entries, resolved, strict=True):
        if isinstance(entry, str) and not any(c in entry for c in "'\\"):
            usable.append(entry)
        else:
            skipped.append(str(raw))
    return usable, skipped


def load_yaml(text: str, where: str, max_nodes: int = MAX_NODES) -> object:
    """One YAML document, strictly and boundedly read (see the module docstring); `where` names it."""
    _check_flow_depth(text, where)
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


# Quoted scalars (a quote opens one only where a scalar can start) and comments: brackets inside them are text.
_QUOTED_OR_COMMENT = re.compile(r"""(?<![^\s\[{,:])(?:'(?:[^']|'')*'|"(?:[^"\\]|\\.)*")|(?<!\S)\#[^\n]*""", re.DOTALL)
_NOT_A_BRACKET = re.compile(r"[^\[\]{}\n]+")


def _check_flow_depth(text: str, where: str) -> None:
    """Refuse flow collections (`[[[...]]]`) nested deeper than MAX_DEPTH before libyaml sees them: its
    composer recurses in C once per level, and some 30,000 levels overflow the stack (a crash, no message).
    Brackets in quoted scalars and comments do not count; one in a plain scalar (`x[0]`) may, which can only
    make a document already near the limit count deeper. Linear: regexes leave only the brackets to count."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    brackets = _NOT_A_BRACKET.sub("", _QUOTED_OR_COMMENT.sub("", text))
    depth = 0
    line = 1
    for char in brackets:
        if char == "\n":
            line += 1
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise PlacementError(f"{where} nests more than {MAX_DEPTH} levels deep at line {line}")
        elif depth:
            depth -= 1


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
        # A plain `010` (style None or "" by loader; a quoted "010" is text and stays so).
        elif (
            node.tag == _INT_TAG
            and isinstance(node, yaml.ScalarNode)
            and not node.style
            and _OCTAL.fullmatch(node.value)
        ):
            sign = "-" if node.value.startswith("-") else ""
            decimal = sign + (node.value.lstrip("+-").lstrip("0").replace("_", "") or "0")
            raise PlacementError(
                f"{where}, {_line(node)}: {quote(node.value)} has a leading zero, which YAML 1.1 reads as the "
                f"octal number {yaml.safe_load(node.value)}; write {decimal} for the number, or quote it "
                f'("{node.value}") for text'
            )


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
    """The config with its `${...}` resolved value by value (see `resolve_lazily`), as plain dicts and lists."""
    # Imported here: only configs that use interpolation pay for OmegaConf's import.
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _check_interpolation_cost(config, where)
    unparsable: dict[str, Unresolved] = {}
    config = _set_aside_unparsable(config, unparsable)
    try:
        tree = OmegaConf.create(config)
    except OmegaConfBaseException as err:
        raise PlacementError(f"{where}: OmegaConf cannot read it: {quote(_first_line(err))}") from None
    resolved = resolve_lazily(tree, where)
    return _put_back(resolved, unparsable) if unparsable else resolved


# A string no config holds (NUL is refused on reading): the stand-in for a value OmegaConf cannot parse.
_UNPARSABLE = "\x00rlplace-unparsable-{}"


def _set_aside_unparsable(value: Any, unparsable: dict[str, Unresolved]) -> Any:
    """`value` with every string whose `${...}` OmegaConf cannot parse (`${a`) replaced by a stand-in, kept
    in `unparsable`: OmegaConf refuses such a string when the tree is made, and it must fail only when read."""
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar_parser import parse

    if isinstance(value, str):
        if "${" not in value:
            return value
        try:
            parse(value)
        except GrammarParseError as err:
            stand_in = _UNPARSABLE.format(len(unparsable))
            unparsable[stand_in] = Unresolved(value, f"it is not a valid interpolation ({_first_line(err)})")
            return stand_in
        return value
    if isinstance(value, dict):
        return {key: _set_aside_unparsable(item, unparsable) for key, item in value.items()}
    if isinstance(value, list):
        return [_set_aside_unparsable(item, unparsable) for item in value]
    return value


def _put_back(value: Any, unparsable: dict[str, Unresolved]) -> Any:
    if isinstance(value, str):
        return unparsable.get(value, value)
    if isinstance(value, dict):
        return {key: _put_back(item, unparsable) for key, item in value.items()}
    if isinstance(value, list):
        return [_put_back(item, unparsable) for item in value]
    return value


def resolve_lazily(tree: Any, where: str) -> dict[str, Any]:
    """A DictConfig as plain dicts and lists, each `${...}` resolved on its own, under the reference's
    resolvers. A value that cannot be resolved (an unset `${oc.env:X}`, an unknown resolver, a key that only a
    defaults file would have) becomes an `Unresolved` that fails only when rlplace reads that key: OmegaConf
    resolves a value when it is read, and so does the training script, so the rest of the file is the user's."""
    try:
        with _time_limit(MAX_RESOLVE_SECONDS), reference_resolvers():
            resolved = _plain(tree)
    except _ResolveTimeout:
        raise PlacementError(
            f"{where}: resolving its ${{...}} interpolations took over {MAX_RESOLVE_SECONDS:g} s "
            "(does a value repeat another many times over?)"
        ) from None
    except MemoryError:
        raise PlacementError(f"{where}: its ${{...}} interpolations expand to more than fits in memory") from None
    assert isinstance(resolved, dict)  # a DictConfig's plain form
    return resolved


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class Unresolved:
    """A `${...}` value that could not be resolved. Kept in the config in its place: reading it is an error
    (`jobconfig.config_value`, the grammar, every typed check that quotes it), leaving it alone is not."""

    __slots__ = ("reason", "text")

    def __init__(self, text: str, reason: str) -> None:
        self.text = text
        self.reason = reason

    def __repr__(self) -> str:
        return f"{self.text!r} (cannot be resolved: {self.reason})"

    __str__ = __repr__

    def error(self, path: str) -> PlacementError:
        return PlacementError(f"{path} is {self.text!r}, which cannot be resolved: {self.reason}")


def _plain(node: Any) -> object:
    """`node` (a DictConfig, ListConfig or value) as plain Python, interpolations resolved one by one."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, DictConfig):
        keys: list[Any] = list(node.keys())
        out: dict[Any, object] = {}
    elif isinstance(node, ListConfig):
        keys = list(range(len(node)))
        out_list: list[object] = []
    else:
        return node
    raw = OmegaConf.to_container(node, resolve=False)
    for key in keys:
        if OmegaConf.is_interpolation(node, key):
            value = _resolve_one(node, key, raw[key])
        elif OmegaConf.is_missing(node, key):
            value = "???"
        else:
            value = _plain(node[key])
        if isinstance(node, DictConfig):
            out[key] = value
        else:
            out_list.append(value)
    return out if isinstance(node, DictConfig) else out_list


def _resolve_one(parent: Any, key: Any, text: object) -> object:
    from omegaconf import Container, OmegaConf

    try:
        value = parent[key]
        if isinstance(value, Container):
            return OmegaConf.to_container(value, resolve=True)
        return value
    except (_ResolveTimeout, MemoryError):
        raise
    except RecursionError:
        return Unresolved(str(text), "its ${...} interpolations refer to each other in a loop")
    except Exception as err:  # any resolver may raise anything; only a read of this key fails
        return Unresolved(str(text), _resolution_reason(err))


def _resolution_reason(err: BaseException) -> str:
    first = _first_line(err)
    cause = err.__cause__
    if cause is not None and str(cause).strip():
        first = f"{first}: {_first_line(cause)}" if _first_line(cause) not in first else first
    return first


#: The resolvers the reference framework registers for its configs (same names, same meaning), available
#: while rlplace resolves a config. `torch.dtype` gives the dtype's name: rlplace has no torch, and no
#: placement setting is a dtype.
REFERENCE_RESOLVERS: dict[str, Any] = {
    "multiply": lambda x, y: x * y,
    "int_div": lambda x, y: x // y,
    "subtract": lambda x, y: x - y,
    "not": lambda x: not bool(x),
    "torch.dtype": lambda name: f"torch.{name}",
}


@contextlib.contextmanager
def reference_resolvers() -> Iterator[None]:
    """Register the reference's resolvers that are not registered yet, and remove them afterwards: a program
    that imports rlplace keeps its own OmegaConf resolvers, and gets none of ours."""
    from omegaconf import OmegaConf

    added = [name for name in REFERENCE_RESOLVERS if not OmegaConf.has_resolver(name)]
    for name in added:
        OmegaConf.register_new_resolver(name, REFERENCE_RESOLVERS[name])
    try:
        yield
    finally:
        for name in added:
            OmegaConf.clear_resolver(name)


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
