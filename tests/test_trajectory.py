import pytest
import torch

from lopd.core.trajectory import Trajectory, Turn, collate, with_prompt


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


def test_with_prompt_keeps_three_turns_of_actions_aligned():
    traj = Trajectory("t", [Turn([1, 2, 3], [10, 11], [-0.1, -0.2]), Turn([4, 5], [12], [-0.3]),
                            Turn([6], [13, 14], [-0.4, -0.5])], reward=1.0, group=2, advantage=0.5)
    view = with_prompt(traj, [7, 8, 9, 9, 9])
    assert view.token_ids == [7, 8, 9, 9, 9, 10, 11, 4, 5, 12, 6, 13, 14]
    # by hand: actions sit at 3, 4, 7, 9, 10 in the student's row and 2 positions later in the teacher's
    student_actions, teacher_actions = [3, 4, 7, 9, 10], [5, 6, 9, 11, 12]
    assert [i for i, m in enumerate(traj.action_mask) if m] == student_actions
    assert [i for i, m in enumerate(view.action_mask) if m] == teacher_actions
    assert [view.token_ids[i] for i in teacher_actions] == [traj.token_ids[i] for i in student_actions] == [10, 11, 12,
                                                                                                             13, 14]
    assert [view.sampler_logprobs[i] for i in teacher_actions] == [-0.1, -0.2, -0.3, -0.4, -0.5]
    assert [view.token_ids[i] for i in (7, 8, 10)] == [4, 5, 6]  # later turns' context, masked
    assert (view.reward, view.group, view.advantage) == (1.0, 2, 0.5)
    batch = collate([traj, view], pad_id=0)
    assert batch.action_mask_B_T[0].nonzero().squeeze(-1).tolist() == [t - 1 for t in student_actions]
    assert batch.action_mask_B_T[1].nonzero().squeeze(-1).tolist() == [t - 1 for t in teacher_actions]
    assert torch.equal(batch.target_ids_B_T[0][batch.action_mask_B_T[0] > 0],
                       batch.target_ids_B_T[1][batch.action_mask_B_T[1] > 0])


def test_a_trajectory_has_a_first_turn():
    with pytest.raises(ValueError, match="at least one turn"):
        Trajectory("t", [])
