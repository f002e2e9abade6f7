"""Loading the catalog: a command reads only the declaration of the method it uses."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from starforge.catalog import loader
from starforge.contract.errors import MethodNotFound


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of two built-in methods as the whole catalog (the loader's caches emptied)."""
    root = tmp_path / "catalog"
    for method in ("custom/custom", "trl/sft"):
        shutil.copytree(loader.CATALOG_ROOT / method, root / method)
    monkeypatch.setattr(loader, "CATALOG_ROOT", root)
    loader.all_methods.cache_clear()
    loader._load_cached.cache_clear()
    yield root
    loader.all_methods.cache_clear()
    loader._load_cached.cache_clear()


def test_a_method_loads_while_another_declaration_is_broken(catalog: Path) -> None:
    (catalog / "trl" / "sft" / "method.yaml").write_text("id: [unclosed\n")
    method = loader.get_method("custom/custom")
    assert method.id == "custom/custom"
    assert method.digest.startswith("sha256:")


def test_a_lazily_loaded_method_is_the_one_the_whole_catalog_lists(catalog: Path) -> None:
    alone = loader.get_method("trl/sft")
    assert loader.all_methods()["trl/sft"] is alone
    assert list(loader.all_methods()) == ["trl/sft", "custom/custom"]


def test_an_id_that_names_no_catalog_folder_is_an_unknown_method(catalog: Path) -> None:
    (catalog.parent / "method.yaml").write_text("id: outside\n")
    for bad in ("../catalog", "trl/../..", "sft", "trl/sft/extra"):
        with pytest.raises(MethodNotFound):
            loader.get_method(bad)
