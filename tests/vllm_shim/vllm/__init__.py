"""An import-only stand-in for the three vLLM modules that Trinity-RFT 0.6.0's
``trinity.common.models.mm_utils`` imports at module level, so Trinity's
``WorkflowRunner`` and ``ModelWrapper`` import on a machine without vLLM (a GPU
package). Nothing on the text-only path calls these names; the functions say so if
anything ever does. ``tests/trinity_runner.py`` puts this folder on ``sys.path`` only
when vLLM is not installed.
"""

__version__ = "0.0.0+tunedsl-import-shim"
