#!/usr/bin/env bash
# Builds the separate environment in which benchmarks/prompt_tuning.py runs AgentScope v1's
# tune_prompt (DSPy MIPROv2): agentscope[tuner]==1.0.21 from the package index, which brings
# DSPy and datasets. DSPy never goes into tunedsl's own environment.
#
#     bash benchmarks/agentscope_env.sh [DIR]     # default ~/.cache/tunedsl-bench/agentscope-venv
#     python benchmarks/prompt_tuning.py --agentscope-python DIR/bin/python
#
# AgentScope 1.0.21's own dependencies are held at the versions tunedsl's constraints file
# for this Python tested it with (constraints/py3.X.txt): their newest releases break its
# import (mcp 2 dropped streamablehttp_client; SQLAlchemy 2.1 no longer brings greenlet;
# the newest pyarrow wants the numpy 2 that those constraints hold back).
# MIPROv2 needs optuna, which DSPy 3.4 makes optional and agentscope[tuner] does not ask for:
# dspy[optuna] brings it. DSPy and what it pins (gepa, litellm, optuna) float.
# About 2-3 minutes and 1.2 GB.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$HOME/.cache/tunedsl-bench/agentscope-venv}
python=${PYTHON:-python3}
version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
source_constraints="$here/constraints/py$version.txt"
[ -f "$source_constraints" ] || { echo "no $source_constraints: use PYTHON=python3.11 (or 3.10, 3.12)" >&2; exit 2; }
names="agentscope aioitertools anthropic dashscope docstring-parser filetype json5 json-repair mcp
numpy openai python-datauri opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp
opentelemetry-semantic-conventions python-socketio shortuuid tiktoken sounddevice sqlalchemy
greenlet python-frontmatter aiofiles datasets pyarrow pandas"
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
while IFS= read -r line; do
    name=$(printf '%s' "${line%%==*}" | tr 'A-Z_' 'a-z-')
    for wanted in $names; do
        [ "$name" = "$wanted" ] && printf '%s\n' "$line" >> "$constraints"
    done
done < <(grep -v '^#' "$source_constraints")
start=$(date +%s)
"$python" -m venv "$dir"
"$dir/bin/pip" install --quiet -c "$constraints" "agentscope[tuner]==1.0.21" "dspy[optuna]" "sqlalchemy[asyncio]"
"$dir/bin/python" -c "import agentscope.tuner, dspy; print('agentscope', agentscope.__version__, 'dspy', dspy.__version__)"
echo "built $dir in $(( $(date +%s) - start )) s; run:"
echo "    python benchmarks/prompt_tuning.py --agentscope-python $dir/bin/python"
