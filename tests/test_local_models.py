"""The local backend's models (models.py): a model folder it cannot load is refused by the
setting's name before training."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tunedsl.errors import ConfigError  # noqa: E402

from .local_support import graph_for, run_local  # noqa: E402


def test_missing_model_path_is_an_error_before_training(tmp_path):
    """A model folder that is not there: one line, nothing downloaded."""
    graph = graph_for("Arith", str(tmp_path / "nope"), tmp_path)
    with pytest.raises(ConfigError) as caught:
        run_local(graph, progress=False)
    assert str(caught.value) == (
        f"model.model_path: {tmp_path / 'nope'} is not a folder; the local backend loads a "
        f"local Hugging Face model folder and never downloads: download it and give its "
        f"folder (for a run on GPUs, check with backend='trinity')")


def test_a_model_that_is_not_a_causal_lm_is_an_error(tmp_path):
    """A vision model folder is refused by name before training."""
    from transformers import ViTConfig, ViTModel

    folder = tmp_path / "vit"
    ViTModel(ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                       intermediate_size=8, image_size=8, patch_size=4)).save_pretrained(folder)
    with pytest.raises(ConfigError) as caught:
        run_local(graph_for("Arith", str(folder), tmp_path), progress=False)
    assert str(caught.value) == (
        f"model.model_path: {folder} is not a causal language model this transformers loads "
        f"(model_type 'vit' in its config.json); give a folder of one, e.g. a Qwen or Llama "
        f"checkpoint")


def test_missing_auxiliary_model_is_named_in_the_error(tiny_model, tmp_path):
    """An auxiliary model path that is not a folder is reported with its name."""
    graph = graph_for("WithHelper", tiny_model, tmp_path,
                      "auxiliary_models.helper.model_path=/nowhere/helper")
    with pytest.raises(ConfigError, match=r"^auxiliary_models\.helper\.model_path: /nowhere/helper"
                                          r" is not a folder"):
        run_local(graph, progress=False)


#: Whether Trinity-RFT is installed: its check reads a model folder on this machine as the
#: local backend's does (vLLM would fail on it once the GPUs are taken).
TRINITY = importlib.util.find_spec("trinity") is not None


def _config_changed(tiny_model, tmp_path, changes):
    """A copy of the tiny model (``tmp_path/m``) whose config.json has ``changes`` over it."""
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return folder

def _refusal(folder, tmp_path, backend):
    """The first line of check's refusal of the arith experiment on the model ``folder``."""
    from tunedsl.api import check

    with pytest.raises(ConfigError) as refused:
        check(graph_for("Arith", folder, tmp_path), backend=backend)
    return str(refused.value).splitlines()[0]


