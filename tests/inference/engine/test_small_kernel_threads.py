"""`--single-thread-small-kernels`: from the command line to the C kernels' thread count."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from inference import LLM, SamplingParams
from inference.kernels.cpu.threads import SMALL_CALL_ELEMENTS, threads_for
from inference.server.cli import add_arguments, engine_config_kwargs
from tests.inference.checkpoints import make_checkpoint


def test_cli_option_reaches_the_engine_config() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--model", "m.gguf"]
    assert engine_config_kwargs(parser.parse_args(base))["single_thread_small_kernels"] is False
    kwargs = engine_config_kwargs(parser.parse_args([*base, "--single-thread-small-kernels"]))
    assert kwargs["single_thread_small_kernels"] is True


def test_the_engine_sets_the_policy_it_was_given_and_answers_the_same(tmp_path: Path) -> None:
    path = make_checkpoint("llama", tmp_path)
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    outputs = []
    for single in (True, False):
        with LLM(path, dtype="float32", single_thread_small_kernels=single, progress=False) as llm:
            small = 1 if single else torch.get_num_threads()
            assert threads_for(SMALL_CALL_ELEMENTS - 1) == small
            assert threads_for(SMALL_CALL_ELEMENTS) == torch.get_num_threads()
            outputs.append(llm.generate(["hello world"], params)[0].outputs[0].token_ids)
    assert threads_for(1) == torch.get_num_threads()  # the last engine's default stays
    assert outputs[0] == outputs[1] and len(outputs[0]) == 8
