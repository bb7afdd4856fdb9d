"""The playbook editor's forms: a draft's sections as forms and formsets, the spec's errors beside their fields.

The forms only read what a person typed (comma lists, one condition a
line, checkboxes); the spec (`ticketagent.playbooks.spec`) decides what is
valid. An editor's `changes()` is the section's new value for
`draft_update()`; `place()` puts each "field.path: message" the spec
reports beside the field (a list entry's error on its row), and keeps the
whole list for the summary above the form.
"""

import re

from django import forms
from django.forms import formset_factory

from ticketagent.llm.schemas import ALLOWED_ACTIONS, Priority
from ticketagent.playbooks.files import errors_with_lines, spec_from_text, spec_to_yaml
from ticketagent.playbooks.spec import GUIDANCE_SECTIONS, PlaybookInvalid, PlaybookSpec, spec_validate

ACTION_CHOICES = [(a, a) for a in ALLOWED_ACTIONS]
PRIORITY_CHOICES = [(p, p) for p in Priority.__args__]  # type: ignore[attr-defined]
RULE_ACTIONS = ("forbid", "require", "approve")
# "rules[2].when[0]: unknown field 'plan'" -> section, entry, field path, line, message
_ERROR = re.compile(r"^(?P<section>[a-z_]+)(?:\[(?P<index>\d+)\])?(?:\.(?P<path>[a-z_.]+))?(?:\[(?P<line>\d+)\])?"
                    r": (?P<message>.*)$", re.S)


def comma_list(text: str) -> list[str]:
    return [word.strip() for word in (text or "").split(",") if word.strip()]


def error_parts(error: str) -> dict | None:
    """An error's section, entry index, field path, line and message (None when it names no field)."""
    match = _ERROR.match(error)
    if match is None:
        return None
    parts = match.groupdict()
    for key in ("index", "line"):
        parts[key] = int(parts[key]) if parts[key] is not None else None
    return parts


def _place_on(form: forms.Form, field: str | None, message: str) -> None:
    form.add_error(field if field in form.fields else None, message)


class EditorInvalid(Exception):
    """A form that cannot even be read (a number that is no number, a forged formset): its errors are on it."""


class Editor:
    """One section's form(s): built from the spec, or bound to what was posted."""

    section = ""

    def __init__(self):
        self.errors: list[str] = []

    def changes(self) -> dict:
        raise NotImplementedError

    def place(self, errors: list[str]) -> None:
        self.errors = list(errors)
        for error in errors:
            parts = error_parts(error)
            if parts is not None:
                self.place_one(parts)

    def place_one(self, parts: dict) -> None:
        raise NotImplementedError

    def all_forms(self) -> list[forms.Form]:
        return []

    @property
    def open(self) -> bool:
        """Shown open: it has errors to fix (the spec's, or a field that could not be read)."""
        return bool(self.errors) or any(form.is_bound and form.errors for form in self.all_forms())


# --------------------------------------------------------------------------- guidance


class GuidanceForm(forms.Form):
    tone = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 6}),
                           help_text="How replies sound. Placeholders: {{customer_name}}, {{ticket_id}}, "
                                     "{{metadata.<key>}} …")
    policies = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 6}),
                               help_text="What the agent may and may not say or promise.")
    escalation = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 4}),
                                 help_text="When a ticket goes to a person.")
    other = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 4}),
                            help_text="Anything else the agent should know.")


class GuidanceEditor(Editor):
    section = "guidance"

    def __init__(self, spec: PlaybookSpec, data=None):
        super().__init__()
        self.form = GuidanceForm(data, initial=spec.guidance.model_dump(), prefix="guidance")

    def all_forms(self) -> list[forms.Form]:
        return [self.form]

    def changes(self) -> dict:
        if not self.form.is_valid():
            raise EditorInvalid
        return {"guidance": {name: self.form.cleaned_data[name] for name in GUIDANCE_SECTIONS}}

    def place_one(self, parts: dict) -> None:
        _place_on(self.form, parts["path"] if parts["section"] == "guidance" else None, parts["message"])


# --------------------------------------------------------------------------- categories and rules (formsets)


