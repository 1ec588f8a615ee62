"""The embedded corpus must be deterministic, sized as asked, grammatical where it claims to be,
and structured enough that context predicts the next word far better than word frequencies do."""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ebd2n.data import synthetic
from ebd2n.data.synthetic import Document, generate_document, generate_documents, split_seed
from ebd2n.data.synthetic_grammar import SECTIONS, Grammar, load_grammar
from ebd2n.errors import UserError

SINGULAR = {"is", "was", "has"}
PLURAL = {"are", "were", "have"}
GENDERED = {"she": {"she", "her", "herself"}, "he": {"he", "him", "his", "himself"}}


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    rng = random.Random(7)
    return [generate_document(rng) for _ in range(400)]


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9'-]+", text.lower())


def _entropy(counts: Counter) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values())


def test_generate_documents_same_seed_is_identical() -> None:
    result = generate_documents(11, 30_000)
    expected = generate_documents(11, 30_000)
    assert result == expected


def test_generate_documents_other_seed_differs() -> None:
    result = generate_documents(12, 30_000)
    expected = generate_documents(11, 30_000)
    assert result != expected


def test_generate_documents_identical_in_another_process() -> None:
    src = Path(synthetic.__file__).resolve().parents[2]
    code = (
        "import hashlib; from ebd2n.data.synthetic import generate_documents; "
        "print(hashlib.sha256('\\x00'.join(generate_documents(3, 20_000)).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(src)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    expected = _digest(generate_documents(3, 20_000))
    assert result.stdout.strip() == expected


@pytest.mark.parametrize("num_bytes", [1, 5_000, 60_000])
def test_generate_documents_stops_at_first_document_reaching_size(num_bytes: int) -> None:
    texts = generate_documents(5, num_bytes)
    total = sum(len(text.encode()) for text in texts)
    result = (total >= num_bytes, total - len(texts[-1].encode()) < num_bytes)
    expected = (True, True)
    assert result == expected


def test_generate_documents_zero_bytes_is_empty() -> None:
    result = generate_documents(5, 0)
    expected: list[str] = []
    assert result == expected


@pytest.mark.parametrize("pronoun", ["she", "he"])
def test_generate_document_gendered_pronouns_need_cast_member(documents: list[Document], pronoun: str) -> None:
    result = [
        doc.text
        for doc in documents
        if all(m.subject != pronoun for m in doc.cast) and GENDERED[pronoun] & set(_words(doc.text))
    ]
    expected: list[str] = []
    assert result == expected


def test_generate_document_sentence_initial_pronoun_continues_subject(documents: list[Document]) -> None:
    result = []
    for doc in documents:
        for previous, sentence in itertools.pairwise(doc.sentences):
            pronoun = sentence.split(" ", 1)[0].lower()
            referents = [member for member in doc.cast if member.subject == pronoun]
            continues = len(referents) == 1 and (
                referents[0].name.lower() in previous.lower() or previous.lower().startswith(pronoun + " ")
            )
            if pronoun in {"she", "he", "they"} and not continues:
                result.append((previous, sentence))
    expected: list[tuple[str, str]] = []
    assert result == expected


def test_generate_document_sample_has_pronoun_subjects(documents: list[Document]) -> None:
    starts = Counter(s.split(" ", 1)[0] for doc in documents for s in doc.sentences)
    result = {pronoun: starts[pronoun] > 20 for pronoun in ("She", "He", "They")}
    expected = {"She": True, "He": True, "They": True}
    assert result == expected


def test_generate_document_be_and_have_agree_with_cast(documents: list[Document]) -> None:
    result = []
    for doc in documents:
        for member in doc.cast:
            # "Mara and Tomas were" is a plural subject: skip names that end a conjunction.
            pattern = rf"(?<!and )\b{re.escape(member.name)} (is|are|was|were|has|have)\b"
            for verb in re.findall(pattern, doc.text, flags=re.IGNORECASE):
                if verb not in (PLURAL if member.plural else SINGULAR):
                    result.append(f"{member.name} {verb}")
    expected: list[str] = []
    assert result == expected


def test_generate_document_pronoun_subjects_agree(documents: list[Document]) -> None:
    pattern = r"\b(?:(?:she|he) (?:are|were|have)|they (?:is|was|has))\b"
    result = [m for doc in documents for m in re.findall(pattern, doc.text, flags=re.IGNORECASE)]
    expected: list[str] = []
    assert result == expected


def test_generate_document_keeps_one_tense(documents: list[Document]) -> None:
    narration = [re.sub(r'"[^"]*"', "", doc.text) for doc in documents]
    result = [text for text in narration if re.search(r"\b(?:was|were)\b", text) and re.search(r"\b(?:is|are)\b", text)]
    expected: list[str] = []
    assert result == expected


def test_generate_document_closing_returns_to_opening_place(documents: list[Document]) -> None:
    places = [place["full"] for place in load_grammar()["places"]]
    result = []
    for doc in documents:
        opening = max((p for p in places if p in doc.sentences[0]), key=len)
        if opening not in doc.text.rsplit("\n\n", 1)[1]:
            result.append(doc.text)
    expected: list[str] = []
    assert result == expected


def test_generate_documents_bigram_entropy_far_below_unigram() -> None:
    words = _words("\n".join(generate_documents(1, 1_000_000)))
    unigram = _entropy(Counter(words))
    conditional = _entropy(Counter(itertools.pairwise(words))) - _entropy(Counter(words[:-1]))
    result = unigram - conditional
    expected = 1.5
    assert result >= expected


def test_split_seed_is_stable() -> None:
    result = split_seed(42, "train")
    expected = int.from_bytes(hashlib.sha256(b"42:train").digest()[:8], "big")
    assert result == expected


def test_split_seed_differs_between_splits() -> None:
    result = split_seed(42, "train")
    expected = split_seed(42, "validation")
    assert result != expected


def test_split_seed_unknown_split_raises() -> None:
    with pytest.raises(UserError, match="unknown data split 'valid': use one of train, validation"):
        split_seed(42, "valid")


def test_load_grammar_default_has_every_section() -> None:
    result = set(SECTIONS) <= set(load_grammar()["templates"])
    expected = True
    assert result == expected


def test_load_grammar_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=re.escape(str(tmp_path / "nowhere.yaml"))):
        load_grammar(tmp_path / "nowhere.yaml")


