"""The generated reference pages match the code they are generated from (``docs/generate.py``):
the settings page ``Settings``, the API page the app's OpenAPI schema, the job-file page
``JobSpec`` and the sections it holds."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel, Field

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "generate.py"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    """The generator script, imported as a module."""
    spec = importlib.util.spec_from_file_location("docs_generate", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages(gen: ModuleType) -> dict[str, str]:
    """Each page as the code generates it now (the API's schema is built once)."""
    return {name: write() for name, write in gen.PAGE_WRITERS.items()}


@pytest.mark.parametrize("page", ["settings.md", "api.md", "job-file.md"])
def test_the_committed_page_is_what_the_code_generates(page: str, pages: dict[str, str]) -> None:
    committed = (ROOT / "docs" / "reference" / page).read_text()
    assert committed == pages[page], f"docs/reference/{page} is stale: run {SCRIPT}"


def test_every_setting_and_route_is_on_its_page(gen: ModuleType, pages: dict[str, str]) -> None:
    from orchestrator.config import ENV_VARS, Settings

    meaning = gen._attributes(Settings.__doc__)
    for field in Settings.model_fields:
        assert f"| `{ENV_VARS[field]}` | `{field}` |" in pages["settings.md"], field
        assert meaning.get(field), f"the Settings docstring does not document {field}"
    api = pages["api.md"]
    for route in ("`POST /v1/jobs`", "`GET /v1/pool`", "`DELETE /v1/tokens/{token_id}`"):
        assert f"### {route}" in api
    assert "### JobSpec" in api and "| `micro_batch` |" in api


def test_check_fails_on_a_stale_page_and_names_it(
    gen: ModuleType,
    pages: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(gen, "PAGES", tmp_path)
    monkeypatch.setattr(gen, "PAGE_WRITERS", {n: (lambda t=t: t) for n, t in pages.items()})
    (tmp_path / "settings.md").write_text("# stale\n")
    (tmp_path / "api.md").write_text(pages["api.md"])
    assert gen.main(["--check"]) == 1
    assert "settings.md" in capsys.readouterr().err
    assert gen.main([]) == 0  # rewrites it
    assert gen.main(["--check"]) == 0
    assert (tmp_path / "settings.md").read_text() == pages["settings.md"]


def _schema_paths(schema: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> list[str]:
    """Every field's dotted path in a JSON schema (by alias), found apart from the generator's
    walk: through ``$ref``, ``anyOf`` and a mapping's values (``<name>``, keys of a pattern
    or any)."""
    paths = []
    for key, prop in schema.get("properties", {}).items():
        paths.append(prefix + key)
        stack = [prop]
        while stack:
            node = stack.pop()
            if "$ref" in node:
                held = defs[node["$ref"].rsplit("/", 1)[-1]]
                paths += _schema_paths(held, defs, f"{prefix}{key}.")
            stack += node.get("anyOf", [])
            values = [node.get("additionalProperties"), *node.get("patternProperties", {}).values()]
            for extra in values:
                if isinstance(extra, dict) and "$ref" in extra:
                    held = defs[extra["$ref"].rsplit("/", 1)[-1]]
                    paths += _schema_paths(held, defs, f"{prefix}{key}.<name>.")
    return paths


def test_every_field_of_the_job_file_is_on_its_page_with_its_meaning(
    gen: ModuleType, pages: dict[str, str]
) -> None:
    from orchestrator.spec import JobSpec

    schema = JobSpec.model_json_schema(by_alias=True)
    paths = _schema_paths(schema, schema["$defs"])
    assert len(paths) == len(gen.job_fields()) > 90
    rows = {
        line.split(" | ")[0].removeprefix("| `").split("`")[0]: line
        for line in pages["job-file.md"].splitlines()
        if line.startswith("| `")
    }
    for path in paths:
        assert path in rows, f"{path} is not on docs/reference/job-file.md"
        meaning = re.split(r"(?<!\\)\|", rows[path])[-2]  # the last cell
        assert meaning.strip(), f"{path} has no description (Field(description=...) or a comment)"
    for path in ("run.base_global_batch", "serve.stopped_at", "resources.gpus.min"):
        assert path in rows
    assert (
        "| `class` (or `job_class`) | string | required | one of `bulk`, `interactive` |"
        in (pages["job-file.md"])
    )
    assert "| `run.micro_batch` | integer | `32` | >= 1, <= 65,536 |" in pages["job-file.md"]


class _Documented(BaseModel):
    """A model whose fields say what they do in each way the generator reads.

    Attributes:
        listed: said in the docstring.
        described: the docstring loses to the description.
    """

    described: int = Field(default=0, description="said by its description")
    # said by the comment above it
    commented: int = 0
    listed: int = 0
    silent: int = 0


def test_a_fields_meaning_is_its_description_else_its_comment_else_its_docstring_entry(
    gen: ModuleType,
) -> None:
    said = {f.name: gen.meaning(f) for f in gen.job_fields(_Documented)}
    assert said == {
        "described": "said by its description",
        "commented": "said by the comment above it",
        "listed": "said in the docstring.",
        "silent": "",  # what the page test refuses
    }