class CategoryForm(forms.Form):
    name = forms.CharField(required=False, help_text="lower case: a-z, 0-9, - and _")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    priority = forms.ChoiceField(choices=PRIORITY_CHOICES, initial="normal", help_text="the default priority")
    keywords = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                               help_text="comma-separated")
    rt_queue = forms.CharField(required=False, label="RT queue")
    rt_owner = forms.CharField(required=False, label="RT owner")
    zendesk_group = forms.CharField(required=False, label="Zendesk group")

    @staticmethod
    def initial_of(category: dict) -> dict:
        return {**{k: category[k] for k in ("name", "description", "priority")},
                "keywords": ", ".join(category["keywords"]), **category["escalate_to"]}

    def value(self) -> dict:
        data = self.cleaned_data
        return {"name": data["name"], "description": data["description"], "priority": data["priority"],
                "keywords": comma_list(data["keywords"]),
                "escalate_to": {k: data[k] for k in ("rt_queue", "rt_owner", "zendesk_group")}}

    def field_of(self, path: str | None) -> str | None:
        return (path or "").removeprefix("escalate_to.") or None


class RuleForm(forms.Form):
    name = forms.CharField(required=False)
    when = forms.CharField(required=False, strip=False, label="Conditions", widget=forms.Textarea(attrs={"rows": 3}),
                           help_text="one a line, all must hold: <field> <is | is not | in | not in | contains> "
                                     "<value>, e.g. category is billing")
    forbid = forms.MultipleChoiceField(required=False, choices=ACTION_CHOICES, widget=forms.CheckboxSelectMultiple)
    require = forms.MultipleChoiceField(required=False, choices=ACTION_CHOICES, widget=forms.CheckboxSelectMultiple)
    approve = forms.MultipleChoiceField(required=False, choices=ACTION_CHOICES, widget=forms.CheckboxSelectMultiple,
                                        label="Hold for approval")

    @staticmethod
    def initial_of(rule: dict) -> dict:
        return {**rule, "when": "\n".join(rule["when"])}

    def value(self) -> dict:
        data = self.cleaned_data
        lines = (data["when"] or "").splitlines()
        self.when_lines = [n for n, line in enumerate(lines, start=1) if line.strip()]  # condition -> its line
        # A rule's fields this form does not edit (format 3: any_of, none_of, priority, status, escalate_to, ...)
        # are kept as they were: editing a rule's conditions or actions never drops what it decides.
        kept = {key: value for key, value in (self.initial or {}).items() if key not in self.fields}
        return {**kept, "name": data["name"], "when": [line for line in lines if line.strip()],
                **{key: list(data[key]) for key in RULE_ACTIONS}}

    def field_of(self, path: str | None) -> str | None:
        return path


class RowsEditor(Editor):
    """A list section (categories, rules) as a formset: change, add (the blank row), remove rows."""

    form_class: type[forms.Form] = forms.Form
    noun = ""
    extra = 1  # blank rows, each adds an entry when filled in

    def __init__(self, spec: PlaybookSpec, data=None):
        super().__init__()
        rows = [self.form_class.initial_of(entry) for entry in spec.model_dump(mode="json")[self.section]]
        formset = formset_factory(self.form_class, extra=self.extra, can_delete=True)
        self.formset = formset(data, initial=rows, prefix=self.section)
        self.kept: list[forms.Form] = []  # the rows sent to the spec, in order: its index -> the row

    def all_forms(self) -> list[forms.Form]:
        return list(self.formset.forms)

    @property
    def open(self) -> bool:
        return super().open or bool(self.formset.is_bound and self.formset.non_form_errors())

    def changes(self) -> dict:
        if not self.formset.is_valid():
            raise EditorInvalid
        self.kept = [form for i, form in enumerate(self.formset.forms)
                     if not form.cleaned_data.get("DELETE")
                     and (i < self.formset.initial_form_count() or self.given(form))]
        return {self.section: [form.value() for form in self.kept]}

    def given(self, form: forms.Form) -> bool:
        """A blank row (one to add an entry) that was filled in."""
        return form.has_changed()

    def place_one(self, parts: dict) -> None:
        index = parts["index"]
        if parts["section"] != self.section or index is None or index >= len(self.kept):
            return  # "categories: at least 1 item": in the summary above the rows
        form, message = self.kept[index], parts["message"]
        if parts["line"] is not None and parts["path"] == "when" and hasattr(form, "when_lines"):
            message = f"line {form.when_lines[parts['line']]}: {message}"
        _place_on(form, form.field_of(parts["path"]), message)

    @property
    def rows(self) -> list[tuple[forms.Form, bool]]:
        """Each row and whether it is the blank one that adds an entry."""
        existing = self.formset.initial_form_count()
        return [(form, i >= existing) for i, form in enumerate(self.formset.forms)]


class CategoriesEditor(RowsEditor):
    section, noun, form_class = "categories", "category", CategoryForm


class RulesEditor(RowsEditor):
    section, noun, form_class = "rules", "rule", RuleForm


# --------------------------------------------------------------------------- reply settings and checks


