"""The synthetic corpus's grammar, compiled once from grammar.yaml so a typo fails before any story is written.

grammar.yaml is package data; data.synthetic writes the stories from the compiled Grammar. A
template is text with {...} slots: characters (A, B, the cast), the found object (O), the place
(P), verbs that agree in number and tense with a role, word lists and numbers; the top of
grammar.yaml lists them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import yaml

from ebd2n.errors import UserError
from ebd2n.yamlio import load_yaml

SECTIONS = ("title", "opening", "introduce", "middle", "dialogue", "callback", "closing")
_NUMBER_ROLES = ("A", "B", "O", "sg", "pl")
_CHARACTER_FIELDS = {
    "": "name",
    "subj": "subject",
    "obj": "object",
    "poss": "possessive",
    "voc": "vocative",
    "i": "first_person",
}
_REFERENCES: dict[str, tuple[str, dict[str, str]]] = {
    # role: (kind, {attribute in the template: field of the object it reads})
    "A": ("character", _CHARACTER_FIELDS),
    "B": ("character", _CHARACTER_FIELDS),
    "O": ("thing", {"": "noun", "full": "full", "indef": "indefinite", "it": "pronoun"}),
    "P": ("place", {"": "full", "short": "short", "prep": "preposition"}),
    "cast": ("cast", {"": "cast"}),
}
_SLOT = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class Character:
    """One member of a story's cast, with the pronoun forms that agree with it."""

    name: str
    vocative: str
    subject: str
    object: str
    possessive: str
    first_person: str
    plural: bool


@dataclass(frozen=True)
class Slot:
    """One {...} of a template, parsed: what it reads (kind, role, field) and how it is said."""

    kind: Literal["character", "thing", "place", "cast", "verb", "word", "number"]
    role: str
    field: str
    present: bool = False
    low: int = 0
    high: int = 0
    capital: bool = False


Template = tuple[str | Slot, ...]
"""A template's literal text and slots, in order."""


@dataclass(frozen=True)
class Place:
    """Where a story happens: its full name, a short one, and the preposition it takes."""

    full: str
    short: str
    preposition: str


@dataclass(frozen=True)
class Noun:
    """A kind of object a hero may find, in both numbers, with the adjectives it takes."""

    singular: str
    plural: str
    adjectives: tuple[str, ...]


@dataclass(frozen=True)
class Grammar:
    """The compiled grammar: templates parsed and checked once, so a typo fails before generation."""

    characters: tuple[Character, ...]
    places: tuple[Place, ...]
    nouns: tuple[Noun, ...]
    verbs: dict[str, tuple[str, str, str, str]]
    words: dict[str, tuple[Any, ...]]
    sticky: frozenset[str]
    templates: dict[str, tuple[Template, ...]]

    @classmethod
    def from_dict(cls, raw: dict, source: str = "synthetic grammar") -> Grammar:
        """Validate and compile the plain YAML that `load_grammar` returns."""
        try:
            return _compile_grammar(raw, source)
        except (LookupError, TypeError, ValueError, AttributeError) as error:
            raise UserError(
                f"{source} is malformed ({type(error).__name__}: {error}); compare it with the shipped {grammar_path()}"
            ) from error


def grammar_path() -> Path:
    """The grammar shipped in this package (ebd2n/data/grammar.yaml)."""
    return files(__package__) / "grammar.yaml"


def load_grammar(path: Path | None = None) -> dict:
    """The grammar file as plain YAML data; a missing or broken file is the user's to fix."""
    path = grammar_path() if path is None else path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"synthetic grammar not found: {path}") from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as error:
        detail = " ".join(str(error).split())
        raise UserError(f"synthetic grammar {path} is not valid YAML: {detail}") from error
    if not isinstance(raw, dict):
        raise UserError(f"synthetic grammar {path} must be a YAML mapping of sections, like the shipped one")
    return raw


def default_grammar() -> Grammar:
    """The shipped grammar, compiled once per process."""
    return _compiled(grammar_path())


@functools.lru_cache(maxsize=4)
def _compiled(path: Path) -> Grammar:
    return Grammar.from_dict(load_grammar(path), source=f"synthetic grammar {path}")


