"""Supervised data: the embedded text-to-SQL set, masked blocks, and prompt tokens that carry no loss."""

from __future__ import annotations

import random
import sqlite3

import pytest
import torch
import torch.nn.functional as F

from ebd2n.config.schema import ModelConfig
from ebd2n.data import sql_synthetic
from ebd2n.model import GPT
from ebd2n.targets import IGNORE_INDEX, split_block
from ebd2n.train.validation import block_batches, evaluate_sequences

TINY_MODEL = ModelConfig(vocab_size=40, layers=1, width=16, heads=2, ffn_width=32, context_length=12)


def _records(seed: int, count: int) -> list[sql_synthetic.SqlRecord]:
    rng = random.Random(seed)
    return [sql_synthetic.generate_record(rng) for _ in range(count)]


def test_every_generated_query_executes_against_its_schema() -> None:
    records = _records(0, 400)
    forms = {record.sql.split(" FROM ")[0].split("(")[0] for record in records}
    for record in records:
        connection = sqlite3.connect(":memory:")
        connection.executescript(sql_synthetic.schema_ddl(record.schema))
        connection.execute(record.sql).fetchall()
        connection.close()
    assert {record.schema for record in records} == set(sql_synthetic.SCHEMAS)
    assert len(forms) > 5 and any(" JOIN " in record.sql for record in records)


def test_a_broken_query_is_refused_by_sqlite() -> None:
    """The check above can fail: sqlite3 rejects a query naming a column its schema lacks."""
    connection = sqlite3.connect(":memory:")
    connection.executescript(sql_synthetic.schema_ddl("shop"))
    with pytest.raises(sqlite3.OperationalError, match="no such column"):
        connection.execute("SELECT salary FROM customers;")


def test_the_set_is_a_pure_function_of_its_seed() -> None:
    first = list(sql_synthetic.iter_records(sql_synthetic.split_seed(3, "train"), 20_000))
    again = list(sql_synthetic.iter_records(sql_synthetic.split_seed(3, "train"), 20_000))
    other = list(sql_synthetic.iter_records(sql_synthetic.split_seed(4, "train"), 20_000))
    validation = list(sql_synthetic.iter_records(sql_synthetic.split_seed(3, "validation"), 20_000))
    assert first == again
    assert first != other and first != validation
    assert sum(len(r.prompt.encode()) + len(r.completion.encode()) for r in first) >= 20_000


def test_prompt_holds_question_and_schema_completion_is_the_sql() -> None:
    record = _records(1, 1)[0]
    assert record.prompt.startswith(record.question)
    assert "CREATE TABLE" in record.prompt and record.completion == record.sql


def test_split_block_of_an_unmasked_block_is_the_plain_shift() -> None:
    blocks = torch.randint(0, 40, (3, 9))
    inputs, targets = split_block(blocks)
    assert torch.equal(inputs, blocks[:, :-1]) and torch.equal(targets, blocks[:, 1:])


def test_split_block_decodes_masked_tokens() -> None:
    blocks = torch.tensor([[~5, ~6, 7, 8, ~0]])
    inputs, targets = split_block(blocks)
    assert inputs.tolist() == [[5, 6, 7, 8]]
    assert targets.tolist() == [[IGNORE_INDEX, 7, 8, IGNORE_INDEX]]


def _masked_blocks(seed: int) -> torch.Tensor:
    """Two blocks of 13 tokens whose first 6 are prompt (masked) tokens."""
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 40, (2, 13), generator=generator)
    blocks[:, :6] = ~blocks[:, :6]
    return blocks


def test_validation_counts_only_completion_targets() -> None:
    torch.manual_seed(0)
    model = GPT(TINY_MODEL)
    blocks = _masked_blocks(1)
    loss, accuracy, count = evaluate_sequences(model, block_batches(blocks, 1), torch.device("cpu"), amp=False)
    tokens = torch.where(blocks < 0, ~blocks, blocks)
    with torch.no_grad():
        logits, _ = model(tokens[:, :-1])
    completion = logits[:, 5:]  # predictions of tokens 6..12, the completion
    expected = F.cross_entropy(completion.reshape(-1, 40), tokens[:, 6:].reshape(-1))
    assert count == 2 * 7
    assert loss == pytest.approx(float(expected), rel=1e-6)
    assert accuracy == pytest.approx(float((completion.argmax(-1) == tokens[:, 6:]).float().mean()))


def test_prompt_tokens_carry_no_loss_or_gradient() -> None:
    """The training loss and its gradient are those of the mean cross-entropy over the completion
    tokens alone, computed by hand; a masked token that is only a target (trailing padding) can
    change without changing either."""
    torch.manual_seed(0)
    model = GPT(TINY_MODEL)
    blocks = _masked_blocks(2)
    blocks[:, -2:] = ~torch.tensor([3, 4])  # trailing padding: masked, the last one never an input

    def loss_and_grads(block: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        _, loss = model(*split_block(block))
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    loss, grads = loss_and_grads(blocks)
    model.zero_grad()
    tokens = torch.where(blocks < 0, ~blocks, blocks)
    logits, _ = model(tokens[:, :-1])
    by_hand = F.cross_entropy(logits[:, 5:10].reshape(-1, 40), tokens[:, 6:11].reshape(-1))  # completion: 6..10
    by_hand.backward()
    assert float(loss) == pytest.approx(by_hand.item(), rel=1e-6)
    assert all(torch.allclose(a, p.grad, atol=1e-7) for a, p in zip(grads, model.parameters(), strict=True))
    changed = blocks.clone()
    changed[:, -1] = ~torch.tensor(9)
    changed_loss, changed_grads = loss_and_grads(changed)
    assert torch.equal(loss, changed_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, changed_grads, strict=True))
    unmasked_loss, _ = loss_and_grads(tokens)  # the same tokens, all carrying loss: another loss
    assert not torch.equal(unmasked_loss, loss)
