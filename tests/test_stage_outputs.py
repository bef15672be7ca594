"""What stages write for DVC: scalar metrics under the stage's name, the training summary from a history, and
histories every committed plot of which DVC renders."""

import json
import subprocess

import pytest

from lopd.core.config import REPO_ROOT
from pipelines.common import UnwritableOutput, check_writable, replacing, write_metrics
from pipelines.train import train_summary


def test_write_metrics_keeps_numbers_under_the_stage_name(tmp_path):
    path = tmp_path / "m.json"
    flat = write_metrics(path, "eval_agentic@lopd", {"envscaler": {"score": 50.0, "n_tasks": 2},
                                                     "bfcl_base": {"n_tasks": 0}, "wall_s": 1.5, "kl": None})
    assert json.loads(path.read_text()) == {"eval_agentic@lopd": {"envscaler": {"score": 50.0, "n_tasks": 2},
                                                                  "bfcl_base": {"n_tasks": 0}, "wall_s": 1.5}}
    assert flat == {"envscaler.score": 50.0, "envscaler.n_tasks": 2, "bfcl_base.n_tasks": 0, "wall_s": 1.5}


@pytest.mark.parametrize("bad", [{"data": "TACO"}, {"ended": {"step_cap": 1, "why": "x"}}, {"passed": True},
                                 {"history": [1, 2]}])
def test_write_metrics_refuses_anything_but_numbers_before_writing(tmp_path, bad):
    path = tmp_path / "m.json"
    with pytest.raises(TypeError, match="must be a number"):
        write_metrics(path, "s", bad)
    assert not path.exists()


