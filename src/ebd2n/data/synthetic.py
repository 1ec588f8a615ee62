"""The embedded synthetic corpus: deterministic English-like stories generated from a seed.

Why: the embedded demo campaign must train without downloading anything, and a small model's loss
on its text must fall far below the unigram entropy. So each story carries structure a model can
learn: subject–verb agreement in one tense per story, pronouns that agree with a small recurring
cast, and long-range references (the object and place of the opening return in later sentences
and in the closing). The grammar and lexicon live in grammar.yaml beside this module (package data).

Only seeded `random.Random` instances are used, and nothing depends on string hashing, so a seed
gives byte-identical text in every process.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import yaml

from ebd2n.errors import UserError
from ebd2n.yamlio import load_yaml

SPLITS = ("train", "validation")

PAST_SHARE = 0.7  # stories told in the past tense; the others stay in the present throughout
TRIO_SHARE = 0.4  # casts of three rather than two
BODY_SENTENCES = (5, 24)  # with the opening and closing: about 80-400 words a story
DIALOGUE_SHARE = 0.25  # body sentences that are quoted speech
CALLBACKS = (1, 2)  # long-range references to the opening, placed in the body's second half
CLOSING_SENTENCES = (1, 2)
STAY_SHARE = 0.5  # chance the previous subject stays the subject, which gives pronouns a referent
PRONOUN_SHARE = 0.6  # chance such a subject is said as a pronoun (when that pronoun is unambiguous)
COUNTED_SHARE = 0.3  # stories whose found object is a counted plural ("14 silver coins")
COUNT_RANGE = (2, 24)

SECTIONS = ("title", "opening", "introduce", "middle", "dialogue", "callback", "closing")
_NUMBER_ROLES = ("A", "B", "O", "sg", "pl")
_CHARACTER_FIELDS = {
    "": "name", "subj": "subject", "obj": "object", "poss": "possessive", "voc": "vocative", "i": "first_person",
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
_FIRST_ALNUM = re.compile(r"[A-Za-z0-9]")
_MINOR_WORDS = frozenset({"a", "an", "and", "the", "of", "in", "on", "at", "by", "to", "from"})


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
class Document:
    """One story: its text, its cast (for agreement checks) and its sentences in order."""

    text: str
    cast: tuple[Character, ...]
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class _Slot:
    kind: Literal["character", "thing", "place", "cast", "verb", "word", "number"]
    role: str
    field: str
    present: bool = False
    low: int = 0
    high: int = 0
    capital: bool = False


_Template = tuple[str | _Slot, ...]


@dataclass(frozen=True)
class _Place:
    full: str
    short: str
    preposition: str


@dataclass(frozen=True)
class _Noun:
    singular: str
    plural: str
    adjectives: tuple[str, ...]


@dataclass(frozen=True)
class _Thing:
    """The object a story's hero finds; every later mention agrees with its number."""

    noun: str
    full: str
    indefinite: str
    pronoun: str
    plural: bool


