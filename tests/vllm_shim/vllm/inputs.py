"""Import-only stand-in: ``vllm.inputs.MultiModalDataDict``."""

MultiModalDataDict = dict
