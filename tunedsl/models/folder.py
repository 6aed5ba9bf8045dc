"""A model folder's files as an engine would find them: weights and tokenizer files a
clone without git-lfs left as pointers, damaged or cut short, shards an index names and
the folder lacks (read from their first bytes, never loaded), and a tokenizer that does not
load or whose chat template does not render a message. Every backend that loads a local
folder asks these first, so ``check`` finds what the engine would fail on once GPUs are
taken."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, BinaryIO

from ..access import permission_fix
from ..lfs import is_git_lfs_pointer, pointer_problem
from ..wording import option

#: Weights files transformers loads, besides ``*.safetensors``.
_OTHER_WEIGHTS = ("pytorch_model*.bin", "model*.bin", "*.pt", "*.pth")


def model_files_problem(path: Path, model_path: str) -> str | None:
    """What keeps a model folder's weights from loading, read from their headers (8 bytes
    and a JSON header a safetensors file): none there, a git-lfs pointer in their place (a
    clone without git-lfs), or a damaged file; None when they look whole."""
    if not any(path.glob("*.safetensors")) and \
            not any(any(path.glob(pattern)) for pattern in _OTHER_WEIGHTS) \
            and not any(path.glob(f"*{_INDEX}")):  # (an index's shards may be in a folder)
        return (f"{model_path} has no model weights (model.safetensors, or "
                f"pytorch_model.bin); copy them into it, or give the folder that holds them")
    for file in [*_safetensors_read(path), *_read_files(path)]:
        problem = model_file_problem(file, model_path)
        if problem is not None:
            return problem
    return _adapter_problem(path, model_path)


def config_shape_problem(path: Path, model_path: str) -> str | None:
    """What keeps a model folder's ``config.json`` from being one any engine reads, said
    alike on every backend: JSON that is not valid, not an object, or without a
    ``model_type`` name (transformers', vLLM's and verl's readers build the model by it);
    None when it has that shape."""
    import json

    try:
        text = (path / "config.json").read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"{model_path}/config.json cannot be read ({exc.strerror})"
    if text.startswith("\ufeff"):  # (transformers' reader refuses it as no JSON)
        return (f"{model_path}/config.json starts with a byte-order mark (U+FEFF), which "
                f"transformers' JSON reader refuses; save it as UTF-8 without one")
    try:
        config = json.loads(text)
    except ValueError as exc:
        where = f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError) \
            else str(exc)
        return (f"{model_path}/config.json is not valid JSON ({where}); fix it, or copy the "
                f"config.json that came with the weights")
    if not isinstance(config, dict):  # ("model_type None" named no fault)
        held = "null" if config is None else f"a JSON {type(config).__name__}"
        return (f"{model_path}/config.json holds {held}, not a JSON object of the model's "
                f"configuration; copy the config.json that came with the weights")
    kind = config.get("model_type")
    if kind is None:
        return (f"{model_path}/config.json has no model_type, by which transformers knows "
                f"the model; copy the config.json that came with the weights (or add its "
                f"model_type, such as \"llama\" or \"qwen2\")")
    if not isinstance(kind, str):
        return (f"{model_path}/config.json: its model_type is {json.dumps(kind)[:40]}, not a "
                f"kind of model's name (\"llama\", \"qwen2\"); copy the config.json that "
                f"came with the weights")
    return None


def generates_text(config: dict[str, Any]) -> bool:
    """Whether the class a configuration's ``architectures`` names (one) builds a model that
    generates text, as an engine builds it by that name: a causal language model's or a
    vision-language one's, one of the model's own code (``auto_map``'s causal model, a
    name ending in ForCausalLM); not a classifier's, a masked language model's, an
    embedding model's, nor an encoder-decoder's (T5's old ``T5WithLMHeadModel``, whose
    name reads as one's: its ``model_type`` says it). True when it names no one class."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    named = config.get("architectures")
    if not (isinstance(named, list) and len(named) == 1 and isinstance(named[0], str)):
        return True
    generating = {name for names in (*MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values(),
                                     *MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values())
                  for name in ((names,) if isinstance(names, str) else names)}
    kind = config.get("model_type")
    encoder_decoder = config.get("is_encoder_decoder") is True or (
        kind in MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
        and kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    auto_map = config.get("auto_map")
    return named[0] in generating or (not encoder_decoder and (
        (named[0].isidentifier() and named[0].endswith(("ForCausalLM", "LMHeadModel")))
        or (isinstance(auto_map, dict) and "AutoModelForCausalLM" in auto_map)))


def unreachable_problem(model_path: str) -> str | None:
    """A model folder's path with a folder on its way that cannot be searched: nothing in it
    can be read (the path reads as missing, or ended in "cannot use that path" without the
    setting); or the folder itself cannot be listed, or holds links to nothing; None when
    nothing stops it."""
    from ..access import (
        looping_link_problem,
        permission_fix,
        searchable,
        unsearchable_folder,
        where_a_broken_link_leads,
    )

    loop = looping_link_problem(model_path)
    if loop is not None:
        return f"{loop}; fix the link, or give the model's folder itself"
    folder = unsearchable_folder(model_path)
    if folder is None and os.path.isdir(model_path):  # the model's folder itself
        folder = unsearchable_folder(os.path.join(model_path, "config.json"))
        if folder is None:
            try:
                os.listdir(model_path)
            except PermissionError as exc:  # searchable, but its files cannot be listed:
                # its weights read as missing, or a listing failed (sweep 46 A-T1)
                return f"{model_path}: cannot list it ({exc.strerror}); " \
                    f"{permission_fix(exc, model_path)}"
            except OSError:
                return None
            dangling = _dangling_links(model_path)
            if dangling:  # (a hub cache's snapshot copied without its blobs/: every file a
                # link to ../../blobs/..., and "has no config.json" beside the one ls shows)
                first = os.path.join(model_path, dangling[0])
                more = f" (and {len(dangling) - 1} more)" if len(dangling) > 1 else ""
                target = os.readlink(first)
                why = (": a copy of a hub cache's snapshot without the files its links point "
                       "at; copy the files themselves (cp -rL), or download the model into a "
                       "folder (hf download MODEL --local-dir DIR)"
                       if "blobs" in target.split(os.sep) else
                       "; fix the link, or copy the file itself there")
                return f"{first} is a symbolic link to {target}, " \
                    f"{where_a_broken_link_leads(first)}{more}{why}"
    if folder is None:
        return None
    shown = model_path if os.path.normpath(folder) == os.path.normpath(model_path) else \
        f"{model_path}: {folder}"
    return f"{shown} cannot be searched, so nothing in it can be read; {searchable(folder)}"


def _dangling_links(folder: str) -> list[str]:
    """The entries of ``folder`` that are symbolic links to nothing, sorted."""
    return sorted(entry.name for entry in os.scandir(folder)
                  if entry.is_symlink() and not os.path.exists(entry.path))


def adapter_only_problem(path: Path, model_path: str, *, trained: bool = True) -> str | None:
    """A LoRA adapter's folder (``adapter_config.json``, no ``config.json``) given as the
    model: "has no config.json, so it is not a saved model folder" said nothing of what
    it is, nor what to give. ``trained``: the model trained (which may train an adapter of
    its own), not an auxiliary or an evaluated one."""
    adapter = path / "adapter_config.json"
    if (path / "config.json").exists() or not adapter.is_file():
        return None
    own = " (tunedsl trains an adapter of its own: Model(..., lora=LoRA()))" if trained else ""
    return (f"{model_path} is a LoRA adapter{_of_its_base(adapter)} (adapter_config.json), "
            f"not a whole model: give the base model's folder{own}, or merge the adapter into "
            f"it (peft's merge_and_unload, then save_pretrained) and give that folder")


def _adapter_problem(path: Path, model_path: str) -> str | None:
    """An ``adapter_config.json`` without adapter weights beside it (a merged LoRA saved
    over its adapter's folder): transformers then loads the folder as a PEFT adapter of
    the base it names, and fails on the adapter's missing weights (blamed on the model's
    weights before)."""
    adapter = path / "adapter_config.json"
    if not adapter.is_file() or any(path.glob("adapter_model.*")):
        return None
    return (f"{adapter} makes transformers load {model_path} as a LoRA "
            f"adapter{_of_its_base(adapter)}, and it "
            f"holds no adapter weights (adapter_model.safetensors); remove adapter_config.json "
            f"if the folder holds the whole model")


def _of_its_base(adapter: Path) -> str:
    """`` of 'BASE'``, the base model a peft ``adapter_config.json`` names, or nothing."""
    import json

    try:
        base = json.loads(adapter.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        base = None
    return f" of {base!r}" if isinstance(base, str) and base else ""


def folder_problem(path: Path, model_path: str, *, loaded_here: bool = False) -> str | None:
    """What keeps the model folder ``path`` (whose ``config.json`` its backend has read)
    from loading as an engine would load it, checked in the same order on every backend:
    its files (`model_files_problem`), its configuration's numbers
    (`config_values_problem`), the weights' fit to it (`weights_fit_problem`), the
    tokenizer and its template (`tokenizer_problem`); None when nothing does.
    ``loaded_here``: transformers loads it on this machine (the local backend), so a
    quantized model it cannot build here is refused, not left to a GPU machine's loader."""
    return (model_files_problem(path, model_path) or _config_file_values_problem(path, model_path)
            or weights_fit_problem(path, model_path, loaded_here=loaded_here)
            or tokenizer_problem(path))


def _config_file_values_problem(path: Path, model_path: str) -> str | None:
    """`config_values_problem` of the folder's ``config.json`` (None when it is no JSON:
    its backend's reading said so first)."""
    import json

    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config_values_problem(config, model_path)


def _safetensors_read(path: Path) -> list[Path]:
    """The folder's ``.safetensors`` files its loaders read: with a shard index, the shards
    it names (vLLM loads those alone: a ``consolidated.safetensors`` beside them, Mistral's,
    is left, and a clone may leave it a git-lfs pointer), checked by the index's own check,
    and a whole ``model.safetensors`` (transformers loads it first); else every one (vLLM
    loads them all)."""
    if (path / f"model.safetensors{_INDEX}").is_file():  # (transformers takes a whole
        whole = path / "model.safetensors"                # model.safetensors first)
        return [whole] if whole.exists() else []
    return sorted(path.glob("*.safetensors"))


def _read_files(path: Path) -> list[Path]:
    """The files of a folder the loaders read besides its ``.safetensors``: the weights of
    the kind they pick (``.bin`` where there are no safetensors) and the shard index of
    that kind, the tokenizer's files, the chat template, the configurations; any of them
    git-lfs may have left as a pointer, as it leaves the weights. A ``README.md``, a
    ``.gguf`` or a ``training_args.bin`` no loader reads is left alone."""
    try:
        files = [file for file in path.iterdir() if not file.name.startswith(".")]
    except OSError:  # a folder that cannot be listed: its loader says so
        return []
    safetensors = any(file.name.endswith(".safetensors") for file in files)

    fast = any(file.name == "tokenizer.json" for file in files)  # (read alone, when there)

    def read(name: str) -> bool:
        if name.endswith(_INDEX):  # (vLLM loads the files an index names, whole one or not)
            return (".safetensors" in name) == safetensors
        if fast and (name in _SLOW_TOKENIZER_FILES or name.endswith(".tiktoken")):
            return False
        if name.endswith(".bin"):
            return not safetensors and name.startswith(("pytorch_model", "model"))
        return name.endswith(_READ_ENDINGS) or name in _READ_NAMES

    # transformers reads every template of additional_chat_templates/ with the tokenizer
    # (a non-UTF-8 one was said as the tokenizer's files being damaged: sweep 50 A-W7)
    extra = path / "additional_chat_templates"
    try:
        templates = sorted(extra.glob("*.jinja")) if extra.is_dir() else []
    except OSError:  # (a folder that cannot be listed: the tokenizer's loader says so)
        templates = []
    return sorted(file for file in files if file.suffix != ".safetensors"
                  and read(file.name)) + templates


#: Endings and names of the files of a model folder its loaders read (configurations, the
#: tokenizer's, the chat template), besides the weights: of JSON files, those transformers
#: and vLLM read (a Trainer's trainer_state.json, say, is read by neither).
_READ_ENDINGS = (".index.json", ".jinja", ".tiktoken")
_READ_NAMES = ("tokenizer.model", "merges.txt", "vocab.txt", "spiece.model", "config.json",
               "generation_config.json", "tokenizer_config.json", "tokenizer.json",
               "special_tokens_map.json", "added_tokens.json", "vocab.json",
               "chat_template.json", "preprocessor_config.json", "processor_config.json")
#: A slow tokenizer's files, which a folder's ``tokenizer.json`` stands in for.
_SLOW_TOKENIZER_FILES = ("tokenizer.model", "merges.txt", "vocab.txt", "vocab.json",
                         "spiece.model")


def git_lfs_pointers(path: Path) -> list[Path]:
    """The files of the model folder ``path`` that a clone without git-lfs left as
    pointers."""
    return [file for file in sorted(path.glob("*.safetensors")) + _read_files(path)
            if is_git_lfs_pointer(file)]


def model_file_problem(file: Path, model_path: str) -> str | None:
    """What is wrong with one file of a model folder, read from its first bytes and, for
    safetensors, its header and size (for a shard index, the shards it names): unreadable,
    a git-lfs pointer, damaged, or cut short (a download interrupted); None when it looks
    whole."""
    if is_git_lfs_pointer(file):
        return pointer_problem(file, model_path)
    try:
        with open(file, "rb") as handle:
            if file.name.endswith(_INDEX):  # model.safetensors.index.json, pytorch_model.bin...
                return _shards_problem(file, handle.read(), model_path)
            if file.suffix == ".safetensors":
                return _safetensors_problem(file, handle, model_path)
            if file.suffix in (".bin", ".pt", ".pth"):
                return _torch_file_problem(file, handle.read(8))
            if file.suffix == ".json" and file.name not in _JSON_SAID_ELSEWHERE:
                return _json_file_problem(file, handle.read())
            if file.suffix == ".jinja":  # (said as the tokenizer's files: sweep 49 B-W5)
                try:
                    handle.read().decode("utf-8")
                except UnicodeDecodeError:
                    return (f"{file} is not UTF-8 text; copy it again from where the model "
                            f"came from")
    except OSError as exc:  # a dangling link (a cache's blob deleted), a folder by that name
        fix = permission_fix(exc, file)  # (a mode or an owner, not a damaged copy)
        if fix is not None:
            return f"{file} cannot be read ({exc.strerror}); {fix}"
        what = "the weights" if file.suffix in _WEIGHTS_ENDINGS else "it"
        return (f"{file} cannot be read ({exc.strerror}); copy {what} again from where the "
                f"model came from")
    return None


#: JSON files a check of their own reads and names, in words of their content.
_JSON_SAID_ELSEWHERE = ("config.json", "chat_template.json")


def _json_file_problem(file: Path, text: bytes) -> str | None:
    """What keeps a JSON file a loader reads from being read: transformers drops a
    ``generation_config.json`` it cannot parse without a word (the reply's end tokens it
    names were not used: sweep 48 B-S2), and refuses others in words of its own."""
    import json

    if text.startswith(b"\xef\xbb\xbf"):
        return (f"{file} starts with a byte-order mark (U+FEFF), which the loaders' JSON "
                f"reader refuses; save it as UTF-8 without one")
    try:
        held = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        return f"{file} is not UTF-8 text; copy it again from where the model came from"
    except ValueError as exc:
        where = f" (line {exc.lineno}: {exc.msg})" if isinstance(exc, json.JSONDecodeError) \
            else ""
        return (f"{file} is not valid JSON{where}, so the loaders would not read it; fix it, "
                f"or copy it again from where the model came from")
    if not isinstance(held, dict):  # (every one is an object; [] was blamed on the weights)
        shown = "null" if held is None else f"a JSON {type(held).__name__}"
        return (f"{file} holds {shown}, not a JSON object, so the loaders would not read it; "
                f"fix it, or copy it again from where the model came from")
    return None


#: How a sharded model's index file ends (``model.safetensors.index.json``,
#: ``pytorch_model.bin.index.json``), and the endings of weights files.
_INDEX = ".index.json"
_WEIGHTS_ENDINGS = (".safetensors", ".bin", ".pt", ".pth")


def _shards_problem(file: Path, text: bytes, model_path: str) -> str | None:
    """What is wrong with a sharded model's index: not the JSON of one, naming a shard the
    folder lacks, or one of its shards (`model_file_problem`)."""
    import json

    try:
        index = json.loads(text)
        weight_map = index.get("weight_map", {})
        shards = sorted({name for name in weight_map.values() if isinstance(name, str)})
        if len(shards) != len(set(weight_map.values())) or not shards:
            raise ValueError("no shard names")
    except (ValueError, AttributeError, TypeError):
        return (f"{file} is damaged (not the JSON of a shard index, whose weight_map names "
                f"each tensor's file); copy it again from where the model came from")
    missing = [name for name in shards if not (file.parent / name).is_file()]
    if missing:
        return (f"{file} names the weights file {missing[0]}, which is not in {model_path}; "
                f"copy it in")
    for name in shards:  # the files loaders read: pointers, damaged or cut short
        problem = model_file_problem(file.parent / name, model_path)
        if problem is not None:
            return problem
    if "metadata" not in index:  # (a merge script's: vLLM reads weight_map alone)
        return (f"{file} has no \"metadata\" entry, which transformers reads from a shard "
                f"index (verl and the local backend load with it); add \"metadata\": {{}}")
    return None


def _safetensors_problem(file: Path, handle: BinaryIO, model_path: str) -> str | None:
    """What is wrong with a safetensors file: a header whose length is not the file's, a
    header that is not JSON, or tensors that end past the file's end (cut short)."""
    import json
    import struct

    head = handle.read(8)
    size = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
    whole = file.stat().st_size
    try:
        if not 0 < size <= whole - 8:
            raise ValueError("its header's length is not the file's")
        header = json.loads(handle.read(size))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        ends = [entry["data_offsets"][1] for entry in header.values()
                if isinstance(entry, dict) and "data_offsets" in entry]
        if ends and 8 + size + max(ends) > whole:  # (its tensors' bytes missing)
            raise ValueError(f"cut short: {whole} bytes of {8 + size + max(ends)}")
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        return (f"{file} is damaged ({exc}); copy the weights again from where the model "
                f"came from")
    try:  # what the library itself reads of the header (each tensor's type, its offsets)
        from safetensors import safe_open

        with safe_open(str(file), framework="pt") as opened:
            opened.keys()
    except ImportError:  # (no safetensors: no backend here loads the file)
        pass
    except Exception as exc:  # noqa: BLE001 - the library's own error type
        return (f"{file} is damaged ({_reason(exc)}); copy the weights again from where the model "
                f"came from")
    return None


#: A tool a workflow's first call might offer (a template may insist on tools).
_TOOL = {"type": "function", "function": {
    "name": "add", "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                   "b": {"type": "number"}},
                   "required": ["a", "b"]}}}
_USER = {"role": "user", "content": "1+1="}
#: What a chat template is asked to render to show it works (a workflow's first call),
#: each in turn until one renders: messages, and the tools offered (or None).
_PROBES: tuple[tuple[list[dict[str, str]], list[dict[str, Any]] | None], ...] = (
    ([_USER], None),
    ([{"role": "system", "content": "Answer briefly."}, _USER], None),  # a system first
    ([_USER], [_TOOL]))  # (a template made for agents, refusing a call without tools)


def load_tokenizer(path: Path) -> Any:
    """The tokenizer of the model folder ``path``, its chat template shown to render a
    message (every backend renders the workflow's messages with it).

    Raises:
        ValueError: it does not load, or its template does not render (the reason, whole).
    """
    import logging

    from transformers import AutoTokenizer
    from transformers.utils import logging as transformers_logging

    quiet = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity(logging.ERROR)  # (a missing file is said below)
    try:
        tokenizer: Any = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - a missing or damaged tokenizer raises many types
        if "Couldn't instantiate the backend tokenizer" in str(exc):  # (its "(1)...(3)")
            raise ValueError(f"cannot load the tokenizer of {path}: none of the files it is "
                             f"built from is there (tokenizer.json; or tokenizer.model, or "
                             f"vocab.json and merges.txt); copy them from the model it was "
                             f"trained from") from None
        raise ValueError(f"cannot load the tokenizer of {path} ({_reason(exc)}); a model "
                         f"folder needs its tokenizer files (tokenizer.json, "
                         f"tokenizer_config.json) whole: copy them from the model it was "
                         f"trained from") from None
    finally:
        transformers_logging.set_verbosity(quiet)
    if getattr(tokenizer, "chat_template", None) is None:
        _refuse_unreadable_template_file(path)
        raise ValueError(f"{path} has no chat template (chat_template.jinja, or chat_template "
                         f"in tokenizer_config.json), with which every backend renders the "
                         f"workflow's messages: a base model's folder? give an instruct "
                         f"model's, or add the template")
    named = tokenizer.chat_template
    if isinstance(named, dict) and "default" not in named:  # (the tools probe took tool_use)
        raise ValueError(f"{path} has chat templates named {', '.join(sorted(named))} but none "
                         f"named 'default', which transformers renders every call without "
                         f"tools with (it refuses those); name one of them 'default' in "
                         f"tokenizer_config.json, or copy the model's templates again")
    failures = []
    for messages, tools in _PROBES:
        try:
            rendered = tokenizer.apply_chat_template(messages, tools=tools,
                                                     add_generation_prompt=True,
                                                     tokenize=True,
                                                     return_dict=True)["input_ids"]
            break
        except Exception as exc:  # noqa: BLE001 - jinja's errors, transformers' own
            failures.append(exc)
    else:
        first = failures[0]
        raise ValueError(f"the chat template of {path} does not render a message "
                         f"({_said(first)}); fix it (chat_template.jinja, "
                         f"or chat_template in tokenizer_config.json), or copy it from the "
                         f"model it was trained from") from None
    if not rendered:
        raise ValueError(f"the chat template of {path} renders a message as nothing (an empty "
                         f"template); fix it (chat_template.jinja, or chat_template in "
                         f"tokenizer_config.json), or copy it from the model it was trained "
                         f"from")
    size = _vocabulary_size(path)
    added = {token: number for token, number in tokenizer.get_added_vocab().items()
             if isinstance(number, int)}
    past = max([*rendered, *added.values(), len(tokenizer) - 1], default=0)
    if size is not None and past >= size:  # the embedding has no row for it
        token = next((name for name, number in added.items() if number == past), None)
        raise ValueError(f"the tokenizer of {path} makes token id {past}"
                         f"{f' ({token})' if token else ''}, past the {size} tokens "
                         f"(vocab_size) of the model its config.json describes: the tokenizer "
                         f"is not this model's; copy the one that came with the weights")
    return tokenizer


def _vocabulary_size(path: Path) -> int | None:
    """The ``vocab_size`` of the folder's ``config.json`` (a multimodal model's text
    part's), or None."""
    import json

    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    size = config.get("vocab_size")
    if size is None and isinstance(config.get("text_config"), dict):
        size = config["text_config"].get("vocab_size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def _refuse_unreadable_template_file(path: Path) -> None:
    """Refuse a ``chat_template.json`` transformers skipped as no JSON of a template (a cut
    copy): the folder was said to have no template at all."""
    import json

    file = path / "chat_template.json"
    if not file.is_file():
        return
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{file} is not the JSON of a chat template ({_said(exc)}); copy it "
                         f"again from the model it was trained from") from None
    if not isinstance(data, dict):  # (said as an AttributeError's repr: sweep 50 A-W6)
        shown = "null" if data is None else f"a JSON {type(data).__name__}"
        raise ValueError(f"{file} holds {shown}, not a JSON object with chat_template; copy "
                         f"it again from the model it was trained from")
    template = data.get("chat_template")
    if not isinstance(template, (str, list)):
        raise ValueError(f"{file} holds no chat_template text; copy it again from the model "
                         f"it was trained from")


def tokenizer_problem(path: Path) -> str | None:
    """Why `load_tokenizer` refuses the folder ``path``, or None."""
    try:
        load_tokenizer(path)
    except ValueError as exc:
        return str(exc)
    return None


def config_values_problem(config: Any, model_path: str) -> str | None:
    """A value of a model's ``config.json`` (read into ``config``) that is no finite
    number where JSON's readers take ``NaN`` and ``Infinity``: the engine builds the model
    and samples NaN; None when there is none."""
    from ..data.json_files import non_finite

    key = non_finite(config)
    if key is None:
        return None
    return (f"{model_path}/config.json: {key} is not a finite number (NaN or Infinity); copy "
            f"config.json again from where the model came from")


def weights_fit_problem(path: Path, model_path: str, *,
                        loaded_here: bool = False) -> str | None:
    """How the folder's weights do not fit the model its ``config.json`` describes, as
    transformers itself finds loading them onto PyTorch's meta device (no tensor data is
    kept; its conversions apply: experts merged, buffers it ignores, tied weights): a
    tensor of another shape, tensors it has no place for (another number of layers, other
    names), tensors it needs that the weights lack (an untied output head), which it would
    leave random with no more than a report; weights it cannot read at all. A configuration
    transformers cannot read or build (an unknown activation) is said too; the attention is
    built plainly (a flash-attn the configuration names is the GPU's, checked apart); a
    quantized model transformers cannot build here, and a model of no causal language
    model's type (a vision-language one, vLLM's to load), are left to their loader;
    tensors that are no parameters (buffers an older version saved) may go unplaced. None
    when they fit."""
    import logging

    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as transformers_logging
    except ImportError:  # (no backend here loads the folder)
        return None
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - any reason it cannot read the configuration
        field = config_field_problem(path)
        if field is not None:
            return f"{model_path}/config.json: {field}"
        return (f"{model_path}/config.json: transformers cannot read it ({_said(exc)}); fix "
                f"config.json, or copy the one that came with the weights")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if getattr(config, "model_type", None) not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        # a vision-language model (qwen2_vl, llava): vLLM loads it on Trinity's GPUs, and
        # transformers builds no causal language model of it here ("fix config.json" was
        # wrong); the local backend refuses it by its model_type before this
        return None
    if getattr(config, "is_encoder_decoder", False) is True:
        # BART's: transformers' causal model of it is the decoder alone, its encoder's
        # tensors "no place" in it (which blamed the config.json)
        named = getattr(config, "architectures", None) or [config.model_type]
        return (f"{model_path}: its config.json describes an encoder-decoder model "
                f"({str(named[0])[:80]}), and tunedsl trains decoder-only language models "
                f"(a causal model of it is its decoder alone); give a decoder-only model's "
                f"folder")
    # a quantized model: checked where transformers can build it here (FP8), else left to
    # its loader (its quantizer's library is the GPU machine's)
    quantized = getattr(config, "quantization_config", None) is not None
    if quantized and not _quant_method(config):
        return (f"{model_path}/config.json: its quantization_config names no quant_method, by "
                f"which transformers and vLLM read it; remove it if the model is not "
                f"quantized, or copy the config.json that came with the weights")
    if quantized and (unknown := _unknown_quant_method(config)):
        return unknown.format(where=f"{model_path}/config.json")
    quiet = transformers_logging.get_verbosity()
    bars = transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity(logging.ERROR)  # (its load report: said below)
    transformers_logging.disable_progress_bar()
    try:
        try:
            with torch.device("meta"):
                AutoModelForCausalLM.from_config(config, attn_implementation="eager")
        except Exception as exc:  # noqa: BLE001 - what the configuration asks it lacks
            if quantized:
                return _quantized_problem(config, exc, model_path) if loaded_here else None
            field = config_field_problem(path)  # ("'int' object has no attribute 'to_dict'")
            if field is not None:
                return f"{model_path}/config.json: {field}"
            return (f"{model_path}/config.json: transformers cannot build the model it "
                    f"describes ({_said(exc)}); fix config.json, or copy the one that came "
                    f"with the weights")
        found: dict[str, Any]
        try:
            loaded: Any = AutoModelForCausalLM.from_pretrained(
                path, device_map="meta", output_loading_info=True, local_files_only=True,
                attn_implementation="eager", ignore_mismatched_sizes=True)
            found = loaded[1]
        except Exception as exc:  # noqa: BLE001 - weights it cannot read or find
            if quantized:
                return _quantized_problem(config, exc, model_path) if loaded_here else None
            return (f"{model_path}: transformers cannot load its weights into the model its "
                    f"config.json describes ({_said(exc)}); copy the weights whole, or the "
                    f"config.json that came with them")
    finally:
        transformers_logging.set_verbosity(quiet)
        if bars:
            transformers_logging.enable_progress_bar()
    mismatched = sorted(found.get("mismatched_keys") or ())
    if mismatched:
        name, *shapes = mismatched[0]
        saved, made = (list(shape) for shape in shapes[:2])
        return (f"{model_path}: the weights' tensor {name} has shape {saved}, where the model "
                f"its config.json describes has {made}: that config.json is not these "
                f"weights'; copy the one that came with them")
    # (parameters only: a buffer an older version of the model saved, GPT-2's
    # attn.masked_bias, is dropped as the model rebuilds it)
    unplaced = sorted(key for key in found.get("unexpected_keys") or ()
                      if key.rpartition(".")[2] in ("weight", "bias"))
    if unplaced:
        return (f"{model_path}: {len(unplaced)} of the weights' tensors have no place in the "
                f"model its config.json describes (the first: {unplaced[0]}), and would be "
                f"dropped: that config.json is not these weights'; copy the one that came "
                f"with them")
    missing = sorted(found.get("missing_keys") or ())
    if missing:
        return (f"{model_path}: the weights lack {len(missing)} of the tensors the model its "
                f"config.json describes needs (the first: {missing[0]}), which would be left "
                f"random; copy the weights whole, or the config.json that came with them")
    return None


def _quantized_problem(config: Any, exc: BaseException, model_path: str) -> str:
    """Why transformers cannot load a quantized model on this machine (its quantizer's
    library, a GPU), for the local backend, which loads it here."""
    method = _quant_method(config) or "a"
    return (f"{model_path}: transformers cannot load this {method}-quantized model on this "
            f"machine ({_said(exc)}), as the local backend would; give a folder of the model "
            f"unquantized, or run it on GPUs ({option('backend', 'trinity')})")


#: Tables of a model's config.json that transformers reads as objects (it failed on
#: another type in its own words: "argument of type 'int' is not iterable").
_OBJECT_FIELDS = ("auto_map", "quantization_config", "rope_scaling", "rope_parameters",
                  "text_config", "vision_config")


def config_field_problem(path: str | os.PathLike[str]) -> str | None:
    """A table of the model folder ``path``'s config.json that is no JSON object, in a
    line (``its auto_map is 5, not an object ...``); None when each is one (or the file is
    not JSON: said where it is read)."""
    import json

    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):  # (JSON null, a list: said in transformers' words)
        return (f"it holds {json.dumps(config)[:40]}, not a JSON object of the model's "
                f"settings; copy the config.json that came with the weights")
    for field in _OBJECT_FIELDS:
        value = config.get(field)
        if value is not None and not isinstance(value, dict):
            return (f"its {field} is {json.dumps(value)[:60]}, not an object ({{...}}) as "
                    f"transformers reads it; fix it, or copy the config.json that came with "
                    f"the weights")
    return None


def _quant_method(config: Any) -> Any:
    """The ``quant_method`` of a configuration's ``quantization_config`` (None without), as
    transformers reads it: bitsandbytes' ``load_in_4bit``/``load_in_8bit`` name theirs."""
    settings = getattr(config, "quantization_config", None)
    read = settings.get if isinstance(settings, dict) else lambda name: getattr(settings, name,
                                                                                None)
    if read("load_in_8bit") or read("load_in_4bit"):
        return "bitsandbytes"
    return read("quant_method")


def _unknown_quant_method(config: Any) -> str | None:
    """A ``quant_method`` transformers knows no quantizer of, as a line to ``format`` with
    ``where``; None for one it knows. The local backend, and verl's actor on Trinity's GPUs,
    load the model with transformers, which refuses it ("Unknown quantization type"):
    on Trinity, once the GPUs are taken."""
    from transformers.quantizers.auto import AUTO_QUANTIZATION_CONFIG_MAPPING

    method = _quant_method(config)
    if method == "bitsandbytes" or method in AUTO_QUANTIZATION_CONFIG_MAPPING:
        return None
    known = ", ".join(sorted(AUTO_QUANTIZATION_CONFIG_MAPPING))
    return (f"{{where}}: its quantization_config's quant_method {method!r} is no quantization "
            f"transformers knows ({known}); copy the config.json that came with the weights")


def _torch_file_problem(file: Path, start: bytes) -> str | None:
    """A ``.bin`` weights file that is no PyTorch file (a zip archive, or a pickle of the
    old format), by its first bytes: an HTML page a download saved, a safetensors file
    renamed. torch said "Weights only load failed" of it, and advised an unsafe load."""
    if start.startswith(b"PK\x03\x04") or start[:1] == b"\x80":
        return None
    shown = start.decode("ascii", "replace")
    begins = (f"it begins with {shown!r}" if shown.isprintable() and shown.strip() else
              f"its first bytes are {start.hex(' ')}" if start else "it is empty")
    return (f"{file} is not a PyTorch weights file ({begins}); copy it again from where the "
            f"model came from")


def _said(exc: BaseException) -> str:
    """An exception as ``Type: its first 200 characters``, on one line."""
    return f"{type(exc).__name__}: {_reason(exc)}"


def _reason(exc: BaseException) -> str:
    """An exception's text on one line, its first 200 characters (its type's name when it
    has none)."""
    text = _TERMINAL_CODES.sub("", str(exc))  # (torch marks words bold for a terminal)
    return " ".join(text.split())[:200] or type(exc).__name__


#: A terminal's control sequences (``\x1b[1m``), which a message quoted in a line drops.
_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def weights_identity(folder: str | os.PathLike[str]) -> str:
    """A digest of a model folder's weights that tells one checkpoint from another without
    reading gigabytes: each weights file's name, size, and first and last 64 KB (an
    adapter's too). A results file keeps it, so a resume whose ``--checkpoint`` now names
    other weights (a ``latest`` link moved to another step, a folder overwritten) is
    refused; the folder's path alone could not tell (sweep 51 B-S6). A folder moved or
    copied keeps its identity."""
    import hashlib

    path = Path(folder)
    patterns = ("*.safetensors", *_OTHER_WEIGHTS)
    files = sorted({file for pattern in patterns for file in path.glob(pattern)
                    if file.is_file()})
    found = hashlib.sha256()
    for file in files:
        try:
            size = file.stat().st_size
            with open(file, "rb") as handle:
                head = handle.read(65536)
                handle.seek(max(0, size - 65536))
                tail = handle.read(65536)
        except OSError:  # (said by the folder's own checks, before the model loads)
            continue
        found.update(f"{file.name}\0{size}\0".encode())
        found.update(hashlib.sha256(head + tail).digest())
    return found.hexdigest()[:16]