WEIGHTS = {
    "lfs-pointer": (b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 99\n",
                    "{file} is a git-lfs pointer, not the file itself (a clone without "
                    "git-lfs); run git lfs pull in {folder}"),
    # a download interrupted: a whole header, the tensors cut (sweep 32 A-S4)
    "cut-short": ("cut", "{file} is damaged (cut short: {size} bytes of {whole}); copy the "
                         "weights again from where the model came from"),
    # a Hugging Face cache's link to a blob deleted (sweep 32 A-T1)
    # (named as the link it is; it was "cannot be read (No such file or directory)")
    "dangling-link": ("link", "{file} is a symbolic link to {folder}/../gone, which does not "
                              "exist; fix the link, or copy the file itself there"),
    "empty": (b"", "{file} is damaged (its header's length is not the file's); copy the "
                   "weights again from where the model came from"),
    "garbage": (b"\xff" * 64, "{file} is damaged (its header's length is not the file's); "
                              "copy the weights again from where the model came from"),
    # the chat template and the tokenizer's config too; a shard an index names (sweep 33)
    "template-pointer": ("chat_template.jinja",
                         "{folder}/chat_template.jinja is a git-lfs pointer, not the file "
                         "itself (a clone without git-lfs); run git lfs pull in {folder}"),
    "missing-shard": ("index", "{folder}/model.safetensors.index.json names the weights file "
                               "model-00002-of-00002.safetensors, which is not in {folder}; "
                               "copy it in"),
    # any other file of the folder git-lfs left as a pointer; a shard index of odd JSON
    # (sweep 34: a list for weight_map's values ended in a TypeError)
    "generation-config-pointer": (("generation_config.json", "lfs-pointer"),
                                  "{folder}/generation_config.json is a git-lfs pointer, not "
                                  "the file itself (a clone without git-lfs); run git lfs "
                                  "pull in {folder}"),
    # transformers dropped it without a word, and its end-of-reply ids with it (sweep 48 B-S2)
    "generation-config-not-json": (("generation_config.json",
                                    b'{\n  "eos_token_id": [1, 7],\n}\n'),
                                   "{folder}/generation_config.json is not valid JSON (line 3: "
                                   "Expecting property name enclosed in double quotes), so the "
                                   "loaders would not read it; fix it, or copy it again from "
                                   "where the model came from"),
    # "transformers cannot load its weights ... (TypeError: 'list' object is not a
    # mapping); copy the weights whole, or the config.json" (sweep 49 A-W4)
    "generation-config-a-list": (("generation_config.json", b"[]"),
                                 "{folder}/generation_config.json holds a JSON list, not a "
                                 "JSON object, so the loaders would not read it; fix it, or "
                                 "copy it again from where the model came from"),
    "special-tokens-with-a-bom": (("special_tokens_map.json", b"\xef\xbb\xbf{}"),
                                  "{folder}/special_tokens_map.json starts with a byte-order "
                                  "mark (U+FEFF), which the loaders' JSON reader refuses; save "
                                  "it as UTF-8 without one"),
    "config-pointer": (("config.json", "lfs-pointer"),
                       "{folder}/config.json is a git-lfs pointer, not the file itself (a "
                       "clone without git-lfs); run git lfs pull in {folder}"),
    "index-of-lists": (("model.safetensors.index.json", b'{"weight_map": {"a": ["x"]}}'),
                       "{folder}/model.safetensors.index.json is damaged (not the JSON of a "
                       "shard index, whose weight_map names each tensor's file); copy it "
                       "again from where the model came from"),
    "index-empty": (("model.safetensors.index.json", b'{"weight_map": {}}'),
                    "{folder}/model.safetensors.index.json is damaged (not the JSON of a "
                    "shard index, whose weight_map names each tensor's file); copy it again "
                    "from where the model came from"),
    # KeyError: 'metadata' in transformers' words, blamed on the weights (sweep 39 A-W2)
    "index-without-metadata": (("model.safetensors.index.json",
                                b'{"weight_map": {"model.embed_tokens.weight": '
                                b'"model.safetensors"}}'),
                               "{folder}/model.safetensors.index.json has no \"metadata\" "
                               "entry, which transformers reads from a shard index (verl and "
                               "the local backend load with it); add \"metadata\": {{}}"),
    "header-a-list": ("list-header", "{file} is damaged (its header is not a JSON object); "
                                     "copy the weights again from where the model came from"),
    # what loads and renders, read by check as by run (sweep 34 A-S1, A-S2)
    "special-tokens-pointer": (("special_tokens_map.json", "lfs-pointer"),
                               "{folder}/special_tokens_map.json is a git-lfs pointer, not the "
                               "file itself (a clone without git-lfs); run git lfs pull in "
                               "{folder}"),
    "template-empty": (("chat_template.jinja", b""),
                       "the chat template of {folder} renders a message as nothing (an empty "
                       "template); fix it (chat_template.jinja, or chat_template in "
                       "tokenizer_config.json), or copy it from the model it was trained from"),
    "template-broken": (("chat_template.jinja", b"{% for m in messages %}{{ m }}"),
                        "the chat template of {folder} does not render a message "
                        "(TemplateSyntaxError: Unexpected end of template. Jinja was looking "
                        "for the following tags: 'endfor' or 'else'. The innermost block that "
                        "needs to be closed is 'for'.); fix it (chat_template.jinja, "
                        "or chat_template in tokenizer_config.json), or copy it from the model "
                        "it was trained from"),
    # "cannot load the tokenizer ... tokenizer files whole" (sweep 49 B-W5)
    "template-not-utf8": (("chat_template.jinja", b"{{ messages }}\xff"),
                          "{folder}/chat_template.jinja is not UTF-8 text; copy it again from "
                          "where the model came from"),
    # blamed on the tokenizer's files, which were whole (sweep 50 A-W7)
    "extra-template-not-utf8": (("additional_chat_templates/tool_use.jinja", b"{{ m }}\xff"),
                                "{folder}/additional_chat_templates/tool_use.jinja is not "
                                "UTF-8 text; copy it again from where the model came from"),
    # "(AttributeError: 'list' object has no attribute 'get')" (sweep 50 A-W6)
    "template-json-a-list": ("chat_template.json alone, a list",
                             "{folder}/chat_template.json holds a JSON list, not a JSON object "
                             "with chat_template; copy it again from the model it was trained "
                             "from"),
    "template-a-folder": (("chat_template.jinja", "folder"),
                          "{folder}/chat_template.jinja cannot be read (Is a directory); copy "
                          "it again from where the model came from"),
    "template-missing": (("chat_template.jinja", None),
                         "{folder} has no chat template (chat_template.jinja, or chat_template "
                         "in tokenizer_config.json), with which every backend renders the "
                         "workflow's messages: a base model's folder? give an instruct "
                         "model's, or add the template"),
    "config-of-another-size": (lambda config: {**config, "hidden_size": 128},
                               "{folder}: the weights' tensor model.embed_tokens.weight has "
                               "shape [20, 64], where the model its config.json describes has "
                               "[20, 128]: that config.json is not these weights'; copy the one "
                               "that came with them"),
    # names that do not fit, a configuration that does not build, a tokenizer past the
    # vocabulary (sweep 35 A-S1, A-S2, A-S3)
    "config-fewer-layers": (lambda config: {**config, "num_hidden_layers": 1},
                            "{folder}: 9 of the weights' tensors have no place in the model its "
                            "config.json describes (the first: "
                            "model.layers.1.input_layernorm.weight), and would be dropped: that "
                            "config.json is not these weights'; copy the one that came with "
                            "them"),
    "config-untied-head": (lambda config: {**config, "tie_word_embeddings": False},
                           "{folder}: the weights lack 1 of the tensors the model its "
                           "config.json describes needs (the first: lm_head.weight), which "
                           "would be left random; copy the weights whole, or the config.json "
                           "that came with them"),
    # a quantized configuration skipped the check: run trained a random head (sweep 37 A-S1)
    "config-fp8-untied-head": (lambda config: {**config, "tie_word_embeddings": False,
                                               "quantization_config": {
                                                   "quant_method": "fp8",
                                                   "activation_scheme": "dynamic",
                                                   "weight_block_size": [8, 8]}},
                               "{folder}: the weights lack 1 of the tensors the model its "
                               "config.json describes needs (the first: lm_head.weight), which "
                               "would be left random; copy the weights whole, or the "
                               "config.json that came with them"),
    "config-unknown-activation": (lambda config: {**config, "hidden_act": "gelu_fancy"},
                                  "{folder}/config.json: transformers cannot build the model "
                                  "it describes (KeyError: 'gelu_fancy'); fix config.json, or "
                                  "copy the one that came with the weights"),
    "config-smaller-vocabulary": (lambda config: {**config, "vocab_size": 10},
                                  "{folder}: the weights' tensor model.embed_tokens.weight "
                                  "has shape [20, 64], where the model its config.json "
                                  "describes has [10, 64]: that config.json is not these "
                                  "weights'; copy the one that came with them"),
    "tokenizer-past-vocabulary": (("tokenizer.json", lambda tokenizer: {
        **tokenizer, "added_tokens": [*tokenizer["added_tokens"], {
            "id": 20, "content": "<sys>", "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}]}),
        "the tokenizer of {folder} makes token id 20 (<sys>), past the 20 tokens (vocab_size) "
        "of the model its config.json describes: the tokenizer is not this model's; copy the "
        "one that came with the weights"),
    "config-nan": (lambda config: {**config, "rms_norm_eps": float("nan")},
                   "{folder}/config.json: rms_norm_eps is not a finite number (NaN or "
                   "Infinity); copy config.json again from where the model came from"),
    "missing": (None, "{folder} has no model weights (model.safetensors, or "
                      "pytorch_model.bin); copy them into it, or give the folder that holds "
                      "them"),
}


@pytest.mark.parametrize("kind", sorted(WEIGHTS))
def test_weights_that_cannot_load_are_refused_by_check_as_by_run(tiny_model, tmp_path, kind):
    """A model folder whose model.safetensors is a git-lfs pointer (a clone without
    git-lfs), empty or garbage passed check --backend local, and run then ended in an
    internal error (SafetensorError); one with no weights passed check too (sweep 31 A-T4)."""
    import shutil

    import tunedsl
    from tunedsl.api import check

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    content, said = WEIGHTS[kind]
    file = folder / "model.safetensors"
    whole = file.stat().st_size
    if content is None:
        file.unlink()
    elif content == "cut":
        file.write_bytes(file.read_bytes()[:whole // 2])
    elif content == "link":
        file.unlink()
        file.symlink_to(f"{folder}/../gone")
    elif callable(content):
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(content(config)))
    elif isinstance(content, tuple):
        name, text = content
        if text == "folder":
            (folder / name).unlink()
            (folder / name).mkdir()
        elif callable(text):  # an edit of the file's JSON
            (folder / name).write_text(json.dumps(text(json.loads((folder / name).read_text()))))
        elif text is None:
            (folder / name).unlink()
        else:
            (folder / name).parent.mkdir(exist_ok=True)
            (folder / name).write_bytes(WEIGHTS[text][0] if text in WEIGHTS else text)
    elif content == "list-header":
        import struct

        file.write_bytes(struct.pack("<Q", 2) + b"[]")
    elif content == "chat_template.json alone, a list":  # (the .jinja is read first)
        (folder / "chat_template.jinja").unlink()
        (folder / "chat_template.json").write_bytes(b"[]")
    elif content == "chat_template.jinja":
        (folder / content).write_bytes(WEIGHTS["lfs-pointer"][0])
    elif content == "index":
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
            "a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    else:
        file.write_bytes(content)
    said = said.replace("{size}", str(whole // 2)).replace("{whole}", str(whole))
    graph = graph_for("Arith", folder, tmp_path)
    trinity = [lambda: check(graph, backend="trinity")] if TRINITY else []
    for action in (lambda: check(graph, backend="local"),
                   lambda: tunedsl.run(graph, backend="local", progress=False), *trinity):
        with pytest.raises(ConfigError) as caught:
            action()
        assert str(caught.value) == "model.model_path: " + said.format(file=file, folder=folder)


#: Chat templates that refuse a lone user message, though workflows send what they want.
INSISTING_TEMPLATES = {
    "a system message first": "{% if messages[0]['role'] != 'system' %}{{ raise_exception("
                              "'The first message must be a system message') }}{% endif %}",
    "tools": "{% if not tools %}{{ raise_exception('tools required') }}{% endif %}",
}


@pytest.mark.parametrize("insisting", sorted(INSISTING_TEMPLATES))
def test_files_no_loader_reads_and_a_template_insisting_on_more_pass(tiny_model, tmp_path,
                                                                     insisting):
    """A git-lfs pointer where no loader reads (a README, a .gguf, training_args.bin: what
    a clone pulling only the safetensors leaves) refused a folder that loads; a template
    that insists on a system message first, or on tools, was refused though workflows send
    them (sweep 35 A-W4, A-W3, sweep 36 A-W8). Both load, and check passes them."""
    import shutil

    from tunedsl.backends.local.models import load_folder, model_folder_problem

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    for name in ("README.md", "model.gguf", "training_args.bin"):
        (folder / name).write_bytes(WEIGHTS["lfs-pointer"][0])
    (folder / "chat_template.jinja").write_text(
        INSISTING_TEMPLATES[insisting] + "{% for m in messages %}{{ m['content'] }}"
        "{% endfor %}")
    assert model_folder_problem(str(folder)) is None
    assert load_folder(folder, "model.model_path")[1].chat_template.startswith("{% if")


def test_pointers_where_no_loader_reads_pass_and_a_pointer_shard_is_refused(tiny_model,
                                                                          tmp_path):
    """Mistral's layout (shards, their index and a consolidated.safetensors no loader reads
    beside them), a Trainer's trainer_state.json and a tokenizer.tiktoken beside a whole
    tokenizer.json, each left a git-lfs pointer by a clone that pulled what loads, refused
    a folder that loads (sweep 37 A-W1). A shard the index names still may not be one."""
    import shutil

    from safetensors.torch import load_file, save_file

    from tunedsl.backends.local.models import model_folder_problem

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    tensors = load_file(folder / "model.safetensors")
    names = sorted(tensors)
    halves = {"model-00001-of-00002.safetensors": names[:len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, held in halves.items():
        save_file({name: tensors[name] for name in held}, folder / shard,
                  metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps({
        "metadata": {}, "weight_map": {name: shard for shard, held in halves.items()
                                       for name in held}}))
    pointer = WEIGHTS["lfs-pointer"][0]
    (folder / "model.safetensors").unlink()
    for name in ("consolidated.safetensors", "trainer_state.json", "tokenizer.tiktoken"):
        (folder / name).write_bytes(pointer)
    assert model_folder_problem(str(folder)) is None
    shard = folder / "model-00002-of-00002.safetensors"
    whole = shard.read_bytes()
    shard.write_bytes(pointer)
    assert model_folder_problem(str(folder)) == (
        f"{shard} is a git-lfs pointer, not the file itself (a clone without git-lfs); run "
        f"git lfs pull in {folder}")
    # a whole model.safetensors beside the shards is what transformers loads first: named as
    # a pointer (sweep 38 A-W1: "SafetensorError: header too large")
    shard.write_bytes(whole)
    (folder / "model.safetensors").write_bytes(pointer)
    assert model_folder_problem(str(folder)) == (
        f"{folder / 'model.safetensors'} is a git-lfs pointer, not the file itself (a clone "
        f"without git-lfs); run git lfs pull in {folder}")


def test_named_chat_templates_without_a_default_are_refused(tiny_model, tmp_path):
    """Chat templates named in tokenizer_config.json with none named 'default' passed check
    (its probe offering tools rendered "tool_use"), and run failed before training,
    blamed on the workflow: transformers refuses every call without tools (sweep 38 A-S5)."""
    import shutil

    from tunedsl.backends.local.models import model_folder_problem

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": [
        {"name": "tool_use", "template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}]}))
    assert model_folder_problem(str(folder)) == (
        f"{folder} has chat templates named tool_use but none named 'default', which "
        f"transformers renders every call without tools with (it refuses those); name one of "
        f"them 'default' in tokenizer_config.json, or copy the model's templates again")


def test_a_vision_language_model_is_left_to_vllm_on_trinity_and_named_on_the_local_backend(
        tiny_model, tmp_path):
    """A qwen2_vl folder was told on --backend trinity to "fix config.json": transformers
    builds no causal language model of it here, though vLLM loads it (sweep 37 A-W4). The
    weights' fit is left to vLLM; the local backend, which cannot run it, says so."""
    import shutil

    from tunedsl.backends.local.models import model_folder_problem
    from tunedsl.models.folder import folder_problem

    folder = tmp_path / "vl"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({
        **config, "model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"]}))
    assert folder_problem(folder, str(folder)) is None
    assert model_folder_problem(str(folder)) == (
        f"{folder} is not a causal language model this transformers loads (model_type "
        f"'qwen2_vl' in its config.json); give a folder of one, e.g. a Qwen or Llama checkpoint")


def test_pytorch_bin_weights_are_read_and_a_bin_that_is_no_torch_file_is_named(tiny_model,
                                                                               tmp_path):
    """A pytorch_model.bin that is an HTML page (a download's error) was described in
    torch's words, "Weights only load failed", advising an unsafe load; one holding an
    object torch will not load safely was quoted with a terminal's bold codes (sweep 37
    A-W5). Whole .bin weights pass."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from tunedsl.backends.local.models import model_folder_problem

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    weights = folder / "pytorch_model.bin"
    torch.save(tensors, weights)
    assert model_folder_problem(str(folder)) is None
    weights.write_text("<html><head><title>403 Forbidden</title></head></html>\n")
    assert model_folder_problem(str(folder)) == (
        f"{weights} is not a PyTorch weights file (it begins with '<html><h'); copy it again "
        f"from where the model came from")
    torch.save({**tensors, "note": object.__new__(_NotATensor)}, weights)
    said = model_folder_problem(str(folder))
    assert said.startswith(f"{folder}: transformers cannot load its weights into the model "
                           f"its config.json describes (") and "\x1b" not in said


class _NotATensor:
    """An object torch's safe loader refuses (any class of the user's)."""


@pytest.mark.parametrize("quantization", [
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
    {"quant_method": "gptq", "bits": 4, "group_size": 128}], ids=["bitsandbytes", "gptq"])
def test_a_model_quantized_for_a_gpu_is_refused_by_the_local_backend_alone(tiny_model,
                                                                           tmp_path,
                                                                           quantization):
    """A bitsandbytes or GPTQ model passed check --backend local, whose run then failed to
    load it, advising to copy the weights again (sweep 38 A-S4). The local backend refuses
    it naming why; on Trinity, its loader (the GPU machine's) decides."""
    import shutil

    from tunedsl.backends.local.models import model_folder_problem
    from tunedsl.models.folder import folder_problem

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config,
                                                    "quantization_config": quantization}))
    said = model_folder_problem(str(folder))
    method = quantization["quant_method"]
    assert said.startswith(f"{folder}: transformers cannot load this {method}-quantized model "
                           f"on this machine (ImportError: ")
    assert said.endswith("), as the local backend would; give a folder of the model "
                         "unquantized, or run it on GPUs (backend='trinity')")
    assert folder_problem(folder, str(folder)) is None


def test_weights_holding_a_nan_are_refused_as_they_load(tiny_model, tmp_path):
    """A NaN in one weight ran to the first rollout, where sampling failed ("probability
    tensor contains either inf, nan") and the workflow was blamed (sweep 38 A-W5)."""
    import shutil

    from safetensors.torch import load_file, save_file

    from tunedsl.backends.local.models import load_folder

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    tensors = load_file(folder / "model.safetensors")
    name = next(key for key in sorted(tensors) if key.endswith("mlp.down_proj.weight"))
    tensors[name][0, 0] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError) as caught:
        load_folder(folder, "model.model_path")
    assert str(caught.value) == (
        f"model.model_path: the weights of {folder} hold a number that is not finite (NaN or "
        f"infinity) in {name}; copy them again from where the model came from, or give the "
        f"checkpoint before they diverged")


def test_a_gpt2_checkpoint_holding_the_buffers_of_an_older_gpt2_passes(tiny_model, tmp_path):
    """GPT-2's original checkpoints hold each layer's ``attn.masked_bias``, a buffer the
    model has since dropped (transformers drops it loading them): refused as tensors "with
    no place" in the model (sweep 37 A-W2). A tensor that is no parameter may go unplaced;
    another layer's weights still may not."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from tunedsl.backends.local.models import model_folder_problem

    config = AutoConfig.for_model("gpt2", vocab_size=20, n_embd=32, n_layer=2, n_head=4,
                                  n_positions=64, bos_token_id=1, eos_token_id=2)
    folder = tmp_path / "gpt2"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(Path(tiny_model) / name, folder / name)
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    save_file({**tensors, **{f"transformer.h.{layer}.attn.masked_bias": torch.tensor(-1e4)
                             for layer in range(2)}}, weights, metadata={"format": "pt"})
    assert model_folder_problem(str(folder)) is None
    save_file({**tensors, "transformer.h.2.mlp.c_fc.weight":
               tensors["transformer.h.1.mlp.c_fc.weight"].clone()}, weights,
              metadata={"format": "pt"})
    assert model_folder_problem(str(folder)) == (
        f"{folder}: 1 of the weights' tensors have no place in the model its config.json "
        f"describes (the first: transformer.h.2.mlp.c_fc.weight), and would be dropped: that "
        f"config.json "
        f"is not these weights'; copy the one that came with them")


def test_a_mixture_of_experts_model_saved_by_transformers_passes(tiny_model, tmp_path):
    """Every mixture-of-experts model in the hub's layout (one tensor per expert: Qwen3-MoE,
    Mixtral, DeepSeek-V3) was refused as tensors "with no place" in its model: transformers
    merges the experts as it loads (sweep 36 A-W1). The fit is transformers' own load
    report, on the meta device."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    from tunedsl.backends.local.models import model_folder_problem

    config = AutoConfig.for_model(
        "qwen3_moe", vocab_size=20, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, max_position_embeddings=64)
    folder = tmp_path / "moe"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(Path(tiny_model) / name, folder / name)
    assert model_folder_problem(str(folder)) is None


@pytest.mark.skipif(not TRINITY, reason="Trinity-RFT (with verl) is not installed")
@pytest.mark.parametrize("architectures, said", [
    (None, "it names no architectures"),
    ([], "it names no architectures"),
    (["LlamaForCausalLM", "LlamaModel"], 'its architectures is ["LlamaForCausalLM", "LlamaModel"]')])
def test_trinity_check_refuses_a_configuration_verl_builds_no_model_by(tiny_model, tmp_path,
                                                                      architectures, said):
    """A config.json saved without a model (``LlamaConfig().save_pretrained``) names no
    architectures: transformers builds by model_type, so check passed it, and verl's own
    model configuration (run here, as Trinity's trainer builds it) refuses it once Ray and
    the GPUs are taken. The local backend, transformers alone, takes it."""
    import shutil

    from verl.workers.config.model import HFModelConfig

    from tunedsl.backends.local.models import model_folder_problem

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    HFModelConfig(path=str(folder))  # as it came: verl takes it
    assert config["architectures"] == ["LlamaForCausalLM"]
    if architectures is None:
        del config["architectures"]
    else:
        config["architectures"] = architectures
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(AssertionError, match="Expect only one architecture"):
        HFModelConfig(path=str(folder))

    assert _refusal(folder, tmp_path, "trinity") == (
        f"model.model_path: {folder}/config.json: {said}, and verl (Trinity's trainer) and "
        f"vLLM build the model by exactly one; set \"architectures\": [\"LlamaForCausalLM\"]")
    assert model_folder_problem(str(folder)) is None


def test_an_adapter_config_left_in_a_whole_model_s_folder_is_named(tiny_model, tmp_path):
    """A merged LoRA saved over its adapter's folder keeps adapter_config.json: transformers
    loads the folder as an adapter and fails on its missing weights, which check blamed on
    the model's weights (sweep 39 A-W3). Removed, the folder passes."""
    import shutil

    from tunedsl.backends.local.models import model_folder_problem

    folder = tmp_path / "merged"
    shutil.copytree(tiny_model, folder)
    adapter = folder / "adapter_config.json"
    adapter.write_text(json.dumps({"r": 8, "peft_type": "LORA",
                                   "base_model_name_or_path": "Qwen/Qwen3-0.6B"}))
    assert model_folder_problem(str(folder)) == (
        f"{adapter} makes transformers load {folder} as a LoRA adapter of 'Qwen/Qwen3-0.6B', "
        f"and it holds no adapter weights (adapter_model.safetensors); remove "
        f"adapter_config.json if the folder holds the whole model")
    adapter.unlink()
    assert model_folder_problem(str(folder)) is None


def test_a_chat_template_json_that_is_no_json_is_named(tiny_model, tmp_path):
    """A cut chat_template.json, the folder's only template: the folder was said to have no
    chat template at all (sweep 39 A-W5)."""
    import shutil

    from tunedsl.backends.local.models import model_folder_problem

    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "chat_template.jinja").unlink()
    template = folder / "chat_template.json"
    template.write_text('{"chat_template": "{{ x ')
    assert model_folder_problem(str(folder)) == (
        f"{template} is not the JSON of a chat template (JSONDecodeError: Unterminated string "
        f"starting at: line 1 column 19 (char 18)); copy it again from the model it was trained "
        f"from")


@pytest.mark.parametrize("backend", ["local", "trinity"])
def test_a_quantization_config_naming_no_method_is_named(tiny_model, tmp_path, backend):
    """``"quantization_config": {}`` was said as "this a-quantized model" on the local
    backend and passed on Trinity, whose vLLM and verl read it by its quant_method (sweep 39
    A-W4)."""


    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = _config_changed(tiny_model, tmp_path, {"quantization_config": {}})
    assert _refusal(folder, tmp_path, backend) == (
        f"model.model_path: {folder}/config.json: its quantization_config names no "
        f"quant_method, by which transformers and vLLM read it; remove it if the model is not "
        f"quantized, or copy the config.json that came with the weights")


@pytest.mark.skipif(not TRINITY, reason="Trinity-RFT is not installed")
@pytest.mark.parametrize("architecture, passes", [
    ("LlamaForSequenceClassification", False), ("LlamaModel", False), ("NoSuchModel", False),
    ("Llama ForCausalLM", False), ("LlamaForCausalLM", True), ("GPT2LMHeadModel", True),
    ("MyOwnForCausalLM", True), ("Qwen2VLForConditionalGeneration", True),
    # an encoder-decoder's, passed by its name's ending (sweep 41 A-S1)
    ("T5ForConditionalGeneration", False), ("BartForConditionalGeneration", False)])
def test_trinity_check_refuses_an_architecture_that_generates_nothing(tiny_model, tmp_path,
                                                                      architecture, passes):
    """``check --backend trinity`` passed a config.json whose one architecture is a
    classifier's or an embedding model's class, or no class at all: vLLM builds the model
    by it, and the run failed, or generated nothing, once the GPUs were taken (sweep 40
    A-S1). The local backend, which builds by model_type, is not concerned."""

    from tunedsl.api import check

    folder = _config_changed(tiny_model, tmp_path, {"architectures": [architecture]})
    graph = graph_for("Arith", folder, tmp_path)
    if passes:
        assert any(line.startswith("trinity: ") for line in check(graph, backend="trinity"))
        return
    with pytest.raises(ConfigError) as refused:
        check(graph, backend="trinity")
    assert str(refused.value).splitlines()[0] == (
        f"model.model_path: {folder}/config.json: its architectures names {architecture!r}, "
        f"no causal language model's class: vLLM (Trinity's rollout engine) builds the model "
        f"by it, and a classifier or an embedding model generates no text; give a causal "
        f"language model's folder (if these weights are one's, set \"architectures\": "
        f"[\"LlamaForCausalLM\"])")


@pytest.mark.parametrize("backend", ["local", "trinity"])
def test_a_reward_model_is_said_to_be_no_generating_model_on_both_backends(tiny_model,
                                                                          tmp_path, backend):
    """A reward model (LlamaForSequenceClassification, its own config.json and weights) on
    Trinity's check was told its config.json was not its weights' (the score head's tensor
    has no place in a causal LM), the weights checked before what the model is (sweep 45
    A-W7)."""
    import shutil

    from transformers import AutoConfig, LlamaForSequenceClassification

    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = tmp_path / "rm"
    config = AutoConfig.from_pretrained(tiny_model)
    config.num_labels = 1
    LlamaForSequenceClassification(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (Path(tiny_model) / name).exists():
            shutil.copy(Path(tiny_model) / name, folder / name)
    said = _refusal(folder, tmp_path, backend)
    assert said.startswith(f"model.model_path: {folder}/config.json: its architectures names "
                           f"'LlamaForSequenceClassification', no causal language model's "
                           f"class: "), said


@pytest.mark.parametrize("backend", ["local", "trinity"])
def test_a_quant_method_transformers_does_not_know_is_named(tiny_model, tmp_path, backend):
    """A ``quant_method`` naming no quantization passed ``check --backend trinity``: verl's
    actor loads the model with transformers, which refuses it once the GPUs are taken
    (sweep 41 A-S3)."""

    from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING


    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = _config_changed(tiny_model, tmp_path,
                             {"quantization_config": {"quant_method": "gptq4", "bits": 4}})
    assert _refusal(folder, tmp_path, backend) == (
        f"model.model_path: {folder}/config.json: its quantization_config's quant_method "
        f"'gptq4' is no quantization transformers knows "
        f"({', '.join(sorted(AUTO_QUANTIZATION_CONFIG_MAPPING))}); copy the config.json that "
        f"came with the weights")


@pytest.mark.parametrize("backend", ["local", "trinity"])
@pytest.mark.parametrize("architecture", ["T5WithLMHeadModel", "MyOwnForCausalLM",
                                          "BartForConditionalGeneration"])
def test_an_encoder_decoder_is_refused_by_its_configuration(tiny_model, tmp_path, backend,
                                                            architecture):
    """T5's old ``T5WithLMHeadModel`` reads as a causal language model's class by its name
    and passed ``check --backend trinity`` (sweep 42 A-S7); a BART folder's encoder tensors
    were said to have "no place" in the model, blaming its config.json: a configuration
    that says it is an encoder-decoder's is refused whatever its class is named."""


    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = _config_changed(tiny_model, tmp_path,
                             {"architectures": [architecture], "is_encoder_decoder": True})
    assert _refusal(folder, tmp_path, backend) == (
        f"model.model_path: {folder}: its config.json describes an encoder-decoder model "
        f"({architecture}), and tunedsl trains decoder-only language models (a causal model "
        f"of it is its decoder alone); give a decoder-only model's folder")


@pytest.mark.skipif(not TRINITY, reason="Trinity-RFT is not installed")
def test_trinity_check_refuses_a_model_type_of_encoder_decoders_alone(tiny_model, tmp_path):
    """T5's model_type, of no causal language model in transformers, under the old class
    name ``T5WithLMHeadModel``, which reads as one's: refused by its model_type."""

    folder = _config_changed(tiny_model, tmp_path,
                             {"architectures": ["T5WithLMHeadModel"], "model_type": "t5"})
    assert _refusal(folder, tmp_path, "trinity") == (
        f"model.model_path: {folder}/config.json: its architectures names 'T5WithLMHeadModel', "
        f"and its model_type 't5' is an encoder-decoder's, which vLLM (Trinity's rollout "
        f"engine) and verl do not train as a causal language model; give a decoder-only "
        f"model's folder")


@pytest.mark.parametrize("backend", ["local", "trinity"])
@pytest.mark.parametrize("field, value", [("auto_map", 5), ("quantization_config", ["awq"]),
                                          ("rope_scaling", "linear"), ("text_config", 5)])
def test_a_config_table_that_is_no_object_is_named(tiny_model, tmp_path, backend, field,
                                                   value):
    """``"auto_map": 5`` was said in transformers' words ("argument of type 'int' is not
    iterable"), naming neither the field nor the fix (sweep 42 A-W2)."""

    from tunedsl.api import check

    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = _config_changed(tiny_model, tmp_path, {field: value})
    with pytest.raises(ConfigError) as refused:
        check(graph_for("Arith", folder, tmp_path), backend=backend)
    assert str(refused.value).splitlines()[0].startswith(
        f"model.model_path: {folder}/config.json: its {field} is {json.dumps(value)}, not an "
        f"object ({{...}}) as transformers reads it; fix it, or copy the config.json that "
        f"came with the weights")


@pytest.mark.parametrize("backend", ["local", "trinity"])
def test_a_lora_adapter_folder_given_as_the_model_says_what_to_give(tiny_model, tmp_path,
                                                                    backend):
    """A peft adapter's folder as model_path was "has no config.json, so it is not a saved
    model folder", naming neither what it is nor what to give (sweep 41 A-W5)."""
    import shutil


    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "base_model_name_or_path": "Qwen/Qwen2.5-0.5B", "r": 8}))
    shutil.copy(Path(tiny_model) / "model.safetensors", folder / "adapter_model.safetensors")
    assert _refusal(folder, tmp_path, backend) == (
        f"model.model_path: {folder} is a LoRA adapter of 'Qwen/Qwen2.5-0.5B' "
        f"(adapter_config.json), not a whole model: give the base model's folder (tunedsl "
        f"trains an adapter of its own: Model(..., lora=LoRA())), or merge the adapter into it "
        f"(peft's merge_and_unload, then save_pretrained) and give that folder")


