"""`python -m tgrad generate MODEL_DIR`: the tokens of tgrad.models' generate, exit statuses for
bad input, and --prompt through tokenizer.json (the tokenizers package, an optional extra)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tgrad.models
import tgrad.nn
from tgrad.__main__ import main

from model_dirs import model_dir


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_dir(tmp_path_factory.mktemp("cli"), eos_token_id=None)


def test_generate_prints_the_new_token_ids(llama: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", str(llama), "--ids", "1,2,3", "--max-new-tokens", "5"]) == 0
    want = tgrad.models.from_pretrained(llama).generate(np.array([[1, 2, 3]]), 5)[0]
    assert capsys.readouterr().out == ",".join(map(str, want)) + "\n"


def test_generate_packs_the_weights_on_the_cpu_unless_told_not_to(llama: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI packs on the CPU (docs/models.md, "Packed weights"): the same tokens either way."""
    assert main(["generate", str(llama), "--ids", "1,2,3", "--max-new-tokens", "6"]) == 0
    packed = capsys.readouterr().out
    assert main(["generate", str(llama), "--ids", "1,2,3", "--max-new-tokens", "6", "--no-pack"]) == 0
    assert capsys.readouterr().out == packed
    assert any(isinstance(m, tgrad.nn.PackedLinear)
               for m in tgrad.models.from_pretrained(llama, pack_weights=True).modules())


def test_several_prompts_decode_as_one_padded_batch(llama: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["generate", str(llama), "--ids", "1,2,3", "--ids", "4", "--max-new-tokens", "4"]) == 0
    model = tgrad.models.from_pretrained(llama)
    want = [model.generate(np.array([p]), 4)[0] for p in ([1, 2, 3], [4])]
    assert capsys.readouterr().out == "".join(",".join(map(str, w)) + "\n" for w in want)


def test_sampling_options_replay_with_a_seed(llama: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", str(llama), "--ids", "4,5", "--max-new-tokens", "6", "--do-sample", "--seed", "3", "--top-k", "5"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    assert capsys.readouterr().out == first
    want = tgrad.models.from_pretrained(llama).generate(np.array([[4, 5]]), 6, do_sample=True, seed=3, top_k=5)[0]
    assert first == ",".join(map(str, want)) + "\n"


def test_decoding_stops_at_the_configs_eos(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    free = tgrad.models.from_pretrained(model_dir(tmp_path / "a")).generate(np.array([[1, 2]]), 6)[0]
    path = model_dir(tmp_path / "b", eos_token_id=int(free[1]))
    assert main(["generate", str(path), "--ids", "1,2", "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out == ",".join(map(str, free[:list(free).index(free[1]) + 1])) + "\n"
    assert main(["generate", str(path), "--ids", "1,2", "--max-new-tokens", "6", "--ignore-eos"]) == 0
    assert capsys.readouterr().out == ",".join(map(str, free)) + "\n"


@pytest.mark.parametrize("argv, status, message", [
    (["--prompt", "hello"], 2, "tokenizer.json"),
    (["--ids", "1,999"], 2, "index_out_of_range"),
    (["--ids", "1,2", "--do-sample", "--temperature", "0"], 2, "temperature"),
    (["--ids", "1,2", "--device", "gpu"], 2, "unknown device 'gpu'"),
], ids=["no-tokenizer", "id-past-vocab", "temperature", "unknown-device"])
def test_bad_input_exits_2_saying_why(llama: Path, capsys: pytest.CaptureFixture[str], argv: list[str], status: int,
                                      message: str) -> None:
    assert main(["generate", str(llama), *argv]) == status
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err


def test_bad_token_ids_are_refused_by_the_parser(llama: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["generate", str(llama), "--ids", "1,x"])
    assert info.value.code == 2


def test_a_model_that_cannot_load_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    assert main(["generate", str(tmp_path), "--ids", "1"]) == 1
    assert "model_unsupported" in capsys.readouterr().err


@pytest.mark.interop
def test_a_prompt_goes_through_tokenizer_json(llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is not installed (extra tgrad[models])")
    vocab = {f"w{i}": i for i in range(96)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece()
    for item in llama.iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    tok.save(str(tmp_path / "tokenizer.json"))
    assert main(["generate", str(tmp_path), "--prompt", "w7 w8 w9", "--max-new-tokens", "4"]) == 0
    want = tgrad.models.from_pretrained(tmp_path).generate(np.array([[7, 8, 9]]), 4)[0]
    assert capsys.readouterr().out == tok.decode([int(t) for t in want]) + "\n"


def test_generate_takes_the_block32_order(llama: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--order block32 generates with every product in the block32 order (the tokens equal the
    Python API's under tgrad.matmul_order), and leaves the caller's order as it was."""
    tgrad.set_matmul_order("pairwise")  # the caller's order, which --order leaves as it was
    try:
        assert main(["generate", str(llama), "--ids", "1,2,3", "--max-new-tokens", "5", "--order", "block32"]) == 0
        assert tgrad.get_matmul_order() == "pairwise"
    finally:
        tgrad.set_matmul_order("block32")
    with tgrad.matmul_order("block32"):
        want = tgrad.models.from_pretrained(llama).generate(np.array([[1, 2, 3]]), 5)[0]
    assert capsys.readouterr().out.strip() == ",".join(str(int(t)) for t in want)
