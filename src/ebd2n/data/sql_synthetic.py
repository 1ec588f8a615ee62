"""The embedded text-to-SQL set: questions over a few small schemas and the SQLite queries that answer them.

Why: a supervised fine-tune must run offline, and its completions must be real SQL, so a model's
output can be executed. Each record's prompt is the question followed by the schema, one line
per table with its columns (short, so records fit small contexts); its completion is one SQL
statement that sqlite3 accepts against the schema's CREATE TABLE statements (`schema_ddl`).
Records come from one seeded `random.Random`, so the set is a pure function of its seed.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ebd2n.errors import UserError

SPLITS = ("train", "validation")


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    """id (INTEGER PRIMARY KEY), text, number, or ref (a foreign key to `refers`)."""
    values: tuple[str | int, ...] = ()
    """Constants questions may compare this column with."""
    refers: str = ""


@dataclass(frozen=True)
class Table:
    name: str
    singular: str
    plural: str
    label: str
    """The text column that names a row ("the customer named ...")."""
    columns: tuple[Column, ...]

    def kinds(self, kind: str) -> list[Column]:
        return [column for column in self.columns if column.kind == kind]


def _t(name: str, singular: str, plural: str, label: str, *columns: Column) -> Table:
    return Table(name, singular, plural, label, (Column("id", "id"), *columns))


SCHEMAS: dict[str, tuple[Table, ...]] = {
    "shop": (
        _t(
            "customers",
            "customer",
            "customers",
            "name",
            Column("name", "text", ("Ada", "Bruno", "Chen", "Dalia", "Emre", "Fatima")),
            Column("city", "text", ("Paris", "Rouen", "Lyon", "Lille", "Nantes")),
            Column("age", "number", (18, 25, 30, 42, 60)),
        ),
        _t(
            "products",
            "product",
            "products",
            "title",
            Column("title", "text", ("lamp", "chair", "kettle", "desk", "mirror")),
            Column("category", "text", ("kitchen", "office", "garden", "bedroom")),
            Column("price", "number", (5, 20, 50, 120, 300)),
        ),
        _t(
            "orders",
            "order",
            "orders",
            "status",
            Column("customer_id", "ref", refers="customers"),
            Column("product_id", "ref", refers="products"),
            Column("status", "text", ("open", "shipped", "returned")),
            Column("quantity", "number", (1, 2, 3, 5, 10)),
        ),
    ),
    "school": (
        _t(
            "teachers",
            "teacher",
            "teachers",
            "name",
            Column("name", "text", ("Moreau", "Singh", "Okafor", "Larsen", "Kowalski")),
            Column("subject", "text", ("maths", "physics", "history", "music")),
            Column("salary", "number", (2000, 2500, 3100, 4000)),
        ),
        _t(
            "students",
            "student",
            "students",
            "name",
            Column("name", "text", ("Ines", "Jonas", "Kemal", "Lea", "Mateo", "Nora")),
            Column("grade", "number", (6, 7, 8, 9, 10)),
            Column("teacher_id", "ref", refers="teachers"),
        ),
        _t(
            "exams",
            "exam",
            "exams",
            "topic",
            Column("student_id", "ref", refers="students"),
            Column("topic", "text", ("algebra", "optics", "empires", "rhythm")),
            Column("score", "number", (40, 55, 70, 85, 100)),
        ),
    ),
    "library": (
        _t(
            "authors",
            "author",
            "authors",
            "name",
            Column("name", "text", ("Austen", "Borges", "Calvino", "Duras", "Eco")),
            Column("country", "text", ("England", "Argentina", "Italy", "France")),
            Column("born", "number", (1775, 1899, 1914, 1923, 1932)),
        ),
        _t(
            "books",
            "book",
            "books",
            "title",
            Column("title", "text", ("Emma", "Ficciones", "Baron", "Lover", "Rose")),
            Column("author_id", "ref", refers="authors"),
            Column("pages", "number", (120, 250, 400, 640)),
            Column("year", "number", (1815, 1944, 1957, 1984, 1980)),
        ),
        _t(
            "loans",
            "loan",
            "loans",
            "reader",
            Column("book_id", "ref", refers="books"),
            Column("reader", "text", ("Paul", "Quinn", "Rosa", "Sami")),
            Column("days", "number", (7, 14, 21, 28)),
        ),
    ),
}
"""The schemas, by name: a few tables each, linked by foreign keys."""

_TYPES = {"id": "INTEGER PRIMARY KEY", "text": "TEXT NOT NULL", "number": "INTEGER NOT NULL", "ref": "INTEGER NOT NULL"}


def schema_text(schema: str) -> str:
    """The schema as prompts show it: `table(column, ...)` per line."""
    return "\n".join(f"{table.name}({', '.join(c.name for c in table.columns)})" for table in SCHEMAS[schema])


def schema_ddl(schema: str) -> str:
    """The schema's CREATE TABLE statements, one per line, as sqlite3 runs them."""
    statements = []
    for table in SCHEMAS[schema]:
        columns = [f"{column.name} {_TYPES[column.kind]}" for column in table.columns]
        columns += [f"FOREIGN KEY ({c.name}) REFERENCES {c.refers}(id)" for c in table.kinds("ref")]
        statements.append(f"CREATE TABLE {table.name} ({', '.join(columns)});")
    return "\n".join(statements)


