#!/usr/bin/env bash
# Prove that `pip install ".[gpu]"` resolves for a GPU machine (CPython 3.11, Linux
# x86_64, packages from the package index) without installing anything:
#
#     bash scripts/check_gpu_install.sh [--wheelhouse DIR]
#
# In a temporary folder, deleted on exit, it
#   1. makes a fresh venv (pip 26.3 and packaging);
#   2. downloads verl 0.8.0's wheel (1.3 MB) and writes verl-0.8.0+numpy2: the same
#      wheel with one metadata line changed, `numpy<2.0.0` -> `numpy>=2.0.0,<2.4`.
#      No verl release fits trinity-rft 0.6.0 and vLLM together otherwise
#      (docs/getting-started/install.md, "GPU install");
#   3. runs pip's resolver on ".[gpu]" of this repository: `pip install --dry-run
#      --ignore-installed --report`, with that wheel on --find-links. Metadata is read
#      through HTTP range requests (`--use-feature=fast-deps`), so no CUDA wheel is
#      downloaded;
#   4. prints the resolved versions of the key packages and checks every declared
#      requirement of the resolved set again, markers and extras included.
#
# pip's configuration is neutralised (PIP_CONFIG_FILE=/dev/null and --isolated), so
# config files and PIP_* variables (a machine-wide torch cap, extra indexes,
# find-links) cannot distort a resolution meant for a GPU machine that reads the package index.
# --wheelhouse DIR also keeps the relabelled verl wheel in DIR; scripts/gpu_smoke.sh
# installs from there.
#
# Needs $PYTHON (default python3.11) and access to the package index. Takes about a minute.
#
#     bash scripts/check_gpu_install.sh --installed PYTHON
#
# instead checks an install of `.[gpu]` on the GPU node (PYTHON is its venv's python;
# scripts/gpu_smoke.sh runs it after installing), one line each, stopping at the first
# that fails: the NVIDIA driver answers (nvidia-smi) and the CUDA version it supports;
# torch sees CUDA and was built for a CUDA version the driver supports (torch 2.11.0's
# wheels are CUDA 13.0 builds: driver >= 580); torch's sdpa attention runs on the GPU
# (the attention tunedsl writes for verl); and `flash_attn.bert_padding` imports, which
# Trinity 0.6.0's trainer imports on every training step whatever the attention
# (trinity/trainer/verl/trainer.py, verl/utils/attention_utils.py; docs/getting-started/install.md, "GPU install").
# Exit status: 0 when it resolves and the set is consistent (--installed: every check
# passes), 1 when not, 2 on bad usage.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
WHEELHOUSE=""
INSTALLED=""
while [ $# -gt 0 ]; do
    case "$1" in
        --wheelhouse) WHEELHOUSE="${2:?--wheelhouse needs a folder}"; shift 2 ;;
        --installed) INSTALLED="${2:?--installed needs the python of the install}"; shift 2 ;;
        -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
        *) echo "usage: $0 [--wheelhouse DIR] | --installed PYTHON" >&2; exit 2 ;;
    esac
done

