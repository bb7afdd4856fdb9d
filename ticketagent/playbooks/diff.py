"""Two playbook versions side by side, field by field.

Lists are matched by their entries' names (categories, rules) or titles
(articles), not by position, so a reordered list shows no change and a
renamed entry shows as one removed and one added.
"""

from dataclasses import dataclass

from ticketagent.playbooks.spec import PlaybookSpec

KEYED = {"categories": "name", "rules": "name", "articles": "title", "facts": "name"}
# A rule's fields listed even when empty; its others (format 3: any_of, category, status, ...) only when set.
RULE_FIELDS_ALWAYS = ("when", "forbid", "require", "approve")


@dataclass(frozen=True)
class FieldChange:
    field: str  # e.g. "rules[Never close billing].forbid"
    before: object  # None: the field did not exist
    after: object

    @property
    def kind(self) -> str:
        if self.before is None:
            return "added"
        return "removed" if self.after is None else "changed"


def _flat(node, prefix: str, out: dict) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            _flat(value, f"{prefix}.{key}" if prefix else key, out)
    else:
        out[prefix] = node


def spec_fields(spec: PlaybookSpec) -> dict[str, object]:
    """Every field of a spec by its path (a list entry keyed by its name or title)."""
    out: dict[str, object] = {}
    for section, value in spec.model_dump(mode="json").items():
        if section in KEYED:
            key = KEYED[section]
            for entry in value:
                _flat({k: v for k, v in entry.items() if k != key and (
                    section != "rules" or k in RULE_FIELDS_ALWAYS or v not in (None, [], "", False))},
                      f"{section}[{entry[key]}]", out)
        else:
            _flat(value, section, out)
    return out


def specs_diff(before: PlaybookSpec, after: PlaybookSpec) -> list[FieldChange]:
    """The fields that differ: in the later version's order, then those it no longer has."""
    a, b = spec_fields(before), spec_fields(after)
    changes = [FieldChange(path, a.get(path), value) for path, value in b.items() if a.get(path) != value]
    return changes + [FieldChange(path, value, None) for path, value in a.items() if path not in b]