@pytest.mark.parametrize("kind", ["unreadable", "another user's"])
def test_a_model_file_kept_from_reading_names_its_chmod(tiny_model, tmp_path, kind):
    """A tokenizer.json of mode 000 or weights of another user's were answered "copy it
    again from where the model came from": a mode, not a damaged copy (sweep 43 A-W13).
    Root ignores file permissions: check runs without the capabilities that let it."""
    import os
    import shutil
    import subprocess
    import sys

    from .cli_support import REPO, unprivileged

    if os.getuid() != 0 and kind == "another user's":
        pytest.skip("only root can give a file to another user")
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    if kind == "unreadable":
        kept = folder / "tokenizer.json"
        fix = f"make it readable (chmod u+r {kept})"
        kept.chmod(0o000)
    else:
        kept = folder / "model.safetensors"
        os.chown(kept, 65534, 65534)
        kept.chmod(0o600)
        fix = (f"make it readable: it belongs to nobody, who (or root) can let you (chmod o+r "
               f"{kept})")
    done = subprocess.run([*unprivileged(), sys.executable, "-m", "tunedsl", "check",
                           "experiment.py:Arith", "--backend", "local", "--set",
                           f"model.model_path={folder}"], cwd=project, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (2, (
        f"Error: model.model_path: {kept} cannot be read (Permission denied); {fix}")
    ), done.stderr


@pytest.mark.skipif(not TRINITY, reason="Trinity-RFT is not installed")
@pytest.mark.parametrize("given", ["config.json", "model.safetensors", "elsewhere"])
def test_trinity_check_refuses_a_file_given_as_the_model(tiny_model, tmp_path, given):
    """A model_path that is a file passed ``check --backend trinity`` ("Trinity-RFT accepts
    the config"), where the local backend says "is not a folder" (sweep 44 A)."""
    from tunedsl.api import check

    if given == "elsewhere":
        path = tmp_path / "notes.txt"
        path.write_text("not a model")
        fix = "give the folder of a Hugging Face model (or its hub id)"
    else:
        path = Path(tiny_model) / given
        fix = f"give the folder that holds it, {tiny_model}"
    with pytest.raises(ConfigError) as refused:
        check(graph_for("Arith", str(path), tmp_path), backend="trinity")
    assert str(refused.value).splitlines()[0] == (
        f"model.model_path: {path} is a file, not a model's folder; {fix}")


@pytest.mark.parametrize("backend", ["local", "trinity"])
@pytest.mark.parametrize("where, mode", [("behind", 0), ("itself", 0), ("itself", 0o644),
                                         ("itself", 0o311)])
def test_a_model_folder_behind_an_unsearchable_folder_names_the_setting(tiny_model, tmp_path,
                                                                        backend, where, mode):
    """Behind a folder whose mode lacks x, the local check ended in "cannot use that path"
    without the setting, and Trinity's passed it as a path of the GPU nodes (sweep 44 A);
    the model's folder itself lacking x named its config.json and no setting (sweep 45
    A-W6). Root ignores file permissions: check runs without the capabilities that let it."""
    import shutil

    from .cli_support import REPO, cli_while_closed

    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    model = tmp_path / "x" / "y" / "m"
    hidden = tmp_path / "x" if where == "behind" else model
    shutil.copytree(tiny_model, model)
    project = tmp_path / "arith"
    shutil.copytree(REPO / "examples" / "arith", project,
                    ignore=shutil.ignore_patterns("__pycache__", "tiny-model"))
    done = cli_while_closed(hidden, mode, "check", "experiment.py:Arith", "--backend", backend,
                            "--set", f"model.model_path={model}", cwd=project)
    shown = f"{model}: {hidden}" if where == "behind" else f"{model}"
    if mode == 0o311:  # searchable, not listable: its weights read as missing, and eval
        # --checkpoint's listing was an internal error (sweep 46 A-T1)
        assert (done.returncode, done.stderr.splitlines()[-1]) == (2, (
            f"Error: model.model_path: {model}: cannot list it (Permission denied); make it "
            f"readable (chmod u+rx {model})")), done.stderr
        return
    assert (done.returncode, done.stderr.splitlines()[-1]) == (2, (
        f"Error: model.model_path: {shown} cannot be searched, so nothing in it "
        f"can be read; make {hidden} searchable (chmod u+rx {hidden})")), done.stderr


@pytest.mark.parametrize("backend", ["local", "trinity"])
@pytest.mark.parametrize("config, said", [
    # transformers' words on Trinity's check ("It looks like the config file ... is not a
    # valid JSON file", "Should have a model_type key"; sweep 45 A-W9)
    ('{"a": 1,}', "config.json is not valid JSON (line 1: Expecting property name enclosed in "
                  "double quotes); fix it, or copy the config.json that came with the weights"),
    ("\ufeff{}", "config.json starts with a byte-order mark (U+FEFF), which transformers' JSON "
                 "reader refuses; save it as UTF-8 without one"),
    ('{"model_type": 7}', "config.json: its model_type is 7, not a kind of model's name "
                          "(\"llama\", \"qwen2\"); copy the config.json that came with the "
                          "weights"),
    ("null", "config.json holds null, not a JSON object of the model's configuration; copy the "
             "config.json that came with the weights"),
    ("[1]", "config.json holds a JSON list, not a JSON object of the model's configuration; "
            "copy the config.json that came with the weights"),
    ('{"architectures": ["LlamaForCausalLM"]}',
     "config.json has no model_type, by which transformers knows the model; copy the "
     "config.json that came with the weights (or add its model_type, such as \"llama\" or "
     "\"qwen2\")")])
def test_a_config_json_without_a_model_type_says_its_fault(tiny_model, tmp_path, config, said,
                                                           backend):
    """The local backend said "not a causal language model ... (model_type None in its
    config.json)" for each (sweep 43 A-W7, sweep 44 A-W14); both backends say it alike."""
    import shutil

    from tunedsl.api import check

    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "config.json").write_text(config, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        check(graph_for("Arith", folder, tmp_path), backend=backend)
    assert str(refused.value).splitlines()[0] == f"model.model_path: {folder}/{said}"


@pytest.mark.parametrize("architecture", ["LlamaForSequenceClassification", "BertForMaskedLM"])
def test_the_local_backend_refuses_a_class_that_generates_no_text(tiny_model, tmp_path,
                                                                  architecture):
    """A reward model's folder was said to hold weights its config.json does not describe
    (score.weight), and a masked language model was trained as a causal policy without a
    word; Trinity's check refused them by their class (sweep 45 A-S5, A-W8)."""

    folder = _config_changed(tiny_model, tmp_path, {"architectures": [architecture]})
    assert _refusal(folder, tmp_path, "local") == (
        f"model.model_path: {folder}/config.json: its architectures names {architecture!r}, "
        f"no causal language model's class: a classifier, a masked language model or an "
        f"embedding model generates no text; give a causal language model's folder")


@pytest.mark.parametrize("backend", ["local", "trinity"])
def test_a_hub_snapshot_copied_without_its_blobs_names_its_links(tiny_model, tmp_path, backend):
    """A hub cache's snapshot folder copied with ``cp -r``: every file a link to
    ``../../blobs/...`` that is not there, told "has no config.json" beside the one ``ls``
    lists (sweep 46 A-W1)."""
    import os

    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    copied = tmp_path / "copied"
    copied.mkdir()
    for name in sorted(os.listdir(tiny_model)):
        (copied / name).symlink_to(f"../../blobs/{name}.blob")
    first = sorted(os.listdir(copied))[0]
    assert _refusal(copied, tmp_path, backend) == (
        f"model.model_path: {copied / first} is a symbolic link to ../../blobs/{first}.blob, "
        f"which does not exist (and {len(os.listdir(copied)) - 1} more): a copy of a hub "
        f"cache's snapshot without the files its links point at; copy the files themselves "
        f"(cp -rL), or download the model into a folder (hf download MODEL --local-dir DIR)")


@pytest.mark.parametrize("backend", ["local", "trinity"])
def test_a_config_json_linked_to_itself_is_said_to_loop(tiny_model, tmp_path, backend):
    """A model folder's config.json that is a link to itself was "a link to config.json,
    which does not exist" beside the file ls lists (sweep 47 A-W9)."""
    import shutil

    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to("config.json")
    assert _refusal(folder, tmp_path, backend) == (
        f"model.model_path: {folder}/config.json is a symbolic link to config.json, which "
        f"loops back to itself; fix the link, or copy the file itself there")


def test_a_run_directory_as_the_model_names_its_newest_checkpoint(tiny_model, tmp_path):
    """``model.model_path = RUN_DIR`` was "has no config.json, so it is not a saved model
    folder", where eval --checkpoint of it names its newest checkpoint (sweep 49 B-W7)."""
    import shutil

    run = tmp_path / "run"
    for step in (1, 2):
        shutil.copytree(tiny_model, run / f"global_step_{step}")
    assert _refusal(run, tmp_path, "local") == (
        f"model.model_path: {run} is a run directory, not a saved model folder; give "
        f"{run / 'global_step_2'} (its newest checkpoint)")


def test_a_run_directory_as_the_model_names_its_newest_good_checkpoint(tiny_model, tmp_path):
    """``model.model_path = RUN_DIR`` named its newest checkpoint even when it held no
    weights (a copy cut short), which then failed to load, where run --resume of it names
    the newest good one (sweep 50 B-W2); the ones skipped are said, with why."""
    import shutil

    run = tmp_path / "run"
    for step in (1, 2, 3):
        shutil.copytree(tiny_model, run / f"global_step_{step}")
    for step in (2, 3):
        (run / f"global_step_{step}" / "model.safetensors").unlink()
    assert _refusal(run, tmp_path, "local") == (
        f"model.model_path: {run} is a run directory, not a saved model folder; give "
        f"{run / 'global_step_1'}, its newest good checkpoint (global_step_3, newer, is "
        f"damaged: no model weights (*.safetensors); 1 more newer checkpoint is skipped too)")
    (run / "global_step_1" / "model.safetensors").unlink()
    assert _refusal(run, tmp_path, "local") == (
        f"model.model_path: {run} is a run directory, not a saved model folder; none of its "
        f"checkpoints holds a whole model (global_step_3, the newest, is damaged: no model "
        f"weights (*.safetensors)); give a saved model folder")


@pytest.mark.parametrize("backend", ["local", "trinity"])
@pytest.mark.parametrize("links", [{"self": "self"}, {"a": "b", "b": "a"}])
def test_a_model_path_through_a_link_loop_is_said_to_loop(tmp_path, backend, links):
    """A model_path that is a link to itself (or two links naming each other) was "not a
    folder ... download it" on the local backend and "not on this machine" on Trinity's
    (sweep 49 A-W5)."""
    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
    first = next(iter(links))
    assert _refusal(tmp_path / first, tmp_path, backend) == (
        f"model.model_path: {tmp_path / first} is a symbolic link to {links[first]}, which "
        f"loops back to itself; fix the link, or give the model's folder itself")


@pytest.mark.parametrize("backend", ["local", "trinity"])
def test_a_config_json_that_is_a_folder_is_said_alike_on_both_backends(tiny_model, tmp_path,
                                                                      backend):
    """Trinity's check said "has no config.json" of a folder holding one, a folder (sweep
    46 A-W1)."""
    import shutil

    if backend == "trinity" and not TRINITY:
        pytest.skip("Trinity-RFT is not installed")
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "config.json").unlink()
    (folder / "config.json").mkdir()
    assert _refusal(folder, tmp_path, backend) == (
        f"model.model_path: {folder / 'config.json'} cannot be read (Is a directory); copy it "
        f"again from where the model came from")