def _compile_grammar(raw: dict, source: str) -> Grammar:
    for section in ("pronouns", "characters", "places", "objects", "verbs", "words", "templates"):
        if not raw.get(section):
            raise UserError(f"{source} has no {section!r} section (or it is empty)")
    _check_text(raw, source, "")
    verbs = {lemma: _verb_forms(lemma, forms) for lemma, forms in raw["verbs"].items()}
    pairs = {name: isinstance(entries[0], list) for name, entries in raw["words"].items()}

    def compile_text(text: str) -> Template:
        return _compile_template(text, source, verbs, pairs)

    words = {
        name: tuple(tuple(map(compile_text, e)) if pairs[name] else compile_text(e) for e in entries)
        for name, entries in raw["words"].items()
    }
    templates = {}
    for section in SECTIONS:
        if not raw["templates"].get(section):
            raise UserError(f"{source} has no templates for {section!r}")
        templates[section] = tuple(compile_text(text) for text in raw["templates"][section])
    return Grammar(
        characters=_characters(raw["characters"], raw["pronouns"]),
        places=tuple(Place(p["full"], p["short"], p["prep"]) for p in raw["places"]),
        nouns=tuple(Noun(o["sg"], o["pl"], tuple(o["adj"])) for o in raw["objects"]),
        verbs=verbs,
        words=words,
        sticky=frozenset(raw.get("sticky", ())),
        templates=templates,
    )


def _check_text(value: Any, source: str, where: str) -> None:
    """Every leaf must be text: YAML reads a bare `on` or `no` as a boolean."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_text(item, source, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_text(item, source, f"{where}[{index}]")
    elif not isinstance(value, str):
        raise UserError(f"{source}: {where} is {value!r}, not text; quote it ('{value}')")


def _characters(raw: dict, pronouns: dict) -> tuple[Character, ...]:
    """Named singles take their gender's pronouns; groups are plural ('the twins ... they')."""
    members = []
    for gender in ("female", "male"):
        p = pronouns[gender]
        members += [Character(n, n, p["subj"], p["obj"], p["poss"], p["i"], False) for n in raw[gender]]
    p = pronouns["group"]
    members += [Character(g["name"], g["voc"], p["subj"], p["obj"], p["poss"], p["i"], True) for g in raw["group"]]
    return tuple(members)


def _verb_forms(lemma: str, forms: list[str]) -> tuple[str, str, str, str]:
    """(present plural, present singular, past plural, past singular); only `be` lists all four."""
    if len(forms) == 4:
        return tuple(forms)  # type: ignore[return-value]
    third_person, past = forms
    return (lemma, third_person, past, past)


def _compile_template(text: str, source: str, verbs: dict, pairs: dict[str, bool]) -> Template:
    parts: list[str | Slot] = []
    position = 0
    for match in _SLOT.finditer(text):
        parts += [text[position : match.start()], _parse_slot(match.group(1), text, source, verbs, pairs)]
        position = match.end()
    parts.append(text[position:])
    literals = [part for part in parts if isinstance(part, str)]
    if any("{" in part or "}" in part for part in literals):
        raise UserError(f"{source}: unbalanced brace in template {text!r}")
    return tuple(part for part in parts if part != "")


def _parse_slot(body: str, text: str, source: str, verbs: dict, pairs: dict[str, bool]) -> Slot:
    """One {...} slot; every mistake names the slot and its template."""

    def bad(problem: str) -> UserError:
        return UserError(f"{source}: slot {{{body}}} in template {text!r}: {problem}")

    capital = body.startswith("^")
    spec = body.removeprefix("^")
    if spec.startswith("@"):
        name, _, role = spec[1:].partition(":")
        if name not in pairs:
            raise bad(f"unknown word list {name!r}")
        if pairs[name] != bool(role) or (role and role not in _NUMBER_ROLES):
            raise bad("lists of [singular, plural] pairs take a role ({@list:A}); plain lists take none")
        return Slot("word", role, name, capital=capital)
    if spec.startswith("#"):
        low, dash, high = spec[1:].partition("-")
        if not (dash and low.isdigit() and high.isdigit() and int(low) <= int(high)):
            raise bad("numbers are written {#low-high}")
        return Slot("number", "", "", low=int(low), high=int(high), capital=capital)
    if ":" in spec:
        role, _, rest = spec.partition(":")
        lemma, bar, flag = rest.partition("|")
        if role not in _NUMBER_ROLES or lemma not in verbs or (bar and flag != "now"):
            raise bad(
                f"verbs are written {{ROLE:lemma}} or {{ROLE:lemma|now}} with ROLE in "
                f"{', '.join(_NUMBER_ROLES)} and a lemma listed under 'verbs'"
            )
        return Slot("verb", role, lemma, present=bool(bar), capital=capital)
    role, _, attribute = spec.partition(".")
    if role not in _REFERENCES or attribute not in _REFERENCES[role][1]:
        raise bad(
            f"unknown reference; use one of {', '.join(_REFERENCES)} with the attributes "
            "listed at the top of grammar.yaml"
        )
    kind, fields = _REFERENCES[role]
    return Slot(kind, role, fields[attribute], capital=capital)  # type: ignore[arg-type]
