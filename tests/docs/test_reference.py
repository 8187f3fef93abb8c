"""The generated reference pages match the code they are generated from (``docs/generate.py``):
the settings page ``Settings``, the API page the app's OpenAPI schema."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

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


@pytest.mark.parametrize("page", ["settings.md", "api.md"])
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
