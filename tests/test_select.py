"""Model selection (`tunedsl eval --model A --model B`, `tunedsl.select_model`) against real
OpenAI-protocol servers on loopback, each answering the arith eval set's sums with a known
accuracy.

The arith eval set has 10 tasks; their answers are 7 5 3 2 9 8 4 5 7 1. So a server wrong
on sevens is right on 8 of 10 (0.8), and one right only on even answers on 3 of 10 (0.3).
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tunedsl
from tunedsl import Model
from tunedsl.errors import ConfigError
from tunedsl.evaluation.select import (
    Candidate,
    candidates_from,
    paired_bootstrap,
    rank,
    result_paths,
    split_model,
)

from .cli_support import REPO, cli, unprivileged
from .openai_server import OpenAIServer, arithmetic
from .test_evaluate import ARITH, lines


def wrong_on_sevens(messages):
    """Right on 8 of the 10 eval sums (two answers are 7)."""
    answer = arithmetic(messages)
    return "0" if answer == "7" else answer


def right_on_evens(messages):
    """Right on 3 of the 10 eval sums (the answers 2, 8 and 4)."""
    answer = arithmetic(messages)
    return answer if int(answer) % 2 == 0 else "0"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def table(stdout):
    """The ranking table's rows, as lists of cells (split on runs of two spaces)."""
    rows = stdout.splitlines()
    start = next(i for i, line in enumerate(rows) if line.startswith("#  model"))
    end = next(i for i, line in enumerate(rows) if line.startswith("verdict"))
    return [re.split(r"\s{2,}", line) for line in rows[start:end]]


def line(stdout, label):
    return next(text for text in stdout.splitlines() if text.startswith(label))


# -- the statistics, in-process -----------------------------------------------------------

def test_paired_bootstrap_pairs_by_task():
    """Tasks of very different difficulty, one model 0.1 behind on each: paired, the
    difference is exactly -0.1 in every resample; an unpaired comparison would see the
    spread of difficulties and call it noise."""
    easy_and_hard = [[1.0], [0.2], [0.9], [0.1], [0.5], [0.8], [0.3], [1.0], [0.6], [0.4]]
    behind = [[r - 0.1 for r in row] for row in easy_and_hard]
    difference, low, high = paired_bootstrap(easy_and_hard, behind)
    assert (round(difference, 12), round(low, 12), round(high, 12)) == (-0.1, -0.1, -0.1)


def test_paired_bootstrap_is_seeded_and_resamples_whole_tasks():
    """The same seed gives the same interval; repeats of a task move together."""
    best = [[1.0, 1.0]] * 10
    other = [[1.0, 1.0]] * 8 + [[0.0, 0.0]] * 2
    first = paired_bootstrap(best, other, seed=0)
    assert first == paired_bootstrap(best, other, seed=0)
    assert first[0] == -0.2
    # Resampling 10 tasks, none of the two bad ones is drawn with probability 0.8**10 =
    # 0.107 > 0.025: the 95% interval reaches 0.
    assert first[2] == 0.0 and first[1] < -0.2
    # Identical rewards: the interval is exactly [0, 0] (no "-0.0").
    assert paired_bootstrap(best, best) == (0.0, 0.0, 0.0)


def records(rewards, errors=()):
    """Result lines for one candidate: rewards[task][repeat]; (task, repeat) in errors
    failed."""
    return [{"task_index": i, "repeat": k, "reward": None if (i, k) in errors else reward,
             "error": "rollout raised ConnectionError: refused" if (i, k) in errors else None,
             "seconds": 0.5, "prompt_tokens": 3, "completion_tokens": 1}
            for i, row in enumerate(rewards) for k, reward in enumerate(row)]


def test_failed_rollouts_count_zero_and_are_shown_as_errors():
    """A candidate right on every rollout it finished but failing half of them scores 0.5,
    not 1.0 (AgentScope would drop the failures and call it perfect)."""
    flaky = records([[1.0]] * 10, errors={(i, 0) for i in range(5)})
    steady = records([[1.0]] * 7 + [[0.0]] * 3)
    ranking = rank({"flaky": flaky, "steady": steady}, tasks=10, repeat=1)
    assert [(s.label, s.mean, s.errors, s.rollouts) for s in ranking.standings] == [
        ("steady", 0.7, 0, 10), ("flaky", 0.5, 5, 10)]
    assert ranking.standings[1].error_messages == ("rollout raised ConnectionError: refused",)


def test_ties_go_to_fewer_errors_then_the_order_given():
    same = records([[1.0]] * 5 + [[0.0]] * 5)
    failing = records([[1.0]] * 5 + [[0.0]] * 5, errors={(9, 0)})
    ranking = rank({"a": failing, "b": same, "c": same}, tasks=10, repeat=1)
    assert [s.label for s in ranking.standings] == ["b", "c", "a"]
    assert ranking.best_is_distinguishable is False


def test_a_missing_rollout_is_refused_not_guessed():
    with pytest.raises(ConfigError, match=r"^x\.jsonl: no result for task 1 repeat 0 \(1 "
                                          r"missing\); continue it with resume=True$"):
        rank({"a": records([[1.0]] * 2), "b": records([[1.0]])}, tasks=2, repeat=1,
             paths={"b": Path("x.jsonl")})


