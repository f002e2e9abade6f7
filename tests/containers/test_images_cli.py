"""``sf admin registry|image`` and the allowlist, as an admin types them, against a real embedded
server (the local user is its admin). Rejections are one line, exit 2, and create nothing."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from starforge.cli.main import main
from starforge.project.lab import Lab
from tests.conftest import Result

pytestmark = pytest.mark.containers


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("sf-home")
    saved = {k: os.environ.get(k) for k in ("STARFORGE_HOME", "STARFORGE_SERVER")}
    os.environ["STARFORGE_HOME"] = str(home)
    os.environ.pop("STARFORGE_SERVER", None)
    assert main(["server", "start"]) == 0
    yield home
    main(["server", "stop"])
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def sf_home(server_home: Path) -> Path:
    return server_home


def test_an_admin_allows_lists_and_denies_registries_and_submissions_follow(
    sf: Callable[..., Result], new_lab: Callable[..., Lab]
) -> None:
    listed = sf("admin", "registry", "ls")
    assert listed.code == 0 and "every registry is allowed" in listed.out
    assert "every registry is allowed" in sf("server", "status").out

    allowed = sf("admin", "registry", "allow", "ghcr.io/my-lab", "--json")
    assert allowed.code == 0, allowed.err
    assert allowed.json()["registries"] == [{"entry": "ghcr.io/my-lab", "source": "admin"}]  # type: ignore[index]
    assert "1 allowed registry" in sf("server", "status").out

    lab = new_lab(experiments_={"c1": "custom/custom"})
    before = sf("job", "ls", "--json").json()
    refused = sf(
        "submit", "c1", "--profile", "h200:1", "--image", "reg.example/t:1",
        "--observability-url", "https://wandb.example/lab", cwd=lab.root,
    )  # fmt: skip
    assert refused.code == 2
    assert "image registry reg.example is not on this server's allowlist" in refused.err
    assert "sf admin registry allow reg.example" in refused.err
    assert sf("job", "ls", "--json").json() == before

    assert sf("admin", "registry", "deny", "ghcr.io/my-lab").code == 0
    assert "every registry is allowed" in sf("admin", "registry", "ls").out
    absent = sf("admin", "registry", "deny", "ghcr.io/my-lab")
    assert absent.code == 2 and "ghcr.io/my-lab is not on the allowlist" in absent.err
    malformed = sf("admin", "registry", "allow", "https://ghcr.io")
    assert malformed.code == 2 and "HOST[:PORT][/PREFIX]" in malformed.err


def test_an_admin_sets_lists_and_clears_a_framework_default_image(
    sf: Callable[..., Result],
) -> None:
    got = sf("admin", "image", "default", "trl", "ghcr.io/my-lab/trl:1.16.0")
    assert got.code == 0, got.err
    shown = sf("admin", "image", "ls", "--json").json()
    assert shown["defaults"] == {"trl": "ghcr.io/my-lab/trl:1.16.0"}  # type: ignore[index]
    assert "ghcr.io/my-lab/trl:1.16.0" in sf("admin", "image", "ls").out
    assert sf("admin", "image", "default", "trl", "").code == 0
    assert sf("admin", "image", "ls", "--json").json()["defaults"] == {}  # type: ignore[index]
    bad = sf("admin", "image", "default", "trl", "Not An Image")
    assert bad.code == 2 and "not a valid image reference" in bad.err
