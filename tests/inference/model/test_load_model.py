"""load_model end to end: the demo GGUF through our model, and the progress bar."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from inference.model.loader import load_model
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.paged import PagedDriver

REPO_ROOT = Path(__file__).resolve().parents[3]


def fetch_demo_model() -> Path:
    script = REPO_ROOT / "scripts" / "fetch-demo-model.sh"
    result = subprocess.run([str(script)], check=True, capture_output=True, text=True)
    return Path(result.stdout.strip().splitlines()[-1])


def test_demo_gguf_logits_match_transformers() -> None:
    path = fetch_demo_model()
    model, config = load_model(path, dtype="float32", progress=False)
    assert (config.num_layers, config.num_heads, config.num_kv_heads) == (30, 9, 3)
    assert config.tie_word_embeddings
    tokens = torch.randint(3, config.vocab_size, (40,), generator=torch.Generator().manual_seed(0))
    ours = PagedDriver(model, num_blocks=8).step({0: tokens.tolist()})
    reference = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    with torch.inference_mode():
        expected = reference(tokens[None]).logits[0]
    torch.testing.assert_close(ours, expected, rtol=1e-4, atol=1e-4)


def test_progress_bar_goes_to_stderr_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = make_checkpoint("qwen3", tmp_path / "qwen3")
    capsys.readouterr()
    load_model(directory, progress=True)
    shown = capsys.readouterr()
    assert "loading qwen3" in shown.err and shown.out == ""
    load_model(directory, progress=False)
    assert capsys.readouterr().err == ""