def test_model_names_and_urls():
    """NAME@URL splits at the @ before http(s)://; a dated name keeps its @."""
    assert split_model("Qwen/Qwen3-8B@http://h:8000/v1") == ("Qwen/Qwen3-8B",
                                                            "http://h:8000/v1")
    assert split_model("claude-3-5-sonnet@20240620") == ("claude-3-5-sonnet@20240620", None)
    assert split_model("m@https://user:pw@h/v1") == ("m", "https://user:pw@h/v1")
    shared = "http://shared/v1"
    found = candidates_from(["a", "a@http://own/v1", "b"], shared)
    assert [(c.name, c.base_url, c.label) for c in found] == [
        ("a", shared, f"a@{shared}"), ("a", "http://own/v1", "a@http://own/v1"),
        ("b", shared, "b")]


#: Unicode's Default_Ignorable_Code_Point, as DerivedCoreProperties.txt lists it (Unicode 14.0
#: to 16.0, "Total code points: 4174"), adjacent ranges merged.
DEFAULT_IGNORABLE = [(0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
                     (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
                     (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
                     (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
                     (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF)]
IGNORABLE = st.sampled_from(DEFAULT_IGNORABLE).flatmap(
    lambda span: st.integers(*span)).map(chr)


def test_every_default_ignorable_code_point_is_an_invisible_character():
    """Each of the 4174, and the same set as the ``regex`` module's (its own Unicode
    tables): a variation selector of the supplement (U+E0100..U+E01EF) and Mongolian's free
    ones (U+180B..U+180F) passed, sent as part of the name (sweep 48 A-W1)."""
    from tunedsl.evaluation.select import holds_a_control_character

    points = [point for first, last in DEFAULT_IGNORABLE for point in range(first, last + 1)]
    assert len(points) == 4174
    assert [chr(point) for point in points if not holds_a_control_character(chr(point))] == []
    regex = pytest.importorskip("regex")
    every = "".join(chr(point) for point in range(0x110000) if not 0xD800 <= point <= 0xDFFF)
    assert [ord(found) for found in regex.findall(r"\p{Default_Ignorable_Code_Point}",
                                                  every)] == points


@given(IGNORABLE, st.sampled_from(["Qwen/Qwen3-0.6B", "gpt-4o-2024-08-06",
                                   "Qwen/Qwen3-0.6B@http://127.0.0.1:9/v1"]),
       st.integers(0, 15))
def test_a_model_name_holding_an_invisible_character_is_refused_showing_it(invisible, name,
                                                                          at):
    """Wherever it is; the message shows it escaped, as a Python literal of what was given
    (a supplement's selector as ``\\U000e0100``: ``\\ue0100`` read back as another)."""
    import ast

    from tunedsl.evaluation.select import CONTROL_IN_A_NAME, holds_a_control_character

    given = name[:at] + invisible + name[at:]
    with pytest.raises(ConfigError) as caught:
        split_model(given)
    message = str(caught.value)
    assert message.startswith("--model ") and message.endswith(f": {CONTROL_IN_A_NAME}")
    shown = message[len("--model "):-len(f": {CONTROL_IN_A_NAME}")]
    assert ast.literal_eval(shown) == given
    assert not holds_a_control_character(shown)


#: Blank space no ASCII: a no-break space, an ideographic one (a CJK keyboard's), others of
#: Unicode's Zs.
UNICODE_BLANKS = ["\u00a0", "\u3000", "\u1680", "\u2000", "\u2007", "\u200a", "\u202f",
                  "\u205f"]


@pytest.mark.parametrize("blank", UNICODE_BLANKS)
@pytest.mark.parametrize("around", ["{}{}", "{1}{0}"])
@pytest.mark.parametrize("url", ["", "@http://127.0.0.1:9/v1"])
def test_unicode_blank_space_around_a_model_name_is_refused_as_a_space_is(blank, around, url):
    """A no-break space or an ideographic one at the name's end was sent as part of it,
    where an ASCII space was refused (sweep 48 A-W1); the example keeps the URL given
    (it was left out: sweep 49)."""
    given = around.format("gpt-4o", blank) + url
    with pytest.raises(ConfigError) as caught:
        split_model(given)
    assert str(caught.value) == (
        f"--model {given!r}: the name has blank space or quotes around it, which no "
        f"endpoint's model name has; give it without them, e.g. --model gpt-4o{url}")


@given(st.sampled_from([chr(point) for point in range(0x110000) if chr(point).isspace()]),
       st.booleans())
def test_no_blank_space_of_any_kind_around_a_model_name_is_sent(blank, first):
    """Every character `str.isspace` finds, at either end: refused (as blank space, or as
    a control character: a line break)."""
    with pytest.raises(ConfigError):
        split_model(blank + "gpt-4o" if first else "gpt-4o" + blank)


@pytest.mark.parametrize("blank", UNICODE_BLANKS)
def test_unicode_blank_space_around_an_aux_model_name_is_refused(blank):
    from tunedsl.cli import _aux_items

    item = f"g=http://127.0.0.1:9/v1,m{blank}"
    with pytest.raises(ConfigError) as caught:
        _aux_items([item])
    assert str(caught.value) == (
        f"--aux {item!r}: the model's name has blank space or quotes around it, which no "
        f"endpoint's model name has; give it without them, e.g. --aux "
        f"g=http://127.0.0.1:9/v1,m")


def test_result_files_are_safe_names_that_do_not_depend_on_order(tmp_path):
    one = Candidate(name="org/model:v1", base_url="http://x/v1", label="org/model:v1")
    two = Candidate(name="org_model_v1", base_url="http://x/v1", label="org_model_v1")
    three = Candidate(name="plain", base_url="http://x/v1", label="plain")
    forward = result_paths([one, two, three], tmp_path)
    assert forward == dict(reversed(result_paths([three, two, one], tmp_path).items()))
    assert forward["plain"] == tmp_path / "plain.jsonl"
    assert re.fullmatch(r"org_model_v1-[0-9a-f]{8}\.jsonl", forward["org/model:v1"].name)
    assert forward["org/model:v1"] != forward["org_model_v1"]


def test_a_candidates_file_is_found_by_the_model_it_holds_whatever_the_others(tmp_path):
    """A candidate's file was named after the whole set of candidates (``a_b.jsonl`` for
    a/b alone, ``a_b-<hash>.jsonl`` beside a_b), so a resume with another set ran a/b's
    finished rollouts again into a new file, or refused the folder (sweep 30 B-01)."""
    url = "http://x/v1"
    slash, under, other = (Candidate(name=name, base_url=url, label=name)
                           for name in ("a/b", "a_b", "c"))
    first = result_paths([slash, other], tmp_path)
    assert [path.name for path in first.values()] == ["a_b.jsonl", "c.jsonl"]
    for candidate, path in first.items():
        path.write_text(json.dumps({"eval_settings": {"model": candidate, "base_url": url}})
                        + "\n")
    added = result_paths([slash, under], tmp_path)
    assert added["a/b"] == first["a/b"]  # where its rollouts are
    assert re.fullmatch(r"a_b-[0-9a-f]{8}\.jsonl", added["a_b"].name)
    added["a_b"].write_text(json.dumps({"eval_settings": {"model": "a_b", "base_url": url}})
                            + "\n")
    assert result_paths([under, other], tmp_path) == {"a_b": added["a_b"], "c": first["c"]}
    # the same model at another endpoint: its file, whose resume names the endpoint
    moved = Candidate(name="c", base_url="http://y/v1", label="c")
    assert result_paths([moved, under], tmp_path)["c"] == first["c"]


@settings(max_examples=200, deadline=None)
@given(labels=st.lists(st.text(min_size=1, max_size=400), min_size=1, max_size=5, unique=True))
def test_result_files_are_names_any_file_system_takes(labels):
    """Any labels, long or in any script: each file is a name of safe characters that fits
    a file system's 255 bytes, and no two candidates share one."""
    candidates = [Candidate(name=label, base_url="http://x/v1", label=label) for label in labels]
    names = [path.name for path in result_paths(candidates, "out").values()]
    assert len({name.lower() for name in names}) == len(labels)  # macOS: one file else
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+\.jsonl", name) and len(name.encode()) <= 255
               for name in names)


# -- the command line, against real endpoints ---------------------------------------------

EXPECTED = """\
#  model    reward  pass@2  errors  p50 (s)  tokens in/out  vs best  95% interval
1  perfect  1.0000  1.0000  0/20    {p}  20/20          best
2  sevens   0.8000  0.8000  0/20    {p}  20/20          -0.2000  [-0.5000, +0.0000]  not distinguishable
3  evens    0.3000  0.3000  0/20    {p}  20/20          -0.7000  [-1.0000, -0.4000]  worse
4  offline  0.0000  0.0000  20/20   {p}  0/0            -1.0000  [-1.0000, -1.0000]  worse"""


def test_ranking_of_endpoints_with_known_accuracy(tmp_path):
    """Four candidates on the same 10 tasks x 2 repeats: the means are the known
    accuracies; 0.3 vs 1.0 is a real difference, 0.8 vs 1.0 on 10 tasks is not; the
    unreachable endpoint's 20 failures count 0 and are shown as 20 errors."""
    out = tmp_path / "pick"
    offline = f"http://127.0.0.1:{closed_port()}/v1"
    with OpenAIServer() as perfect, OpenAIServer(wrong_on_sevens) as sevens, \
            OpenAIServer(right_on_evens) as evens:
        done = cli("eval", ARITH, "--base-url", perfect.base_url, "--model", "perfect",
                   "--model", f"sevens@{sevens.base_url}", "--model", f"evens@{evens.base_url}",
                   "--model", f"offline@{offline}", "--repeat", "2", "-o", str(out),
                   "--no-progress")
        served = [len(s.requests) for s in (perfect, sevens, evens)]
    assert done.returncode == 0, done.stderr
    assert served == [20, 20, 20]
    assert sorted(p.name for p in out.iterdir()) == ["evens.jsonl", "offline.jsonl",
                                                     "perfect.jsonl", "sevens.jsonl"]
    kept = lines(out / "sevens.jsonl")
    assert sorted((r["task_index"], r["repeat"]) for r in kept) == [
        (i, k) for i in range(10) for k in range(2)]
    kept_settings = dict(kept[0]["eval_settings"])
    digest = kept_settings.pop("tasks")  # the rows evaluated: the same for every candidate
    from examples.arith.experiment import add, exact
    from tunedsl.evaluation.evaluate import code_digest

    assert kept_settings.pop("functions") == {"workflow": code_digest(add),
                                              "judge": code_digest(exact)}
    assert code_digest(exact).startswith("exact@")
    assert kept_settings == {"split": None, "limit": None, "repeat": 2, "model": "sevens",
                             "experiment": "Arith", "rollout_timeout": 3600,
                             "base_url": sevens.base_url, "checkpoint": None, "aux": [],
                             "params": {}, "sampling": {"temperature": 1.0, "top_p": 1.0,
                                                        "max_tokens": 1,
                                                        "enable_thinking": None}}
    assert {lines(out / name)[0]["eval_settings"]["tasks"]
            for name in ("perfect.jsonl", "evens.jsonl")} == {digest}
    stdout = re.sub(r"(?<=  )\d+\.\d{3}(?=  )", "P.PPP", done.stdout)  # latencies vary
    assert stdout.splitlines()[0] == (f"results      {out}/ (one file per candidate: "
                                      f"perfect.jsonl, sevens.jsonl, evens.jsonl, "
                                      f"offline.jsonl)")
    assert line(stdout, "ranking") == ("ranking      4 candidates, each on the same 10 tasks "
                                       "x 2 repeats of the eval_dataset")
    assert "\n".join(stdout.splitlines()[2:7]) == EXPECTED.format(p="P.PPP  ")
    assert line(stdout, "verdict") == (
        "verdict      perfect is not distinguishable from sevens: the 95% interval of their "
        "difference, [-0.5000, +0.0000], includes 0; more tasks may tell them apart, "
        "else choose on cost and latency")
    assert line(stdout, "method") == ("method       paired bootstrap over tasks, 95% interval, "
                                      "10000 resamples, seed 0; a failed rollout counts as "
                                      "reward 0")
    assert line(stdout, "error").startswith(
        "error        offline: @workflow add (examples/arith/experiment.py:15) raised "
        "ConnectionError: cannot reach the model endpoint http://127.0.0.1:")
    assert "note" not in stdout  # the eval dataset was used: no training-split note


def test_a_real_difference_is_called_so_and_failures_are_counted(tmp_path):
    """evens (0.3) against sevens (0.8): the interval excludes 0, so sevens is better. A
    400 (not retried) fails three of sevens' rollouts: they count 0, shown as 3 errors."""
    out = tmp_path / "pick"
    with OpenAIServer(wrong_on_sevens, failures=[400] * 3) as sevens, \
            OpenAIServer(right_on_evens) as evens:
        done = cli("eval", ARITH, "--model", f"evens@{evens.base_url}", "--model",
                   f"sevens@{sevens.base_url}", "--repeat", "2", "--concurrency", "1",
                   "-o", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = table(done.stdout)
    # One worker takes task 0 repeats 0 and 1, then task 1 repeat 0: those three fail.
    # Task 0's answer is 7 (wrong anyway); task 1's (5) loses one of its two right answers.
    assert [row[:5] for row in rows[1:]] == [["1", "sevens", "0.7500", "0.8000", "3/20"],
                                            ["2", "evens", "0.3000", "0.3000", "0/20"]]
    assert rows[2][7:] == ["-0.4500", "[-0.7500, -0.1500]", "worse"]
    assert line(done.stdout, "verdict") == (
        "verdict      sevens is better than evens: the 95% interval of their difference, "
        "[-0.7500, -0.1500], excludes 0")
    assert line(done.stdout, "error") == (
        "error        sevens: @workflow add (examples/arith/experiment.py:15) raised "
        "BadRequestError: Error code: 400 - {'error': {'message': 'scripted failure 400'}}")
    assert sum(r["error"] is not None for r in lines(out / "sevens.jsonl")) == 3


def test_identical_candidates_are_indistinguishable(tmp_path):
    """Two endpoints right on the same 8 tasks: interval [0, 0], includes 0."""
    with OpenAIServer(wrong_on_sevens) as one, OpenAIServer(wrong_on_sevens) as two:
        done = cli("eval", ARITH, "--model", f"one@{one.base_url}", "--model",
                   f"two@{two.base_url}", "-o", str(tmp_path / "pick"), "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = table(done.stdout)
    assert rows[0] == ["#", "model", "reward", "errors", "p50 (s)", "tokens in/out",
                       "vs best", "95% interval"]  # no pass@k with one repeat
    assert [row[1:3] for row in rows[1:]] == [["one", "0.8000"], ["two", "0.8000"]]
    assert rows[2][6:] == ["+0.0000", "[+0.0000, +0.0000]", "not distinguishable"]
    assert line(done.stdout, "verdict") == (
        "verdict      one is not distinguishable from two: the 95% interval of their "
        "difference, [+0.0000, +0.0000], includes 0; more tasks may tell them apart, "
        "else choose on cost and latency")


def test_a_candidate_whose_replies_were_cut_at_max_tokens_is_named(tmp_path):
    """A candidate whose replies stop at max_tokens ranks low for the setting, not the
    model: named with its count after the table (sweep 45 B-W2's neighbour); one whose
    replies end is not."""
    def cut(completion):
        completion["choices"][0]["finish_reason"] = "length"
        return completion

    with OpenAIServer() as whole, OpenAIServer(answer=cut) as short:
        done = cli("eval", ARITH, "--model", f"whole@{whole.base_url}", "--model",
                   f"short@{short.base_url}", "-n", "4", "-o", str(tmp_path / "pick"),
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "candidate 1/2: whole\ncandidate 2/2: short\n"
        "Warning: replies stopped at max_tokens (finish_reason 'length'), cut short before "
        "the model ended them (short 4 of 4); if answers need more room, raise "
        "model.max_tokens (--set model.max_tokens=N)\n")


def test_resume_repeats_no_rollout(tmp_path):
    """Cut one candidate's file short (an interrupted selection): --resume runs only its
    missing rollouts, none of the other candidate's, and ranks as before."""
    out = tmp_path / "pick"
    with OpenAIServer() as a, OpenAIServer(wrong_on_sevens) as b:
        args = ("eval", ARITH, "--base-url", a.base_url, "--model", "a", "--model",
                f"b@{b.base_url}", "--repeat", "2", "-o", str(out), "--no-progress")
        first = cli(*args)
        kept = (out / "b.jsonl").read_text().splitlines(keepends=True)
        (out / "b.jsonl").write_text("".join(kept[:7]))
        before = len(a.requests), len(b.requests)
        resumed = cli(*args, "--resume")
        after = len(a.requests), len(b.requests)
        again = cli(*args, "--resume")
        last = len(a.requests), len(b.requests)
    assert (first.returncode, resumed.returncode, again.returncode) == (0, 0, 0), resumed.stderr
    assert (after[0] - before[0], after[1] - before[1]) == (0, 13)
    assert last == after  # a finished selection resumed calls no model: it ranks again
    assert sorted((r["task_index"], r["repeat"]) for r in lines(out / "b.jsonl")) == [
        (i, k) for i in range(10) for k in range(2)]
    strip = lambda text: re.sub(r"\d+\.\d{3}(?=  )", "", text)
    assert strip(resumed.stdout) == strip(first.stdout) == strip(again.stdout)


def test_training_split_is_named_in_a_note(tmp_path):
    """An experiment without an eval dataset is ranked on its train dataset, and says so."""
    with OpenAIServer() as a, OpenAIServer(wrong_on_sevens) as b:
        done = cli("eval", "tests.fixtures.eval_agents:Lenient", "--model", f"a@{a.base_url}",
                   "--model", f"b@{b.base_url}", "-o", str(tmp_path / "pick"),
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    assert line(done.stdout, "ranking").endswith("10 tasks x 1 repeat of the train_dataset")
    assert line(done.stdout, "note") == (
        "note         the experiment has no eval_dataset, so the candidates were ranked on "
        "its train_dataset; a model picked on the tasks it is tuned on can look better than "
        "it is on new ones: give the experiment an eval_dataset of held-out tasks")


def test_every_rollout_failing_exits_1(tmp_path):
    done = cli("eval", ARITH, "-n", "1", "--model", f"a@http://127.0.0.1:{closed_port()}/v1",
               "--model", f"b@http://127.0.0.1:{closed_port()}/v1", "-o",
               str(tmp_path / "pick"), "--no-progress")
    assert done.returncode == 1
    # The ranking is still printed: both score 0, with their failure counted.
    assert [row[1:4] for row in table(done.stdout)[1:]] == [["a", "0.0000", "1/1"],
                                                            ["b", "0.0000", "1/1"]]
    assert done.stderr.splitlines()[-1].startswith(
        "Error: every rollout of every candidate failed; the first error: @workflow add")


def test_auxiliary_models_serve_every_candidate(tmp_path):
    """--aux clients are made afresh for each candidate's evaluation (an HTTP client
    belongs to one event loop), so the grader grades both."""
    with OpenAIServer(lambda m: "Paris.") as a, OpenAIServer(lambda m: "Lyon.") as b, \
            OpenAIServer(lambda m: "Score: 8" if "Paris" in json.dumps(m) else "Score: 2") \
            as grader:
        done = cli("eval", "examples.llm_judge.experiment:LLMJudged", "-n", "2",
                   "--model", f"a@{a.base_url}", "--model", f"b@{b.base_url}",
                   "--aux", f"grader={grader.base_url},g", "-o", str(tmp_path / "pick"),
                   "--no-progress")
        graded = len(grader.requests)
    assert done.returncode == 0, done.stderr
    assert graded == 4
    assert [row[1:3] for row in table(done.stdout)[1:]] == [["a", "0.8000"], ["b", "0.2000"]]
    assert "only 2 tasks: a bootstrap over so few is too narrow to trust" in done.stdout


@pytest.mark.parametrize("args, message", [
    (["--base-url", "http://x/v1", "--model", "a", "--model", "a"],
     "--model a is given twice; give each candidate once"),
    (["--base-url", "http://x/v1", "--model", "a", "--model", "a@http://x/v1"],
     "--model a@http://x/v1 is given twice; give each candidate once"),
    (["--model", "a@", "--model", "b@http://x/v1"],
     "--model a@: give the endpoint's URL after @, e.g. --model a@http://localhost:8000/v1"),
    (["--model", "a@localhost:8000/v1", "--model", "b@http://x/v1"],
     "--model a@localhost:8000/v1: localhost:8000/v1 is not an http(s) URL; give e.g. "
     "a@http://localhost:8000/v1"),
    (["--model", "a@ftp://x/v1", "--model", "b@http://x/v1"],
     "--model a@ftp://x/v1: ftp://x/v1 is not an http(s) URL; give e.g. a@http://x/v1"),
    (["--model", "@http://x/v1", "--model", "b@http://x/v1"],
     "--model @http://x/v1: give the model name before @, e.g. --model "
     "Qwen/Qwen3-8B@http://x/v1"),
    (["--model", "a", "--model", "b@http://x/v1"],
     "--model a has no endpoint: give --base-url URL for every --model without one, or "
     "--model a@URL"),
    # printed raw, a line break broke the ranking's table (sweep 25 W-01)
    (["--model", "a\nb@http://x/v1", "--model", "c@http://x/v1"],
     "--model 'a\\nb@http://x/v1': a model name holds no line break, control character or "
     "invisible one (a zero-width space, a byte-order mark); give the name on one line, typed "
     "anew"),
    # a zero-width space, a byte-order mark or U+2028 pasted after it was sent (sweep 46 A-W10)
    *[(["--model", f"a{mark}@http://x/v1", "--model", "c@http://x/v1"],
       f"--model 'a{shown}@http://x/v1': a model name holds no line break, control character "
       f"or invisible one (a zero-width space, a byte-order mark); give the name on one line, "
       f"typed anew")
      for mark, shown in (("\u200b", "\\u200b"), ("\ufeff", "\\ufeff"),
                          ("\u2028", "\\u2028"), ("\u034f", "\\u034f"),
                          ("\u3164", "\\u3164"), ("\ufe0f", "\\ufe0f"))],
    (["--base-url", "http://x/v1", "--model", "a@http://y/v1", "--model", "b@http://y/v1"],
     "--base-url http://x/v1 is used by no --model (each gives its own @URL); drop it, or "
     "drop the @URL of the models it serves"),
    # a space copied with the URL was sent as %20: every rollout a 404 (sweep 26 W-05)
    (["--base-url", "http://x/v1 ", "--model", "a", "--model", "b"],
     "--base-url http://x/v1 : it holds blank space (a space or a line break copied with "
     "it); give the endpoint's, e.g. http://localhost:8000/v1"),
    (["--base-url", "x", "--model", "a", "--model", "b"],
     "--base-url x: not an http(s) URL; give the endpoint's, e.g. http://localhost:8000/v1"),
    (["--base-url", "http://x/v1", "--model", "a", "--model", "b", "--checkpoint", "d"],
     "--checkpoint evaluates one local model; compare endpoints with several --model, "
     "without --checkpoint"),
    (["--base-url", "http://x/v1", "--model", "a", "--model", "b", "--resume"],
     "--resume continues a model selection: give its folder with -o DIR"),
    (["--base-url", "http://x/v1", "--model", "a", "--model", "b", "-o", "picks.jsonl"],
     "-o picks.jsonl: with several --model, -o names a folder (one results file per "
     "candidate), not a file; give e.g. -o picks"),
    # One --model: as before, plus NAME@URL.
    (["--base-url", "http://x/v1", "--model", "a@http://y/v1"],
     "--base-url http://x/v1 is used by no --model (each gives its own @URL); drop it, or "
     "drop the @URL of the models it serves"),
])
def test_bad_selection_input_is_one_line_and_exit_2(args, message):
    done = cli("eval", ARITH, *args)
    assert (done.returncode, done.stderr.strip()) == (2, f"Error: {message}")


def test_a_folder_holding_results_needs_resume(tmp_path):
    """Checked for every candidate before any rollout runs."""
    (tmp_path / "b.jsonl").write_text('{"task_index": 0, "repeat": 0, "reward": 1.0}\n')
    with OpenAIServer() as server:
        done = cli("eval", ARITH, "--base-url", server.base_url, "--model", "a", "--model",
                   "b", "-o", str(tmp_path))
        served = len(server.requests)
    assert (done.returncode, served) == (2, 0)
    assert done.stderr.strip() == (f"Error: -o {tmp_path} already holds results for b "
                                   f"({tmp_path / 'b.jsonl'}); add --resume to continue them, "
                                   f"or choose another folder")


def test_resume_without_the_folder_is_refused_in_python_as_on_the_command_line():
    """``select_model(resume=True)`` without ``output_dir`` called every candidate again
    into a new folder (sweep 20 S3); refused before any request, as ``eval --resume``
    without ``-o`` is."""
    import pytest

    import tunedsl
    from tunedsl.errors import ConfigError

    with OpenAIServer() as server:
        with pytest.raises(ConfigError) as raised:
            tunedsl.select_model(ARITH, candidate_models=["a", "b"], base_url=server.base_url,
                                 resume=True, progress=False)
        assert server.requests == []
    assert str(raised.value) == ("resume continues a model selection: give its folder as "
                                 "output_dir")


def test_resume_with_another_endpoint_is_refused(tmp_path):
    """A candidate's file made against another endpoint is not merged into."""
    with OpenAIServer() as a, OpenAIServer() as b:
        assert cli("eval", ARITH, "-n", "1", "--model", f"a@{a.base_url}", "--model",
                   f"b@{a.base_url}", "-o", str(tmp_path), "--no-progress").returncode == 0
        done = cli("eval", ARITH, "-n", "1", "--model", f"a@{a.base_url}", "--model",
                   f"b@{b.base_url}", "-o", str(tmp_path), "--resume", "--no-progress")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"Error: --resume {tmp_path / 'b.jsonl'}: its results were made with other settings "
        f"(base_url '{a.base_url}' -> '{b.base_url}'); merging would mix two evaluations, "
        f"so resume with the same options or write to another -o file")


def test_one_model_at_its_own_url_is_a_plain_eval(tmp_path):
    out = tmp_path / "r.jsonl"
    with OpenAIServer() as server:
        done = cli("eval", ARITH, "-n", "2", "--model", f"m@{server.base_url}", "-o", str(out),
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "rollouts     2 (0 errors)" in done.stdout and "ranking" not in done.stdout
    assert lines(out)[0]["eval_settings"]["base_url"] == server.base_url


# -- the Python API -----------------------------------------------------------------------

def test_select_model_with_candidate_models(tmp_path):
    """AgentScope's argument names: names on a shared base_url and a Model record with its
    own endpoint and temperature (the others are asked at the experiment's)."""
    with OpenAIServer(right_on_evens) as shared, OpenAIServer() as own:
        ranking = tunedsl.select_model(
            ARITH, candidate_models=["evens", Model("perfect", base_url=own.base_url,
                                                    temperature=0.0)],
            base_url=shared.base_url, output_dir=tmp_path, repeat=2, max_threads=4,
            progress=False)
        temperatures = ({r["temperature"] for r in shared.requests},
                        {r["temperature"] for r in own.requests})
    assert isinstance(ranking, tunedsl.Ranking)
    assert [(s.name, s.mean, s.errors, s.pass_at) for s in ranking.standings] == [
        ("perfect", 1.0, 0, 1.0), ("evens", 0.3, 0, 0.3)]
    assert ranking.best.name == "perfect" and ranking.best.base_url == own.base_url
    assert ranking.best_is_distinguishable is True
    assert ranking.standings[1].difference == pytest.approx(-0.7)
    assert ranking.standings[1].interval == pytest.approx((-1.0, -0.4))
    assert (ranking.tasks, ranking.repeat, ranking.dataset, ranking.notes) == (
        10, 2, "eval_dataset", ())
    assert temperatures == ({1.0}, {0.0})
    assert ranking.best.results == tmp_path / "perfect.jsonl"
    # the experiment's sampling settings, but the temperature the candidate set
    assert lines(tmp_path / "perfect.jsonl")[0]["eval_settings"]["sampling"] == {
        "temperature": 0.0, "top_p": 1.0, "max_tokens": 1, "enable_thinking": None}


@pytest.mark.parametrize("kwargs, message", [
    ({"candidate_models": ["a"], "base_url": "http://x/v1"},
     "model selection needs at least two candidates (got 1)"),
    ({"candidate_models": ["a", "b"]},
     "candidate_models item 'a' has no endpoint: give base_url for the candidates without "
     "one, or 'a@URL'"),
    ({"candidate_models": ["a", Model("a", base_url="http://x/v1")], "base_url": "http://x/v1"},
     "candidate_models item 'a' is given twice; give each candidate once"),
    ({"candidate_models": [Model("a", base_url="http://y/v1"), "b@http://y/v1"],
      "base_url": "http://x/v1"},
     "base_url http://x/v1 is used by no candidate_models (each gives its own @URL or "
     "base_url); drop it, or drop their own URL from the candidates it serves"),
    ({"candidate_models": ["a", 3], "base_url": "http://x/v1"},
     "candidate_models item 3: give a model name (a str, NAME@URL) or a tunedsl Model(...)"),
    ({"candidate_models": ["a", "b"], "base_url": "http://x/v1", "concurrency": 2,
      "max_threads": 3},
     "give concurrency or max_threads (AgentScope's name for it), not both"),
])
def test_select_model_refuses_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(ConfigError) as caught:
        tunedsl.select_model(ARITH, output_dir=tmp_path, progress=False, **kwargs)
    assert str(caught.value) == message


def test_ctrl_c_before_any_rollout_of_a_selection_says_nothing_was_kept(tmp_path):
    """Ctrl-C before a rollout finished: the line said the folder kept rollouts it never
    had, and told to resume it (sweep 50's known list)."""
    import signal
    import subprocess

    from .cli_support import cli_started, stopped_when

    folder = tmp_path / "pick"
    with OpenAIServer(delay=5) as server:  # (each rollout's request still unanswered)
        running = cli_started("eval", ARITH, "--base-url", server.base_url, "--model", "a",
                              "--model", "b", "-o", str(folder), "--no-progress",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, stderr = stopped_when(running, lambda: (folder / "b.jsonl").exists() and len(
            server.requests) >= 3, signal.SIGINT)
    assert (running.returncode, stderr.splitlines()[-1]) == (130, (
        "Error: interrupted; no rollout had finished, so nothing was kept: run the same "
        "command to start again"))
    assert not any(path.stat().st_size for path in folder.iterdir())


def test_a_default_selection_folder_of_nothing_is_removed(tmp_path):
    """Stopped before any rollout, a selection writing to its default folder said nothing
    was kept, and left ``evals/NAME-STAMP/`` of empty files behind (sweep 52 B-W3)."""
    import shutil
    import signal
    import subprocess

    from .cli_support import REPO, cli_started, stopped_when

    shutil.copytree(REPO / "examples" / "arith", tmp_path / "arith")
    evals = tmp_path / "arith" / "evals"
    with OpenAIServer(delay=5) as server:
        running = cli_started("eval", "experiment.py:Arith", "--base-url", server.base_url,
                              "--model", "a", "--model", "b", "--no-progress",
                              cwd=tmp_path / "arith", stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
        _, stderr = stopped_when(running, lambda: evals.is_dir() and any(
            evals.rglob("b.jsonl")) and len(server.requests) >= 3, signal.SIGINT)
    assert stderr.splitlines()[-1] == (
        "Error: interrupted; no rollout had finished, so nothing was kept: run the same "
        "command to start again")
    assert list(evals.iterdir()) == []


def test_ctrl_c_in_a_model_selection_says_to_resume_its_folder(tmp_path):
    """Ctrl-C while the first candidate is evaluated: the line names the folder, which a
    resume continues (it named the candidate's file, which -o with several --model refuses)."""
    import signal
    import subprocess

    from .cli_support import cli_started, stopped_when

    folder = tmp_path / "pick"
    with OpenAIServer(delay=0.3) as server:
        args = ("eval", ARITH, "--base-url", server.base_url, "--model", "a", "--model", "b",
                "--concurrency", "2", "-o", str(folder), "--no-progress")
        running = cli_started(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, stderr = stopped_when(running, lambda: (folder / "a.jsonl").exists() and len(
            (folder / "a.jsonl").read_text().splitlines()) >= 3, signal.SIGINT)
        resumed = cli(*args, "--resume")
    assert (running.returncode, stderr.splitlines()[-1]) == (130, (
        f"Error: interrupted; {folder} keeps every rollout that finished: run the same "
        f"command with -o {folder} --resume to go on"))
    assert resumed.returncode == 0, resumed.stderr
    assert [len(lines(folder / name)) for name in ("a.jsonl", "b.jsonl")] == [10, 10]


def test_a_model_reads_its_endpoint_from_the_environment_as_settings_do(tmp_path, monkeypatch):
    """``${env:NAME}`` in a model's URL is read as the settings read theirs (a Model given to
    the Python API was refused as "not an http(s) URL" with the variable set)."""
    with OpenAIServer() as server:
        monkeypatch.setenv("TUNEDSL_TEST_URL", server.base_url)
        summary = tunedsl.evaluate(ARITH, Model("m", base_url="${env:TUNEDSL_TEST_URL}"),
                                   output=tmp_path / "r.jsonl", limit=2, progress=False)
        named = tunedsl.evaluate(ARITH, "m@${env:TUNEDSL_TEST_URL}", output=tmp_path / "s.jsonl",
                                 limit=2, progress=False)
    assert (summary.rollouts, named.rollouts) == (2, 2)
    assert {line["eval_settings"]["base_url"] for line in lines(tmp_path / "r.jsonl")} == {
        server.base_url}
    monkeypatch.delenv("TUNEDSL_TEST_URL")
    with pytest.raises(ConfigError) as caught:
        tunedsl.select_model(ARITH, ["a", Model("b", base_url="${env:TUNEDSL_TEST_URL}")],
                             base_url="http://127.0.0.1:9/v1", output_dir=tmp_path / "pick")
    assert str(caught.value) == (
        "candidate_models item 'b': Model.base_url: environment variable TUNEDSL_TEST_URL is "
        "not set; export it, or give a default: ${env:TUNEDSL_TEST_URL,default}")


@pytest.mark.parametrize("value", ["", "localhost:8000"])
def test_a_shared_url_read_from_the_environment_is_refused_showing_what_was_read(
        tmp_path, monkeypatch, value):
    """``--base-url ${env:URL}`` with URL empty said "--base-url : not an http(s) URL" (the
    variable's empty text, with a double space); the message shows the variable and what
    was read from it."""
    from .cli_support import cli

    monkeypatch.setenv("TUNEDSL_TEST_URL", value)
    done = cli("eval", ARITH, "--base-url", "${env:TUNEDSL_TEST_URL}", "--model", "m", "-o",
               tmp_path / "r.jsonl")
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: --base-url ${{env:TUNEDSL_TEST_URL}} (read as {value!r}): not an http(s) "
        f"URL; give the endpoint's, e.g. http://localhost:8000/v1"))


def test_a_selection_resume_checks_every_file_against_the_rows_before_any_rollout(tmp_path):
    """A resume ran candidate a's missing rollouts, then refused b's file for a line whose
    task was replaced; every file's lines are checked against the rows first."""
    out = tmp_path / "pick"
    args = ("eval", ARITH, "-n", "3", "--model", "a", "--model", "b", "-o", str(out),
            "--no-progress")
    with OpenAIServer() as server:
        assert cli(*args, "--base-url", server.base_url).returncode == 0
        kept = lines(out / "a.jsonl")
        (out / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept[:-1]))
        edited = lines(out / "b.jsonl")
        edited[0]["task"] = {"question": "9+9=", "answer": "18"}
        (out / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in edited))
        asked = len(server.requests)
        done = cli(*args, "--base-url", server.base_url, "--resume")
        assert len(server.requests) == asked  # no rollout ran
    index = edited[0]["task_index"]
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (2, (
        f"Error: --resume {out / 'b.jsonl'}: its result for task_index {index}, repeat 0 "
        f"holds another task than row {index} of the dataset; the file was edited, so resume "
        f"cannot trust it: write to another -o file"))


@pytest.mark.parametrize("read_only", ["folder", "file"])
def test_a_selection_folder_that_cannot_be_written_is_refused_before_any_candidate(tmp_path,
                                                                                  read_only):
    """A read-only selection folder (or a candidate's file in it) was found only once the
    candidates before it had run, and the line offered "give another file", though its
    names are the models' (sweep 39 B W5). Root ignores file permissions: the command runs
    without the capabilities that let it (setpriv)."""
    import os
    import subprocess
    import sys

    folder = tmp_path / "selection"
    folder.mkdir()
    with OpenAIServer(arithmetic) as server:
        args = [sys.executable, "-m", "tunedsl", "eval", ARITH, "--base-url", server.base_url,
                "--model", "a", "--model", "b", "-o", str(folder), "--no-progress"]
        if read_only == "file":
            (folder / "b.jsonl").write_text("")
            (folder / "b.jsonl").chmod(0o444)
        else:
            folder.chmod(0o555)
        prefix = unprivileged()
        try:
            done = subprocess.run([*prefix, *args, *(["--resume"] * (read_only == "file"))],
                                  capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
        finally:
            folder.chmod(0o755)
        asked = len(server.requests)
    fix = f"it is read-only: make it writable (chmod u+w {folder / 'b.jsonl'})" \
        if read_only == "file" else f"make its folder writable (chmod u+w {folder})"
    first = "a" if read_only == "folder" else "b"
    assert (done.returncode, done.stderr.splitlines()[-1], asked) == (2, (
        f"Error: -o {folder / (first + '.jsonl')}: cannot write it (Permission denied); "
        f"{fix}"), 0), done.stderr
