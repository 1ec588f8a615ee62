"""Supervised data: the embedded text-to-SQL set, masked blocks, and prompt tokens that carry no loss."""

from __future__ import annotations

import json
import math
import random
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from ebd2n.atomic import sha256_file
from ebd2n.config import DataConfig, dump_recipe, load_recipe, recipe_identity
from ebd2n.config.schema import ModelConfig
from ebd2n.data import (
    BlockReader,
    Cache,
    iter_full_validation,
    open_cache,
    prepare_cache,
    sql_synthetic,
    train_bpe,
    verify_cache,
)
from ebd2n.data.cache import MANIFEST
from ebd2n.data.cache_prepare import _request
from ebd2n.data.cache_verify import STAMP
from ebd2n.errors import UserError
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
    assert record.prompt.endswith(sql_synthetic.schema_text(record.schema))
    assert "customers(id, name, city, age)" in sql_synthetic.schema_text("shop").splitlines()
    assert record.completion == record.sql


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


# Supervised caches ------------------------------------------------------------------------------

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A ChatML template (the Qwen family's), as tokenizer_config.json carries it."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory's tokenizer files: a byte-level BPE trained offline on synthetic SQL
    records (with ChatML's special tokens), and a tokenizer_config.json with the chat template."""
    directory = tmp_path_factory.mktemp("model")
    records = _records(7, 300)
    tokenizer = train_bpe((f"{r.prompt}\n{r.completion}" for r in records), 320)
    tokenizer.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def _sql_data(tmp_path: Path, name: str = "cache", **supervised: Any) -> DataConfig:
    return DataConfig(
        source="sql-synthetic",
        cache_dir=str(tmp_path / name),
        supervised=supervised,
        synthetic_train_bytes=6_000,
        synthetic_validation_bytes=3_000,
        shard_tokens=700,
    )


def _validation_records(data: DataConfig) -> set[tuple[str, str]]:
    seed = sql_synthetic.split_seed(data.synthetic_seed, "validation")
    return {(r.prompt, r.completion) for r in sql_synthetic.iter_records(seed, data.synthetic_validation_bytes)}


def _decode(cache: Cache, ids: np.ndarray) -> tuple[str, str]:
    """(masked text, unmasked text) of a block's tokens, for a tokenizer that has the ids."""
    tokenizer = Tokenizer.from_file(str(cache.tokenizer_path))
    prompt, completion = ~ids[ids < 0], ids[ids >= 0]
    return tokenizer.decode(prompt.tolist(), skip_special_tokens=False), tokenizer.decode(
        completion.tolist(), skip_special_tokens=False
    )


def test_padded_cache_holds_one_masked_record_per_block(tmp_path: Path, model_dir: Path) -> None:
    data = _sql_data(tmp_path, packing=False).model_copy(update={"tokenizer": str(model_dir)})
    cache = prepare_cache(data, 400, progress=False, context_length=255)
    reader = BlockReader(cache, "validation", 256)
    records = _validation_records(data)
    seen = set()
    for index in range(reader.num_blocks):
        block = reader.read(np.array([index]))[0].numpy()
        masked = block < 0
        first_counted = int(np.argmax(~masked))
        assert not masked[first_counted:][: int((~masked).sum())].any()  # prompt, then the completion
        prompt, completion = _decode(cache, block[: first_counted + int((~masked).sum())])
        assert completion.endswith("<|im_end|>")  # the tokenizer_config's EOS
        seen.add((prompt.removesuffix("\n"), completion.removesuffix("<|im_end|>")))
        assert (block[first_counted + int((~masked).sum()) :] == ~cache.manifest["supervised"]["eos_id"]).all()
    assert seen == records
    assert cache.dtype == np.dtype("<i4") and cache.padded_block_len == 256
    assert cache.manifest["splits"]["validation"]["truncated"] == 0
    assert cache.manifest["request"]["model.context_length"] == 255


def test_packed_cache_is_the_records_in_a_row(tmp_path: Path, model_dir: Path) -> None:
    data = _sql_data(tmp_path, packing=True).model_copy(update={"tokenizer": str(model_dir / "tokenizer.json")})
    cache = prepare_cache(data, 400, progress=False)
    stream = np.fromfile(cache.directory / cache.manifest["splits"]["validation"]["shards"][0]["file"], dtype="<i4")
    eos = cache.manifest["supervised"]["eos_id"]
    ends = np.flatnonzero(stream == eos) + 1
    first = stream[: ends[0]]
    prompt, completion = _decode(cache, first)
    assert (prompt.removesuffix("\n"), completion.removesuffix("<|im_end|>")) in _validation_records(data)
    assert cache.padded_block_len is None and "model.context_length" not in cache.manifest["request"]
    counted = sum(int((targets != IGNORE_INDEX).sum()) for _, targets in iter_full_validation(cache, 31, 4))
    assert (
        counted
        == cache.validation_targets
        == int(
            (np.concatenate([np.fromfile(path, dtype="<i4") for path, _ in cache.shards("validation")])[1:] >= 0).sum()
        )
    )


def test_chat_format_renders_the_template(tmp_path: Path, model_dir: Path) -> None:
    data = _sql_data(tmp_path, format="chat", packing=False).model_copy(update={"tokenizer": str(model_dir)})
    cache = prepare_cache(data, 400, progress=False, context_length=255)
    block = BlockReader(cache, "validation", 256).read(np.array([0]))[0].numpy()
    prompt, completion = _decode(cache, block[: np.flatnonzero(block >= 0)[-1] + 1])  # without the padding
    assert prompt.startswith("<|im_start|>user\n") and prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    question = prompt.removeprefix("<|im_start|>user\n").removesuffix("<|im_end|>\n<|im_start|>assistant\n")
    assert completion.endswith("<|im_end|>")  # cut at the end of turn: no template newline after it
    assert (question, completion.removesuffix("<|im_end|>")) in _validation_records(data)
    assert cache.manifest["supervised"]["chat_template"] == CHATML


def test_chat_format_without_a_template_is_a_one_line_error(tmp_path: Path, model_dir: Path) -> None:
    data = _sql_data(tmp_path, format="chat").model_copy(update={"tokenizer": str(model_dir / "tokenizer.json")})
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(model_dir / "tokenizer.json", bare / "tokenizer.json")
    data = data.model_copy(update={"tokenizer": str(bare / "tokenizer.json")})
    with pytest.raises(UserError, match="data.supervised.format chat: data.tokenizer has no chat_template"):
        prepare_cache(data, 400, progress=False, context_length=127)
    assert not (tmp_path / "cache").exists()


def test_long_records_are_truncated_and_counted(tmp_path: Path, model_dir: Path) -> None:
    data = _sql_data(tmp_path, packing=False).model_copy(update={"tokenizer": str(model_dir)})
    cache = prepare_cache(data, 400, progress=False, context_length=40)
    split = cache.manifest["splits"]["validation"]
    blocks = np.fromfile(cache.directory / split["shards"][0]["file"], dtype="<i4")
    lengths = [len(prompt) + len(completion) for prompt, completion in _validation_records(data)]
    assert split["truncated"] == split["documents"] > 0 and all(length > 41 for length in lengths)
    assert split["tokens"] == 41 * split["documents"] and len(blocks) <= split["tokens"]
    assert split["without_completion"] <= split["truncated"]


def test_masked_ids_are_checked_against_the_vocabulary(tmp_path: Path, model_dir: Path) -> None:
    """Verification decodes ~id: an id beyond the vocabulary is caught when it appears masked too."""
    data = _sql_data(tmp_path, packing=True).model_copy(update={"tokenizer": str(model_dir)})
    cache = prepare_cache(data, 400, progress=False)
    verify_cache(cache.directory)
    shard = cache.shards("validation")[0][0]
    ids = np.fromfile(shard, dtype="<i4")
    assert (ids < 0).any() and (ids >= 0).any()
    ids[np.flatnonzero(ids < 0)[0]] = ~(cache.vocab_size + 5)  # a prompt token out of the vocabulary
    ids.tofile(shard)
    manifest = json.loads((cache.directory / MANIFEST).read_text())
    manifest["splits"]["validation"]["shards"][0]["sha256"] = sha256_file(shard)  # a consistent manifest
    (cache.directory / MANIFEST).write_text(json.dumps(manifest))
    (cache.directory / STAMP).unlink()
    with pytest.raises(UserError, match=f"holds token id {cache.vocab_size + 5}, not below"):
        verify_cache(cache.directory)


def test_language_model_caches_and_recipes_keep_their_identity(tmp_path: Path) -> None:
    """data.supervised, added later, is left out of requests and recipe dumps while unset."""
    recipe = load_recipe("demo")
    assert "supervised" not in dump_recipe(recipe)
    assert "data.supervised" not in _request(recipe.data, 300, None)
    assert _request(recipe.data, 300, None) == _request(recipe.data.model_copy(update={"supervised": None}), 300, None)
    supervised = load_recipe("demo", ["data.source=sql-synthetic", "data.supervised.packing=true"])
    assert "supervised" in dump_recipe(supervised)
    assert recipe_identity(supervised, "c" * 64) != recipe_identity(
        load_recipe("demo", ["data.source=sql-synthetic", "data.supervised.packing=false"]), "c" * 64
    )


# Training and validation on supervised caches ---------------------------------------------------


def _sft_recipe(tmp_path: Path, model_dir: Path, packing: bool, *overrides: str):
    context = 64 if packing else 160
    return load_recipe(
        "demo",
        [
            f"data.cache_dir={tmp_path / 'cache'}",
            f"runtime.output_dir={tmp_path / 'run'}",
            "data.source=sql-synthetic",
            f"data.supervised.packing={str(packing).lower()}",
            f"data.tokenizer={model_dir}",
            "data.synthetic_train_bytes=12000",
            "data.synthetic_validation_bytes=3000",
            "model.vocab_size=330",
            "model.layers=1",
            "model.width=32",
            "model.ffn_width=64",
            f"model.context_length={context}",
            f"training.batch_tokens={4 * context}",
            "training.micro_batch_size=2",
            f"training.epoch_tokens={16 * context}",
            f"training.max_tokens={32 * context}",
            "evaluation.subset_blocks=8",
            "evaluation.batch_size=4",
            *overrides,
        ],
    )


def test_engine_step_is_the_mean_over_counted_targets_whatever_the_micro_batches(
    model_dir: Path, tmp_path: Path
) -> None:
    """Rows with different numbers of completion tokens: micro-batches of 1, 2 or 4 rows take the same step."""
    from ebd2n.train.budget import budget_of
    from ebd2n.train.engine import SynchronousEngine

    blocks = _masked_blocks(3).repeat(2, 1)
    blocks[1, 6:9] = ~blocks[1, 6:9]  # row 1 has fewer counted targets
    blocks[2, :3] = ~blocks[2, :3]
    results, states = [], []
    for micro in (1, 2, 4):
        recipe = _sft_recipe(
            tmp_path,
            model_dir,
            True,
            "model.vocab_size=40",
            "model.context_length=12",
            "training.batch_tokens=48",
            f"training.micro_batch_size={micro}",
            "training.epoch_tokens=480",
            "training.max_tokens=960",
        )
        torch.manual_seed(0)
        engine = SynchronousEngine(recipe, budget_of(recipe), torch.device("cpu"))
        results.append(engine.train_step(blocks, 1e-2))
        states.append(engine.model.state_dict())
    counted = int((blocks[:, 1:] >= 0).sum())
    assert counted < 4 * 12
    for result, state in zip(results[1:], states[1:], strict=True):
        assert result.loss == pytest.approx(results[0].loss, rel=1e-5)
        assert result.accuracy == results[0].accuracy and round(result.accuracy * counted) == result.accuracy * counted
        assert all(torch.allclose(state[name], states[0][name], atol=1e-6) for name in state)


def test_packed_engine_weighs_completion_tokens_as_the_synchronous_one(model_dir: Path, tmp_path: Path) -> None:
    from ebd2n.train.budget import budget_of
    from ebd2n.train.engine import PackedEngine, SynchronousEngine

    blocks = _masked_blocks(4).repeat(2, 1)
    blocks[1, 6:10] = ~blocks[1, 6:10]
    results, weights = [], []
    for engine_class, extra in ((SynchronousEngine, []), (PackedEngine, ["decentralized.num_models=1"])):
        recipe = _sft_recipe(
            tmp_path,
            model_dir,
            True,
            "model.vocab_size=40",
            "model.context_length=12",
            "training.batch_tokens=48",
            "training.micro_batch_size=1",
            "training.epoch_tokens=480",
            "training.max_tokens=960",
            *extra,
        )
        torch.manual_seed(0)
        engine = engine_class(recipe, budget_of(recipe), torch.device("cpu"))
        results.append(engine.train_step(blocks, 1e-2))
        weights.append(engine.evaluation_model().state_dict())
    assert results[1].loss == pytest.approx(results[0].loss, rel=1e-5)
    assert results[1].accuracy == results[0].accuracy
    assert all(torch.allclose(weights[1][name], weights[0][name], atol=1e-6) for name in weights[0])


@pytest.mark.parametrize("packing", [True, False], ids=["packed", "padded"])
def test_supervised_run_resumes_bitwise_and_validates_completions(
    model_dir: Path, tmp_path: Path, packing: bool
) -> None:
    from ebd2n.evaluate import validate_run
    from ebd2n.train import train
    from ebd2n.train.checkpoint import load_checkpoint
    from ebd2n.train.records import read_metrics

    recipe = _sft_recipe(tmp_path, model_dir, packing)
    prepare_cache(recipe.data, recipe.model.vocab_size, progress=False, context_length=recipe.model.context_length)
    train(recipe, progress=False)
    sliced = recipe.model_copy(
        update={"runtime": recipe.runtime.model_copy(update={"output_dir": str(tmp_path / "sliced")})}
    )
    train(sliced, until_epoch=1, progress=False)
    train(sliced, resume=tmp_path / "sliced/checkpoints/epoch-1.pt", progress=False)
    whole, resumed = (load_checkpoint(tmp_path / name / "final.pt")["engine"]["model"] for name in ("run", "sliced"))
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)
    results = validate_run(tmp_path / "run")
    cache = open_cache(recipe.data.cache_dir)
    tokens = np.concatenate([np.fromfile(path, dtype="<i4") for path, _ in cache.shards("validation")])
    assert results["targets"] == cache.validation_targets < int((tokens >= 0).sum()) + 1
    assert 0 < results["accuracy"] < 1 and math.isfinite(results["loss"])
    epoch = [record for record in read_metrics(tmp_path / "run") if record["type"] == "epoch"][-1]
    assert 0 < epoch["val_accuracy"] < 1


# Records from files, and ebd2n prepare ----------------------------------------------------------


def _write_records(directory: Path, kind: str, prompt: str = "question", completion: str = "query") -> Path:
    """Synthetic SQL records under the given column names, as JSONL or Parquet."""
    records = _records(11, 60)
    rows = {prompt: [r.prompt for r in records], completion: [r.completion for r in records]}
    if kind == "jsonl":
        path = directory / "records.jsonl"
        path.write_text(
            "".join(json.dumps({prompt: p, completion: c}) + "\n" for p, c in zip(*rows.values(), strict=True)),
            encoding="utf-8",
        )
    else:
        path = directory / "records.parquet"
        pq.write_table(pa.table(rows), path)
    return path


def _prepare_cli(*settings: str) -> subprocess.CompletedProcess:
    argv = ["prepare", "demo", "--quiet", *(arg for setting in settings for arg in ("--set", setting))]
    return subprocess.run([sys.executable, "-m", "ebd2n", *argv], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_records_from_local_files(tmp_path: Path, model_dir: Path, kind: str) -> None:
    path = _write_records(tmp_path, kind)
    data = DataConfig(
        source="local",
        dataset=str(path),
        cache_dir=str(tmp_path / "cache"),
        tokenizer=str(model_dir),
        validation_fraction=0.2,
        supervised={"prompt_field": "question", "completion_field": "query", "packing": True},
    )
    cache = prepare_cache(data, 400, progress=False)
    records = Counter((r.prompt, r.completion) for r in _records(11, 60))
    stream = np.concatenate([np.fromfile(p, dtype="<i4") for p, _ in cache.shards("train")])
    ends = np.flatnonzero(stream == cache.manifest["supervised"]["eos_id"]) + 1
    decoded = Counter(
        (prompt.removesuffix("\n"), completion.removesuffix("<|im_end|>"))
        for prompt, completion in (_decode(cache, record) for record in np.split(stream, ends)[:-1])
    )
    assert decoded <= records and decoded.total() == cache.manifest["splits"]["train"]["documents"] == 48


def test_prepare_prints_records_and_truncation(tmp_path: Path, model_dir: Path) -> None:
    result = _prepare_cli(
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.source=sql-synthetic",
        "data.supervised.packing=false",
        f"data.tokenizer={model_dir}",
        "model.context_length=48",
        "data.synthetic_train_bytes=3000",
        "data.synthetic_validation_bytes=2000",
    )
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "cache" / MANIFEST).read_text())
    train, validation = manifest["splits"]["train"], manifest["splits"]["validation"]
    assert f"train: {train['documents']} records, {train['truncated']} truncated to 49 tokens" in result.stdout
    assert f"validation: {validation['documents']} records, {validation['truncated']} truncated" in result.stdout
    assert train["truncated"] > 0


