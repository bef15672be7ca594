"""scripts/gpu_check.py's resume comparison (the rest of the script needs a CUDA device)."""

import torch


def lopd_run(weights: dict, rewards: list, losses: list) -> dict:
    return {"weights": {k: torch.tensor(v) for k, v in weights.items()},
            "history": [{"reward": reward, "loss": loss, "kl": 0.0} for reward, loss in zip(rewards, losses)]}


def test_resume_comparison_reports_the_largest_weight_difference_and_both_histories(load_script):
    compare = load_script("gpu_check").resume_comparison
    straight = lopd_run({"a": [1.0, 2.0], "b": [[0.5, -1.0]]}, [0.25, 0.5], [0.1, 0.2])
    resumed = lopd_run({"a": [1.0, 2.0], "b": [[0.5, -1.75]]}, [0.25, 0.75], [0.1, 0.3])

    result = compare(straight, resumed)

    assert result == {"max_abs_diff": 0.75, "reward_uninterrupted": [0.25, 0.5], "reward_resumed": [0.25, 0.75],
                      "loss_uninterrupted": [0.1, 0.2], "loss_resumed": [0.1, 0.3]}
    assert compare(straight, straight)["max_abs_diff"] == 0.0


def test_bf16_weights_are_compared_in_float(load_script):
    compare = load_script("gpu_check").resume_comparison
    straight = {"weights": {"w": torch.tensor([1.0], dtype=torch.bfloat16)}, "history": []}
    resumed = {"weights": {"w": torch.tensor([1.0078125], dtype=torch.bfloat16)}, "history": []}

    assert compare(straight, resumed)["max_abs_diff"] == 0.0078125
