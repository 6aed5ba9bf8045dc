"""Session-wide test settings."""

import os
from pathlib import Path

# Local data only: never let `datasets` or the hub client reach the network, in this
# process or in the CLI subprocesses the tests start (they inherit the environment).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

# One torch (OpenMP/MKL) thread per process, in this process and in the CLI subprocesses
# the tests start. The tests run in parallel, one pytest-xdist worker per core: with
# torch's default of a thread per core in every worker the threads fight over the cores,
# and a training test measured six times slower (370 s instead of 56 s, two workers on 2
# cores). Alone, that test takes 29 s on one thread against 26 s on two; and every run
# gets the same numbers however many workers there are. A value already set wins.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import sys  # noqa: E402

# Bytecode for what the tests import, written as they import it. This machine sets
# PYTHONDONTWRITEBYTECODE, under which every process (each worker, each CLI subprocess)
# compiles torch, transformers and Trinity again; and compiling the whole environment at
# install time costs about 50 s on 2 cores for the many modules no test imports. Set here,
# before pytest-xdist starts its workers, it reaches them and their subprocesses.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

import pytest  # noqa: E402

if "torch" in sys.modules:  # imported by another plugin, before the variable was set
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="session", autouse=True)
def _short_openai_backoff():
    """The openai client's backoff between retries, 0.5 s doubling, cut to 10 ms doubling in
    this process: the tests of endpoints that refuse or fail still see every retry (they
    count the requests), without sleeping several seconds each. The CLI subprocesses some
    tests start keep the real delays."""
    try:
        import openai._base_client as client

        delays = client.INITIAL_RETRY_DELAY, client.MAX_RETRY_DELAY
    except (ImportError, AttributeError):  # an openai that keeps its delays elsewhere
        yield
        return
    client.INITIAL_RETRY_DELAY, client.MAX_RETRY_DELAY = 0.01, 0.16
    yield
    client.INITIAL_RETRY_DELAY, client.MAX_RETRY_DELAY = delays


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The arith example's tiny random model, built once per session into a temp folder."""
    pytest.importorskip("torch")
    from examples.arith.tiny_model import build_tiny_model

    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "model"), seed=0)


