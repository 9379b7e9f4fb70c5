"""Options of `python -m tracekit.demo`: defaults and one-line errors for what cannot run."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tracekit.demo.options import DemoOptions, choose_backend, parse_args
from tracekit.demo.server import main
from tracekit.errors import InputError


def test_defaults_are_8_cpu_ranks_k3_extend() -> None:
    opts = parse_args([])
    assert (opts.ranks, opts.device, opts.draft_tokens, opts.verify_mode) == (8, "cpu", 3, "extend")
    assert choose_backend(opts) == ("gloo", None)
    assert opts.model_config().divergence == 0.3


def test_overrides_reach_the_model_config() -> None:
    cfg = parse_args(["--layers", "3", "--divergence", "0.5", "--seed", "4"]).model_config()
    assert (cfg.num_layers, cfg.divergence, cfg.seed) == (3, 0.5, 4)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--ranks", "3"], "cannot be split over 3 ranks"),
        (["--cycles", "0"], "--cycles must be at least 1"),
        (["--draft-tokens", "0"], "--draft-tokens must be at least 1"),
        (["--verify-mode", "graph"], "needs --device cuda"),
        (["--prompt-len", "250"], "does not fit"),
    ],
)
def test_bad_options_raise_input_error(argv: list[str], match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_args(argv)


def test_main_prints_one_line_and_returns_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ranks", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("python -m tracekit.demo: error: ")


def test_cuda_ranks_beyond_gpus_fall_back_to_gloo(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracekit.demo.options as options

    monkeypatch.setattr(options, "cuda_count", lambda: 1)
    backend, message = choose_backend(DemoOptions(ranks=2, device="cuda"))
    assert backend == "gloo"
    assert message is not None
    assert "NCCL" in message
    assert choose_backend(DemoOptions(ranks=1, device="cuda")) == ("nccl", None)