class ReplyForm(forms.Form):
    signature = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 3}))
    language = forms.CharField(required=False, help_text="“ticket” (the ticket's language) or a code: en, de, pt-BR")
    max_chars = forms.IntegerField(label="Longest reply (characters)", help_text="100 to 10000")


def phrase_lines(lists: dict[str, list[str]]) -> str:
    """Phrase lists as the editor shows them: one line per language, `en: phrase, phrase`."""
    return "\n".join(f"{code}: {', '.join(phrases)}" for code, phrases in lists.items())


def phrase_lists(text: str) -> dict[str, list[str]]:
    """The editor's `en: phrase, phrase` lines as lists per language; a line without a code is refused."""
    out: dict[str, list[str]] = {}
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        code, colon, phrases = line.partition(":")
        if not colon or not code.strip() or " " in code.strip():
            raise forms.ValidationError(f"line {number}: starts with a language code and a colon (en: …)")
        out.setdefault(code.strip().lower(), []).extend(comma_list(phrases))
    return out


class ChecksForm(forms.Form):
    min_chars = forms.IntegerField(label="Shortest reply (characters)", help_text="0 to 2000")
    scaffolding = forms.BooleanField(required=False, label="Hold replies that show the model's working")
    promises = forms.BooleanField(required=False, label="Hold replies that promise (the phrases below)")
    promise_phrases = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 6}), label="Promise phrases",
        help_text="one line per language: “en: we will refund, has been approved, by {date}”; * is up to three "
                  "words, {date} a day")
    money = forms.BooleanField(required=False, label="Hold replies that name an amount of money ($2,880, 40 EUR)")
    secrets = forms.BooleanField(required=False, label="Hold replies that give away a secret: keys, tokens, "
                                                       "passwords, one-time codes, internal notes")
    internal_fields = forms.CharField(required=False, label="Internal ticket fields",
                                      help_text="metadata fields written for the team only, comma-separated")
    personal_data = forms.BooleanField(required=False, label="Hold replies that copy back the customer's phone, "
                                                             "street address or email")
    made_up_contacts = forms.BooleanField(required=False,
                                          label="Hold replies with contact details not on the list below "
                                                "nor in the playbook's text")
    contacts_allowed = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Contact details a reply may give",
        help_text="one phone number, link or email address a line; the ticket is never a source")
    article_titles = forms.BooleanField(required=False, label="Hold replies that cite an article the playbook "
                                                              "does not have")
    article_cues = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Words that cite an article",
        help_text="one line per language: “en: article, guide, see”; a quoted title after one must exist")
    language = forms.BooleanField(required=False, label="Hold replies in the wrong language")

    def __init__(self, data=None, *, checks: dict, **kwargs):
        initial = {**checks, "promise_phrases": phrase_lines(checks["promise_phrases"]),
                   "article_cues": phrase_lines(checks["article_cues"]),
                   "contacts_allowed": "\n".join(checks["contacts_allowed"]),
                   "internal_fields": ", ".join(checks["internal_fields"])}
        super().__init__(data, initial=initial, **kwargs)

    def clean_promise_phrases(self):
        return phrase_lists(self.cleaned_data["promise_phrases"])

    def clean_article_cues(self):
        return phrase_lists(self.cleaned_data["article_cues"])

    def clean_contacts_allowed(self):
        return [line.strip() for line in self.cleaned_data["contacts_allowed"].splitlines() if line.strip()]

    def clean_internal_fields(self):
        return comma_list(self.cleaned_data["internal_fields"])


class ReplyEditor(Editor):
    section = "reply"

    def __init__(self, spec: PlaybookSpec, data=None):
        super().__init__()
        self.reply = ReplyForm(data, initial=spec.reply.model_dump(), prefix="reply")
        self.checks = ChecksForm(data, checks=spec.checks.model_dump(), prefix="checks")

    def all_forms(self) -> list[forms.Form]:
        return [self.reply, self.checks]

    def changes(self) -> dict:
        valid = [self.reply.is_valid(), self.checks.is_valid()]
        if not all(valid):
            raise EditorInvalid
        return {"reply": dict(self.reply.cleaned_data), "checks": dict(self.checks.cleaned_data)}

    def place_one(self, parts: dict) -> None:
        form = self.checks if parts["section"] == "checks" else self.reply
        _place_on(form, (parts["path"] or "").split(".")[0], parts["message"])


# --------------------------------------------------------------------------- articles (a formset)


