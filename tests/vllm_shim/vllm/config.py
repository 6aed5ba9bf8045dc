"""Import-only stand-in: ``vllm.config.ModelConfig``."""


class ModelConfig:
    """Never built on the text-only path."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("the tunedsl test shim of vLLM cannot build a ModelConfig")