@dataclass(frozen=True)
class Grammar:
    """The compiled grammar: templates parsed and checked once, so a typo fails before generation."""

    characters: tuple[Character, ...]
    places: tuple[_Place, ...]
    nouns: tuple[_Noun, ...]
    verbs: dict[str, tuple[str, str, str, str]]
    words: dict[str, tuple[Any, ...]]
    sticky: frozenset[str]
    templates: dict[str, tuple[_Template, ...]]

    @classmethod
    def from_dict(cls, raw: dict, source: str = "synthetic grammar") -> Grammar:
        """Validate and compile the plain YAML that `load_grammar` returns."""
        try:
            return _compile_grammar(raw, source)
        except (LookupError, TypeError, ValueError, AttributeError) as error:
            raise UserError(
                f"{source} is malformed ({type(error).__name__}: {error}); "
                f"compare it with the shipped {grammar_path()}"
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


def split_seed(seed: int, split: str) -> int:
    """Distinct, stable seeds per split, so validation stories are not a replay of training ones."""
    if split not in SPLITS:
        raise UserError(f"unknown data split {split!r}: use one of {', '.join(SPLITS)}")
    digest = hashlib.sha256(f"{seed}:{split}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def generate_documents(seed: int, num_bytes: int) -> list[str]:
    """All stories of iter_documents, for callers that want the whole split at once."""
    return list(iter_documents(seed, num_bytes))


def iter_documents(seed: int, num_bytes: int) -> Iterator[str]:
    """Stories from one seeded stream until their UTF-8 size reaches num_bytes (the last crosses it)."""
    grammar = default_grammar()
    rng = random.Random(seed)
    produced = 0
    while produced < num_bytes:
        text = generate_document(rng, grammar).text
        produced += len(text.encode("utf-8"))
        yield text


def generate_document(rng: random.Random, grammar: Grammar | None = None) -> Document:
    """One story drawn from rng; the cast comes back too so agreement can be checked."""
    return _Story(rng, grammar or default_grammar()).write()


class _Story:
    """The state one story keeps: tense, cast, place, object, sticky words and the last subject."""

    def __init__(self, rng: random.Random, grammar: Grammar) -> None:
        self.rng = rng
        self.grammar = grammar
        self.past = rng.random() < PAST_SHARE
        self.cast = tuple(rng.sample(grammar.characters, 3 if rng.random() < TRIO_SHARE else 2))
        self.place = rng.choice(grammar.places)
        self.thing = _draw_thing(rng, grammar.nouns)
        names = [member.name for member in self.cast]
        self.cast_phrase = ", ".join(names[:-1]) + " and " + names[-1]
        subjects = [member.subject for member in self.cast]
        self.unambiguous = tuple(m for m in self.cast if subjects.count(m.subject) == 1)
        self.sticky: dict[str, Any] = {}
        self.previous: Character | None = None
        self.subject: Character | None = None

    def write(self) -> Document:
        hero, others = self.cast[0], self.cast[1:]
        title = _title_case(self._render(self._pick("title"), hero, others[0], at_start=False))
        head = [self._say(self._pick("opening"), hero, others[0])]
        head += [self._say(self._pick("introduce"), hero, other) for other in others]
        body = self._body(hero, others)
        count = self.rng.randint(*CLOSING_SENTENCES)
        endings = self.rng.sample(self.grammar.templates["closing"], count)
        closing = [self._say(template, hero, others[0]) for template in endings]
        paragraphs = [" ".join(part) for part in (head, body, closing)]
        return Document("\n\n".join([title, *paragraphs]), self.cast, tuple(head + body + closing))

    def _body(self, hero: Character, others: tuple[Character, ...]) -> list[str]:
        size = self.rng.randint(*BODY_SENTENCES)
        callbacks = set(self.rng.sample(range(size // 2, size), self.rng.randint(*CALLBACKS)))
        sentences = []
        for index in range(size):
            if index in callbacks:
                sentences.append(self._say(self._pick("callback"), hero, self.rng.choice(others)))
            else:
                section = "dialogue" if self.rng.random() < DIALOGUE_SHARE else "middle"
                sentences.append(self._say(self._pick(section), *self._pair()))
        return sentences

    def _pair(self) -> tuple[Character, Character]:
        """Roles A and B; A often keeps the last subject so the next sentence can say 'she'."""
        if self.previous is not None and self.rng.random() < STAY_SHARE:
            first = self.previous
        else:
            first = self.rng.choice(self.cast)
        return first, self.rng.choice([member for member in self.cast if member != first])

    def _pick(self, section: str) -> _Template:
        return self.rng.choice(self.grammar.templates[section])

    def _say(self, template: _Template, a: Character, b: Character) -> str:
        self.subject = None
        sentence = _capitalise(self._render(template, a, b, at_start=True))
        self.previous = self.subject
        return sentence

    def _render(self, template: _Template, a: Character, b: Character, at_start: bool) -> str:
        return "".join(
            part if isinstance(part, str) else self._fill(part, a, b, at_start and index == 0)
            for index, part in enumerate(template)
        )

    def _fill(self, slot: _Slot, a: Character, b: Character, at_start: bool) -> str:
        text = self._slot_text(slot, a, b, at_start)
        return _capitalise(text) if slot.capital else text

    def _slot_text(self, slot: _Slot, a: Character, b: Character, at_start: bool) -> str:
        if slot.kind == "character":
            member = a if slot.role == "A" else b
            return self._mention(member, at_start) if slot.field == "name" else getattr(member, slot.field)
        if slot.kind == "thing":
            return getattr(self.thing, slot.field)
        if slot.kind == "place":
            return getattr(self.place, slot.field)
        if slot.kind == "cast":
            return self.cast_phrase
        if slot.kind == "verb":
            forms = self.grammar.verbs[slot.field]
            present = slot.present or not self.past
            return forms[(0 if present else 2) + (0 if self._plural(slot.role, a, b) else 1)]
        if slot.kind == "word":
            entry = self._word(slot.field)
            if slot.role:
                entry = entry[1] if self._plural(slot.role, a, b) else entry[0]
            return self._render(entry, a, b, at_start=False)
        return str(self.rng.randint(slot.low, slot.high))

    def _mention(self, member: Character, at_start: bool) -> str:
        """A character by name, or by pronoun when it continues the last sentence's subject."""
        if self.subject is not None:
            return member.name
        self.subject = member
        if (
            at_start
            and member == self.previous
            and member in self.unambiguous
            and self.rng.random() < PRONOUN_SHARE
        ):
            return member.subject
        return member.name

    def _plural(self, role: str, a: Character, b: Character) -> bool:
        if role == "A":
            return a.plural
        if role == "B":
            return b.plural
        if role == "O":
            return self.thing.plural
        return role == "pl"

    def _word(self, name: str) -> Any:
        """A lexicon entry; sticky lists answer the same entry for the whole story."""
        entries = self.grammar.words[name]
        if name not in self.grammar.sticky:
            return self.rng.choice(entries)
        if name not in self.sticky:
            self.sticky[name] = self.rng.choice(entries)
        return self.sticky[name]


def _draw_thing(rng: random.Random, nouns: tuple[_Noun, ...]) -> _Thing:
    noun = rng.choice(nouns)
    adjective = rng.choice(noun.adjectives)
    if rng.random() < COUNTED_SHARE:
        count = rng.randint(*COUNT_RANGE)
        return _Thing(
            f"the {noun.plural}", f"the {count} {adjective} {noun.plural}",
            f"{count} {adjective} {noun.plural}", "them", True,
        )
    article = "an" if adjective[0] in "aeiou" else "a"
    return _Thing(
        f"the {noun.singular}", f"the {adjective} {noun.singular}",
        f"{article} {adjective} {noun.singular}", "it", False,
    )


def _capitalise(text: str) -> str:
    """Upper-case the first letter, skipping an opening quote ('"the key is cold," ...')."""
    match = _FIRST_ALNUM.search(text)
    if match is None:
        return text
    i = match.start()
    return text[:i] + text[i].upper() + text[i + 1:]


def _title_case(text: str) -> str:
    words = text.split(" ")
    return " ".join(w if i and w in _MINOR_WORDS else _capitalise(w) for i, w in enumerate(words))


def _compile_grammar(raw: dict, source: str) -> Grammar:
    for section in ("pronouns", "characters", "places", "objects", "verbs", "words", "templates"):
        if not raw.get(section):
            raise UserError(f"{source} has no {section!r} section (or it is empty)")
    _check_text(raw, source, "")
    verbs = {lemma: _verb_forms(lemma, forms) for lemma, forms in raw["verbs"].items()}
    pairs = {name: isinstance(entries[0], list) for name, entries in raw["words"].items()}

    def compile_text(text: str) -> _Template:
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
        places=tuple(_Place(p["full"], p["short"], p["prep"]) for p in raw["places"]),
        nouns=tuple(_Noun(o["sg"], o["pl"], tuple(o["adj"])) for o in raw["objects"]),
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
    members += [
        Character(g["name"], g["voc"], p["subj"], p["obj"], p["poss"], p["i"], True) for g in raw["group"]
    ]
    return tuple(members)


def _verb_forms(lemma: str, forms: list[str]) -> tuple[str, str, str, str]:
    """(present plural, present singular, past plural, past singular); only `be` lists all four."""
    if len(forms) == 4:
        return tuple(forms)  # type: ignore[return-value]
    third_person, past = forms
    return (lemma, third_person, past, past)


def _compile_template(text: str, source: str, verbs: dict, pairs: dict[str, bool]) -> _Template:
    parts: list[str | _Slot] = []
    position = 0
    for match in _SLOT.finditer(text):
        parts += [text[position:match.start()], _parse_slot(match.group(1), text, source, verbs, pairs)]
        position = match.end()
    parts.append(text[position:])
    literals = [part for part in parts if isinstance(part, str)]
    if any("{" in part or "}" in part for part in literals):
        raise UserError(f"{source}: unbalanced brace in template {text!r}")
    return tuple(part for part in parts if part != "")


def _parse_slot(body: str, text: str, source: str, verbs: dict, pairs: dict[str, bool]) -> _Slot:
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
        return _Slot("word", role, name, capital=capital)
    if spec.startswith("#"):
        low, dash, high = spec[1:].partition("-")
        if not (dash and low.isdigit() and high.isdigit() and int(low) <= int(high)):
            raise bad("numbers are written {#low-high}")
        return _Slot("number", "", "", low=int(low), high=int(high), capital=capital)
    if ":" in spec:
        role, _, rest = spec.partition(":")
        lemma, bar, flag = rest.partition("|")
        if role not in _NUMBER_ROLES or lemma not in verbs or (bar and flag != "now"):
            raise bad(f"verbs are written {{ROLE:lemma}} or {{ROLE:lemma|now}} with ROLE in "
                      f"{', '.join(_NUMBER_ROLES)} and a lemma listed under 'verbs'")
        return _Slot("verb", role, lemma, present=bool(bar), capital=capital)
    role, _, attribute = spec.partition(".")
    if role not in _REFERENCES or attribute not in _REFERENCES[role][1]:
        raise bad(f"unknown reference; use one of {', '.join(_REFERENCES)} with the attributes "
                  "listed at the top of grammar.yaml")
    kind, fields = _REFERENCES[role]
    return _Slot(kind, role, fields[attribute], capital=capital)  # type: ignore[arg-type]
