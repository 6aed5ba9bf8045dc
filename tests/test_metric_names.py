"""The metrics reference's rows (tunedsl/backends/local/metric_names.py) match the names a
local run logs: every run the tests make through ``local_support.run_local`` checks its
``metrics.jsonl`` against them; here, the matching itself."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from tunedsl.backends.local.metric_names import LOCAL_METRICS, described, markdown

SEGMENT = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="_"),
                  min_size=1, max_size=12)


@given(SEGMENT, st.sampled_from(["mean", "max", "min"]))
def test_a_metric_your_code_returns_is_described_whatever_its_name(name, stat):
    assert described(f"rollout/{name}/{stat}")
    assert described(f"eval/validation/{name}/mean@4")


@given(SEGMENT)
@example("_loss")  # CI found it: actor/pg_loss_loss is a `{loss}_loss`
@example("x")
def test_a_name_no_row_has_is_not_described(name):
    assert not described(f"nowhere/{name}")
    # a row's whole name, not a prefix: only `actor/{loss}_loss` may take what follows
    assert described(f"actor/pg_loss{name}") == name.endswith("_loss")
    assert not described(f"time/{name}_seconds") or name in ("step", "model")


def test_the_reference_lists_every_row_once():
    names = [name for name, _ in LOCAL_METRICS]
    assert len(names) == len(set(names))
    table = markdown()
    assert all(f"| `{name}` |" in table for name in names)
    assert described("actor/sft_loss") and described("train/carried_samples")