@dataclass(frozen=True)
class SqlRecord:
    """One question over one schema and the query that answers it."""

    schema: str
    question: str
    sql: str

    @property
    def prompt(self) -> str:
        return f"{self.question}\nTables:\n{schema_text(self.schema)}"

    @property
    def completion(self) -> str:
        return self.sql


def split_seed(seed: int, split: str) -> int:
    """Distinct, stable seeds per split, so validation questions are not a replay of training ones."""
    if split not in SPLITS:
        raise UserError(f"unknown data split {split!r}: use one of {', '.join(SPLITS)}")
    return int.from_bytes(hashlib.sha256(f"sql:{seed}:{split}".encode()).digest()[:8], "big")


def iter_records(seed: int, num_bytes: int) -> Iterator[SqlRecord]:
    """Records from one seeded stream until their prompts and completions reach num_bytes of UTF-8."""
    rng = random.Random(seed)
    produced = 0
    while produced < num_bytes:
        record = generate_record(rng)
        produced += len(record.prompt.encode("utf-8")) + len(record.completion.encode("utf-8"))
        yield record


def generate_record(rng: random.Random) -> SqlRecord:
    """One record drawn from rng: a schema, a table of it, a question form."""
    schema = rng.choice(sorted(SCHEMAS))
    tables = SCHEMAS[schema]
    question, sql = rng.choice(_FORMS)(rng, rng.choice(tables), tables)
    return SqlRecord(schema, question, sql)


def _literal(value: str | int) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def _count(rng: random.Random, table: Table, tables: tuple[Table, ...]) -> tuple[str, str]:
    return f"How many {table.plural} are there?", f"SELECT COUNT(*) FROM {table.name};"


def _filter_number(rng: random.Random, table: Table, tables: tuple[Table, ...]) -> tuple[str, str]:
    column = rng.choice(table.kinds("number"))
    value = rng.choice(column.values)
    word, op = rng.choice((("more than", ">"), ("less than", "<"), ("exactly", "=")))
    return (
        f"List the {table.label} of every {table.singular} whose {column.name} is {word} {value}.",
        f"SELECT {table.label} FROM {table.name} WHERE {column.name} {op} {value};",
    )


def _filter_text(rng: random.Random, table: Table, tables: tuple[Table, ...]) -> tuple[str, str]:
    column = rng.choice(table.kinds("text"))
    value = rng.choice(column.values)
    return (
        f"Show all {table.plural} with {column.name} {value}.",
        f"SELECT * FROM {table.name} WHERE {column.name} = {_literal(value)};",
    )


def _aggregate(rng: random.Random, table: Table, tables: tuple[Table, ...]) -> tuple[str, str]:
    column = rng.choice(table.kinds("number"))
    word, function = rng.choice((("average", "AVG"), ("largest", "MAX"), ("smallest", "MIN"), ("total", "SUM")))
    return (
        f"What is the {word} {column.name} of the {table.plural}?",
        f"SELECT {function}({column.name}) FROM {table.name};",
    )


def _group(rng: random.Random, table: Table, tables: tuple[Table, ...]) -> tuple[str, str]:
    column = rng.choice(table.kinds("text"))
    return (
        f"For each {column.name}, how many {table.plural} are there?",
        f"SELECT {column.name}, COUNT(*) FROM {table.name} GROUP BY {column.name};",
    )


def _top(rng: random.Random, table: Table, tables: tuple[Table, ...]) -> tuple[str, str]:
    column = rng.choice(table.kinds("number"))
    n = rng.randint(1, 5)
    word, order = rng.choice((("highest", "DESC"), ("lowest", "ASC")))
    noun, verb = (table.plural, "have") if n > 1 else (table.singular, "has")
    return (
        f"Which {n} {noun} {verb} the {word} {column.name}?",
        f"SELECT {table.label} FROM {table.name} ORDER BY {column.name} {order} LIMIT {n};",
    )


def _join(rng: random.Random, table: Table, tables: tuple[Table, ...]) -> tuple[str, str]:
    """A question across a foreign key of some table of the schema (not necessarily `table`)."""
    child = rng.choice([t for t in tables if t.kinds("ref")])
    key = rng.choice(child.kinds("ref"))
    parent = next(t for t in tables if t.name == key.refers)
    on = f"{child.name} JOIN {parent.name} ON {child.name}.{key.name} = {parent.name}.id"
    if rng.random() < 0.5:
        return (
            f"List each {child.singular}'s {child.label} with the {parent.label} of its {parent.singular}.",
            f"SELECT {child.name}.{child.label}, {parent.name}.{parent.label} FROM {on};",
        )
    value = rng.choice(next(c for c in parent.columns if c.name == parent.label).values)
    return (
        f"How many {child.plural} belong to the {parent.singular} with {parent.label} {value}?",
        f"SELECT COUNT(*) FROM {on} WHERE {parent.name}.{parent.label} = {_literal(value)};",
    )


_FORMS: tuple[Callable[[random.Random, Table, tuple[Table, ...]], tuple[str, str]], ...] = (
    _count,
    _filter_number,
    _filter_text,
    _aggregate,
    _group,
    _top,
    _join,
)
"""Question forms; each returns (question, SQL) for a table of a schema."""
