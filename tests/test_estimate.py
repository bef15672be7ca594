"""scripts/estimate.py (`make estimate`): the predicted wall time of `dvc repro` from the benchmarks' rates."""

import dataclasses
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from lopd.core.config import resolve

REPO = Path(__file__).resolve().parents[1]


def samples(stage: str) -> bool:
    """Whether a stage of the default run builds a rollout engine: it validates, fills a bank, trains a method that
    updates, or evaluates."""
    return stage.startswith(("validate_base", "build_bank", "eval")) or (stage.startswith("train")
                                                                        and not stage.endswith("@vanilla"))


def _module():
    spec = importlib.util.spec_from_file_location("estimate", REPO / "scripts" / "estimate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["estimate"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def estimate():
    return _module()


@pytest.mark.parametrize("domain", ["code", pytest.param("agentic", marks=pytest.mark.xfail(strict=True, reason=(
    "x1.43 of the recorded agentic domain: at the recorded run's sampler (vLLM's sort, 2026-11-26) an episode's time "
    "comes from the rate model, no episode having been measured with it: the bank 11.7 min against 3.9, GRPO's and "
    "SDPO's trainings about twice theirs; the records sampled with ours are within (issue 61)")))])
def test_the_cpu_estimate_matches_the_recorded_run_per_domain_at_its_machines_speed(estimate, domain):
    """The check: the cpu profile's estimate from the committed benchmarks against the recorded default run's stage
    times (reports/perf/default_run_wall_time.json), per domain, within 25%, once sampling is set to the speed of the
    machine that recorded the run (measured on the same training batch), from the rates of the sampler that run
    sampled with and its updates' float32 matmul path, for the params it ran (params.yaml at its commit). A benchmark
    machine slower at sampling than the recording one (ratio > 1) estimates longer than that speed does, a faster one
    shorter."""
    record = estimate.recorded_run(REPO / "reports" / "perf" / "default_run_wall_time.json")
    cfg = estimate.recorded_config(record)
    assert cfg.data.validation_tasks == 32  # the recorded run's, not today's 96
    costs = estimate.cpu_costs(cfg, None, None, sampler=estimate.recorded_sampler(record),
                               matmul=estimate.recorded_matmul(record),
                               malloc=estimate.recorded_malloc(record))  # like with like
    predicted, counts, _ = estimate.estimate(cfg, costs, 1)
    assert {estimate.domain_of(s) for s in predicted} == {"code", "agentic"}
    assert counts["humaneval_plus"] == 164 and counts["mbpp_plus"] == 378
    machine = estimate.machine_ratios(record, "cpu")[domain]
    if "bench_mean_tokens" in machine:
        assert abs(machine["bench_mean_tokens"] - machine["recorded_mean_tokens"]) < 1  # as long a batch
    else:
        assert machine["bench_policy_steps"] == machine["recorded_policy_steps"]  # the same episodes
    raw = estimate.check(predicted, record)["domains"][domain]
    entry = estimate.check(estimate.estimate(cfg, estimate.at_speed(costs, machine["ratio"]), 1)[0],
                           record)["domains"][domain]
    assert (entry["estimated_s"] < raw["estimated_s"]) == (machine["ratio"] > 1)
    assert entry["within_tolerance"], entry


def test_the_tool_use_stages_timed_on_this_code_match_the_estimate(estimate):
    """Like with like: 8 tool-use stages run on this code (reports/perf/default_run_wall_time.2026-12-04-tool-use.json:
    the bank, Vanilla's, GRPO's, SDPO's and LOPD's trainings, three evaluations) on the machine and in the session
    that measured the benchmarks, with the heap, the backend's sampler and oneDNN, against the estimate over those
    stages: within 25% in all and per kind (evaluations, the rest)."""
    record = estimate.recorded_run(REPO / "reports" / "perf" / "default_run_wall_time.2026-12-04-tool-use.json")
    assert (record["sampler"], record["malloc"], record["cpu_matmul"]) == ("top_k_first", "heap", "onednn")
    cfg = estimate.recorded_config(record)
    assert cfg.agentic.benchmark_limit("envscaler") == 5  # the recorded run's, not today's 48
    costs = estimate.cpu_costs(cfg, None, None, sampler=record["sampler"], matmul=record["cpu_matmul"],
                               malloc=record["malloc"])
    predicted, _, _ = estimate.estimate(cfg, costs, 1)
    timed = estimate.check(predicted, record)["recorded_stages"]["agentic"]
    assert len(timed["stages"]) == 8 and timed["within_tolerance"], timed
    for evaluation in (True, False):
        part = {s: e for s, e in timed["stages"].items() if s.startswith("eval") == evaluation}
        ratio = sum(e["estimated_s"] for e in part.values()) / sum(e["recorded_s"] for e in part.values())
        assert abs(ratio - 1) <= estimate.CHECK_TOLERANCE, (evaluation, ratio, part)


def test_make_estimate_check_compares_with_the_newest_one_machine_record_of_todays_code(estimate, monkeypatch,
                                                                                        tmp_path, capsys):
    """`make estimate ARGS=--check` without --record: the newest record whose stages all name one machine (the
    2026-11-26 one, another sampler, reads x1.43 on tool use), timed where and when profile_rollouts.json was measured,
    so that file gives its machine's speed (x1); within 25% at both speeds, written to estimate_check.<record>.json."""
    perf = REPO / "reports" / "perf"

    def one_machines_newest_stage(path: Path) -> str:
        stages = json.loads(path.read_text())["stages"].values()
        machines = {entry.get("machine") for entry in stages}
        return max(entry["finished"] for entry in stages) if len(machines) == 1 and None not in machines else ""

    assert estimate.CHECK_RECORD == max(perf.glob("default_run_wall_time*.json"), key=one_machines_newest_stage)
    record = json.loads(estimate.CHECK_RECORD.read_text())
    machine = json.loads(estimate.CHECK_RECORD_ROLLOUTS.read_text())["cpu"]["machine"]
    assert {entry["machine"] for entry in record["stages"].values()} == {machine}
    scratch = tmp_path / "perf"  # the benchmarks read through links; the check written here, not over the committed
    scratch.mkdir()
    for path in perf.glob("*.json"):
        if not path.name.startswith("estimate_check"):
            (scratch / path.name).symlink_to(path)
    monkeypatch.setattr(estimate, "PERF", scratch)
    monkeypatch.setattr(sys, "argv", ["estimate.py", "--check"])
    estimate.main()
    result = json.loads((scratch / f"estimate_check.{estimate.CHECK_RECORD.stem}.json").read_text())
    assert result["record"] == "reports/perf/default_run_wall_time.2026-12-04-tool-use.json"
    assert {domain: ratio["ratio"] for domain, ratio in result["machine"].items()} == {"code": 1.0, "agentic": 1.0}
    for timed in (result["recorded_stages"], result["recorded_stages_at_recorded_machine_speed"]):
        assert list(timed) == ["agentic"] and timed["agentic"]["within_tolerance"], timed
    assert "outside" not in capsys.readouterr().out


def test_a_domain_the_record_lacks_stages_of_is_checked_over_the_stages_it_has(estimate):
    """A re-recording in progress (scripts/wall_time.py lists the stages it has no run for) checks the domains it
    has whole; the others are n/a as domains, not a partial sum called one, and are compared over the stages the
    record has; a stage timed with others (`includes`) is compared with their estimates summed."""
    record = {"written": "now", "missing": ["train@grpo"],
              "stages": {"eval_agentic@vanilla": {"seconds": 100.0}, "build_bank": {"seconds": 50.0},
                         "eval@sdpo": {"seconds": 200.0, "includes": ["train@sdpo"]}}}
    predicted = {"eval_agentic@vanilla": 110.0, "build_bank": 60.0, "train@grpo": 500.0, "train@sdpo": 90.0,
                 "eval@sdpo": 120.0}
    result = estimate.check(predicted, record)
    assert result["domains"]["agentic"] == {"recorded_s": 100, "estimated_s": 110, "ratio": 1.1,
                                            "within_tolerance": True}
    assert result["domains"]["code"].startswith("n/a: the record lacks 1 of its stages (train@grpo")
    code = result["recorded_stages"]["code"]
    assert code["stages"] == {"build_bank": {"recorded_s": 50.0, "estimated_s": 60.0},
                              "eval@sdpo": {"recorded_s": 200.0, "estimated_s": 210.0}}
    assert (code["recorded_s"], code["estimated_s"], code["ratio"], code["within_tolerance"]) == (250, 270, 1.08, True)
    assert result["recorded_stages"]["agentic"]["ratio"] == 1.1


def test_updates_at_the_recording_machines_speed_come_from_its_make_bench(estimate, tmp_path):
    """--record-cpu: the recording machine's cpu.json; its update through the record's path and its AdamW step
    against the benchmarks' machine's give the update speed, and at_speed divides every update cost by it while the
    sampling rates take the sampling ratio alone."""
    here = json.loads((REPO / "reports" / "perf" / "cpu.json").read_text())
    there = tmp_path / "cpu.slow.json"
    there.write_text(json.dumps({"update": {"paths": {"fp32_blas": {"update_s": 4 * here["update"]["paths"][
        "fp32_blas"]["update_s"]}}}, "adamw": {"fused": {"step_s": 2 * here["adamw"]["fused"]["step_s"]}}}))
    updates = estimate.update_ratios(there, "blas")
    assert (updates["ratio"], updates["adamw_ratio"]) == (0.25, 0.5)
    cfg = resolve({"profile": "cpu"})
    costs = estimate.cpu_costs(cfg, None, None)
    slow = estimate.at_speed(costs, 0.5, updates)
    assert slow.train_rate == pytest.approx(costs.train_rate / 2)
    assert slow.student_s == pytest.approx(4 * costs.student_s) and slow.lopd_s == pytest.approx(4 * costs.lopd_s)
    assert slow.agentic_update_s["grpo"] == pytest.approx(4 * costs.agentic_update_s["grpo"])
    assert slow.optimizer_s == pytest.approx(2 * costs.optimizer_s)
    assert estimate.at_speed(costs, 0.5).student_s == costs.student_s  # no --record-cpu: updates as benchmarked
    with pytest.raises(SystemExit, match=r"--record-cpu .*cpu.slow.json: no fp32_onednn update"):
        estimate.update_ratios(there, "onednn")


def test_the_code_machine_speed_from_the_record_needs_a_batch_as_long_as_the_benchmarks(estimate, monkeypatch):
    """Without --record-rollouts the code ratio compares the benchmark's training step (the first training tasks) with
    the record's first GRPO step (a seeded permutation's: other tasks), so only where the two are as long: a
    re-recording's 186.8 tokens on average against the benchmark's 147.6 gives none, and the agentic domain, without a
    Vanilla evaluation of its own, none either."""
    bench = json.loads((REPO / "reports" / "perf" / "profile_rollouts.json").read_text())["cpu"]["train_step"]
    record = {"sampler": "top_k_first",
              "stages": {"train@grpo": {"seconds": 1.0, "finished": "now", "machine": "here"}}}

    def first_step(mean_length):
        history = json.dumps([{"completions/mean_length": mean_length, "time_sampling_s": 60.0, "time_reward_s": 2.0}])
        monkeypatch.setattr(estimate, "recorded_file",
                            lambda r, stage, path: history if stage == "train@grpo" else None)
        return estimate.machine_ratios(record, "cpu")

    same = first_step(bench["mean_tokens"] + 0.5)
    measured = json.loads((REPO / "reports" / "perf" / "profile_rollouts.json").read_text())["cpu"].get("malloc")
    as_recorded = estimate.malloc_factors(measured or "mapped", "mapped")["step"]  # the record names none: mapped
    assert same["code"]["ratio"] == round(bench["wall_s"] * as_recorded / 62.0, 3)
    assert same["code"]["machine"] == "here"
    assert same["agentic"]["ratio"] == same["code"]["ratio"]
    other = first_step(bench["mean_tokens"] + 39.2)
    assert other["code"].startswith("n/a: the record's first GRPO batch is not as long as the benchmark's")
    assert other["agentic"].startswith("n/a: the record has no eval_agentic@vanilla played together")


def test_record_rollouts_time_the_same_work_on_both_machines(estimate, tmp_path):
    """--record-rollouts: the recording machine's training steps, code and agentic, against profile_rollouts.json's
    give each domain's ratio where they are the same work (as many rollouts or episodes, sampled token counts within
    SAME_WORK_TOKENS: CPU kinds round apart); the record's stages timed elsewhere are named; a file sampled with
    another sampler, or lacking a part, is a one-line error."""
    here = json.loads((REPO / "reports" / "perf" / "profile_rollouts.json").read_text())["cpu"]
    code, agentic = here["train_step"], here["agentic_train_step"]
    there = {"sampler": here["sampler"], "machine": "slow CPU", "malloc": here.get("malloc", "mapped"),
             "train_step": {**code, "wall_s": 2 * code["wall_s"], "sampled_tokens": code["sampled_tokens"] + 3},
             "agentic_train_step": {**agentic, "wall_s": 4 * agentic["wall_s"],
                                    "sampled_tokens": round(agentic["sampled_tokens"] * 1.05)}}
    path = tmp_path / "profile_rollouts.slow.json"
    path.write_text(json.dumps({"cpu": there}))
    record = {"stages": {"train@grpo": {"machine": "slow CPU"}, "eval@grpo": {"machine": "another CPU"}}}
    ratios = estimate.machine_ratios(record, "cpu", path)
    assert ratios["code"]["ratio"] == round(code["wall_s"] / (2 * code["wall_s"]), 3) == 0.5
    assert ratios["code"]["machine"] == "slow CPU" and ratios["code"]["stages_on_other_machines"] == ["eval@grpo"]
    path.write_text(json.dumps({"cpu": {**there, "malloc": "mapped"}}))  # that machine with glibc's default
    as_there = estimate.malloc_factors(here.get("malloc", "mapped"), "mapped")["step"]
    assert estimate.machine_ratios(record, "cpu", path)["code"]["ratio"] == round(0.5 * as_there, 3)
    path.write_text(json.dumps({"cpu": there}))
    assert ratios["agentic"].startswith("n/a: ") and "sampled tokens against the benchmark's" in ratios["agentic"]
    path.write_text(json.dumps({"cpu": {**there, "train_step": {**there["train_step"], "rollouts": 8}}}))
    assert "8 rollouts against the benchmark's 16" in estimate.machine_ratios(record, "cpu", path)["code"]
    path.write_text(json.dumps({"cpu": {**there, "sampler": "vocabulary_sort"}}))
    with pytest.raises(SystemExit, match=r"--record-rollouts .*: sampled with vocabulary_sort"):
        estimate.machine_ratios(record, "cpu", path)
    path.write_text(json.dumps({"cpu": {"sampler": here["sampler"], "train_step": code}}))
    with pytest.raises(SystemExit, match=r"--record-rollouts .*: no agentic_train_step \(scripts/bench/bench_prof"):
        estimate.machine_ratios(record, "cpu", path)


def test_the_agentic_machine_speed_is_the_same_evaluation_played_on_both_machines(estimate):
    """The agentic ratio compares like with like: the benchmarks played together in one batch on the benchmarks'
    machine (agentic_eval.json) and in the recorded Vanilla evaluation; a record that played them apart did other
    work and gives none."""
    bench = {"benchmarks": ["a", "b"], "wall_s": 276.0, "policy_steps": 148}
    together = [{"played_together": ["b", "a"], "wall_s": 485.7, "n_policy_steps": n} for n in (100, 48)]
    assert estimate.eval_play_ratio(bench, together) == {
        "bench_s": 276.0, "recorded_s": 485.7, "bench_policy_steps": 148, "recorded_policy_steps": 148,
        "ratio": round(276.0 / 485.7, 3)}
    apart = [{"wall_s": 40.0, "n_policy_steps": n} for n in (100, 48)]
    assert estimate.eval_play_ratio(bench, apart) is None
    assert estimate.eval_play_ratio(bench, together[:1] + [{**together[1], "played_together": ["a"]}]) is None


def test_a_record_that_is_not_wall_times_is_a_one_line_error(estimate, tmp_path):
    bad = tmp_path / "record.json"
    bad.write_text("[]")
    with pytest.raises(SystemExit, match=r"--record .*record.json: no `stages`"):
        estimate.recorded_run(bad)


def test_gpus_split_the_work_and_not_the_start_up(estimate):
    from lopd.core.config import resolve

    cfg = resolve({"profile": "cpu"})
    costs = estimate.cpu_costs(cfg, None, None)
    one, _, _ = estimate.estimate(cfg, costs, 1)
    four, _, _ = estimate.estimate(cfg, costs, 4)
    for stage in one:
        fixed = costs.startup_s + (costs.engine_start_s if samples(stage) else 0.0)
        assert four[stage] - fixed == pytest.approx((one[stage] - fixed) / 4), stage


def test_a_gpu_ten_times_faster_makes_sampling_and_updates_ten_times_shorter(estimate, tmp_path, monkeypatch):
    """gpu.json whose engine and GRPO update are 10x this CPU's: every stage's work but the sandbox's scoring and the
    start-up shrinks tenfold (the estimate scales the CPU's measured costs by the measured speed-ups)."""
    from lopd.core.config import resolve

    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    cfg = resolve({"profile": "cpu"})
    cpu = estimate.cpu_costs(cfg, None, None)
    rollout = json.loads((REPO / "reports/perf/rollout.json").read_text())
    prompt = json.loads((REPO / "reports/perf/profile_rollouts.json").read_text())["cpu"]["train_step"][
        "mean_prompt_tokens"]
    step = json.loads((REPO / "reports/perf/lopd_step.json").read_text())["models"][cfg.model.name]["step"]
    action = step["action_tokens"] / step["rollouts"]
    cpu_sequence_token_s = cpu.student_s * action / (action + prompt)
    fast = 10 * rollout["vllm"]["train_setting"]["tokens_per_s"]
    (tmp_path / "gpu.json").write_text(json.dumps({
        "size": "real", "device": {"name": "NVIDIA H200"},
        "rollout": [{"architecture": "qwen2.5-coder-0.5b", "vllm": "n/a", "static": {"tokens_per_s": fast},
                     "loop": {"tokens_per_s": fast / 5}}],
        "update": [{"architecture": "qwen2.5-coder-0.5b", "grpo": {"tokens_per_s": 10 / cpu_sequence_token_s},
                    "lopd": {"error": "out of memory"}}]}))
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    gpu = estimate.gpu_costs(cfg, "h200", cpu)
    assert gpu.train_rate == pytest.approx(10 * cpu.train_rate)
    assert gpu.teacher_s == pytest.approx(cpu.teacher_s / 10) and gpu.lopd_s == pytest.approx(cpu.lopd_s / 10)
    assert gpu.agentic_update_s["lopd"] == pytest.approx(cpu.agentic_update_s["lopd"] / 10)
    with pytest.raises(SystemExit, match="not an H100"):
        estimate.gpu_costs(cfg, "h100", cpu)


def test_make_estimate_prints_every_stage_and_its_assumptions(estimate, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["estimate.py", "--profile", "cpu"])
    estimate.main()
    out = capsys.readouterr().out
    held_out = resolve({"profile": "cpu"}).data.validation_tasks
    assert "Assumptions" in out and "training rollouts:" in out and f"validation: {held_out} tasks" in out
    assert "train_lopd " in out and "eval_agentic_base_composer " in out and "code domain" in out
    monkeypatch.setattr(sys, "argv", ["estimate.py", "--profile", "paper"])
    with pytest.raises(SystemExit, match="no entry for profile paper"):
        estimate.main()


@pytest.mark.parametrize("race", ["learn", "learn_tool"])
def test_each_learning_race_is_estimated_stage_by_stage(estimate, race):
    """`make estimate` also prices `make learn`'s two races: the selection, every run of the race's runs and the
    report; a LOPD run costs more than a GRPO run of the same budget (its teacher and composer passes, or its text
    teacher's), and processes split the work."""
    cfg = resolve({"profile": "cpu"})
    costs = estimate.cpu_costs(cfg, None, None)
    one, assumptions = estimate.estimate_learn(cfg, costs, 1, race)
    runs = getattr(cfg, race).runs
    assert list(one) == [f"{race}_select", *(f"{race}@{name}" for name in runs), f"{race}_report"]
    fixed = costs.startup_s + costs.engine_start_s  # every race stage but the report samples
    assert one[f"{race}@lopd"] > one[f"{race}@grpo"] == one[f"{race}@grpo_lr0"] > fixed
    assert one[f"{race}_report"] == costs.startup_s
    two, _ = estimate.estimate_learn(cfg, costs, 2, race)
    for stage in list(one)[:-1]:
        assert two[stage] - fixed == pytest.approx((one[stage] - fixed) / 2)
    assert any(f"{race}.max_new_tokens" in line for line in assumptions)


def test_the_tool_use_race_is_priced_from_the_measured_episodes_within_its_budget(estimate, monkeypatch):
    """A tool-use race run: its steps' episodes as profile_rollouts.json timed the tool-use training's step (GRPO in
    groups, OPSD one per task), each trained episode's update over its whole sequence (agentic_update.json), its
    measurements as the bank's batch; the cpu profile's defaults fit the issue's 2.5 h on 2 cores, also once the
    tool-use bank has entries (LOPD then pays for its latent context)."""
    cfg = resolve({"profile": "cpu"})
    costs = estimate.cpu_costs(cfg, None, None)
    episode = estimate.episodes(cfg)
    play = estimate.episode_seconds(costs, episode)
    stages, _ = estimate.estimate_learn(cfg, costs, 1, "learn_tool")
    learn, fixed = cfg.learn_tool, costs.startup_s + costs.engine_start_s
    points = -(-learn.steps // learn.eval_every)
    measure = learn.tasks * learn.eval_samples * play["bank"]
    opsd = learn.steps * (learn.rollouts_per_step * (play["single"] + estimate.episode_update_s(
        costs, "opsd", False, episode)) + costs.optimizer_s) + costs.first_optimizer_s + points * measure
    assert stages["learn_tool@opsd"] == pytest.approx(fixed + opsd)
    assert sum(stages.values()) <= 2.5 * 3600
    monkeypatch.setattr(estimate, "episodes", lambda cfg, bank=None: dataclasses.replace(episode, bank_success=1.0))
    banked, assumptions = estimate.estimate_learn(cfg, costs, 1, "learn_tool")
    assert banked["learn_tool@lopd"] > stages["learn_tool@lopd"] and sum(banked.values()) <= 2.5 * 3600
    assert not any("text teacher" in line for line in assumptions)


def test_a_built_bank_prices_the_tool_use_cold_start_by_its_steps_entries_and_held_out_passes(estimate):
    """Given build_bank_agentic's record, its successes decide the tool-use bank (the benchmark's batch otherwise):
    the cold start costs agentic.cold_start_steps steps of min(batch, entries) of the entries it trains on (those of
    the held-out tasks aside), each a code entry's cost scaled by its positions, their NLL measured twice, and the
    privilege's passes over the held-out entries (no context, both texts, the latents at step 0 and the end); LOPD's
    training composes the anchors of each task it trains on once (a code task's, scaled by the encoder positions of
    its n_ret items)."""
    cfg = resolve({"profile": "cpu", "agentic": {"cold_start_steps": 2}})
    costs = estimate.cpu_costs(cfg, None, None)
    bank = {"n_rollouts": 64, "rollout_success_rate": 12 / 64}
    episode = estimate.episodes(cfg, bank)
    assert episode.bank_success == 12 / 64 and "12 of the 64" in episode.bank_note
    stages, counts, _ = estimate.estimate(cfg, costs, 1, bank)
    scale = estimate.agentic_entry_positions(cfg, episode) / costs.cold_start_entry_positions
    per_entry, measure = costs.cold_start_entry_s * scale, costs.cold_start_measure_s * scale
    held_out = 3 * 1.5  # agentic.cold_start_held_out_tasks, 1 to 2 entries a task
    trained = 12 - held_out
    work = 2 * trained * per_entry + 2 * trained * measure + held_out * (3 + 2) * measure
    assert stages["cold_start_agentic"] == pytest.approx(costs.startup_s + work)
    longer, _, _ = estimate.estimate(resolve({"profile": "cpu", "agentic": {"cold_start_steps": 4}}), costs, 1, bank)
    assert longer["cold_start_agentic"] == pytest.approx(stages["cold_start_agentic"] + 2 * trained * per_entry)
    anchors = costs.compose_s * cfg.n_ret * cfg.composer.max_item_tokens / costs.compose_positions
    without = dataclasses.replace(costs, compose_s=0.0)
    assert stages["train_lopd_agentic"] - estimate.estimate(cfg, without, 1, bank)[0]["train_lopd_agentic"] == \
        pytest.approx(cfg.agentic.steps * cfg.agentic.rollouts_per_step * anchors)
    empty, _, _ = estimate.estimate(cfg, costs, 1, {"n_rollouts": 64, "rollout_success_rate": 0.0})
    assert empty["cold_start_agentic"] == costs.startup_s and empty["train_lopd_agentic"] < stages["train_lopd_agentic"]


def test_a_record_sampled_with_the_backends_sampler_takes_the_measured_episodes(estimate):
    """The agentic episodes were measured with the backend's sampler (top_k_first): a record that sampled with it
    (a re-recording) is priced with them, as `make estimate` is; one that sampled with vLLM's sort keeps the episode
    model."""
    cfg = resolve({"profile": "cpu"})
    perf = REPO / "reports" / "perf"
    play = json.loads((perf / "agentic_eval.json").read_text())["cpu"]
    trained = json.loads((perf / "profile_rollouts.json").read_text())["cpu"]
    # each at the stages' malloc mode (malloc.json's factor for a step of few rows where it was measured with another)
    played = play["together"]["seconds_per_episode"] * estimate.malloc_factors(
        play.get("malloc", "mapped"), estimate.stage_malloc_mode())["step"]
    factors = estimate.malloc_factors(trained.get("malloc", "mapped"), estimate.stage_malloc_mode())
    episodes = {shape: trained[part]["seconds_per_episode"] * factors[kind]
                for shape, (part, kind) in estimate.AGENTIC_PLAYS.items() if part in trained}
    assert "grouped" in episodes
    for sampler in (None, "top_k_first"):
        costs = estimate.cpu_costs(cfg, None, None, sampler=sampler)
        assert costs.agentic_eval_episode_s == pytest.approx(played)
        assert costs.agentic_play_s == pytest.approx(episodes)
    sort = estimate.cpu_costs(cfg, None, None, sampler="vocabulary_sort")
    assert (sort.agentic_eval_episode_s, sort.agentic_play_s) == (None, {})


def test_the_rates_are_those_of_the_sampler_asked_for(estimate):
    """profile_rollouts.json measures the CPU engine with the backend's sampler (its top level) and vLLM's own beside
    it; an entry without `sampler` predates the backend's and sampled with vLLM's."""
    parts = {"train_step": {"wall_s": 10.0}, "validation": {}, "eval": {}}
    sort = {**parts, "train_step": {"wall_s": 20.0}}
    entry = {"profile": "cpu", "sampler": "top_k_first", **parts, "vocabulary_sort": sort}
    assert estimate.sampled_parts(entry, None) is entry and estimate.sampled_parts(entry, "top_k_first") is entry
    assert estimate.sampled_parts(entry, "vocabulary_sort") is sort
    older = {"profile": "cpu", **parts}
    assert estimate.sampled_parts(older, "vocabulary_sort") is older
    with pytest.raises(SystemExit, match="profile_rollouts.json: profile cpu has no rates measured with the "
                                         "top_k_first sampler"):
        estimate.sampled_parts(older, "top_k_first")


def test_agentic_evaluations_take_the_measured_seconds_per_episode_played_together(estimate, tmp_path, monkeypatch):
    """agentic_eval.json's seconds per episode (the profile's benchmarks played together, as eval_agentic plays
    them) sets every agentic evaluation's work; the check's rates (vLLM's sort, the recorded run's benchmarks apart)
    and a profile it has not measured keep the episode model."""
    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    (tmp_path / "agentic_eval.json").unlink(missing_ok=True)
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    cfg = resolve({"profile": "cpu"})
    modelled, counts, _ = estimate.estimate(cfg, estimate.cpu_costs(cfg, None, None), 1)
    (tmp_path / "agentic_eval.json").write_text(json.dumps({"cpu": {"together": {"seconds_per_episode": 2.5},
                                                                    "malloc": estimate.stage_malloc_mode()}}))
    costs = estimate.cpu_costs(cfg, None, None)
    assert costs.agentic_eval_episode_s == 2.5
    measured, _, _ = estimate.estimate(cfg, costs, 1)
    played = sum(counts[f"agentic.{name}"] for name in cfg.agentic.benchmarks)
    assert played > 0
    for method in cfg.methods:
        assert measured[f"eval_agentic@{method}"] == pytest.approx(costs.startup_s + costs.engine_start_s
                                                                   + played * 2.5)
    # the measured episodes say the bank stays empty: Base + Composer retrieves nothing, so composes nothing
    assert measured["eval_agentic_base_composer"] == measured["eval_agentic@grpo"]
    assert {s: t for s, t in measured.items() if "eval_agentic" not in s} == {
        s: t for s, t in modelled.items() if "eval_agentic" not in s}
    assert estimate.cpu_costs(cfg, None, None, sampler="vocabulary_sort").agentic_eval_episode_s is None
    assert estimate.at_speed(costs, 2.0).agentic_eval_episode_s == pytest.approx(1.25)


def test_updates_measured_through_another_matmul_path_are_scaled_by_cpu_jsons_ratio(estimate, tmp_path, monkeypatch):
    """An update benchmark records its float32 matmul path (none: BLAS, before `model.cpu_matmul`); costed for another
    path, its figures are scaled by the ratio of cpu.json's updates through the two; the sampling rates are not."""
    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    paths = {"fp32_blas": {"update_s": 80.0}, "fp32_onednn": {"update_s": 50.0}}
    cpu_json = json.loads((tmp_path / "cpu.json").read_text())
    (tmp_path / "cpu.json").write_text(json.dumps({**cpu_json, "update": {**cpu_json["update"], "paths": paths}}))
    assert estimate.matmul_factor("onednn", "blas") == pytest.approx(1.6)
    assert estimate.matmul_factor("blas", "blas") == 1.0
    cfg = resolve({"profile": "cpu"})
    for variant in ("grpo:on", "lopd:on"):
        agentic = json.loads((tmp_path / "agentic_update.json").read_text())
        agentic["variants"][variant]["cpu_matmul"] = "onednn"
        (tmp_path / "agentic_update.json").write_text(json.dumps(agentic))
    step = json.loads((tmp_path / "lopd_step.json").read_text())
    step["models"][cfg.model.name]["cpu_matmul"] = "onednn"
    (tmp_path / "lopd_step.json").write_text(json.dumps(step))
    as_measured = estimate.cpu_costs(cfg, None, None)
    as_blas = estimate.cpu_costs(cfg, None, None, matmul="blas")
    for name in ("student_s", "teacher_s", "composer_s", "lopd_s", "compose_s", "cold_start_entry_s",
                 "cold_start_measure_s"):  # composer.json's through oneDNN too
        assert getattr(as_blas, name) == pytest.approx(1.6 * getattr(as_measured, name)), name
    for name in ("optimizer_s", "first_optimizer_s"):  # AdamW is bound by memory, not by the matmul path
        assert getattr(as_blas, name) == getattr(as_measured, name), name
    for kind in ("grpo", "lopd"):
        assert as_blas.agentic_update_s[kind] == pytest.approx(1.6 * as_measured.agentic_update_s[kind]), kind
    assert as_blas.train_rate == as_measured.train_rate
    del step["models"][cfg.model.name]["cpu_matmul"]  # a measurement without the key took BLAS
    (tmp_path / "lopd_step.json").write_text(json.dumps(step))
    assert estimate.cpu_costs(cfg, None, None, matmul="onednn").student_s == pytest.approx(as_measured.student_s / 1.6)


def test_benchmarks_measured_with_another_malloc_mode_are_scaled_by_malloc_jsons_ratios(estimate, tmp_path,
                                                                                         monkeypatch):
    """A benchmark records how glibc served its tensors (`malloc`; none: mapped, before `reuse_freed_memory`); priced
    for the other mode, it is scaled by malloc.json's ratio for the kind of work it timed (heap over mapped, so
    mapped takes longer): a call of many rows (validation, evaluations), a step of few (a training step, agentic
    episodes, prefill) or an update; AdamW's steps and the engine's start are not."""
    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    (tmp_path / "malloc.json").write_text(json.dumps({"heap_over_mapped": {
        "sampling": 0.8, "train_step_sampling": 0.9, "later_update": 0.5}}))
    assert estimate.malloc_factors("mapped", "heap") == {"call": 0.8, "step": 0.9, "update": 0.5}
    assert estimate.malloc_factors("heap", "mapped") == pytest.approx({"call": 1.25, "step": 1 / 0.9, "update": 2.0})
    assert estimate.malloc_factors("heap", "heap") == {"call": 1.0, "step": 1.0, "update": 1.0}
    cfg = resolve({"profile": "cpu"})

    def measured(mode: str | None) -> None:
        """Every benchmark file as measured with `mode` (None: without the key)."""
        for name, entry_of in (("profile_rollouts.json", lambda d: d["cpu"]), ("rollout.json", lambda d: d),
                               ("agentic_eval.json", lambda d: d["cpu"]), ("composer.json", lambda d: d),
                               ("lopd_step.json", lambda d: d["models"][cfg.model.name]),
                               ("agentic_update.json", lambda d: d)):
            data = json.loads((tmp_path / name).read_text())
            entry = entry_of(data)
            entry.pop("malloc", None)
            if mode is not None:
                entry["malloc"] = mode
            (tmp_path / name).write_text(json.dumps(data))

    measured("heap")
    heap = estimate.cpu_costs(cfg, None, None, malloc="heap")
    mapped = estimate.cpu_costs(cfg, None, None, malloc="mapped")
    for name, ratio in (("train_rate", 0.9), ("prefill_rate", 0.9), ("validation_rate", 0.8)):
        assert getattr(mapped, name) == pytest.approx(ratio * getattr(heap, name)), name
    assert mapped.eval_rate == pytest.approx({b: 0.8 * r for b, r in heap.eval_rate.items()})
    assert mapped.agentic_eval_episode_s == pytest.approx(heap.agentic_eval_episode_s / 0.9)
    heap_over_mapped = {"step": 0.9, "call": 0.8}
    assert heap.agentic_play_s and mapped.agentic_play_s == pytest.approx(
        {shape: s / heap_over_mapped[estimate.AGENTIC_PLAYS[shape][1]] for shape, s in heap.agentic_play_s.items()})
    for name in ("student_s", "teacher_s", "composer_s", "lopd_s", "compose_s", "cold_start_entry_s",
                 "cold_start_measure_s"):
        assert getattr(mapped, name) == pytest.approx(2.0 * getattr(heap, name)), name
    assert mapped.agentic_update_s == pytest.approx({k: 2.0 * v for k, v in heap.agentic_update_s.items()})
    for name in ("optimizer_s", "first_optimizer_s", "engine_start_s", "sandbox_s"):
        assert getattr(mapped, name) == getattr(heap, name), name
    measured(None)  # without the key: measured mapped, so a mapped run takes the rates as they are
    assert estimate.cpu_costs(cfg, None, None, malloc="mapped").train_rate == pytest.approx(heap.train_rate)
    assert estimate.cpu_costs(cfg, None, None, malloc="heap").student_s == pytest.approx(0.5 * heap.student_s)
    assert estimate.recorded_malloc({}) == "mapped" and estimate.recorded_malloc({"malloc": "heap"}) == "heap"


def test_an_update_costs_its_trained_tokens_and_a_step_its_optimizer_step(estimate, tmp_path, monkeypatch):
    """A GRPO update runs its micro-batches over the rollouts that carry a gradient only (lopd.core.loop.update), so
    it is priced per trained action token: lopd_step.json's first GRPO update less its first AdamW step, over its
    action tokens; every step adds one AdamW step and a stage's first adds what allocating the state costs (cpu.json).
    A step none of whose rollouts carries a gradient costs its sampling, validation and optimizer step alone."""
    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    cfg = resolve({"profile": "cpu"})
    step_file = json.loads((tmp_path / "lopd_step.json").read_text())
    step_file["models"][cfg.model.name]["malloc"] = estimate.stage_malloc_mode()  # as measured: no malloc factor
    (tmp_path / "lopd_step.json").write_text(json.dumps(step_file))
    step = step_file["models"][cfg.model.name]["step"]
    adamw = json.loads((tmp_path / "cpu.json").read_text())["adamw"]["fused"]
    costs = estimate.cpu_costs(cfg, None, None)
    assert costs.student_s == pytest.approx((step["grpo_update_s"] - adamw["first_step_s"]) / step["action_tokens"])
    assert costs.lopd_s == pytest.approx((step["lopd_update_s"] - adamw["first_step_s"]) / step["action_tokens"])
    assert (costs.optimizer_s, costs.first_optimizer_s) == (adamw["step_s"], adamw["first_step_s"] - adamw["step_s"])

    def grpo_stage(trained_fraction: float) -> float:
        rollout = json.loads((REPO / "reports/perf/rollout.json").read_text())
        rollout["grpo_step"]["trained_fraction"] = trained_fraction
        (tmp_path / "rollout.json").write_text(json.dumps(rollout))
        return estimate.estimate(cfg, costs, 1)[0]["train@grpo"]

    steps, rollouts = cfg.train.steps, cfg.train.rollouts_per_step
    assert grpo_stage(1.0) - grpo_stage(0.0) == pytest.approx(steps * rollouts * costs.train_tokens * costs.student_s)
    points = -(-steps // cfg.train.val_every)  # step 0 is validate_base's
    validation = cfg.data.validation_tasks * (costs.train_tokens / costs.validation_rate + costs.sandbox_s)
    sampling = rollouts * (costs.train_tokens / costs.train_rate + costs.sandbox_s)
    assert grpo_stage(0.0) == pytest.approx(costs.startup_s + costs.engine_start_s
                                            + steps * (sampling + costs.optimizer_s) + costs.first_optimizer_s
                                            + points * validation)


def test_agentic_updates_measured_on_another_model_are_a_one_line_error(estimate, tmp_path, monkeypatch):
    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    cfg = resolve({"profile": "cpu"})
    agentic = json.loads((tmp_path / "agentic_update.json").read_text())
    for measured, named in (({**agentic, "model": "smollm2-135m"}, "smollm2-135m"),
                            ({k: v for k, v in agentic.items() if k != "model"}, "an unnamed model")):
        (tmp_path / "agentic_update.json").write_text(json.dumps(measured))
        with pytest.raises(SystemExit, match=f"agentic_update.json: measured on {named}, not {cfg.model.name}"):
            estimate.cpu_costs(cfg, None, None)


def test_agentic_training_episodes_are_the_measured_ones(estimate, tmp_path, monkeypatch):
    """Steps, tokens, sequence and seconds of an agentic training episode come from profile_rollouts.json's
    agentic_train_step (an entry without one is a one-line error), and its update from the sequence's tokens. A method
    that plays one episode per task (LOPD) takes agentic_train_step_single's seconds, and the bank its batch's seconds
    and successes, where measured; else the grouped step's."""
    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    cfg = resolve({"profile": "cpu"})
    profiles = json.loads((tmp_path / "profile_rollouts.json").read_text())
    played = {"episodes": 8, "bank_successes": 2, "bank_success_threshold": 0.8, "wall_s": 80.0, "policy_steps": 24,
              "sampled_tokens": 960, "seconds_per_episode": 10.0, "mean_steps": 3.0, "mean_step_tokens": 40.0,
              "mean_first_context_tokens": 1000.0, "mean_sequence_tokens": 1500.0}
    for part in ("agentic_train_step_single", "agentic_bank_batch"):
        profiles["cpu"].pop(part, None)
    profiles["cpu"]["agentic_train_step"] = played
    (tmp_path / "profile_rollouts.json").write_text(json.dumps(profiles))
    episode = estimate.episodes(cfg)
    assert (episode.steps, episode.step_tokens, episode.sequence_tokens) == (3.0, 40.0, 1500.0)
    costs = estimate.cpu_costs(cfg, None, None)
    assert costs.agentic_play_s == {"grouped": 10.0}
    assert estimate.cpu_costs(cfg, None, None, sampler="vocabulary_sort").agentic_play_s == {}
    a = cfg.agentic
    bank_episodes = min(a.bank_task_limit, estimate.agentic_counts(cfg)["train_tasks"]) * a.bank_samples_per_task
    shares = estimate.signal_shares(cfg, episode.success)[0]["agentic"]

    def trained(method: str, kind: str, seconds: float) -> float:
        update = shares[method] * 1500.0 * costs.agentic_update_s[kind]
        anchors = (costs.compose_s * cfg.n_ret * cfg.composer.max_item_tokens / costs.compose_positions
                   if method == "lopd" else 0.0)  # c_phi0 of each task trained on (all a.steps x rollouts differ)
        return costs.startup_s + costs.engine_start_s + a.steps * a.rollouts_per_step * (seconds + update + anchors)

    stages, _, _ = estimate.estimate(cfg, costs, 1)
    assert stages["train_agentic@grpo"] == pytest.approx(trained("grpo", "grpo", 10.0))
    assert stages["train_lopd_agentic"] == pytest.approx(trained("lopd", "lopd", 10.0))
    assert stages["build_bank_agentic"] == pytest.approx(costs.startup_s + costs.engine_start_s + bank_episodes * 10.0)
    assert episode.bank_success == 0.25
    single = {**played, "tasks": 8, "seconds_per_episode": 15.0}
    bank = {**played, "tasks": 32, "episodes": 64, "bank_successes": 16, "seconds_per_episode": 5.0}
    profiles["cpu"].update(agentic_train_step={**played, "bank_successes": 0}, agentic_train_step_single=single,
                           agentic_bank_batch=bank)
    (tmp_path / "profile_rollouts.json").write_text(json.dumps(profiles))
    costs = estimate.cpu_costs(cfg, None, None)
    assert costs.agentic_play_s == {"grouped": 10.0, "single": 15.0, "bank": 5.0}
    episode = estimate.episodes(cfg)
    stages, _, _ = estimate.estimate(cfg, costs, 1)
    assert stages["train_agentic@grpo"] == pytest.approx(trained("grpo", "grpo", 10.0))
    assert stages["train_lopd_agentic"] == pytest.approx(trained("lopd", "lopd", 15.0))
    assert stages["build_bank_agentic"] == pytest.approx(costs.startup_s + costs.engine_start_s + bank_episodes * 5.0)
    # the bank's batch keeps a quarter of its episodes: the cold start trains on them (priced in
    # test_a_built_bank_prices_the_tool_use_cold_start_by_its_steps_entries_and_anchors)
    assert episode.bank_success == 0.25 and bank_episodes / 4 >= 1
    assert stages["cold_start_agentic"] > costs.startup_s
    profiles["cpu"]["agentic_bank_batch"] = {**bank, "bank_successes": 0}
    (tmp_path / "profile_rollouts.json").write_text(json.dumps(profiles))
    empty, _, _ = estimate.estimate(cfg, costs, 1)
    assert empty["cold_start_agentic"] == costs.startup_s  # an empty bank: nothing
    # nor latent context: LOPD's teacher pass trains nothing, a forward as a text teacher's (SDFT's, OPSD's)
    forward = (costs.student_s + costs.teacher_s * estimate.TEACHER_FORWARD_SHARE) / costs.student_s
    assert costs.update_s("lopd", latent=False) == costs.update_s("sdft") == pytest.approx(forward * costs.student_s)
    per_episode = 15.0 + 1500.0 * costs.agentic_update_s["grpo"] * forward
    assert empty["train_lopd_agentic"] == pytest.approx(
        costs.startup_s + costs.engine_start_s + a.steps * a.rollouts_per_step * per_episode)
    assert empty["train_lopd_agentic"] == pytest.approx(empty["train_agentic@sdft"])
    del profiles["cpu"]["agentic_bank_batch"]
    profiles["cpu"]["agentic_train_step"] = {k: v for k, v in played.items() if k != "bank_successes"}
    (tmp_path / "profile_rollouts.json").write_text(json.dumps(profiles))
    with pytest.raises(SystemExit, match="agentic_train_step of profile cpu has no bank_successes"):
        estimate.episodes(cfg)
    del profiles["cpu"]["agentic_train_step"]
    (tmp_path / "profile_rollouts.json").write_text(json.dumps(profiles))
    with pytest.raises(SystemExit, match="profile_rollouts.json: no agentic_train_step for profile cpu"):
        estimate.episodes(cfg)


def test_skill_sd_trains_every_rollout_after_its_first_step(estimate):
    """Skill-SD's distillation term trains every rollout whose task has a skill, and the first step's summaries give
    every later task one: its recorded runs trained 0.25 of the first step's code rollouts, then 1.0 (and 0.0, then
    1.0 on tool use). So its share is GRPO's on the first step and 1 on every other."""
    cfg = resolve({"profile": "cpu"})
    shares = estimate.signal_shares(cfg, 0.5)[0]
    code_steps = cfg.method_sections["skill_sd"].steps or cfg.train.steps
    for domain, steps in (("code", code_steps), ("agentic", cfg.agentic.steps)):
        per_step = [shares[domain]["grpo"]] + [1.0] * (steps - 1)
        assert shares[domain]["skill_sd"] == pytest.approx(sum(per_step) / len(per_step))
    assert shares["code"]["sdpo"] == shares["code"]["grpo"] < shares["code"]["skill_sd"] < 1.0


def test_the_cold_start_and_base_composer_are_priced_from_composer_json(estimate, tmp_path, monkeypatch):
    """composer.json (scripts/bench/bench_composer.py) prices what no training step measures: the cold start's steps per
    trained bank entry, its NLL measurement before and after per measured entry and the privilege's passes per
    held-out entry, LOPD's anchors as composing each task it trains on once, and
    Base + Composer's latent context per evaluation task on top of an evaluation; one measured on another model is a
    one-line error."""
    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    cfg = resolve({"profile": "cpu"})
    matmul = json.loads((tmp_path / "lopd_step.json").read_text())["models"][cfg.model.name]["cpu_matmul"]
    latent = {"model": cfg.model.name, "cpu_matmul": matmul, "malloc": estimate.stage_malloc_mode(),
              "compose": {"seconds_per_task": 2.0, "per_benchmark": {"humaneval_plus": {"positions_per_task": 400}}},
              "cold_start": {"step_s": 80.0, "batch_size": 8, "step_positions": 8000,
                             "seconds_per_measured_entry": 5.0}}
    (tmp_path / "composer.json").write_text(json.dumps(latent))
    costs = estimate.cpu_costs(cfg, None, None)
    stages, counts, _ = estimate.estimate(cfg, costs, 1)
    c = cfg.cold_start
    privilege = 8 * 1.5 * (3 + 4)  # held-out entries x (no context, 2 texts, the latents at steps 0, 4, 8 and 12)
    assert stages["cold_start"] == pytest.approx(costs.startup_s + c.steps * c.batch_size * 10.0
                                                 + (2 * c.eval_examples + privilege) * 5.0)
    anchors = min(cfg.method_sections["lopd"].steps * cfg.train.rollouts_per_step, counts["train_tasks"]) * 2.0
    assert stages["train_lopd"] - estimate.estimate(cfg, dataclasses.replace(costs, compose_s=0.0), 1)[0][
        "train_lopd"] == pytest.approx(anchors)
    tasks = sum(counts[b] for b in cfg.benchmarks) * cfg.eval.n_samples
    assert tasks == 164 + 378
    assert stages["eval_base_composer"] - stages["eval@vanilla"] == pytest.approx(tasks * 2.0)
    (tmp_path / "composer.json").write_text(json.dumps({**latent, "model": "smollm2-135m"}))
    with pytest.raises(SystemExit, match=f"composer.json: measured on smollm2-135m, not {cfg.model.name}"):
        estimate.cpu_costs(cfg, None, None)


def test_every_stage_that_samples_pays_the_engines_start_once(estimate, tmp_path, monkeypatch):
    """stage_startup.json's engine_start_s is added once to every stage that builds a rollout engine, and to no other;
    a file without a number there (an older one, or n/a on a machine without vLLM) is a one-line error."""
    for f in (REPO / "reports" / "perf").glob("*.json"):
        shutil.copy(f, tmp_path)
    monkeypatch.setattr(estimate, "PERF", tmp_path)
    cfg = resolve({"profile": "cpu"})
    costs = estimate.cpu_costs(cfg, None, None)
    with_engine, _, _ = estimate.estimate(cfg, costs, 1)
    without, _, _ = estimate.estimate(cfg, dataclasses.replace(costs, engine_start_s=0.0), 1)
    for stage in with_engine:
        assert with_engine[stage] - without[stage] == pytest.approx(costs.engine_start_s if samples(stage) else 0.0)
    startup = json.loads((tmp_path / "stage_startup.json").read_text())
    for value in ("n/a: vllm is not installed", None):
        (tmp_path / "stage_startup.json").write_text(json.dumps({**startup, "engine_start_s": value}))
        with pytest.raises(SystemExit, match="stage_startup.json: engine_start_s is"):
            estimate.cpu_costs(cfg, None, None)
