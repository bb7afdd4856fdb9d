"""Playbook files: one YAML (or JSON) document per version, read with clear errors and written for review in git."""

import json
import re
from pathlib import Path

import yaml

from ticketagent.playbooks.spec import PlaybookInvalid, PlaybookSpec

MAX_FILE_BYTES = 5 * 1024 * 1024


def spec_from_text(text: str, *, source: str = "file") -> dict:
    """The mapping a playbook file holds (validated later, as a whole); PlaybookInvalid when it is not one."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise PlaybookInvalid([f"{source}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MB"])
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlaybookInvalid([f"{source}: not valid YAML or JSON{where}: {problem}"]) from None
    if not isinstance(data, dict):
        raise PlaybookInvalid([f"{source}: a playbook file holds one mapping (name, guidance, categories, rules, "
                               f"reply, checks, articles)"])
    return data


_PATH = re.compile(r"^(?P<path>[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\]|\.[A-Za-z0-9_-]+)*): ")
_STEP = re.compile(r"\[(\d+)\]|\.?([A-Za-z0-9_-]+)")


def _node_at(root, path: str):
    """The deepest YAML node on `path` ("rules[2].when[0]") that the document has."""
    node = root
    for index, key in _STEP.findall(path):
        if index and isinstance(node, yaml.SequenceNode) and int(index) < len(node.value):
            node = node.value[int(index)]
        elif key and isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
            if found is None:
                return node
            node = found
        else:
            return node
    return node


def errors_with_lines(text: str, errors: list[str]) -> list[str]:
    """Each spec error ("rules[2].when[0]: …") prefixed with the line of `text` (a YAML document that parses)
    where its field is, or where the nearest field that is there starts ("line 14: rules[2].when[0]: …")."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return errors
    out = []
    for error in errors:
        match = _PATH.match(error)
        node = _node_at(root, match["path"]) if match and root is not None else None
        out.append(f"line {node.start_mark.line + 1}: {error}" if node is not None and node is not root else error)
    return out


def spec_from_file(path: Path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlaybookInvalid([f"{path}: cannot be read: {exc}"]) from None
    return spec_from_text(text, source=str(path))


class _Literal(str):
    """A multi-line string written as a YAML block (|), so a diff in git shows lines."""


def _literal(dumper, value):
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Literal, _literal)


def _blocks(node):
    if isinstance(node, dict):
        return {k: _blocks(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_blocks(v) for v in node]
    return _Literal(node) if isinstance(node, str) and "\n" in node else node


def spec_to_yaml(spec: PlaybookSpec) -> str:
    return yaml.dump(_blocks(spec.model_dump(mode="json")), Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     width=110)
