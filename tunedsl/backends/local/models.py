"""The models a local run holds: the policy it trains and the auxiliary models it only
samples (loaded once and frozen, or called at an endpoint)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ...config.graph import ExperimentGraph
from ...errors import ConfigError
from ...lfs import pointer_problem
from ...models.folder import (
    adapter_only_problem,
    config_shape_problem,
    folder_problem,
    generates_text,
    git_lfs_pointers,
    load_tokenizer,
    model_file_problem,
    unreachable_problem,
)
from ...runs.run_files import STEP_DIR_SHOWN
from ...wording import option, shown_path, spelled
from .chat import ChatCodec, LocalChatModel
from .engine import Engine, eos_ids

#: Files of which a model folder needs one for its tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def model_folder_problem(model_path: str, *, trained: bool = True) -> str | None:
    """What keeps ``model_path`` from being a model folder the local backend loads (a
    folder with a ``config.json`` of a causal language model transformers knows, and a
    tokenizer), found without loading the weights; None when nothing does. ``trained``:
    the model trained, not an auxiliary or an evaluated one."""
    import json

    path = Path(model_path)
    unreachable = unreachable_problem(model_path)
    if unreachable is not None:
        return unreachable
    if not path.is_dir():
        return (f"{shown_path(model_path)} is not a folder; the local backend loads a local "
                f"Hugging Face "
                f"model folder and never downloads: download it and give its folder (for a "
                f"run on GPUs, check with {option('backend', 'trinity')})")
    if not (path / "config.json").exists():
        from .checkpoints import model_pointer

        # a run directory: its newest checkpoint with a whole model, as eval --checkpoint of
        # it says (sweep 49 B-W7), not a damaged newer one that fails to load (sweep 50 B-W2)
        pointer = model_pointer(model_path)
        return adapter_only_problem(path, model_path, trained=trained) or (
            f"{model_path} is a run directory, not a saved model folder; {pointer}"
            if pointer else
            f"{model_path} has no config.json, so it is not a saved model folder")
    pointer = model_file_problem(path / "config.json", model_path)
    if pointer is not None:
        return pointer
    shape = config_shape_problem(path, model_path)
    if shape is not None:
        return shape
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = config.get("model_type")
    if kind in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not generates_text(config) and \
            config.get("is_encoder_decoder") is not True:  # (an encoder-decoder: said so)
        # (a reward model, a masked language model: built as a causal model here, its head
        # dropped, or its attention not causal, and trained without a word)
        return (f"{model_path}/config.json: its architectures names "
                f"{str(config['architectures'][0])[:80]!r}, no causal language model's class: "
                f"a classifier, a masked language model or an embedding model generates no "
                f"text; give a causal language model's folder")
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return (f"{model_path} is not a causal language model this transformers loads "
                f"(model_type {kind!r} in its config.json); give a folder of one, e.g. a "
                f"Qwen or Llama checkpoint")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        return (f"{model_path} has no tokenizer ({', '.join(TOKENIZER_FILES)}); copy the "
                f"tokenizer files from the model it was trained from")
    return folder_problem(path, model_path, loaded_here=True)


def load_policy(graph: ExperimentGraph, setting: str = "model") -> tuple[Any, Any]:
    """Load a model (``model`` or ``auxiliary_models.NAME``) and its tokenizer from a local
    folder, or say why not."""
    spec = graph.model if setting == "model" else graph.auxiliary_models[setting.split(".", 1)[1]]
    problem = model_folder_problem(spec.model_path, trained=setting == "model")
    if problem is not None:
        raise ConfigError(f"{setting}.model_path: {problem}")
    return load_folder(Path(spec.model_path), f"{setting}.model_path")


def load_folder(path: Path, label: str) -> tuple[Any, Any]:
    """Load the model and tokenizer of a local Hugging Face folder (``label`` names it in
    an error), or say why not."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()  # tunedsl shows its own progress
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except ValueError as exc:
        kind = type(config).__name__ if "config" in locals() else "unknown"
        raise ConfigError(f"{label}: {path} is not a causal language model ({kind}: "
                          f"{str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise ConfigError(f"{label}: cannot load {path}: "
                          f"{str(exc).splitlines()[0]}") from None
    except Exception as exc:  # noqa: BLE001 - safetensors' own error type, torch's, ...
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"{label}: cannot load the weights of {path} "
                          f"({type(exc).__name__}: {reason[:200]}); copy them again from "
                          f"where the model came from") from None
    endless = next((name for name, tensor in model.state_dict().items()
                    if tensor.is_floating_point() and not bool(tensor.isfinite().all())), None)
    if endless is not None:  # (sampling failed in the first rollout, blamed on the workflow)
        raise ConfigError(f"{label}: the weights of {path} hold a number that is not finite "
                          f"(NaN or infinity) in {endless}; copy them again from where the "
                          f"model came from, or give the checkpoint before they diverged")
    try:
        tokenizer = load_tokenizer(path)
    except ValueError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


