"""scripts/wall_time.py: the default run's wall time from the stages' MLflow runs."""

from datetime import datetime, timedelta

import pytest


@pytest.fixture(scope="module")
def wall_time(load_script):
    return load_script("wall_time")


def _run(stage, start_min, minutes, status="FINISHED", experiment=None, paused_s=0.0):
    start = datetime(2026, 1, 1) + timedelta(minutes=start_min)
    return {"stage": stage, "status": status, "start": start, "experiment": experiment, "commit": "c",
            "paused_s": paused_s,
            "end": None if minutes is None else start + timedelta(minutes=minutes)}


def test_the_newest_finished_workspace_run_of_each_stage_counts(wall_time):
    runs = [_run("bank", 0, 10), _run("bank", 20, 4),           # re-run: the newer one counts
            _run("train", 30, 50), _run("train", 90, 5, "FAILED"),  # a failed retry does not
            _run("train", 100, 1, experiment="fig3-m_0"),            # nor a sweep point
            _run("eval", 120, None, "RUNNING"), _run("other", 0, 7)]  # not a DAG stage
    got = wall_time.stage_wall_times(runs, ["bank", "train", "eval"])
    assert {s: v["seconds"] for s, v in got["stages"].items()} == {"bank": 240.0, "train": 3000.0}
    assert got["total_s"] == 3240.0
    assert got["missing"] == ["eval"] and not got["complete"]


def test_since_keeps_the_runs_started_then_or_later(wall_time):
    """A re-timing of some stages: their runs from `since` on, not an older run of another stage."""
    runs = [_run("bank", 0, 10), _run("train", 30, 50), _run("bank", 120, 4)]
    got = wall_time.stage_wall_times(runs, ["bank", "train"], since=datetime(2026, 1, 1, 1))
    assert {s: v["seconds"] for s, v in got["stages"].items()} == {"bank": 240.0}
    assert got["missing"] == ["train"]
    assert wall_time.stage_wall_times(runs, ["bank", "train"], since=datetime(2026, 1, 1, 0, 30))["missing"] == []
    assert wall_time.since_time("2026-12-04T22:30").isoformat() == "2026-12-04T22:30:00+00:00"  # UTC unless it says
    assert wall_time.since_time("2026-12-04T22:30+01:00").utcoffset() == timedelta(hours=1)
    with pytest.raises(SystemExit):
        wall_time.main(["--since", "yesterday"])


def test_complete_when_every_stage_has_a_run(wall_time):
    got = wall_time.stage_wall_times([_run("a", 0, 1), _run("b", 5, 2)], ["a", "b"])
    assert got["complete"] and got["missing"] == [] and got["total_s"] == 180.0


def test_a_resumed_stage_counts_its_run_less_the_time_it_was_interrupted(wall_time):
    got = wall_time.stage_wall_times([_run("train", 0, 100, paused_s=1800.0)], ["train"])
    assert got["stages"]["train"]["seconds"] == 4200.0


def test_stages_without_a_run_here_come_from_earlier_sessions_files(wall_time):
    here = wall_time.stage_wall_times([_run("eval", 60, 3)], ["bank", "train", "eval"])
    day1 = {"stages": {"bank": {"seconds": 600.0, "finished": "2026-01-01T00:10:00", "commit": "a"},
                       "eval": {"seconds": 999.0, "finished": "2026-01-01T00:20:00", "commit": "a"}}}
    day2 = {"stages": {"bank": {"seconds": 240.0, "finished": "2026-01-02T00:04:00", "commit": "b"}}}
    got = wall_time.merge_earlier(here, {"day1.json": day1, "day2.json": day2}, ["bank", "train", "eval"])
    assert got["stages"]["bank"] == {"seconds": 240.0, "finished": "2026-01-02T00:04:00", "commit": "b",
                                     "from": "day2.json"}  # the newest of the files
    assert got["stages"]["eval"]["seconds"] == 180.0 and "from" not in got["stages"]["eval"]  # a run here wins
    assert got["missing"] == ["train"] and not got["complete"] and got["total_s"] == 420.0
    assert list(got["stages"]) == ["bank", "eval"]  # in the DAG's order


def test_a_merge_file_that_is_not_this_scripts_output_is_a_one_line_error(wall_time, tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text('{"total_s": 1}')
    with pytest.raises(SystemExit, match=r"^error: --merge .*other\.json: no `stages` \(not an output of "
                                         r"scripts/wall_time\.py\)$"):
        wall_time.main(["--merge", str(bad), "--out", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()


def test_the_cpu_is_named_with_its_family_model_and_vector_unit(wall_time):
    """A virtual CPU's model name can be generic ("Intel Xeon Processor"): the numbers and the widest vector unit tell
    two machines apart in a record spread over them, as does bf16 (one model was seen here with and without it)."""
    info = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
            "model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
            "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n")
    assert wall_time.cpu_name(info) == "Intel(R) Xeon(R) Processor (family 6, model 207, AVX-512 with BF16)"
    assert wall_time.cpu_name(info.replace(" avx512_bf16", "")) == \
        "Intel(R) Xeon(R) Processor (family 6, model 207, AVX-512)"
    assert wall_time.cpu_name("model name\t: AMD EPYC 7B13\ncpu family\t: 25\nmodel\t\t: 1\nflags\t: avx2\n") == \
        "AMD EPYC 7B13 (family 25, model 1, AVX2)"