@pytest.fixture(scope="session")
def ray_on_this_machine(tmp_path_factory):
    """``with ray_on_this_machine(alone=...)``: a lock over the Ray instances the tests start.

    ``ray.init(address="auto")`` joins any Ray cluster running on the machine: it finds one
    by its GCS server's process, whichever test (or pytest-xdist worker) started it. Tests
    that start Ray hold the lock shared; a test that must find no cluster running holds it
    alone (``alone=True``) and waits for the others' Ray to stop. The lock file sits in the
    session's temporary folder, which the workers share."""
    import contextlib
    import fcntl

    path = tmp_path_factory.getbasetemp().parent / "ray.lock"

    @contextlib.contextmanager
    def hold(alone=False):
        with open(path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    return hold


#: Seconds the slowest tests take (by test, or by test function for the slowest of its
#: parameters), measured with two workers on 2 cores (--durations=0): only their order
#: matters.
SLOW_TESTS = {
    "test_trinity_on_tinker.py::test_ctrl_c_ends_the_run_at_once_and_resume_continues_from_the_checkpoint": 300,
    "test_trinity_on_tinker.py::test_a_grpo_run_explores_evaluates_trains_and_checkpoints": 150,
    "test_trinity_on_tinker.py::test_a_failed_trainer_on_a_users_ray_cluster_is_exit_1_naming_its_log": 120,
    "test_trinity_on_tinker.py::test_a_failed_explorer_is_exit_1_naming_its_log": 120,
    "test_trinity_on_tinker.py::test_a_group_judge_ranks_each_tasks_group_on_the_trinity_path": 120,
    "test_local_trainer.py::test_learning_with_multi_token_replies_and_two_calls_per_trajectory": 56,
    "test_trinity_launch.py::test_user_code_resolves_in_an_actor_started_by_an_actor_from_elsewhere": 27,
    "test_local_distill.py::test_the_student_learns_from_the_teacher": 22,
    "test_view_browser.py::test_run_page_draws_the_reward_curves_and_shows_a_clicked_steps_rollouts": 12,
    "test_agentscope.py::test_eval_against_transformers_serve": 12,
    "test_trinity_launch_on_ray.py::test_a_run_splits_the_clusters_gpus_as_verl_can_train": 9,
    "test_local_algorithms.py::test_each_algorithm_learns": 9,
    "test_trinity_cluster.py::test_a_run_sizes_itself_to_the_ray_cluster_it_joins": 8,
    "test_trinity_rollouts.py::test_a_rollout_holding_the_loop_fails_on_a_runner_thread": 7,
    "test_local_trainer.py::test_the_example_learns": 7,
    "test_trinity_rollouts.py::test_a_rollout_awaiting_past_rollout_timeout_fails_at_the_bound": 6,
    "test_trinity_launch_on_ray.py::test_a_resumed_run_skips_a_finished_warmup": 6,
    "test_trinity_launch_on_ray.py::test_a_failed_warmup_stops_the_run_before_rl_naming_the_jobs_logs": 6,
    "test_monitors.py::test_offline_trackers_get_the_metrics": 6,
    "test_local_trainer.py::test_a_rollout_that_times_out_is_dropped_and_logged": 6,
    "test_datasets.py::test_a_folder_of_split_files_is_read_without_importing_datasets": 6,
    "test_lora.py::test_lora_learns_and_eval_checkpoint_reads_the_merged_model": 5,
    "test_local_sft.py::test_a_warmed_up_run_stopped_anywhere_resumes_to_the_same_weights": 5,
    "test_local_run.py::test_interrupted_and_resumed_run_ends_with_the_same_weights": 5,
    "test_local_checkpoints.py::test_a_damaged_newest_checkpoint_is_named_and_the_good_one_used_on_request": 5,
    "test_gpu_smoke_check.py::test_the_command_line_prints_the_verdict_and_exits_with_it": 5,
    "test_view_browser.py::test_the_page_pages_by_the_size_the_meta_answer_gives": 4,
    "test_trinity_launch_on_ray.py::test_a_resumed_run_takes_the_explorer_back_to_the_trainers_checkpoint": 4,
    "test_trinity_config.py::test_workflow_class_imports_without_vllm": 4,
    "test_lora.py::test_kl_with_lora_is_to_the_base_model_with_the_adapters_off": 4,
    "test_lora.py::test_interrupted_and_resumed_lora_run_ends_with_the_same_adapter": 4,
    "test_lora.py::test_a_damaged_adapter_is_named_when_resuming": 4,
    "test_local_sft.py::test_sft_alone_teaches_the_sums_from_conversations": 4,
    "test_local_checkpoints.py::test_a_damaged_optimizer_state_is_named_and_an_older_checkpoint_used": 4,
    "test_cli.py::test_bad_input_is_one_line_not_a_traceback": 4,
    "test_agentscope.py::test_rollouts_jsonl_keeps_every_call_with_its_advantage": 4,
    "test_agentscope.py::test_rollouts_jsonl_can_keep_every_nth_step_and_a_sample": 4,
    "test_agentscope.py::test_local_training_learns_from_every_call_of_every_trajectory": 4,
    "test_view_browser.py::test_out_file_renders_with_the_network_off": 3,
    "test_view_browser.py::test_filters_change_what_is_shown": 3,
    "test_view_browser.py::test_a_rollout_with_per_token_advantages_shows_their_mean": 3,
    "test_trinity_run_logs.py::test_a_clean_run_and_an_earlier_runs_error_are_not_failures": 3,
    "test_rundir.py::test_resume_refuses_changed_settings_but_allows_a_longer_run": 3,
    "test_lora.py::test_check_skips_building_a_large_lora_model_and_says_so": 3,
    "test_local_trainer.py::test_auxiliary_models_reach_workflow_and_judge_and_stay_frozen": 3,
    "test_local_trainer.py::test_algorithm_settings_mean_the_same_locally_and_unused_trinity_ones_are_named": 3,
    "test_local_run.py::test_resuming_after_a_crash_runs_again_the_steps_past_the_checkpoint_once": 3,
    "test_local_run.py::test_a_run_directory_being_written_cannot_be_resumed_by_another_process": 3,
    "test_evaluate.py::test_resume_after_a_kill_loses_nothing": 3,
    "test_evaluate.py::test_rescore_bounds_each_judgement_as_eval_does": 3,
    "test_error_catalogue.py::test_catalogue_row": 3,
    "test_backend_checks.py::test_run_and_check_report_both_local_problems_before_any_model": 3,
    "test_agentscope.py::test_the_tutorials_agent_trains_on_the_local_backend": 3,
    "test_trinity_runner.py::test_trinitys_runner_builds_the_experiences": 2,
    "test_gpu_smoke_check.py::test_the_engine_was_asked_with_the_runs_sampling": 2,
}


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the slowest tests first and shared out between the workers.

    ``--dist worksteal`` hands each worker a contiguous share of the collected tests, and an
    idle worker then steals from the end of another's queue. In file order the slowest
    tests fell wherever their files did, some at the end of a share, so one worker was
    still on a minute-long test long after the other had run out. Here each worker's share
    begins with slow tests, dealt longest first to the share with the least so far; the
    rest follow in file order, and what is stolen at the end is short. The tests of a
    module that share a module-scoped fixture (a Ray instance, a browser, a trained run)
    move as one unit: pytest tears such a fixture down as soon as a test of another module
    runs, and dealt apart they started Ray five times. Without workers (``-n 0``) the
    order is the files'."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers < 2:
        return

    def seconds(item):
        test = item.nodeid.removeprefix("tests/")
        return SLOW_TESTS.get(test, SLOW_TESTS.get(test.split("[")[0], 0))

    def shared_fixtures(item):
        definitions = getattr(item, "_fixtureinfo", None)
        definitions = definitions.name2fixturedefs if definitions else {}
        return tuple(sorted(name for name, defs in definitions.items()
                            if defs and defs[-1].scope == "module"))

    units = {}  # in file order: a test alone, or the tests sharing module fixtures
    for item in items:
        shared = shared_fixtures(item)
        key = (item.module.__name__, shared) if shared else item.nodeid
        units.setdefault(key, []).append(item)
    units = list(units.values())
    slow = sorted((unit for unit in units if sum(map(seconds, unit))),
                  key=lambda unit: sum(map(seconds, unit)), reverse=True)
    rest = [item for unit in units if not sum(map(seconds, unit)) for item in unit]
    shares = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for unit in slow:
        least = loads.index(min(loads))
        shares[least] += unit
        loads[least] += sum(map(seconds, unit))
    # worksteal sends the first worker len // workers tests, the next len // (workers - 1)
    # of what is left, and so on: fill each share to that size.
    remaining = len(items)
    ordered = []
    for index, share in enumerate(shares):
        size = remaining // (workers - index)
        fill = max(0, size - len(share))
        ordered += share + rest[:fill]
        rest = rest[fill:]
        remaining -= len(share) + fill
    items[:] = ordered + rest


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(size, read_only=False, holding=None)``: a folder on a file system of
    its own (a tmpfs of ``size``, ``"64k"``), first filled with a copy of the folder
    ``holding``, then made read-only if asked; unmounted afterwards. Skips where this
    process may not mount (it must be root)."""
    import shutil
    import subprocess

    mounted = []

    def make(size: str, read_only: bool = False, holding: Path | None = None) -> Path:
        folder = tmp_path / f"disk{len(mounted)}"
        folder.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small file system here: {done.stderr.strip()}")
        mounted.append(folder)
        if holding is not None:
            shutil.copytree(holding, folder, dirs_exist_ok=True)
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        return folder

    yield make
    for folder in reversed(mounted):
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture()
def fresh_modules(tmp_path):
    """A test that imports its own ``exp`` module (a catalogue row's project): forget any
    other test's ``exp`` first, and this test's modules (and its path) afterwards."""
    path = list(sys.path)
    sys.modules.pop("exp", None)
    yield
    sys.path[:] = path
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]