if [ -n "$INSTALLED" ]; then
    if ! smi=$(nvidia-smi 2>&1); then
        echo "FAIL driver: nvidia-smi does not answer: $(head -n 1 <<<"$smi")" >&2
        exit 1
    fi
    driver_cuda=$(sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' <<<"$smi" | head -n 1)
    driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
    if [ -z "$driver_cuda" ]; then
        echo "FAIL driver: nvidia-smi names no CUDA version the driver supports" >&2
        exit 1
    fi
    echo "ok  driver: NVIDIA $driver, supports CUDA up to $driver_cuda"
    "$INSTALLED" - "$driver_cuda" <<'PY'
import sys

def fail(what, why):
    print(f"FAIL {what}: {why}", file=sys.stderr)
    sys.exit(1)

import torch

driver = tuple(int(part) for part in sys.argv[1].split(".")[:2])
built = torch.version.cuda
if built is None:
    fail("torch", f"torch {torch.__version__} is a CPU build; install the CUDA build "
                  f"(pip install -e \".[gpu]\" from the package index)")
if tuple(int(part) for part in built.split(".")[:2]) > driver:
    fail("torch", f"torch {torch.__version__} is built for CUDA {built}, newer than the "
                  f"driver supports ({sys.argv[1]}); upgrade the NVIDIA driver")
if not torch.cuda.is_available():
    fail("torch", f"torch {torch.__version__} (CUDA {built}) sees no GPU")
name = torch.cuda.get_device_name(0)
print(f"ok  torch: {torch.__version__}, CUDA {built}, {torch.cuda.device_count()} GPU(s), {name}")

import torch.nn.functional as F

q = torch.randn(2, 4, 16, 16, device="cuda", dtype=torch.bfloat16)
try:
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.cuda.synchronize()
except Exception as exc:
    fail("sdpa", f"torch's scaled_dot_product_attention fails on {name}: "
                 f"{type(exc).__name__}: {exc}")
if not torch.isfinite(out.float()).all():
    fail("sdpa", f"torch's scaled_dot_product_attention gives non-finite values on {name}")
print("ok  sdpa: torch's scaled_dot_product_attention runs on the GPU (bfloat16, causal)")

try:
    import flash_attn.bert_padding  # noqa: F401
except Exception as exc:
    why = " ".join(f"{type(exc).__name__}: {exc}".split())
    fail("flash-attn", f"flash_attn.bert_padding does not import ({why}); Trinity 0.6.0's "
                       f"trainer needs it on every step: pip install flash-attn "
                       f"--no-build-isolation (docs/getting-started/install.md, \"GPU install\")")
print("ok  flash-attn: flash_attn.bert_padding imports")
PY
    exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/tunedsl-gpu-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export PIP_CONFIG_FILE=/dev/null TMPDIR="$WORK"
PIP=("$WORK/venv/bin/python" -m pip --isolated --disable-pip-version-check
     --cache-dir "$WORK/cache")
START=$(date +%s)

"$PYTHON" -m venv "$WORK/venv"
"${PIP[@]}" install --quiet "pip==26.3" "packaging>=24"

# verl 0.8.0 with numpy<2.0.0 -> numpy>=2.0.0,<2.4 in its metadata, version 0.8.0+numpy2
# (a local version, so it still satisfies verl==0.8.0 and pip prefers it to the package index's).
"${PIP[@]}" download --quiet --no-deps --only-binary=:all: --dest "$WORK/download" "verl==0.8.0"
mkdir -p "$WORK/wheels"
"$WORK/venv/bin/python" - "$WORK/download" "$WORK/wheels" <<'PY'
import base64, glob, hashlib, os, sys, zipfile

source = glob.glob(os.path.join(sys.argv[1], "verl-0.8.0-py3-none-any.whl"))[0]
old, new = "verl-0.8.0.dist-info/", "verl-0.8.0+numpy2.dist-info/"
files = {}
with zipfile.ZipFile(source) as wheel:
    for name in wheel.namelist():
        data = wheel.read(name)
        if name.startswith(old):
            name = new + name[len(old):]
        if name == new + "METADATA":
            text = data.decode()
            for before, after in (("\nVersion: 0.8.0\n", "\nVersion: 0.8.0+numpy2\n"),
                                  ("\nRequires-Dist: numpy<2.0.0\n",
                                   "\nRequires-Dist: numpy<2.4,>=2.0.0\n")):
                if before not in text:
                    sys.exit(f"verl 0.8.0's METADATA has no {before.strip()!r}")
                text = text.replace(before, after, 1)
            data = text.encode()
        files[name] = data
files.pop(new + "RECORD")
record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
          for name, data in files.items()]
files[new + "RECORD"] = ("\n".join(record + [new + "RECORD,,"]) + "\n").encode()
with zipfile.ZipFile(os.path.join(sys.argv[2], "verl-0.8.0+numpy2-py3-none-any.whl"), "w",
                     zipfile.ZIP_DEFLATED) as wheel:
    for name, data in files.items():
        wheel.writestr(name, data)