def test_a_missing_record_field_is_a_one_line_error(tmp_path: Path, model_dir: Path) -> None:
    path = _write_records(tmp_path, "jsonl")
    result = _prepare_cli(
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.source=local",
        f"data.dataset={path}",
        f"data.tokenizer={model_dir}",
        "data.supervised.prompt_field=question",
        "data.supervised.packing=true",
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert f"data.supervised.completion_field completion: no such column in data.dataset {path}" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no cache, no staging, no lock left


def test_a_wrong_typed_record_field_names_key_and_file(tmp_path: Path, model_dir: Path) -> None:
    path = tmp_path / "records.parquet"
    pq.write_table(pa.table({"prompt": ["How many books are there?"], "completion": [3]}), path)
    data = DataConfig(
        source="local",
        dataset=str(path),
        cache_dir=str(tmp_path / "cache"),
        tokenizer=str(model_dir),
        supervised={"packing": True},
    )
    with pytest.raises(
        UserError, match=f"data.supervised.completion_field completion: column of data.dataset {path} holds int"
    ):
        prepare_cache(data, 400, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_supervised_keys_need_records(tmp_path: Path) -> None:
    result = _prepare_cli(f"data.cache_dir={tmp_path / 'cache'}", "data.source=sql-synthetic")
    assert result.returncode == 2 and "data.supervised" in result.stderr and result.stderr.strip().count("\n") == 0
    with pytest.raises(ValueError, match="data.source synthetic holds documents"):
        DataConfig(supervised={})


def test_truncation_counts_only_the_records_kept(tmp_path: Path, model_dir: Path) -> None:
    """data.prepare_validation_tokens stops mid-batch and mid-record: the padded cache keeps whole
    blocks, and counts only the records in them, as many as the reader reads."""
    data = _sql_data(tmp_path, packing=False).model_copy(
        update={"tokenizer": str(model_dir), "prepare_validation_tokens": 41 * 3 + 5}
    )
    cache = prepare_cache(data, 400, progress=False, context_length=40)
    split = cache.manifest["splits"]["validation"]
    assert (split["documents"], split["truncated"], split["tokens"]) == (3, 3, 41 * 3)
    assert BlockReader(cache, "validation", 41).num_blocks == 3
