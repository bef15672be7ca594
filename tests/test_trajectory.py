import torch

from lopd.trajectory import Trajectory, Turn, collate


def test_multi_turn_collate_masks_everything_but_actions():
    traj = Trajectory("t", [Turn([1, 2, 3], [10, 11], [-0.1, -0.2]), Turn([4, 5], [12], [-0.3])], reward=1.0)
    short = Trajectory("u", [Turn([7], [20], [-0.5])])
    batch = collate([traj, short], pad_id=0)
    assert traj.token_ids == [1, 2, 3, 10, 11, 4, 5, 12]
    assert batch.input_ids_B_L.tolist() == [[1, 2, 3, 10, 11, 4, 5, 12], [7, 20, 0, 0, 0, 0, 0, 0]]
    # brute force: target t+1 is trained on iff it is an action token of its trajectory
    for row, tr in enumerate([traj, short]):
        actions = {i for i, m in enumerate(tr.action_mask) if m}
        for t in range(batch.target_ids_B_T.shape[1]):
            assert batch.action_mask_B_T[row, t].item() == (1.0 if t + 1 in actions else 0.0)
    assert torch.allclose(batch.sampler_logprobs_B_T[0], torch.tensor([0, 0, -0.1, -0.2, 0, 0, -0.3]))
    assert batch.attention_mask_B_L[1].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]
    assert batch.rewards_B.tolist() == [1.0, 0.0]