PY

echo "resolving $REPO[gpu] against the package index ..." >&2
if ! "${PIP[@]}" install --dry-run --ignore-installed --use-feature=fast-deps \
        --find-links "$WORK/wheels" --report "$WORK/report.json" "$REPO[gpu]" \
        > "$WORK/pip.log" 2>&1; then
    # pip's explanation, without the build and download chatter before it
    sed -n '/^ERROR\|conflict is caused by/,$p' "$WORK/pip.log" | head -n 60 >&2
    echo "FAILED: pip could not resolve $REPO[gpu]" >&2
    exit 1
fi

"$WORK/venv/bin/python" - "$WORK/report.json" "$(( $(date +%s) - START ))" <<'PY'
import json, sys
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canon
from packaging.version import Version

report = json.load(open(sys.argv[1]))
env = report["environment"]
dists = {canon(item["metadata"]["name"]): item for item in report["install"]}
version = {name: Version(item["metadata"]["version"]) for name, item in dists.items()}

print(f"resolved in {sys.argv[2]} s by pip {report['pip_version']} for CPython "
      f"{env['python_full_version']} on {env['sys_platform']} {env['platform_machine']}:")
for name in ("trinity-rft", "vllm", "verl", "torch", "transformers", "numpy", "pyarrow",
             "opencv-python-headless", "ray"):
    print(f"  {name:24} {version.get(canon(name), 'MISSING')}")

# Every requirement of every resolved package, with the extras actually requested of it.
extras = {name: set(item.get("requested_extras", [])) for name, item in dists.items()}
problems, checked, changed = [], {}, True
while changed:
    changed = False
    for name, item in dists.items():
        for line in item["metadata"].get("requires_dist") or []:
            req = Requirement(line)
            marker = req.marker or Marker("python_version > '0'")
            if not any(marker.evaluate({**env, "extra": e}) for e in {"", *extras[name]}):
                continue
            checked[(name, line)] = req
            target = canon(req.name)
            if target in dists and not set(req.extras) <= extras[target]:
                extras[target] |= set(req.extras)
                changed = True
for (name, line), req in checked.items():
    target = canon(req.name)
    if target not in version:
        problems.append(f"{name} requires {line}: not in the resolved set")
    elif not req.specifier.contains(version[target], prereleases=True):
        problems.append(f"{name} requires {line}: resolved {version[target]}")

def show(target, only=None):
    reqs = sorted((n, str(r.specifier)) for (n, _), r in checked.items()
                  if canon(r.name) == target and str(r.specifier) and n == (only or n))
    ok = all(Requirement(f"{target}{spec}").specifier.contains(version[target], True)
             for _, spec in reqs)
    print(f"{target} {version[target]} {'meets' if ok else 'BREAKS'} "
          f"{'the pin' if only else ('every range' if ok else 'a range')} declared by "
          + "; ".join(f"{n} ({spec})" for n, spec in reqs))

show("numpy")
show("torch", only="vllm")
show("transformers")
if version["numpy"] >= Version("2"):
    print("deliberate exception: verl 0.8.0 as published says numpy<2.0.0; the "
          "verl-0.8.0+numpy2 wheel says numpy>=2.0.0,<2.4 (docs/getting-started/install.md, \"GPU install\")")
if problems:
    print("FAILED: declared requirements that the resolved set breaks:", *problems, sep="\n  ")
    sys.exit(1)
print(f"ok: {len(checked)} declared requirements of {len(dists)} packages hold")
PY

if [ -n "$WHEELHOUSE" ]; then
    mkdir -p "$WHEELHOUSE"
    cp "$WORK/wheels/verl-0.8.0+numpy2-py3-none-any.whl" "$WHEELHOUSE/"
    echo "wrote $WHEELHOUSE/verl-0.8.0+numpy2-py3-none-any.whl" >&2
fi
