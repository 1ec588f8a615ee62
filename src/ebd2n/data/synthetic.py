"""The embedded synthetic corpus: deterministic English-like stories generated from a seed.

Why: the embedded demo campaign must train without downloading anything, and a small model's loss
on its text must fall far below the unigram entropy. So each story carries structure a model can
learn: subject–verb agreement in one tense per story, pronouns that agree with a small recurring
cast, and long-range references (the object and place of the opening return in later sentences
and in the closing). The grammar and lexicon live in grammar.yaml, compiled by data.synthetic_grammar.

Only seeded `random.Random` instances are used, and nothing depends on string hashing, so a seed
gives byte-identical text in every process.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Any

from ebd2n.data.synthetic_grammar import Character, Grammar, Noun, Slot, Template, default_grammar
from ebd2n.errors import UserError

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

_FIRST_ALNUM = re.compile(r"[A-Za-z0-9]")
_MINOR_WORDS = frozenset({"a", "an", "and", "the", "of", "in", "on", "at", "by", "to", "from"})


@dataclass(frozen=True)
class Document:
    """One story: its text, its cast (for agreement checks) and its sentences in order."""

    text: str
    cast: tuple[Character, ...]
    sentences: tuple[str, ...]


@dataclass(frozen=True)
class _Thing:
    """The object a story's hero finds; every later mention agrees with its number."""

    noun: str
    full: str
    indefinite: str
    pronoun: str
    plural: bool


def split_seed(seed: int, split: str) -> int:
    """Distinct, stable seeds per split, so validation stories are not a replay of training ones."""
    if split not in SPLITS:
        raise UserError(f"unknown data split {split!r}: use one of {', '.join(SPLITS)}")
    digest = hashlib.sha256(f"{seed}:{split}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def generate_documents(seed: int, num_bytes: int) -> list[str]:
    """Stories from one seeded stream until their UTF-8 size reaches num_bytes (the last crosses it)."""
    grammar = default_grammar()
    rng = random.Random(seed)
    texts: list[str] = []
    produced = 0
    while produced < num_bytes:
        texts.append(generate_document(rng, grammar).text)
        produced += len(texts[-1].encode("utf-8"))
    return texts


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

    def _pick(self, section: str) -> Template:
        return self.rng.choice(self.grammar.templates[section])

    def _say(self, template: Template, a: Character, b: Character) -> str:
        self.subject = None
        sentence = _capitalise(self._render(template, a, b, at_start=True))
        self.previous = self.subject
        return sentence

    def _render(self, template: Template, a: Character, b: Character, at_start: bool) -> str:
        return "".join(
            part if isinstance(part, str) else self._fill(part, a, b, at_start and index == 0)
            for index, part in enumerate(template)
        )

    def _fill(self, slot: Slot, a: Character, b: Character, at_start: bool) -> str:
        text = self._slot_text(slot, a, b, at_start)
        return _capitalise(text) if slot.capital else text

    def _slot_text(self, slot: Slot, a: Character, b: Character, at_start: bool) -> str:
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
        if at_start and member == self.previous and member in self.unambiguous and self.rng.random() < PRONOUN_SHARE:
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


def _draw_thing(rng: random.Random, nouns: tuple[Noun, ...]) -> _Thing:
    noun = rng.choice(nouns)
    adjective = rng.choice(noun.adjectives)
    if rng.random() < COUNTED_SHARE:
        count = rng.randint(*COUNT_RANGE)
        return _Thing(
            f"the {noun.plural}",
            f"the {count} {adjective} {noun.plural}",
            f"{count} {adjective} {noun.plural}",
            "them",
            True,
        )
    article = "an" if adjective[0] in "aeiou" else "a"
    return _Thing(
        f"the {noun.singular}",
        f"the {adjective} {noun.singular}",
        f"{article} {adjective} {noun.singular}",
        "it",
        False,
    )


def _capitalise(text: str) -> str:
    """Upper-case the first letter, skipping an opening quote ('"the key is cold," ...')."""
    match = _FIRST_ALNUM.search(text)
    if match is None:
        return text
    i = match.start()
    return text[:i] + text[i].upper() + text[i + 1 :]


def _title_case(text: str) -> str:
    words = text.split(" ")
    return " ".join(w if i and w in _MINOR_WORDS else _capitalise(w) for i, w in enumerate(words))