def test_load_grammar_not_a_mapping_raises(tmp_path: Path) -> None:
    path = tmp_path / "grammar.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(UserError, match="must be a YAML mapping"):
        load_grammar(path)


def test_load_grammar_invalid_yaml_raises(tmp_path: Path) -> None:
    path = tmp_path / "grammar.yaml"
    path.write_text("verbs: [be\n")
    with pytest.raises(UserError, match="is not valid YAML"):
        load_grammar(path)


def _set_first_middle(raw: dict, text: str) -> None:
    raw["templates"]["middle"][0] = text


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda raw: _set_first_middle(raw, "{A} {A:fly} away."), r"slot \{A:fly\}.*verbs are written"),
        (lambda raw: _set_first_middle(raw, "{A} {A:walk} to {@nowhere}."), "unknown word list 'nowhere'"),
        (lambda raw: _set_first_middle(raw, "{A} {A:walk} {P.in}."), r"slot \{P.in\}.*unknown reference"),
        (lambda raw: _set_first_middle(raw, "{A} {A:walk {P}."), "unbalanced brace"),
        (lambda raw: _set_first_middle(raw, "{A} {A:walk} to {@relation}."), r"pairs take a role"),
        (lambda raw: _set_first_middle(raw, "{A} counts {#9-2} birds."), r"written \{#low-high\}"),
        (lambda raw: raw["places"][0].update(prep=True), r"places\[0\]\.prep is True, not text; quote it"),
        (lambda raw: raw.pop("verbs"), "has no 'verbs' section"),
        (lambda raw: raw["templates"].pop("closing"), "has no templates for 'closing'"),
        (lambda raw: raw["places"][0].pop("short"), "is malformed"),
    ],
)
def test_grammar_from_dict_bad_grammar_raises(edit, message: str) -> None:
    raw = copy.deepcopy(load_grammar())
    edit(raw)
    with pytest.raises(UserError, match=message):
        Grammar.from_dict(raw)