def test_outputs_are_replaced_together_once_all_are_written(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "plots" / "new.png"
    old.write_text("previous")
    with pytest.raises(OSError, match="disk full"):
        with replacing(old, new) as (old_file, new_file):
            old_file.write_text("next")
            raise OSError(28, "disk full")  # what a full disk raises while the figure is written
    assert old.read_text() == "previous" and sorted(p.name for p in tmp_path.rglob("*")) == ["old.json", "plots"]
    with replacing(old, new) as (old_file, new_file):
        old_file.write_text("next")
        new_file.write_text("figure")
    assert old.read_text() == "next" and new.read_text() == "figure"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["new.png", "old.json", "plots"]



def test_a_folder_output_is_replaced_whole(tmp_path):
    """An evaluation's results folder (it persists in dvc.yaml: DVC leaves it in place) keeps no file of an earlier
    run's, say a benchmark since dropped, and a run that fails leaves the previous folder as it was."""
    results = tmp_path / "eval" / "grpo"
    results.mkdir(parents=True)
    for name in ("humaneval_plus.json", "lcb_v5.json"):
        (results / name).write_text("previous")
    files = lambda: {p.name: p.read_text() for p in results.iterdir()}  # noqa: E731
    with pytest.raises(OSError, match="disk full"):
        with replacing(results) as (folder,):
            folder.mkdir()
            (folder / "humaneval_plus.json").write_text("next")
            raise OSError(28, "disk full")
    assert files() == {"humaneval_plus.json": "previous", "lcb_v5.json": "previous"}
    (tmp_path / "eval" / ".tmp-grpo").mkdir()  # a killed run's half-written folder
    (tmp_path / "eval" / ".tmp-grpo" / "mbpp_plus.json").write_text("killed")
    with replacing(results) as (folder,):
        folder.mkdir()
        (folder / "humaneval_plus.json").write_text("next")
    assert files() == {"humaneval_plus.json": "next"} and [p.name for p in (tmp_path / "eval").iterdir()] == ["grpo"]

def test_an_unwritable_output_folder_is_named_before_anything_is_written(tmp_path, read_only):
    (tmp_path / "plots").mkdir()
    read_only(tmp_path / "plots")
    with pytest.raises(UnwritableOutput, match=f"^{tmp_path / 'plots'}: cannot write here .*; the stage changed "
                                               "nothing$"):
        with replacing(tmp_path / "metrics.json", tmp_path / "plots" / "curve.json"):
            raise AssertionError("not reached")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plots"]
    (tmp_path / "file").write_text("")
    with pytest.raises(UnwritableOutput, match="file/sub: cannot write here"):  # a file where a folder should be
        check_writable([tmp_path / "file" / "sub" / "x.json"])


def test_train_summary_reads_the_history():
    history = [{"step": 1, "reward": 0.25, "cumulative_rollouts": 8, "kl_mean": 0.5, "beta_next": 0.01,
                "privilege_margin": -0.1},
               {"step": 2, "reward": 0.75, "cumulative_rollouts": 16, "kl_mean": 0.25, "beta_next": 0.02,
                "privilege_margin": 0.2}]
    assert train_summary(history, []) == {"reward_final": 0.75, "reward_mean": 0.5, "rollouts": 16, "kl_final": 0.25,
                                          "delta_final": 0.2, "beta_final": 0.02}
    validation = [{"val_reward": 0.25, "val_n": 4, "val_rewards": [0.0, 0.0, 1.0, 0.0]},
                  {"val_reward": 0.5, "val_n": 4, "val_rewards": [1.0, 0.0, 1.0, 0.0]}]
    # the final validation's 95% CI: Wilson for 2 of 4 tasks, z = 1.96, by hand
    z2 = 1.959963984540054 ** 2
    centre, half = (0.5 + z2 / 8) / (1 + z2 / 4), 1.959963984540054 / (1 + z2 / 4) * (0.25 / 4 + z2 / 64) ** 0.5
    summary = train_summary(history, validation)
    assert summary.pop("val_reward_final_ci_low") == pytest.approx(centre - half)
    assert summary.pop("val_reward_final_ci_high") == pytest.approx(centre + half)
    assert summary == {
        "reward_final": 0.75, "reward_mean": 0.5, "rollouts": 16, "val_reward_initial": 0.25, "val_reward_final": 0.5,
        "val_n": 4, "kl_final": 0.25, "delta_final": 0.2, "beta_final": 0.02}
    assert train_summary([{"step": 1, "reward": 1.0, "cumulative_rollouts": 4}], []) == {
        "reward_final": 1.0, "reward_mean": 1.0, "rollouts": 4}  # GRPO: no KL, Δ or β
    assert train_summary([], []) == {"rollouts": 0}  # vanilla trains nothing


def test_training_curves_draw_the_panels_the_histories_have(tmp_path):
    from evaluation.figures import draw_curves, history_panels

    grpo = [{"step": 1, "cumulative_rollouts": 8, "reward": 0.1, "loss": 0.5},
            {"step": 2, "cumulative_rollouts": 16, "reward": 0.3, "loss": 0.4}]
    lopd = [{"step": 1, "cumulative_rollouts": 8, "reward": 0.2, "loss": 0.1, "beta_next": 0.01}]
    assert [key for key, _ in history_panels({"GRPO": grpo, "LOPD": lopd})] == ["reward", "loss", "beta_next"]
    path = tmp_path / "fig" / "curves.png"
    draw_curves({"GRPO": grpo, "LOPD": lopd, "Vanilla": []}, path, "t")
    first = path.read_bytes()
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    draw_curves({"GRPO": grpo, "LOPD": lopd, "Vanilla": []}, path, "t")
    assert path.read_bytes() == first  # the same curves give the same file (no version or date in it)


def test_a_history_with_steps_that_did_not_measure_a_key_still_draws(tmp_path):
    from evaluation.figures import draw_curves, history_panels
    from pipelines.common import uniform_rows

    grpo = uniform_rows([{"step": 1, "cumulative_rollouts": 8, "reward": 0.1},  # every group tied: no PPO ratio
                         {"step": 2, "cumulative_rollouts": 16, "reward": 0.3, "ratio_mean": 0.5}])
    assert grpo[0]["ratio_mean"] is None
    assert [key for key, _ in history_panels({"GRPO": [grpo[0]]})] == ["reward"]
    draw_curves({"GRPO": grpo}, tmp_path / "curves.png", "t")


def test_every_committed_plot_renders_in_dvc(tmp_path):
    """`dvc plots show` of the repository's plots (offline: it writes HTML that loads Vega from a CDN) warns of no
    file: DVC reads a history only when all its rows share their keys."""
    proc = subprocess.run(["dvc", "plots", "show", "-o", str(tmp_path / "html")], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and "WARNING" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    rendered = (tmp_path / "html" / "index.html").read_text()
    for path in sorted((REPO_ROOT / "plots").rglob("*.json")):
        rows = json.loads(path.read_text())
        if rows:
            assert all(set(row) == set(rows[0]) for row in rows), path
            assert str(path.relative_to(REPO_ROOT)) in rendered, path
