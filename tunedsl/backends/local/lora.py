"""LoRA on the local backend: peft adapters on the trained model, and their checkpoints.

`add_lora` injects the adapters into the loaded model in place, so the sampler and the
trainer's forward passes, which call that model, go through them; the optimizer is given
the adapters' weights only, and the base weights stay as loaded.

A LoRA checkpoint ``global_step_N/`` holds the merged model (the adapter folded into the
base weights) where a full-training checkpoint holds the model, so ``eval --checkpoint``
and ``AutoModelForCausalLM.from_pretrained`` read both alike; ``global_step_N/adapter/``
holds the adapter itself in peft's format (``adapter_config.json``,
``adapter_model.safetensors``), which a resume loads back and
``PeftModel.from_pretrained(base, ...)`` reads.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

from ...dsl.records import LoRA
from ...errors import ConfigError

#: The adapter's folder inside ``global_step_N``, and the files peft writes there.
ADAPTER = "adapter"
ADAPTER_CONFIG = f"{ADAPTER}/adapter_config.json"
ADAPTER_WEIGHTS = f"{ADAPTER}/adapter_model.safetensors"


def add_lora(model: Any, lora: LoRA, model_path: str, seed: int) -> Any:
    """Inject ``lora``'s adapters into ``model`` (in place) and return the peft model that
    saves and switches them; only the adapters' weights then require gradients. Their random
    initial weights derive from ``seed`` alone, so a run is the same in any process."""
    import torch

    try:
        from peft import LoraConfig, TaskType, get_peft_model
    except ImportError:
        raise ConfigError('model.lora: the local backend trains LoRA adapters with peft, which '
                          'is not installed; pip install "tunedsl[local]"') from None
    targets = lora.target_modules
    # As Trinity's verl worker configures peft (its dropout is peft's default, 0).
    config = LoraConfig(task_type=TaskType.CAUSAL_LM, r=lora.rank, lora_alpha=lora.alpha,
                        target_modules=targets if isinstance(targets, str) else list(targets),
                        bias="none")
    setting = f"model.lora.target_modules = {_shown(targets)}"
    _refuse_names_matching_nothing(model, targets, setting, model_path)
    _refuse_rank_wider_than_layers(model, lora.rank, model_path)
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # fork_rng leaves the process's generator as it was. peft reads transformers'
            # deprecated is_gradient_checkpointing: a warning for peft, not for the user.
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing",
                                    category=FutureWarning)
            # a tied layer in the adapter: refused below in tunedsl's words
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings",
                                    category=UserWarning)
            torch.manual_seed(seed)
            peft_model = get_peft_model(model, config)
    except ValueError as exc:  # peft's reason, e.g. "Target modules ... not found in ..."
        reason = str(exc).splitlines()[0]
        if "not found in the base model" in reason:
            reason = f"matches no layer of {model_path}"
        raise ConfigError(f"{setting}: {reason}; its linear layers are named "
                          f"{_linear_names(model)}") from None
    _refuse_tied_adapters(model, setting, model_path)
    return peft_model


def _linear_names(model: Any) -> str:
    import torch

    return ", ".join(sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                             if isinstance(module, torch.nn.Linear)}))


def _refuse_names_matching_nothing(model: Any, targets: str | tuple[str, ...], setting: str,
                                   model_path: str) -> None:
    """Each name of a list must name a layer, as peft matches one (the whole dotted name,
    or its last parts): peft refuses a list only when no name matches, and trained the
    others without a word for a misspelt one."""
    if isinstance(targets, str):
        return  # "all-linear" or a regular expression: peft's own check holds
    names = [name for name, _ in model.named_modules()]
    for target in targets:
        if not any(name == target or name.endswith(f".{target}") for name in names):
            raise ConfigError(f"{setting}: {target!r} matches no layer of {model_path}; its "
                              f"linear layers are named {_linear_names(model)}")


def _refuse_rank_wider_than_layers(model: Any, rank: int, model_path: str) -> None:
    """A rank above a layer's narrower side adds nothing a full update would not, and a
    rank far above every layer's made peft allocate until memory ran out."""
    import torch

    widest = max((min(module.in_features, module.out_features)
                  for module in model.modules() if isinstance(module, torch.nn.Linear)),
                 default=None)
    if widest is not None and rank > widest:
        raise ConfigError(f"model.lora.rank = {rank}: wider than every linear layer of "
                          f"{model_path} (the widest is {widest} on its narrower side, and a "
                          f"rank above a layer's width adds nothing); give at most {widest}")


def _shown(targets: str | tuple[str, ...]) -> str:
    return repr(targets) if isinstance(targets, str) else repr(list(targets))


def _refuse_tied_adapters(model: Any, setting: str, model_path: str) -> None:
    """An adapter on an output head that shares its weights with the input embeddings
    cannot be merged: the merge would change both, and the saved model would not be the
    trained one (peft warns of this too)."""
    from peft.tuners.lora import LoraLayer

    tied = getattr(model.config.get_text_config(), "tie_word_embeddings", False)
    layers = {"output head": model.get_output_embeddings(),
              "input embeddings": model.get_input_embeddings()}
    adapted = [name for name, layer in layers.items() if isinstance(layer, LoraLayer)]
    if tied and adapted:
        raise ConfigError(f"{setting}: {model_path} ties its output head to its input "
                          f"embeddings (tie_word_embeddings), so an adapter on its "
                          f"{adapted[0]} could not be merged into the saved model without "
                          f"changing the other; leave that layer out")


class WithoutAdapter:
    """The initial model for the KL term: the policy with its adapters switched off (the
    base weights never change), so no second copy is loaded."""

    def __init__(self, peft_model: Any) -> None:
        self.peft_model = peft_model

    def __call__(self, **inputs: Any) -> Any:
        with self.peft_model.disable_adapter():
            return self.peft_model(**inputs)


def save_lora(peft_model: Any, folder: Path) -> None:
    """Write the adapter to ``folder/adapter`` and the merged model to ``folder``."""
    peft_model.save_pretrained(folder / ADAPTER)
    # Merging in place and back would move the base weights by rounding: merge a copy.
    copy.deepcopy(peft_model).merge_and_unload().save_pretrained(folder)


def load_lora(peft_model: Any, folder: Path) -> None:
    """Load the adapter weights saved in ``folder/adapter`` into ``peft_model``."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    set_peft_model_state_dict(peft_model, load_peft_weights(str(folder / ADAPTER)))