@attrs.frozen(kw_only=True)
class FrozenModel:
    """An auxiliary model on the local backend: its sampler, chat template and settings."""

    engine: Engine
    codec: ChatCodec
    sampling: dict[str, Any]
    tool_call_parser: str | None
    max_model_len: int | None
    reasoning_parser: str | None

    def session(self, name: str) -> LocalChatModel:
        """A fresh recording `ChatModel` for one rollout."""
        return LocalChatModel(self.engine, self.codec, name=name, sampling=self.sampling,
                              tool_call_parser=self.tool_call_parser,
                              max_model_len=self.max_model_len,
                              reasoning_parser=self.reasoning_parser)


@attrs.frozen(kw_only=True)
class EndpointModel:
    """An auxiliary model served by an endpoint (``Model(base_url=...)``): nothing local."""

    client: Any
    factory: Callable[[], Any]

    def session(self, name: str) -> Any:
        """A fresh recording `ChatModel` for one rollout."""
        return self.factory()


def _kept_from_reading(folder: Path) -> str | None:
    """The first file of a model folder that permissions keep from reading, with its
    ``chmod``; None when each can be read."""
    from ...access import permission_fix

    for file in sorted(folder.iterdir()):
        try:
            with open(file, "rb"):
                pass
        except IsADirectoryError:
            continue
        except OSError as exc:
            fix = permission_fix(exc, file)
            if fix is not None:
                return f"{file} cannot be read ({exc.strerror}); {fix}"
    return None


def checkpoint_model(folder: str, sampling: Mapping[str, Any], *,
                     enable_thinking: bool | None = None,
                     tool_call_parser: str | None = "hermes",
                     max_model_len: int | None = None,
                     reasoning_parser: str | None = None) -> Any:
    """A factory of `LocalChatModel` s over a saved model folder (e.g. ``global_step_N``)."""
    unreachable = unreachable_problem(str(folder))
    if unreachable is not None:  # (Python's "cannot use that path" of its config.json)
        raise ConfigError(f"{option('checkpoint', folder)}: {unreachable}")
    if not Path(folder).exists():
        raise ConfigError(f"{option('checkpoint', folder)}: no such folder; give a saved "
                          f"model folder, "
                          f"RUN_DIR/{STEP_DIR_SHOWN}")
    if Path(folder).is_file():  # config.json, say, or a weights file: its folder was meant
        parent = Path(folder).parent
        held = (f"give the folder that holds it: {parent}" if (parent / "config.json").is_file()
                else f"give a saved model folder, RUN_DIR/{STEP_DIR_SHOWN}")
        raise ConfigError(f"{option('checkpoint', folder)}: a file, not a model folder; {held}")
    # (a folder named config.json is said below, as check says it)
    if not (Path(folder) / "config.json").exists():
        from .checkpoints import model_pointer

        # a run directory: its newest checkpoint with a whole model is the likely one
        pointer = model_pointer(folder)
        adapter = None if pointer else adapter_only_problem(Path(folder), folder, trained=False)
        raise ConfigError(f"{option('checkpoint', folder)}: " + (adapter or (
            f"not a saved model folder (no config.json); "
            f"{pointer or f'give RUN_DIR/{STEP_DIR_SHOWN}'}")))
    from .checkpoints import weights_problem

    pointers = git_lfs_pointers(Path(folder))  # not damaged: the clone left them behind
    if pointers:
        raise ConfigError(f"{option('checkpoint', folder)}: "
                          f"{pointer_problem(pointers[0], folder)}")
    kept = _kept_from_reading(Path(folder))  # (a mode, not damage: "No such file" was said)
    if kept is not None:
        raise ConfigError(f"{option('checkpoint', folder)}: {kept}")
    problem = model_file_problem(Path(folder) / "config.json", folder)  # (a folder of that
    if problem is not None:  # name was "damaged", where check says what it is)
        raise ConfigError(f"{option('checkpoint', folder)}: {problem}")
    # a checkpoint's safetensors, damaged; other weights (a sound pytorch_model.bin was
    # "damaged: no *.safetensors", a folder named model.safetensors "No such device") are
    # said by the run's rules below, as check says them (sweep 47 A-W1)
    weights = list(Path(folder).glob("*.safetensors"))
    problem = weights_problem(Path(folder)) if weights and all(map(Path.is_file, weights)) \
        else None
    if problem is not None:
        raise ConfigError(f"{option('checkpoint', folder)}: the saved model is damaged "
                          f"({problem}); "
                          f"evaluate another checkpoint")
    # what a run's model_path is refused for (weights that do not fit, a quantization
    # transformers skips): scored anyway, with random layers or unquantized, before
    problem = model_folder_problem(folder, trained=False)
    if problem is not None:
        raise ConfigError(f"{option('checkpoint', folder)}: {problem}")
    model, tokenizer = load_folder(Path(folder), spelled("checkpoint"))
    model.eval()
    engine = Engine(model, eos_token_id=eos_ids(model, tokenizer),
                    pad_token_id=tokenizer.pad_token_id)
    codec = ChatCodec(tokenizer, enable_thinking=enable_thinking)
    return lambda: LocalChatModel(engine, codec, name=folder, sampling=sampling,
                                  max_model_len=max_model_len,
                                  reasoning_parser=reasoning_parser,
                                  tool_call_parser=tool_call_parser)
