"""A model of the user's own (`cluster.model: path/to/config.json`): the spec derived from an
HF config.json matches the bundled specs' published figures, and bad files are one-line
errors naming the file and the field."""

import json

import pytest
import yaml
from model_files import hf_config, write_hf_config

from pearl.errors import InputError
from pearl.specs import get_model, model_labels, model_specs
from pearl.specs.model_file import SUPPORTED, derived_params


@pytest.mark.parametrize("name", sorted(model_specs()))
def test_derived_counts_equal_every_bundled_spec(name):
    """Parameters, active parameters, weight and KV bytes derived from the architecture
    equal the figures each bundled spec records from its model card."""
    spec = model_specs()[name]
    total, active = derived_params(spec.model_dump())
    assert total == spec.params_total
    assert active == spec.active_params
    assert spec.weight_bytes_bf16 == 2 * total


@pytest.mark.parametrize("name", sorted(model_specs()))
def test_a_config_json_gives_the_bundled_spec(tmp_path, name):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf_config(name)))
    got, want = get_model(str(path)).model_dump(), model_specs()[name].model_dump()
    for key in ("params_total", "weight_bytes_bf16", "kv_bytes_per_token_bf16",
                "num_hidden_layers", "num_experts", "params_active_per_token"):  # fmt: skip
        assert got[key] == want[key], key


@pytest.mark.parametrize(
    ("doc", "total"),
    [
        # Qwen/Qwen2.5-7B config.json (q/k/v carry biases): 7,615,616,512 parameters
        (
            {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584,
             "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944, "vocab_size": 152064,
             "max_position_embeddings": 131072, "rope_theta": 1000000.0,
             "tie_word_embeddings": False},
            7_615_616_512,
        ),
        # mistralai/Mixtral-8x7B-v0.1 config.json: 46,702,792,704 parameters, 2 of 8 experts
        (
            {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2,
             "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 1e6},
            46_702_792_704,
        ),
    ],
    ids=["qwen2.5-7b", "mixtral-8x7b"],
)  # fmt: skip
def test_models_not_bundled(tmp_path, doc, total):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    spec = get_model(str(path))
    assert spec.params_total == total
    assert spec.name == tmp_path.name  # a config.json is named by its folder
    assert (
        spec.kv_bytes_per_token_bf16
        == 2
        * doc["num_hidden_layers"]
        * doc["num_key_value_heads"]
        * (doc["hidden_size"] // doc["num_attention_heads"])
        * 2
    )


def test_a_spec_yaml_needs_only_the_architecture(tmp_path):
    doc = {k: v for k, v in hf_config("qwen3-8b").items() if k != "architectures"}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"architecture": "Qwen3ForCausalLM", **doc}))
    spec = get_model(str(path))
    assert spec.name == "mine" and spec.params_total == model_specs()["qwen3-8b"].params_total


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("{not json", None, "not valid JSON"),
        ('{"architectures": ["DeepseekV3ForCausalLM"]}', "architectures", "supported: Llama"),
        ('{"hidden_size": 8}', "architectures", "missing"),
        ('{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, '
         '"num_attention_heads": 32}', "num_hidden_layers", "missing"),
        ('{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 0,'
         '"num_attention_heads": 32, "intermediate_size": 1, "vocab_size": 10,'
         '"max_position_embeddings": 10}', "num_hidden_layers", "greater than 0"),
    ],
)  # fmt: skip
def test_bad_model_files_name_the_file_and_field(tmp_path, text, field, words):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        get_model(str(path))
    assert err.value.source == str(path) and words in str(err.value)
    assert err.value.field == field


def test_unknown_name_and_missing_file():
    with pytest.raises(InputError, match="known: .*qwen3-8b.*or a model file"):
        get_model("qwen3-9b")
    with pytest.raises(InputError, match="nope.json.*file not found"):
        get_model("nope.json")


def test_table_labels_are_model_names_unless_two_files_share_one(tmp_path):
    a = write_hf_config(tmp_path / "mine", "qwen3-8b")
    b = write_hf_config(tmp_path / "other" / "mine", "qwen3-8b")
    c = write_hf_config(tmp_path / "theirs", "qwen3-8b")
    assert model_labels(["qwen3-8b", str(a), str(c)]) == {
        "qwen3-8b": "qwen3-8b",
        str(a): "mine",
        str(c): "theirs",
    }
    assert model_labels([str(a), str(b)]) == {str(a): str(a), str(b): str(b)}


def test_every_supported_architecture_is_named_in_the_docs():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "simulator-model.md").read_text()
    assert all(arch in doc for arch in SUPPORTED)


def test_a_config_json_of_a_bundled_model_simulates_as_it(tmp_path):
    """`pearl simulate --model .../config.json` with Qwen3-8B's config gives Qwen3-8B's run."""
    from typer.testing import CliRunner

    from pearl.cli.main import app

    path = write_hf_config(tmp_path / "qwen3-8b-copy", "qwen3-8b")
    common = ["simulate", "--static-gpus", "2", "--duration", "900", "--batch", "8",
              "--policies", "roll", "--no-bound", "--json"]  # fmt: skip
    docs = []
    for model in ("qwen3-8b", str(path)):
        res = CliRunner().invoke(app, [*common, "--model", model])
        assert res.exit_code == 0, res.output
        docs.append(json.loads(res.stdout))
    assert docs[1]["model"] == str(path)
    assert docs[0]["policies"] == docs[1]["policies"]


# -- a card of your own ------------------------------------------------------------------------
def test_a_gpu_file_with_the_h100s_figures_simulates_as_the_h100(tmp_path):
    """A GPU file holding the H100-SXM's datasheet and calibrated efficiencies is the H100:
    the same run; without efficiencies it runs at the fallback ones and says so."""
    from typer.testing import CliRunner

    from pearl.cli.main import app
    from pearl.sim.physics.iteration import DEFAULT_EFFICIENCY
    from pearl.specs import get_gpu, gpu_specs

    h100 = gpu_specs()["h100-sxm"].model_dump(exclude={"name", "unpinned"})
    eff_c, eff_m = DEFAULT_EFFICIENCY["h100-sxm"]
    mine = tmp_path / "my-h100.yaml"
    mine.write_text(
        yaml.safe_dump({**h100, "compute_efficiency": eff_c, "memory_efficiency": eff_m})
    )
    common = ["simulate", "--static-gpus", "2", "--duration", "900", "--batch", "8",
              "--policies", "roll", "--no-bound", "--json"]  # fmt: skip
    docs, notes = [], []
    for gpu in ("h100-sxm", str(mine)):
        res = CliRunner().invoke(app, [*common, "--gpu", gpu])
        assert res.exit_code == 0, res.output
        docs.append(json.loads(res.stdout))
        notes.append(res.stderr)
    assert docs[0]["policies"] == docs[1]["policies"]
    assert "not calibrated" not in notes[0] and "the efficiencies the file gives" in notes[1]
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(h100))
    assert get_gpu(str(bare)).name == "bare" and "fallback" in get_gpu(str(bare)).unpinned


@pytest.mark.parametrize(
    ("text", "field"),
    [("bf16_tflops: 100\n", "hbm_tb_s"), ("bf16_tflops: -1\nhbm_tb_s: 1\nhbm_gb: 8\n"
      "nvlink_gb_s_per_dir: 1\n", "bf16_tflops"), ("[1, 2]\n", None)],
)  # fmt: skip
def test_bad_gpu_files_name_the_file_and_field(tmp_path, text, field):
    from pearl.specs import get_gpu

    path = tmp_path / "card.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        get_gpu(str(path))
    assert err.value.source == str(path) and err.value.field == field
