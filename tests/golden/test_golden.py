"""Outputs unchanged: `summary`, `breakdown`, `diff`, `breakeven` JSON and the Perfetto trace
bytes on the sample traces equal the files saved under tests/golden/ (tests/golden/cases.py
says which). A change on purpose: regenerate with `python tests/golden/regen.py` and say why
in the commit. Skipped while no golden file is saved."""

from __future__ import annotations

import difflib

import pytest

from tests.golden.cases import produce, saved

SAVED = saved()

pytestmark = [
    pytest.mark.slow,  # about 12 s on 2 cores: merges 7 sample runs, ingests one trace
    pytest.mark.skipif(
        not SAVED, reason="no golden files saved yet: run `python tests/golden/regen.py`"
    ),
]


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return produce(tmp_path_factory.mktemp("golden"))


def test_the_same_files_are_produced(produced: dict[str, bytes]) -> None:
    assert sorted(produced) == sorted(SAVED)


@pytest.mark.parametrize("name", sorted(SAVED))
def test_output_is_unchanged(produced: dict[str, bytes], name: str) -> None:
    want = SAVED[name].read_bytes()
    got = produced.get(name)
    assert got is not None, f"{name} is no longer produced"
    if got != want:
        diff = "\n".join(
            difflib.unified_diff(
                want.decode().splitlines(),
                got.decode().splitlines(),
                f"saved {name}",
                "now",
                lineterm="",
                n=2,
            )
        )
        pytest.fail(
            f"{name} changed (regenerate with tests/golden/regen.py if on purpose):\n{diff[:6000]}"
        )