class ArticleForm(forms.Form):
    title = forms.CharField(required=False)
    body = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 5}),
                           help_text="at most 5000 characters; the draft step quotes it")
    tags = forms.CharField(required=False, help_text="comma-separated")
    enabled = forms.BooleanField(required=False, initial=True, help_text="a disabled article is never searched")

    @staticmethod
    def initial_of(article: dict) -> dict:
        return {**article, "tags": ", ".join(article["tags"])}

    def value(self) -> dict:
        data = self.cleaned_data
        return {"title": data["title"], "body": data["body"], "tags": comma_list(data["tags"]),
                "enabled": data["enabled"]}

    def field_of(self, path: str | None) -> str | None:
        return path


class ArticlesEditor(RowsEditor):
    """Every article in one form: change, add (the blank rows), remove many at once."""

    section, noun, form_class, extra = "articles", "article", ArticleForm, 3

    def given(self, form: forms.Form) -> bool:
        data = form.cleaned_data
        return bool(data.get("title") or data.get("body") or data.get("tags"))


# --------------------------------------------------------------------------- the whole draft as YAML


class YamlForm(forms.Form):
    text = forms.CharField(strip=False, label="The playbook as YAML", widget=forms.Textarea(
        attrs={"rows": 24, "spellcheck": "false", "autocapitalize": "off", "class": "pb-yaml"}),
        help_text="the whole draft, as “Export (YAML)” writes it: a section left out takes its default; "
                  "nothing is saved unless all of it is valid")


class YamlEditor(Editor):
    """The whole draft as one YAML document: every section replaced at once, or nothing (each error with its line)."""

    section = "yaml"

    def __init__(self, spec: PlaybookSpec, data=None):
        super().__init__()
        self.form = YamlForm(data, initial={"text": spec_to_yaml(spec)}, prefix="yaml")

    def all_forms(self) -> list[forms.Form]:
        return [self.form]

    def changes(self) -> dict:
        if not self.form.is_valid():
            raise EditorInvalid
        text = self.form.cleaned_data["text"]
        data = spec_from_text(text, source="YAML")
        try:
            spec = spec_validate(data)
        except PlaybookInvalid as exc:
            raise PlaybookInvalid(errors_with_lines(text, exc.errors)) from None
        return spec.model_dump(mode="json", exclude={"format"})

    def place_one(self, parts: dict) -> None:
        return  # every error is in the list above the text, with its line


# a draft's sections by name: each is a form of its own, saved on its own (its URL: `playbook-<section>`)
EDITORS = {cls.section: cls for cls in (GuidanceEditor, CategoriesEditor, RulesEditor, ReplyEditor, ArticlesEditor,
                                        YamlEditor)}


def section_editors(spec: PlaybookSpec, bound: Editor | None = None) -> dict:
    """Every editor of a draft's page, unbound, except the one that was posted (with its errors)."""
    editors = {section: cls(spec) for section, cls in EDITORS.items()}
    if bound is not None:
        editors[bound.section] = bound
    return editors


class NewPlaybookForm(forms.Form):
    name = forms.CharField(max_length=100, label="Name", help_text="what tasks and people call it, e.g. “Acme”")
    start = forms.TypedChoiceField(coerce=int, empty_value=None, required=False, label="Start from",
                                   help_text="empty: one category (“other”), no rules, no articles; or a copy of a "
                                             "version of a playbook, under the new name")

    def __init__(self, *args, versions, **kwargs):
        super().__init__(*args, **kwargs)
        self.versions = {v.pk: v for v in versions}
        self.fields["start"].choices = [("", "an empty playbook")] + [
            (v.pk, f"a copy of {v.label}" + (" (draft)" if v.is_draft else "")) for v in versions]

    def clean_start(self):
        pk = self.cleaned_data["start"]
        return None if pk is None else self.versions[pk]


class RenameForm(forms.Form):
    name = forms.CharField(max_length=100, label="New name",
                           help_text="the draft takes it too; published versions keep the name they were "
                                     "published with")


# --------------------------------------------------------------------------- a playbook file


class PlaybookFileForm(forms.Form):
    file = forms.FileField(help_text="YAML or JSON, as `manage.py playbook export` writes it. A file whose name is "
                                     "an existing playbook's becomes that playbook's draft.")
    publish = forms.BooleanField(required=False, label="Publish it at once",
                                 help_text="Otherwise it stays a draft you can read and change first.")

    def spec_data(self) -> dict:
        """The mapping the file holds; PlaybookInvalid naming the file when it is not one."""
        upload = self.cleaned_data["file"]
        try:
            text = upload.read().decode("utf-8")
        except UnicodeDecodeError:
            raise PlaybookInvalid([f"{upload.name}: not UTF-8 text"]) from None
        return spec_from_text(text, source=upload.name)
